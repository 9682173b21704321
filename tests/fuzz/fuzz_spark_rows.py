"""Fuzz target: the Spark source's row decoder (gsp_spark._decode.decode_chunk), which turns the
spooled bytes of received messages into one Arrow record batch of the declared schema (msgpack
maps, or raw bytes/strings), under ``on_bad_message`` ``fail`` and ``skip``.

Input layout: byte 0 picks the schema (bits 0-2, an index into ``SCHEMAS``) and
``on_bad_message`` (bit 3: skip); the rest is a sequence of message bodies, each a 2-byte
big-endian length then that many bytes (a short last one takes what is left). The bodies are
spooled as the receiver spools them (``REC`` header: length, pipe id, receive time) and the
whole spool is decoded as one chunk.

A finding is: anything but a record batch of exactly the schema's Arrow type with at most one
row per message (all of them when the format is raw), or any exception but
:class:`gsp_spark._decode.SourceError` under ``fail`` (and any exception at all under
``skip``). A hang is caught by libFuzzer's ``-timeout``.
"""

from __future__ import annotations

import atheris
import harness

with atheris.instrument_imports(include=list(harness.INSTRUMENTED)):
    import pyarrow as pa
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from gsp_spark._decode import SourceError, _Chunk, decode_chunk
    from gsp_spark._spool import REC
    from gsp_spark._types import DEFAULT_SOURCE_SCHEMA, check_source_schema


def _schema(*fields: tuple[str, object]) -> T.StructType:
    fields_ = [T.StructField(name, typ, True) for name, typ in fields]  # type: ignore[arg-type]
    return T.StructType(fields_)


#: Found here, in gsp_spark/_decode.py (reproducer: findings/spark_rows-timestamp-oserror): an
#: int timestamp beyond the platform's time_t range makes datetime.fromtimestamp raise OSError
#: (errno 75), which _safe does not catch, so it escapes decode_chunk under both on_bad modes.
KNOWN: list[harness.Known] = []  # the far-off timestamp's OSError is fixed (test_fuzz FIXED)

META = [("_received", T.TimestampType()), ("_pipe", T.LongType()), ("_seq", T.LongType())]
#: (schema, format): the msgpack decoder over scalar, temporal, nested and metadata columns,
#: and the raw formats. DEFAULT_SOURCE_SCHEMA is the one a query gets when it declares none.
SCHEMAS = [
    (_schema(("a", T.LongType()), ("b", T.StringType())), "auto"),
    (_schema(("x", T.DoubleType()), ("ok", T.BooleanType()), ("n", T.IntegerType()), *META),
     "msgpack"),
    (_schema(("ts", T.TimestampType()), ("d", T.DateType()), ("amount", T.DecimalType(10, 2)),
             ("ntz", T.TimestampNTZType())), "auto"),
    (_schema(("tags", T.ArrayType(T.StringType())),
             ("attrs", T.MapType(T.StringType(), T.LongType())),
             ("raw", T.BinaryType()), ("small", T.ByteType())), "msgpack"),
    (_schema(("p", T.StructType([T.StructField("x", T.IntegerType()),
                                 T.StructField("y", T.ArrayType(T.DoubleType()))])),
             ("f", T.FloatType()), ("s", T.ShortType()), ("_pipe", T.IntegerType())), "msgpack"),
    (_schema(("value", T.BinaryType()), *META), "auto"),  # = DEFAULT_SOURCE_SCHEMA: raw bytes
    (_schema(("text", T.StringType()), ("_seq", T.LongType())), "raw"),
    (_schema(("value", T.BinaryType()), ("n", T.LongType())), "auto"),
]
assert DEFAULT_SOURCE_SCHEMA.startswith("value BINARY")
PREPARED = [(s, check_source_schema(s, fmt), to_arrow_schema(s, timezone="UTC"))
            for s, fmt in SCHEMAS]


def bodies(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 2], "big")
        out.append(data[pos + 2:pos + 2 + n])
        pos += 2 + n
    return out


def one_input(data: bytes) -> None:
    if not data:
        return
    schema, raw, arrow = PREPARED[data[0] & 7]
    on_bad = "skip" if data[0] & 8 else "fail"
    msgs = bodies(data[1:])
    spool = b"".join(REC.pack(len(b), 1 + i % 3, 1.7e9 + i) + b for i, b in enumerate(msgs))
    try:
        batch = decode_chunk(_Chunk(100, spool), schema, raw, on_bad)
    except SourceError as exc:
        harness.expect(on_bad == "fail", f"on_bad_message 'skip' raised {exc!r}")
        harness.expect("gsp source: message seq " in str(exc), f"an unhelpful error: {exc}")
        return
    harness.expect(isinstance(batch, pa.RecordBatch), f"returned a {type(batch).__name__}")
    harness.expect(batch.schema == arrow, f"schema {batch.schema} is not {arrow}")
    harness.expect(batch.num_rows == len(msgs) if raw else batch.num_rows <= len(msgs),
                   f"{batch.num_rows} rows from {len(msgs)} messages")
    if "_seq" in schema.names:
        seqs = batch.column("_seq").to_pylist()
        harness.expect(seqs == sorted(set(seqs)) and all(100 <= s < 100 + len(msgs) for s in seqs),
                       f"sequence numbers {seqs[:5]}...")


if __name__ == "__main__":
    harness.main(one_input, KNOWN)
