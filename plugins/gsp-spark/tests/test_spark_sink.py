"""The gsp sink on a real local Spark (batch and streaming), its wire format and Deduplicator.

One SparkSession serves the module. It is built without ``gsp_spark.register``: ``format("gsp")``
must resolve through PySpark's auto-discovery of the ``pyspark_gsp`` module. Receivers run in
their own thread and hub (:class:`gsp_spark.HubThread`) because Spark calls block this thread.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pytest
import spark_fixtures
from pyspark.sql.functions import udf

import gsp
from gsp_spark import Deduplicator, SchemaMismatch, SinkError, unpack

pytestmark = [pytest.mark.spark, spark_fixtures.LOCAL_GROUP]
no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
Receiver = spark_fixtures.Receiver
ipc_dir = spark_fixtures.ipc_dir


@pytest.fixture(scope="module")
def spark():
    # The session the local modules share: local[2,4], two cores and up to 4 attempts per task
    # (local mode ignores spark.task.maxFailures), so a task failing once is retried; gsp found
    # by PySpark's auto-discovery (test_spark_source.py registers it too, as a user may).
    return spark_fixtures.shared_session()


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_batch_push_delivers_every_row_exactly_once(spark):
    df = spark.range(10_000, numPartitions=4).selectExpr("id", "concat('row-', id) AS name")
    rows = spark_fixtures.pushed_rows(df, 10_000)  # each id once, with its name
    assert len(rows) == 10_000
    keys = {tuple(r["_gsp_key"]) for r in rows}
    assert len(keys) == 10_000
    assert len({k[0] for k in keys}) == 1  # one writer id for the job
    assert {k[2] for k in keys} == {0, 1, 2, 3}  # partition numbers
    for part in range(4):  # each partition numbers its rows 0, 1, 2, ... in order
        seqs = [r["_gsp_key"][3] for r in rows if r["_gsp_key"][2] == part]
        assert seqs == list(range(len(seqs)))


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_req_task_retry_duplicates_are_removed_by_deduplicator(spark, tmp_path):
    markers = str(tmp_path)

    def fail_once(i: Any) -> Any:
        # Each partition (2,500 ids) stalls, then fails, its first attempt at its 2,000th row; the
        # rows before it reach the writer meanwhile and are sent (and acknowledged), so the
        # retry sends them again. The padding makes the UDF's worker flush its output buffer.
        marker = os.path.join(markers, f"failed-{i // 2500}")
        if i % 2500 == 2000 and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(2.0)
            raise RuntimeError("forced task failure")
        return f"{i:08d}" + "x" * 500

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "250")
    try:
        df = spark.range(10_000, numPartitions=4).select(
            udf(fail_once, "string", useArrow=False)("id").alias("payload"))
        with Receiver("rep") as rx:
            (df.write.format("gsp").option("url", rx.url).option("protocol", "req")
             .mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert sorted(os.listdir(markers)) == [f"failed-{p}" for p in range(4)]
    dedup = Deduplicator()
    rows = [r for m in rx.messages for r in dedup.rows(m)]
    ids = sorted(int(r["payload"][:8]) for r in rows)
    assert ids == list(range(10_000))  # 0 lost, 0 extra
    assert dedup.duplicates >= 4 * 1000  # every partition's retry re-sent its first rows
    assert len(rx.messages) == 10_000 + dedup.duplicates


def test_raw_format_sends_value_column_as_is(spark):
    df = spark.createDataFrame([(b"\x00\x01", "a"), (b"", "b"), (None, "c"), (b"xyz", "d")],
                               "value BINARY, tag STRING")
    with Receiver("pull") as rx:
        df.write.format("gsp").option("url", rx.url).option("format", "raw").mode("append").save()
        rx.wait_until(lambda: len(rx.messages) >= 3, 20)
    assert sorted(rx.messages) == [b"", b"\x00\x01", b"xyz"]  # the null row has nothing to send


def test_msgpack_carries_spark_types(spark):
    df = spark.sql("""SELECT 1 AS i, 2.5D AS d, CAST('3.25' AS DECIMAL(5,2)) AS dec,
        DATE'2024-02-29' AS day, TIMESTAMP'2024-02-29 12:00:00 UTC' AS ts, X'ff00' AS b,
        array(1, 2) AS arr, map('k', 1) AS m, named_struct('x', 1, 'y', 'z') AS st,
        CAST(NULL AS STRING) AS nothing, true AS flag""")
    with Receiver("pull") as rx:
        df.write.format("gsp").option("url", rx.url).mode("append").save()
        rx.wait_until(lambda: len(rx.messages) >= 1, 20)
    row = unpack(rx.messages[0])
    assert row["i"] == 1 and row["d"] == 2.5 and row["dec"] == "3.25"
    assert row["day"] == "2024-02-29" and row["b"] == b"\xff\x00" and row["flag"] is True
    assert row["ts"] == dt.datetime(2024, 2, 29, 12, tzinfo=dt.timezone.utc)
    assert row["arr"] == [1, 2] and row["m"] == {"k": 1} and row["st"] == {"x": 1, "y": "z"}
    assert row["nothing"] is None


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_streaming_pub_sink_packs_batch_rows_with_query_keys(spark, tmp_path):
    with Receiver("sub") as rx:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
             .writeStream.format("gsp").option("url", rx.url).option("protocol", "pub")
             .option("batch_rows", 50).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="300 milliseconds").start())
        try:
            rx.wait_until(lambda: len({r["_gsp_key"][1] for m in list(rx.messages)
                                       for r in unpack(m)}) >= 3, 60)
        finally:
            q.stop()
    messages = [unpack(m) for m in rx.messages]
    assert all(isinstance(m, list) and 1 <= len(m) <= 50 for m in messages)
    rows = [r for m in messages for r in m]
    keys = [tuple(r["_gsp_key"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert {k[0] for k in keys} == {q.id}  # streaming: the query id, stable across restarts
    assert len({k[1] for k in keys}) >= 3  # several micro-batches
    values = [r["value"] for r in rows]
    assert len(set(values)) == len(values)
    assert all(isinstance(r["timestamp"], dt.datetime) for r in rows)


# -- errors reach the user as gsp's own, at save()/start() --------------------------------------
@pytest.mark.parametrize("options, error, kind", [
    ({"protocol": "pull"}, "^gsp sink: unknown protocol 'pull'; use one of push, pub, req",
     gsp.BadOption),
    ({"url": None}, "^gsp sink: option 'url' is required", gsp.BadOption),
    ({"url": "bogus://x"}, "^no transport for 'bogus' in 'bogus://x'", gsp.InvalidAddress),
    ({"batchrows": "5"}, "^gsp sink: unknown option.*'batchrows'", gsp.BadOption),
    ({"batch_rows": "0"}, "^gsp sink: option 'batch_rows' must be an integer >= 1", gsp.BadOption),
    ({"format": "raw"}, "^gsp sink: format 'raw' sends column 'value' as-is, but the DataFrame "
                        "has none", SchemaMismatch),
    ({"format": "raw", "batch_rows": "10"}, "^gsp sink: batch_rows .* cannot be used with format "
                                            "'raw'", gsp.BadOption),
])
def test_bad_options_fail_the_write_with_gsps_message(spark, options, error, kind, tmp_path):
    opts = {"url": "tcp://127.0.0.1:1", **options}
    w = spark.range(3).write.format("gsp").mode("append")
    for k, v in opts.items():
        if v is not None:
            w = w.option(k, v)
    with pytest.raises(kind, match=error):
        w.save()
    # Streaming: at start(), not when the first micro-batch runs.
    sw = spark.readStream.format("rate").load().writeStream.format("gsp").options(
        **{k: v for k, v in opts.items() if v is not None})
    if "format" not in options:  # rate's columns have no 'value' of type BINARY/STRING: skip raw
        with pytest.raises(kind, match=error):
            sw.option("checkpointLocation", str(tmp_path / "ck")).start()
    assert spark.streams.active == []


def test_reserved_key_column_and_unsupported_type_are_rejected(spark):
    w = spark.range(3).selectExpr("id AS _gsp_key").write.format("gsp").mode("append")
    with pytest.raises(SchemaMismatch, match="^gsp sink: .*'_gsp_key' is reserved"):
        w.option("url", "tcp://127.0.0.1:1").save()
    w = spark.sql("SELECT parse_json('1') AS v").write.format("gsp").mode("append")
    with pytest.raises(SchemaMismatch, match="^gsp sink: .*column 'v' has type variant"):
        w.option("url", "tcp://127.0.0.1:1").save()


def test_refused_connection_fails_save_with_gsps_message(spark):
    # Found by the tasks on the executors; save() re-raises it as gsp's SinkError, chained to
    # Spark's exception.
    w = (spark.range(3, numPartitions=1).write.format("gsp").mode("append")
         .option("url", "tcp://127.0.0.1:1").option("connect_timeout", "0.3"))
    with pytest.raises(SinkError, match=r"^gsp sink: no peer connected to tcp://127.0.0.1:1 "
                                        r"within 0.3 s \(ConnectionRefused") as info:
        w.save()
    assert "Python worker" in str(info.value.__cause__)  # Spark's own report, kept as the cause


# -- any thread: PySpark resolves format("gsp") through the JVM thread's active session, which a
# new Python thread lacks; this session has no register() either (auto-discovery only).
# Spark on 2 shared cores: its own waits bound it, and each of the two threads gets 240 s (a
# batch write took over 120 s on a machine at load 10)
@pytest.mark.timeout(600)
def test_read_and_write_from_a_plain_thread(spark, ipc_dir, tmp_path):
    got = spark_fixtures.through_gsp(spark, spark_fixtures.in_thread, f"ipc://{ipc_dir}/t.sock",
                                     str(tmp_path), "from_thread")
    assert got == list(range(100))


@pytest.mark.timeout(600)  # Spark on 2 shared cores: its own waits bound it (as above)
def test_read_and_write_from_a_thread_pool(spark, ipc_dir, tmp_path):
    with ThreadPoolExecutor(2, thread_name_prefix="user-pool") as pool:
        got = spark_fixtures.through_gsp(spark, lambda fn: pool.submit(fn).result(240),
                                         f"ipc://{ipc_dir}/p.sock", str(tmp_path), "from_pool")
    assert got == list(range(100))


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_write_inside_foreach_batch(spark, tmp_path):
    done: list[int] = []  # micro-batches whose save() returned

    with Receiver("pull") as rx:
        def each(df: Any, batch_id: int) -> None:  # runs in py4j's callback thread
            df.selectExpr("value AS n").write.format("gsp").option("url", rx.url) \
                .mode("append").save()
            done.append(batch_id)

        q = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
             .writeStream.foreachBatch(each).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="500 milliseconds").start())
        try:
            rx.wait_until(lambda: len(done) >= 3 or not q.isActive, 90)
            error = q.exception()
        finally:
            q.stop()
    assert error is None
    rows = [unpack(m) for m in rx.messages]
    ns = sorted(r["n"] for r in rows if r["_gsp_key"][1] in done[:3])
    assert len(ns) > 0 and ns == list(range(len(ns)))  # the rate source's values, each once


# -- wire format and Deduplicator, no Spark ------------------------------------------------------
def test_deduplicator_drops_retries_and_late_copies():
    d = Deduplicator()
    assert [d.is_new(("w", 0, 0, s)) for s in range(3)] == [True] * 3
    assert [d.is_new(("w", 0, 0, s)) for s in range(4)] == [False, False, False, True]
    assert d.is_new(("w", 0, 1, 0)) and d.is_new(("w", 1, 0, 0)) and d.is_new(("v", 0, 0, 0))
    assert d.is_new(("w", 0, 0, 6)) and d.is_new(("w", 0, 0, 5))  # out of order
    assert not d.is_new(("w", 0, 0, 6))
    assert d.is_new(("w", 0, 0, 4)) and not d.is_new(("w", 0, 0, 5))
    assert d.is_new(("w", 0, 0, 7))
    assert (d.accepted, d.duplicates) == (11, 5)


def test_deduplicator_rows_decodes_maps_arrays_and_unkeyed():
    pack = msgpack.packb
    d = Deduplicator()
    one = pack({"a": 1, "_gsp_key": ["w", 0, 0, 0]})
    many = pack([{"a": 2, "_gsp_key": ["w", 0, 0, 1]}, {"a": 3, "_gsp_key": ["w", 0, 0, 2]}])
    assert [r["a"] for r in d.rows(one) + d.rows(many) + d.rows(many) + d.rows(one)] == [1, 2, 3]
    assert d.rows(pack({"a": 9})) == [{"a": 9}] and d.unkeyed == 1


def test_deduplicator_forgets_least_recent_streams_beyond_its_bound():
    d = Deduplicator(max_streams=2)
    for part in range(3):
        assert d.is_new(("w", 0, part, 0))
    assert not d.is_new(("w", 0, 2, 0))
    assert d.is_new(("w", 0, 0, 0))  # stream 0 was forgotten: documented limit


def test_packer_encodes_spark_values():
    from gsp_spark import packer

    data = packer().pack({"d": decimal.Decimal("1.50"), "day": dt.date(2024, 1, 2),
                          "naive": dt.datetime(2024, 1, 2, 3, 4),
                          "aware": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc),
                          "span": dt.timedelta(seconds=90)})
    assert unpack(data) == {"d": "1.50", "day": "2024-01-02", "naive": "2024-01-02T03:04:00",
                            "aware": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc),
                            "span": 90.0}


@pytest.mark.plugins("gsp_bench")
@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_bench_runs_every_path_and_counts_every_row(spark):
    """``gsp bench spark`` (gevent-sp-bench) on a few rows, and the internals' tool of these
    tests: each path (a bench raises when its receiver or query saw another count than it sent)
    yields a rate and a line; the source path with a ``--source-option`` (one partition a
    micro-batch). No timing is checked."""
    import spark_bench_internals as internals

    from gsp_bench import spark as bench

    for table, options in ((bench.PATHS, {"partitions": "1"}), (internals.PATHS, None)):
        lines: list[str] = []
        rates = bench.run(spark, 3000, 1, list(table), lines.append, options, table=table)
        assert set(rates) == set(table) and all(r[0] > 0 for r in rates.values())
        assert [ln.split()[0] for ln in lines] == list(table)
