"""The gsp streaming source on a real local Spark, and its spool and decoding without Spark.

One SparkSession serves the module (``gsp_spark.register`` done by ``local_session``). Producers
run in their own thread and hub (:class:`gsp_spark.HubThread`) because Spark calls block this one.
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
import time
from typing import Callable

import gevent
import msgpack
import pytest
import spark_fixtures
from pyspark.errors import StreamingQueryException
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import gsp
from gsp_spark import (
    HubThread,
    SchemaMismatch,
    SourceConfig,
    SourceError,
    SpoolBusy,
    StreamReader,
    _decode,
    _source,
    gsp_error,
    register,
)
from gsp_spark._decode import _Chunk, _records, _struct_batch, decode_chunk
from gsp_spark._spool import REC, Spool, scan

pytestmark = [pytest.mark.spark, spark_fixtures.LOCAL_GROUP]
no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
ipc_dir = spark_fixtures.ipc_dir


@pytest.fixture(scope="module")
def spark():
    # The session the local modules share, with gsp registered as a user would (idempotent).
    session = spark_fixtures.shared_session()
    register(session)
    return session


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


table_count = spark_fixtures.table_count


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_pull_source_receives_every_message_from_three_producers(spark, ipc_dir, tmp_path):
    url = f"ipc://{ipc_dir}/src.sock"
    total, producers = 10_000, 3

    def produce(stop: threading.Event) -> None:
        def one(p: int) -> None:
            with gsp.socket("push", dial=url, send_timeout=60) as s:
                for n in range(p, total, producers):
                    s.send(msgpack.packb({"producer": p, "n": n, "note": f"event {n}"}))
        gevent.joinall([gevent.spawn(one, p) for p in range(producers)], raise_error=True)

    q = (spark.readStream.format("gsp").schema("n INT, producer INT, _seq BIGINT, _pipe BIGINT")
         .option("url", url).option("spool", str(tmp_path / "spool")).load()
         .writeStream.format("memory").queryName("pulled")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    prod = HubThread(produce, "producers")
    try:
        wait_for(lambda: table_count(spark, "pulled") >= total, 90, "10,000 rows")
        prod.join(30)
    finally:
        q.stop()
    rows = spark.sql("SELECT * FROM pulled").collect()
    assert len(rows) == total  # exactly once in a run without failures
    assert sorted(r.n for r in rows) == list(range(total))
    assert all(r.n % producers == r.producer for r in rows)
    assert sorted(r["_seq"] for r in rows) == list(range(total))  # spool offsets, gap-free
    assert len({r["_pipe"] for r in rows}) == producers  # one pipe per producer


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_rep_source_keeps_acknowledged_messages_across_kill_and_restart(spark, ipc_dir, tmp_path):
    spark_fixtures.rep_source_survives_kill(spark, f"ipc://{ipc_dir}/rep.sock", tmp_path,
                                            total=10_000, kill_after=3000)


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_sub_source_dials_and_filters_by_prefix(spark, tmp_path):
    pub, url = spark_fixtures.publisher(
        lambda k: [topic + str(k).encode() for topic in (b"alpha.", b"beta.", b"gamma.")], 0.005)
    q = (spark.readStream.format("gsp").option("url", url).option("protocol", "sub")
         .option("mode", "dial").option("subscribe", "alpha.,gamma.")
         .option("spool", str(tmp_path / "spool")).load()
         .writeStream.format("memory").queryName("subbed")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    try:
        wait_for(lambda: table_count(spark, "subbed") >= 100, 60, "100 published messages")
    finally:
        q.stop()
        pub.join(10)
    rows = spark.sql("SELECT value FROM subbed").collect()
    topics = {bytes(r.value).split(b".")[0] for r in rows}
    assert topics == {b"alpha", b"gamma"}


# -- errors reach the user as gsp's own, at load()/start() ---------------------------------------
@pytest.mark.parametrize("schema", [None, "n INT"])
@pytest.mark.parametrize("options, error", [
    ({"protocol": "push"}, "unknown protocol 'push'; use one of pull, sub, rep"),
    ({"url": None}, "option 'url' is required"),
    ({"mode": "connect"}, "unknown mode 'connect'; use one of listen, dial"),
    ({"subscribe": "a"}, "'subscribe' needs protocol 'sub'"),
    ({"max_batch_rows": "lots"}, "'max_batch_rows' must be an integer"),
    ({"spoool": "/tmp/x"}, "unknown option.*'spoool'"),
])
def test_bad_source_options_fail_at_load_with_gsps_message(spark, options, error, schema):
    # With a declared schema Spark itself would not look at the options before the query runs.
    r = spark.readStream.format("gsp")
    if schema:
        r = r.schema(schema)
    for k, v in {"url": "tcp://127.0.0.1:1", **options}.items():
        if v is not None:
            r = r.option(k, v)
    with pytest.raises(gsp.BadOption, match="^gsp source: .*" + error):
        r.load()
    with pytest.raises(gsp.BadOption, match="^gsp source: .*" + error):  # keyword form
        spark.readStream.load(format="gsp", schema=schema,
                              **{"url": "tcp://127.0.0.1:1", **options})


def test_bad_url_fails_at_load_with_gsps_message(spark):
    with pytest.raises(gsp.InvalidAddress, match="^no transport for 'bogus' in 'bogus://x'"):
        spark.readStream.format("gsp").option("url", "bogus://x").load()


def test_schema_mismatch_fails_at_load_with_gsps_message(spark):
    # Spark would only find this out when the query runs.
    r = spark.readStream.format("gsp").schema("a INT, b INT").option("format", "raw")
    with pytest.raises(SchemaMismatch, match="^gsp source: format 'raw' needs exactly one BINARY "
                                             "or STRING column"):
        r.option("url", "tcp://127.0.0.1:1").load()


def test_receiver_that_cannot_listen_fails_the_query_with_gsps_message(spark, tmp_path):
    # Only the running query can find this out: gsp_error digs gsp's error out of Spark's.
    q = (spark.readStream.format("gsp").option("url", "ipc:///nonexistent-gsp-dir/s.sock")
         .option("spool", str(tmp_path / "spool")).load()
         .writeStream.format("memory").queryName("cannot_listen")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        with pytest.raises(StreamingQueryException) as info:
            q.awaitTermination(60)
    finally:
        q.stop()
    err = gsp_error(info.value)
    assert isinstance(err, SourceError)
    assert str(err).startswith("gsp source: cannot open ipc:///nonexistent-gsp-dir/s.sock: ")


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_read_and_write_from_a_plain_thread_with_register(spark, ipc_dir, tmp_path):
    # This session was registered by hand; the sink module's relies on auto-discovery.
    got = spark_fixtures.through_gsp(spark, spark_fixtures.in_thread, f"ipc://{ipc_dir}/t.sock",
                                     str(tmp_path), "registered_thread")
    assert got == list(range(100))


# -- spool and decoding, no Spark --------------------------------------------------------------
def segments(path: object) -> list[str]:
    """The spool's segment files in ``path``, oldest first (each named by its first message's
    number, zero-padded)."""
    return sorted(n for n in os.listdir(str(path)) if n.endswith(".gsps"))


def test_spool_numbers_survive_restart_torn_tail_and_commit(tmp_path):
    sp = Spool(str(tmp_path), segment_bytes=200)
    sp.open()
    for k in range(10):
        sp.append([f"m{k}".encode() * 10], [7], 1.5)
    assert (sp.first_seq, sp.next_seq) == (0, 10)
    data, offs, first = sp.read(3, 6)
    assert first == 3 and len(offs) == 3
    sp.drop_below(6)
    assert 0 < sp.first_seq <= 6  # whole segments below 6 are gone
    sp.close()
    with open(os.path.join(str(tmp_path), segments(tmp_path)[-1]), "ab") as f:
        f.write(b"\x10\x00\x00\x00torn")  # a crash in the middle of a write
    sp2 = Spool(str(tmp_path), segment_bytes=200)
    sp2.open()
    try:
        assert sp2.next_seq == 10  # numbering continues; the torn record is dropped
        sp2.append([b"next"], [1], 2.0)
        data, offs, first = sp2.read(6, 11)
        rows = decode_chunk(_Chunk(first, data), StructType([
            StructField("value", BinaryType()), StructField("_seq", LongType())]), True, "fail")
        assert rows.column("_seq").to_pylist() == [6, 7, 8, 9, 10]
        assert rows.column("value").to_pylist()[-1] == b"next"
        with pytest.raises(SpoolBusy, match="in use by process"):
            Spool(str(tmp_path)).open()
    finally:
        sp2.close()


def test_spool_index_cuts_the_same_records_as_a_scan_across_segments_and_reopen(tmp_path):
    """The spool remembers where each record starts (no rescan per micro-batch); the chunks the
    planner cuts with it must decode exactly like chunks whose records are found by scanning."""
    schema = StructType([StructField("value", BinaryType()), StructField("_seq", LongType()),
                         StructField("_pipe", LongType())])
    sp = Spool(str(tmp_path), segment_bytes=300)
    sp.open()
    try:
        pipes: list[int] = []
        for k in range(20):  # groups of 1-3 messages of varied sizes, over several segments
            group = [bytes([k]) * (k * 7 % 50)] * (k % 3 + 1)
            sp.append(group, [k] * len(group) if k % 2 else None, 1.0)  # None: pipe 0
            pipes += [k if k % 2 else 0] * len(group)
        total = sp.next_seq
        assert total == len(pipes) and len(segments(tmp_path)) > 3
        data, offs, first = sp.read(5, total - 3)
        assert first == 5 and list(offs) == scan(data)[0]
        by_index = decode_chunk(_Chunk(first, data, offs.tobytes()), schema, True, "fail")
        assert by_index.equals(decode_chunk(_Chunk(first, data), schema, True, "fail"))
        assert by_index.column("_seq").to_pylist() == list(range(5, total - 3))
        assert by_index.column("_pipe").to_pylist() == pipes[5:total - 3]
    finally:
        sp.close()
    again = Spool(str(tmp_path), segment_bytes=300)
    again.open()  # the index is rebuilt from the files
    try:
        data2, offs2, _ = again.read(5, total - 3)
        assert (data2, list(offs2)) == (data, list(offs))
    finally:
        again.close()


def test_pickled_chunks_go_compressed_and_come_back_byte_for_byte(tmp_path, monkeypatch):
    """The planner's chunks are pickled on their way to the tasks: compressed, with lengths
    instead of offsets, they must come back the same records at the same offsets, decoding to
    the same rows; without a codec they go as they are; an empty chunk survives too."""
    schema = StructType([StructField("user", StringType()), StructField("n", LongType()),
                         StructField("_seq", LongType()), StructField("_pipe", LongType()),
                         StructField("_received", TimestampType())])
    sp = Spool(str(tmp_path), segment_bytes=1 << 16)
    sp.open()
    try:
        for k in range(40):  # groups of varied sizes, pipes and receive times, over segments
            group = [msgpack.packb({"user": f"user-{i % 7}", "n": i}) for i in range(k * 50)]
            sp.append(group + [b""] * (k % 2), [k] * (len(group) + k % 2), 1.7e9 + k)
        data, offs, first = sp.read(30, sp.next_seq - 5)
    finally:
        sp.close()
    chunk = _Chunk(first, data, offs.tobytes())
    expected = decode_chunk(chunk, schema, False, "skip")
    assert expected.num_rows > 30_000

    def round_trip() -> tuple[int, _Chunk]:
        wire = pickle.dumps(chunk)
        back = pickle.loads(wire)
        assert (back.first_seq, back.data, back.offsets) == (first, data, offs.tobytes())
        assert decode_chunk(back, schema, False, "skip").equals(expected)
        return len(wire), back

    size, _ = round_trip()
    assert size < len(data) // 3  # maps of the same keys and few values compress well
    monkeypatch.setattr(_decode, "_CODEC", None)
    size, _ = round_trip()
    assert size > len(data)
    empty = pickle.loads(pickle.dumps(_Chunk(9, b"")))
    assert (empty.first_seq, empty.data, empty.offsets, empty.records) == (9, b"", b"", 0)


def _chunk(*bodies: bytes) -> _Chunk:
    return _Chunk(100, b"".join(REC.pack(len(b), 3, 1.7e9) + b for b in bodies))


def test_decoding_msgpack_into_a_schema():
    schema = StructType([StructField("name", StringType()), StructField("x", DoubleType()),
                         StructField("when", TimestampType()), StructField("day", DateType()),
                         StructField("amount", DecimalType(6, 2)),
                         StructField("missing", IntegerType()), StructField("_pipe", LongType()),
                         StructField("_received", TimestampType())])
    batch = decode_chunk(_chunk(
        msgpack.packb({"name": "a", "x": 1, "when": 1.7e9, "day": "2024-01-02", "amount": "1.5"}),
        msgpack.packb({"name": "b", "x": 2.5, "extra": True}),
    ), schema, False, "fail")
    rows = batch.to_pylist()
    assert [r["name"] for r in rows] == ["a", "b"] and [r["x"] for r in rows] == [1.0, 2.5]
    assert rows[0]["when"].timestamp() == 1.7e9 and str(rows[0]["day"]) == "2024-01-02"
    assert str(rows[0]["amount"]) == "1.50" and rows[1]["missing"] is None
    assert rows[0]["_pipe"] == 3 and rows[0]["_received"].timestamp() == 1.7e9


def test_bad_messages_fail_with_their_seq_or_are_skipped():
    schema = StructType([StructField("n", IntegerType()), StructField("_seq", LongType())])
    chunk = _chunk(msgpack.packb({"n": 1}), b"\xc1not msgpack", msgpack.packb({"n": "two"}),
                   msgpack.packb({"n": 4}))
    with pytest.raises(SourceError, match="message seq 101 is not a msgpack map"):
        decode_chunk(chunk, schema, False, "fail")
    with pytest.raises(SourceError, match="message seq 102: field 'n' = 'two' does not fit int"):
        decode_chunk(_chunk(msgpack.packb({"n": 1}), msgpack.packb({"n": 1}),
                            msgpack.packb({"n": "two"})), schema, False, "fail")
    batch = decode_chunk(chunk, schema, False, "skip")
    assert batch.to_pylist() == [{"n": 1, "_seq": 100}, {"n": 4, "_seq": 103}]


def test_quick_decoding_gives_way_to_the_exact_one():
    """Schemas without timestamps decode with plain ``msgpack.unpackb`` first; whatever it reads
    differently (a Timestamp, a map with int keys) must come out as the exact decoder has it."""
    when = msgpack.Timestamp(1_700_000_000)
    schema = StructType([StructField("s", StringType()),
                         StructField("m", MapType(IntegerType(), StringType())),
                         StructField("_seq", LongType())])
    int_keys = msgpack.packb({"s": "a", "m": {1: "one", 2: "two"}})
    batch = decode_chunk(_chunk(int_keys, msgpack.packb({"s": "b"})), schema, False, "fail")
    assert batch.to_pylist() == [{"s": "a", "m": [(1, "one"), (2, "two")], "_seq": 100},
                                 {"s": "b", "m": None, "_seq": 101}]
    stamped = msgpack.packb({"s": when}, datetime=False)
    with pytest.raises(SourceError, match=r"message seq 101: field 's' = datetime\.datetime\(2023"):
        decode_chunk(_chunk(msgpack.packb({"s": "a"}), stamped), schema, False, "fail")
    batch = decode_chunk(_chunk(stamped, msgpack.packb({"s": "c"})), schema, False, "skip")
    assert batch.to_pylist() == [{"s": "c", "m": None, "_seq": 101}]


def test_reader_dropped_without_stop_releases_socket_thread_and_spool(ipc_dir, tmp_path):
    """Spark does not always call stop(): a reader that is garbage-collected (or whose process
    exits) releases its receiver, socket and spool lock anyway."""
    path, spool = f"{ipc_dir}/drop.sock", str(tmp_path / "spool")
    cfg = SourceConfig.parse({"url": f"ipc://{path}", "spool": spool})
    reader = StreamReader(cfg, StructType([StructField("value", BinaryType())]))
    assert reader.initialOffset() == {"seq": 0}  # starts the receiver

    def receivers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "gsp-spark-receiver"]

    assert receivers() and spark_fixtures.ipc_listening(path)
    with pytest.raises(SpoolBusy):
        Spool(spool).open()
    del reader
    gc.collect()
    assert not receivers() and not spark_fixtures.ipc_listening(path)
    free = Spool(spool)
    free.open()  # the lock was released
    free.close()



def test_planner_cuts_a_batch_into_partitions_that_decode_to_every_message(ipc_dir, tmp_path,
                                                                          monkeypatch):
    """The receiver spools a burst (in groups), the planner cuts any seq range into partitions
    read straight from the spool files, and executors decode them: every message once, in
    order, each partition numbered from its first message's seq. A batch too small for two
    partitions of ``_PART_ROWS`` messages is one partition."""
    path = f"{ipc_dir}/cut.sock"
    cfg = SourceConfig.parse({"url": f"ipc://{path}", "spool": str(tmp_path / "spool"),
                              "partitions": "3"})
    schema = StructType([StructField("n", LongType()), StructField("_seq", LongType())])
    reader = StreamReader(cfg, schema)
    try:
        reader.initialOffset()
        n = 5000

        def send(stop: threading.Event) -> None:
            with gsp.socket("push", dial=f"ipc://{path}", send_timeout=10) as s:
                for i in range(n):
                    s.send(msgpack.packb({"n": i}))
                gevent.sleep(0.2)  # let the last writes go out before close

        producer = HubThread(send)
        deadline = time.monotonic() + 30
        while reader.latestOffset({"seq": 0}, None)["seq"] < n and time.monotonic() < deadline:
            time.sleep(0.02)
        producer.join(10)
        whole = reader.partitions({"seq": 0}, {"seq": n})
        assert len(whole) == 1
        assert next(reader.read(whole[0])).to_pylist() == [{"n": i, "_seq": i} for i in range(n)]
        monkeypatch.setattr(_source, "_PART_ROWS", 1000)
        for lo, hi in [(0, n), (1234, 4321)]:
            parts = reader.partitions({"seq": lo}, {"seq": hi})
            batches = [next(reader.read(p)).to_pylist() for p in parts]
            assert len(batches) == 3 and all(batches)
            assert [r for b in batches for r in b] == [{"n": i, "_seq": i} for i in range(lo, hi)]
    finally:
        reader.stop()


def test_flat_schemas_decode_through_typed_structs_as_the_exact_decoder_would():
    """A schema of flat scalar columns decodes with msgspec into typed structs first; a batch it
    refuses (a value of another type) is decoded again by the next decoder, with the same
    result as before."""
    schema = StructType([StructField("user name", StringType()), StructField("n", LongType()),
                         StructField("x", DoubleType()), StructField("ok", BooleanType()),
                         StructField("b", BinaryType()), StructField("_seq", LongType())])
    good = _chunk(msgpack.packb({"user name": "a", "n": 1, "x": 2, "ok": True, "b": b"\x00"}),
                  msgpack.packb({"n": -5, "x": 0.5, "extra": [1, 2]}))
    expected = [{"user name": "a", "n": 1, "x": 2.0, "ok": True, "b": b"\x00", "_seq": 100},
                {"user name": None, "n": -5, "x": 0.5, "ok": None, "b": None, "_seq": 101}]
    assert decode_chunk(good, schema, False, "fail").to_pylist() == expected
    arrow = to_arrow_schema(schema, timezone="UTC")
    bodies = [msgpack.packb({"user name": "a", "n": 1, "x": 2, "ok": True, "b": b"\x00"}),
              msgpack.packb({"n": -5, "x": 0.5, "extra": [1, 2]})]
    assert _struct_batch(_records(good), bodies, 100, schema, arrow).to_pylist() == expected
    # A string where a long belongs: refused by the struct decoder, named by the exact one.
    bad = _chunk(msgpack.packb({"n": 1}), msgpack.packb({"n": "two"}))
    assert _struct_batch(_records(bad), [msgpack.packb({"n": 1}), msgpack.packb({"n": "two"})],
                         100, schema, arrow) is None
    with pytest.raises(SourceError, match="message seq 101: field 'n' = 'two' does not fit"):
        decode_chunk(bad, schema, False, "fail")
    assert decode_chunk(bad, schema, False, "skip").to_pylist() == \
        [{"user name": None, "n": 1, "x": None, "ok": None, "b": None, "_seq": 100}]
