"""The gsp source and sinks through Spark Connect, on a local Connect server.

One Spark Connect session serves the module: a Connect client of the server that the classic
session the local modules share runs in this process (``spark_fixtures.shared_session``: Spark's
Connect plugin bound to the loopback on a port of its own, as ``gsp_spark.local_connect_session``
starts one; the ``connect-missing`` job of ``jobs.py`` runs that function in a process of its
own). The session is built without ``gsp_spark.register``: the server finds
``format("gsp")`` through PySpark's auto-discovery of ``pyspark_gsp``, the client only sends plans.

* batch writes with push, pub and acknowledged req (each row once; req's retries removed by
  ``Deduplicator``), and gsp's own errors at ``save()`` / ``load()``;
* streaming reads with pull, sub and acknowledged rep, and a bounded read of the spool with
  ``trigger(availableNow=True)``; the rep source keeps every acknowledged message across a
  SIGKILL of its process and a restart, into an exactly-once parquet sink;
* streaming writes with push, pub and acknowledged req, deduplicated on the receiver.

The same driver scripts as a user's, in processes of their own, are in
``test_spark_user_scripts.py``: the issue's snippet and its streaming counterpart from a
virtualenv that is not activated, and a server whose Python lacks the plugin.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Iterator

import msgpack
import pytest
import spark_fixtures
import spark_standalone as standalone

import gsp
from gsp_spark import Deduplicator, HubThread, unpack
from gsp_spark._local import connect_url

pytestmark = [pytest.mark.spark, spark_fixtures.LOCAL_GROUP]
no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
Receiver = spark_fixtures.Receiver
wait_for = spark_fixtures.wait_for
table_count = spark_fixtures.table_count
free_tcp_url = standalone.free_tcp_url


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # A client of the Connect server that the session the local modules share runs (its JVM and
    # Python worker daemon already up if an earlier module started them).
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_url(spark_fixtures.shared_session())).create()
    assert type(session).__module__ == "pyspark.sql.connect.session"
    session.range(1).selectExpr("id").collect()
    yield session
    session.stop()  # the client's session: the server runs on for the other modules


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_batch_push_pub_and_req_sinks_through_connect(spark: Any) -> None:
    df = spark.range(3000, numPartitions=3).selectExpr("id", "concat('row-', id) AS name")
    spark_fixtures.pushed_rows(df, 3000)  # each id once, with its name

    # pub: each task waits for the subscriber before publishing; 50 rows a message.
    with Receiver("sub") as sub:
        (df.write.format("gsp").option("url", sub.url).option("protocol", "pub")
         .option("batch_rows", 50).mode("append").save())
        sub.wait_until(lambda: sum(len(unpack(m)) for m in sub.messages) >= 3000, 30)
    assert sorted(r["id"] for m in sub.messages for r in unpack(m)) == list(range(3000))

    # req: save() returns once every message was acknowledged.
    with Receiver("rep") as rep:
        df.write.format("gsp").option("url", rep.url).option("protocol", "req") \
            .mode("append").save()
        acked = list(rep.messages)
    dedup = Deduplicator()
    assert sorted(r["id"] for m in acked for r in dedup.rows(m)) == list(range(3000))


def test_gsps_own_errors_through_connect(spark: Any) -> None:
    with pytest.raises(gsp.BadOption, match="^gsp sink: unknown protocol 'pull'"):
        spark.range(3).write.format("gsp").option("url", "tcp://127.0.0.1:1") \
            .option("protocol", "pull").mode("append").save()
    with pytest.raises(gsp.InvalidAddress, match="^no transport for 'bogus'"):
        spark.readStream.format("gsp").option("url", "bogus://x").load()
    with pytest.raises(gsp.BadOption, match="^gsp source: unknown protocol 'push'"):
        spark.readStream.load(format="gsp", url="tcp://127.0.0.1:1", protocol="push")


def _push(url: str, n: int) -> HubThread:
    def produce(stop: threading.Event) -> None:
        with gsp.socket("push", dial=url, send_timeout=60) as s:
            for i in range(n):
                s.send(msgpack.packb({"n": i}))
    return HubThread(produce, "push-producer")


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_pull_source_and_a_bounded_read_of_its_spool_through_connect(spark: Any,
                                                                     tmp_path: Any) -> None:
    url, spool = free_tcp_url(), str(tmp_path / "spool")
    q = (spark.readStream.format("gsp").schema("n BIGINT").option("url", url)
         .option("spool", spool).load()
         .writeStream.format("memory").queryName("connect_pull")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    try:
        _push(url, 2000).join(90)
        wait_for(lambda: table_count(spark, "connect_pull") >= 2000, 90, "2,000 rows")
    finally:
        q.stop()
    assert sorted(r.n for r in spark.sql("SELECT n FROM connect_pull").collect()) == \
        list(range(2000))

    # Bounded: availableNow reads what the spool holds (a fresh checkpoint: all 2,000), stops.
    q2 = (spark.readStream.format("gsp").schema("n BIGINT").option("url", url)
          .option("spool", spool).load()
          .writeStream.format("memory").queryName("connect_bounded")
          .option("checkpointLocation", str(tmp_path / "ck2"))
          .trigger(availableNow=True).start())
    try:
        assert q2.awaitTermination(120)
    finally:
        q2.stop()
    assert sorted(r.n for r in spark.sql("SELECT n FROM connect_bounded").collect()) == \
        list(range(2000))


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_sub_source_through_connect(spark: Any, tmp_path: Any) -> None:
    # sub dials a publisher (here, in this process) and keeps the subscribed prefix only.
    pub, url = spark_fixtures.publisher(
        lambda n: (b"keep" + msgpack.packb({"n": n}), b"drop" + msgpack.packb({"n": -1})), 0.002)
    attempts = itertools.count()

    def start() -> Any:
        # A memory sink cannot recover from a checkpoint, and sub keeps nothing to replay: a
        # query run_until starts again begins afresh, with its own checkpoint and spool.
        n = next(attempts)
        return (spark.readStream.format("gsp").option("url", url)
                .option("protocol", "sub").option("mode", "dial").option("subscribe", "keep")
                .option("spool", str(tmp_path / f"spool{n}")).load()
                .writeStream.format("memory").queryName("connect_sub")
                .option("checkpointLocation", str(tmp_path / f"ck{n}"))
                .trigger(processingTime="300 milliseconds").start())

    try:
        spark_fixtures.run_until(start, lambda: table_count(spark, "connect_sub") >= 500, 90,
                                 "500 messages")
    finally:
        pub.join(10)
    values = [bytes(r.value) for r in spark.sql("SELECT value FROM connect_sub").collect()]
    assert values and all(v.startswith(b"keep") for v in values)
    ns = [msgpack.unpackb(v[4:])["n"] for v in values]
    assert len(set(ns)) == len(ns)  # each once


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_rep_source_keeps_acknowledged_messages_across_kill_through_connect(
        spark: Any, tmp_path: Any) -> None:
    # Acknowledged after fsync to the spool; the source's process SIGKILLed midway; the query
    # restarted on the same checkpoint; an exactly-once parquet sink holds every acknowledged
    # message (the same check as test_spark_source.py's, through Connect).
    spark_fixtures.rep_source_survives_kill(spark, free_tcp_url(), tmp_path, total=3000,
                                            kill_after=800)


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_streaming_push_pub_and_req_sinks_through_connect(spark: Any, tmp_path: Any) -> None:
    def stream_to(url: str, protocol: str, name: str, **options: Any) -> Any:
        w = (spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
             .writeStream.format("gsp").option("url", url).option("protocol", protocol)
             .option("checkpointLocation", str(tmp_path / name))
             .trigger(processingTime="300 milliseconds"))
        for k, v in options.items():
            w = w.option(k, v)
        return w.start()

    for protocol, receiver, options in (("push", "pull", {}), ("pub", "sub", {"batch_rows": 50}),
                                        ("req", "rep", {})):
        with Receiver(receiver) as rx:
            q = stream_to(rx.url, protocol, protocol, **options)
            try:
                rx.wait_until(lambda: len({r["_gsp_key"][1] for m in list(rx.messages)
                                           for r in _rows(m)}) >= 3, 90)
            finally:
                q.stop()
        dedup = Deduplicator()
        rows = [r for m in rx.messages for r in dedup.rows(m)]
        keys = [tuple(r["_gsp_key"]) for r in rows]
        assert len(set(keys)) == len(keys), protocol  # after Deduplicator: each row once
        assert {k[0] for k in keys} == {q.id}, protocol  # the query id names the stream
        values = sorted(r["value"] for r in rows)
        assert len(set(values)) == len(values), protocol


def _rows(message: bytes) -> list[dict[str, Any]]:
    out = unpack(message)
    return out if isinstance(out, list) else [out]


@pytest.mark.plugins("gsp_bench")
@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_bench_runs_the_sink_and_source_paths_through_connect(spark: Any) -> None:
    """``gsp bench spark --connect`` on a few rows: each path raises when its receiver or query
    saw another count than it sent. No timing is checked."""
    from gsp_bench import spark as bench

    paths = ["sink-push", "sink-req-100", "ceiling-source", "source"]
    lines: list[str] = []
    rates = bench.run(spark, 3000, 1, paths, lines.append)
    assert all(rates[p][0] > 0 for p in paths)
    assert [ln.split()[0] for ln in lines] == paths
