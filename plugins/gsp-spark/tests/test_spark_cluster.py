"""The source and a sink on ``local-cluster[2,1,1024]``: a standalone master and two worker JVMs
started by Spark itself, each with an executor JVM of its own and Python workers under it — the
layout of a real cluster, on one machine.

Checked: a sink's rows are sent from Python workers under *both* executor JVMs (never the
driver's), and the source — receiver beside the driver, decoding in the executors — delivers
every message once.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import msgpack
import pytest
import spark_fixtures
from pyspark.sql.functions import udf

import gsp
from gsp_spark import HubThread, local_session, unpack

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
wait_for = spark_fixtures.wait_for


@pytest.fixture(scope="module")
def spark():
    session = local_session("local-cluster[2,1,1024]", "gsp-cluster-tests")
    status = session.sparkContext._jsc.sc().getExecutorMemoryStatus()
    wait_for(lambda: status.size() >= 3, 90, "two executors")  # the driver counts as one
    session.range(1).select(udf(lambda x: x, "long", useArrow=False)("id")).collect()
    yield session
    session.stop()


@pytest.mark.timeout(300)  # Spark on 2 shared cores: the session's start and its own waits
def test_sink_and_source_on_a_local_cluster(spark, tmp_path):
    def executor_jvm(_: Any) -> int:
        """In a Python worker: the pid of the executor JVM it runs under (0 if none). Defined
        here, so it is pickled by value: executors cannot import this test module."""
        import os

        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        return 0

    # Sink: every executor dials the receiver (here, in this process).
    got: list[bytes] = []
    ready = threading.Event()
    where: dict[str, str] = {}

    def receive(stop: threading.Event) -> None:
        with gsp.socket("pull", listen="tcp://127.0.0.1:0", recv_timeout=0.05) as s:
            where["url"] = s.listeners[0].url
            ready.set()
            while not stop.is_set():
                try:
                    got.append(s.recv())
                except gsp.Timeout:
                    continue

    rx = HubThread(receive, "receiver")
    try:
        assert ready.wait(10)
        df = spark.range(2000, numPartitions=4).select(
            "id", udf(executor_jvm, "long", useArrow=False)("id").alias("jvm"))
        df.write.format("gsp").option("url", where["url"]).mode("append").save()
        wait_for(lambda: len(got) >= 2000, 30, "2,000 rows")
    finally:
        rx.join(10)
    rows = [unpack(m) for m in got]
    assert sorted(r["id"] for r in rows) == list(range(2000))
    jvms = {r["jvm"] for r in rows}
    assert len(jvms) == 2 and 0 not in jvms  # two executor JVMs, neither the driver

    # Source: the receiver listens beside the driver; producers dial it.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    q = (spark.readStream.format("gsp").schema("n BIGINT").option("url", url)
         .option("spool", str(tmp_path / "spool")).load()
         .writeStream.format("memory").queryName("on_cluster")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    try:
        def produce(stop: threading.Event) -> None:
            with gsp.socket("push", dial=url, send_timeout=60) as s:
                for n in range(2000):
                    s.send(msgpack.packb({"n": n}))

        HubThread(produce, "producer").join(90)
        wait_for(lambda: spark.sql("SELECT count(*) AS c FROM on_cluster").first().c >= 2000,
                 90, "2,000 rows from the source")
    finally:
        q.stop()
    assert sorted(r.n for r in spark.sql("SELECT n FROM on_cluster").collect()) == \
        list(range(2000))
