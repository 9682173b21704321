"""The source and the sinks on ``local-cluster[2,1,1024]``: a standalone master and two worker JVMs
started by Spark itself, each with an executor JVM of its own and Python workers under it — the
layout of a real cluster, on one machine. One cluster serves the module (its start is most of the
time these tests take).

Checked: each sink's rows (push, acknowledged req, pub) are sent from Python workers under *both*
executor JVMs (never the driver's); the source — receiver beside the driver, decoding in the
executors — delivers every message once; and with ``rep``, killing the source's process beside
the driver and restarting the query on its checkpoint loses no acknowledged message.
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
from gsp_spark import Deduplicator, HubThread, unpack

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
wait_for = spark_fixtures.wait_for
Receiver = spark_fixtures.Receiver


@pytest.fixture(scope="module")
def spark():
    yield from spark_fixtures.module_session("local-cluster[2,1,1024]", "gsp-cluster-tests",
                                             executors=2)


def rows_with_executor_jvm(spark: Any, n: int) -> Any:
    """``n`` rows of ``id`` and ``jvm``: the pid of the executor JVM whose Python worker made the
    row (0 if none)."""
    def executor_jvm(_: Any) -> int:
        # Defined inside a function, so it is pickled by value: executors cannot import this
        # test module.
        import os

        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        return 0

    return spark.range(n, numPartitions=4).select(
        "id", udf(executor_jvm, "long", useArrow=False)("id").alias("jvm"))


def assert_from_both_executors(rows: list[dict[str, Any]], n: int) -> None:
    assert sorted(r["id"] for r in rows) == list(range(n))
    jvms = {r["jvm"] for r in rows}
    assert len(jvms) == 2 and 0 not in jvms  # two executor JVMs, neither the driver


def free_tcp_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.timeout(300)  # Spark on 2 shared cores: the session's start and its own waits
def test_sink_and_source_on_a_local_cluster(spark, tmp_path):
    # Sink: every executor dials the receiver (here, in this process).
    with Receiver("pull") as rx:
        rows_with_executor_jvm(spark, 2000).write.format("gsp").option("url", rx.url) \
            .mode("append").save()
        rx.wait_until(lambda: len(rx.messages) >= 2000, 30)
    assert_from_both_executors([unpack(m) for m in rx.messages], 2000)

    # Source: the receiver listens beside the driver; producers dial it.
    url = free_tcp_url()
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


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_req_and_pub_sinks_on_a_local_cluster(spark):
    # req: save() returns only once every message was acknowledged, so all are here by then.
    with Receiver("rep") as rep:
        rows_with_executor_jvm(spark, 2000).write.format("gsp").option("url", rep.url) \
            .option("protocol", "req").mode("append").save()
        acked = list(rep.messages)
    dedup = Deduplicator()
    assert_from_both_executors([r for m in acked for r in dedup.rows(m)], 2000)

    # pub: each task waits for the subscriber before publishing; 50 rows per message.
    with Receiver("sub") as sub:
        rows_with_executor_jvm(spark, 2000).write.format("gsp").option("url", sub.url) \
            .option("protocol", "pub").option("batch_rows", 50).mode("append").save()
        sub.wait_until(lambda: len(sub.messages) >= 40, 30)
    assert_from_both_executors([r for m in sub.messages for r in unpack(m)], 2000)


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_rep_source_keeps_acknowledged_messages_across_kill_on_a_local_cluster(spark, tmp_path):
    # Fewer messages than in local mode (the same check), but enough that many are still
    # unacknowledged when the kill lands.
    spark_fixtures.rep_source_survives_kill(spark, free_tcp_url(), tmp_path, total=6000,
                                            kill_after=1000)


@pytest.mark.timeout(480)  # two more drivers, each starting a cluster: Spark on 2 shared cores
def test_rep_source_keeps_acknowledged_messages_across_a_driver_sigkill_on_a_local_cluster(
        spark, tmp_path):
    # The whole driver (its Python process and its JVM, in which local-cluster's master and
    # workers run too; the executors' JVMs lose it and exit), then a new driver and cluster on
    # the same checkpoint and spool.
    spark_fixtures.rep_source_survives_driver_kill(spark, "local-cluster[2,1,1024]",
                                                   free_tcp_url(), tmp_path, total=6000,
                                                   kill_after=1000)
