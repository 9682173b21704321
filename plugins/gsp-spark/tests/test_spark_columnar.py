"""The columnar decoder (gsp_spark._columnar) against the typed-struct decoder it stands before.

Every batch it accepts must come out exactly as ``_struct_batch`` (msgspec, then
``pyarrow.array``) has it; every batch it cannot read that way it must decline, and
``decode_chunk`` then gives what the other decoders give. The maps here are written by hand in
every encoding msgpack allows for a value (a 5 as a fixint, a uint8, an int64...; strings as
fixstr, str8, str16, str32; maps as fixmap, map16, map32), as producers other than
msgpack-python write them.
"""

from __future__ import annotations

import random
import struct

import msgpack
import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from gsp_spark import SourceError
from gsp_spark._columnar import MAX_KEYS, decode_maps
from gsp_spark._decode import _by_message, _Chunk, _records, _struct_batch, decode_chunk
from gsp_spark._spool import REC

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("user", StringType()), StructField("n", LongType()),
                     StructField("i", IntegerType()), StructField("s", ShortType()),
                     StructField("b", ByteType()), StructField("x", DoubleType()),
                     StructField("ok", BooleanType()), StructField("raw", BinaryType()),
                     StructField("a long column name, past eight bytes", StringType()),
                     StructField("_seq", LongType()), StructField("_pipe", LongType())])
ARROW = to_arrow_schema(SCHEMA, timezone="UTC")


def _str(text: str | bytes, rng: random.Random) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    forms = [f for f, fits in (("fix", len(raw) < 32), ("8", len(raw) < 256),
                               ("16", len(raw) < 65536), ("32", True)) if fits]
    form = rng.choice(forms)
    head = {"fix": bytes([0xA0 | len(raw)]) if len(raw) < 32 else b"",
            "8": b"\xd9" + struct.pack(">B", len(raw) % 256),
            "16": b"\xda" + struct.pack(">H", len(raw) % 65536),
            "32": b"\xdb" + struct.pack(">I", len(raw))}[form]
    return head + raw


def _bin(raw: bytes, rng: random.Random) -> bytes:
    form = rng.choice([f for f, fits in (("8", len(raw) < 256), ("16", len(raw) < 65536),
                                          ("32", True)) if fits])
    return {"8": b"\xc4" + struct.pack(">B", len(raw) % 256),
            "16": b"\xc5" + struct.pack(">H", len(raw) % 65536),
            "32": b"\xc6" + struct.pack(">I", len(raw))}[form] + raw


def _int(v: int, rng: random.Random) -> bytes:
    forms = []
    if 0 <= v < 128:
        forms.append(bytes([v]))
    if -32 <= v < 0:
        forms.append(struct.pack(">b", v))
    for code, fmt in ((0xCC, ">B"), (0xCD, ">H"), (0xCE, ">I"), (0xCF, ">Q"),
                      (0xD0, ">b"), (0xD1, ">h"), (0xD2, ">i"), (0xD3, ">q")):
        try:
            forms.append(bytes([code]) + struct.pack(fmt, v))
        except struct.error:
            pass
    return rng.choice(forms)


def _float(v: float, rng: random.Random) -> bytes:
    if rng.random() < 0.3 and abs(v) < 1e38 and struct.unpack(">f", struct.pack(">f", v))[0] == v:
        return b"\xca" + struct.pack(">f", v)
    return b"\xcb" + struct.pack(">d", v)


def _map(entries: list[bytes], rng: random.Random) -> bytes:
    n = len(entries)
    forms = ([bytes([0x80 | n])] if n < 16 else []) + [b"\xde" + struct.pack(">H", n),
                                                          b"\xdf" + struct.pack(">I", n)]
    return rng.choice(forms) + b"".join(entries)


def _message(rng: random.Random) -> bytes:
    """One map: some of the schema's fields (each maybe nil), in any order, among extra keys."""
    text = rng.choice(["", "user-7", "ünïcødé ✓", "x" * 40, "y" * 300, "z" * 70000])
    values = {
        "user": lambda: _str(text, rng),
        "n": lambda: _int(rng.choice([0, 1, -1, 127, 128, -32, -33, 255, 256, 65535, 65536,
                                      2**31, -2**31 - 1, 2**63 - 1, -2**63]), rng),
        "i": lambda: _int(rng.choice([0, 5, -5, 2**31 - 1, -2**31, 40000]), rng),
        "s": lambda: _int(rng.choice([0, 300, -300, 32767, -32768]), rng),
        "b": lambda: _int(rng.choice([0, 100, -100, 127, -128]), rng),
        "x": lambda: rng.choice([_float(rng.choice([0.5, -2.25, 1e300, 1.1, -0.0]), rng),
                                 _int(rng.choice([3, -7, 2**53 + 1, 2**63 - 1]), rng)]),
        "ok": lambda: rng.choice([b"\xc2", b"\xc3"]),
        "raw": lambda: _bin(rng.choice([b"", b"\x00\xff", bytes(300)]), rng),
        "a long column name, past eight bytes": lambda: _str(text, rng),
    }
    extras = {"extra": lambda: _int(rng.randrange(-1000, 1000), rng),
              "a long column name, past eight bytez": lambda: _str("no", rng),
              "use": lambda: b"\xc3",
              "stamp": lambda: b"\xd6\xff" + struct.pack(">I", 1_700_000_000),  # ext -1 (4 B)
              "ext8": lambda: b"\xc7\x03\x05abc",
              "ext16": lambda: b"\xc8\x00\x02\x09ab",
              "uuid": lambda: b"\xd8\x07" + bytes(range(16)),  # fixext 16
              "f32": lambda: b"\xca" + struct.pack(">f", 1.5)}
    keys = rng.sample(sorted(values), rng.randrange(len(values) + 1))
    keys += rng.sample(sorted(extras), rng.randrange(4))
    rng.shuffle(keys)
    return _map([_str(k, rng) + (b"\xc0" if rng.random() < 0.1 else
                                 {**values, **extras}[k]()) for k in keys], rng)


def _chunk(bodies: list[bytes]) -> _Chunk:
    return _Chunk(100, b"".join(REC.pack(len(b), 3, 1.7e9) + b for b in bodies))


def _columnar(bodies: list[bytes], schema: StructType = SCHEMA) -> list[pa.Array] | None:
    chunk = _chunk(bodies)
    starts = np.frombuffer(chunk.offsets, np.int64)
    ends = np.append(starts[1:], len(chunk.data))
    arrow = to_arrow_schema(schema, timezone="UTC")
    names = [f.name for f in schema.fields if not f.name.startswith("_")]
    return decode_maps(chunk.data, starts + REC.size, ends,
                       [(name, arrow.field(name).type) for name in names])


@pytest.mark.parametrize("seed", range(8))
def test_every_encoding_decodes_as_the_typed_struct_decoder_has_it(seed):
    rng = random.Random(seed)
    bodies = [_message(rng) for _ in range(300)]
    chunk = _chunk(bodies)
    expected = _struct_batch(_records(chunk), bodies, 100, SCHEMA, ARROW)
    assert expected is not None
    columns = _columnar(bodies)
    assert columns is not None, "the columnar decoder declined a batch it reads"
    names = [f.name for f in SCHEMA.fields if not f.name.startswith("_")]
    for name, column in zip(names, columns):
        assert column.equals(expected.column(name)), name
    assert decode_chunk(chunk, SCHEMA, False, "fail").equals(expected)


def test_the_usual_batch_is_read_by_the_columnar_decoder():
    """msgpack-python's maps of a flat schema: accepted, with the metadata columns beside."""
    bodies = [msgpack.packb({"user": f"user-{k}", "x": k * 0.5, "n": k}) for k in range(1000)]
    assert _columnar(bodies) is not None
    rows = decode_chunk(_chunk(bodies), SCHEMA, False, "fail").to_pylist()
    assert rows[7] == {"user": "user-7", "n": 7, "i": None, "s": None, "b": None, "x": 3.5,
                       "ok": None, "raw": None, "a long column name, past eight bytes": None,
                       "_seq": 107, "_pipe": 3}


DECLINED = {
    "a nested value": msgpack.packb({"user": "a", "tags": [1, 2]}),
    "an empty nested map": msgpack.packb({"user": "a", "m": {}}),
    "a duplicate key": b"\x82\xa4user\xa1a\xa4user\xa1b",
    "an int key": b"\x81\x01\xa1a",
    "a bin key": b"\x81\xc4\x04user\xa1a",
    "bytes after the map": msgpack.packb({"user": "a"}) + b"\x00",
    "a truncated map": msgpack.packb({"user": "abc"})[:-1],
    "more entries than bytes": b"\x83\xa4user\xa1a",
    "not a map": msgpack.packb(["user", "a"]),
    "an empty body": b"",
    "0xc1": b"\x81\xa4user\xc1",
    "a string past its body": b"\x81\xa4user\xd9\xff",
    "invalid UTF-8": b"\x81\xa4user\xa2\xff\xfe",
    "a bin for a string": b"\x81\xa4user\xc4\x01a",
    "a string for a long": msgpack.packb({"n": "1"}),
    "a float for a long": msgpack.packb({"n": 1.0}),
    "a bool for a long": msgpack.packb({"n": True}),
    "an int beyond int32": msgpack.packb({"i": 2**31}),
    "an int beyond int8": msgpack.packb({"b": -129}),
    "a uint64 beyond int64": msgpack.packb({"n": 2**64 - 1}),
    "a string for a double": msgpack.packb({"x": "1.5"}),
    "a nil-less bool": msgpack.packb({"ok": 1}),
    "a string for binary": msgpack.packb({"raw": "a"}),
    "too many keys": msgpack.packb({f"k{k}": k for k in range(MAX_KEYS + 1)}),
}


def _outcome(decode, on_bad: str) -> object:
    try:
        return decode(on_bad).to_pylist()
    except SourceError as exc:
        return str(exc)


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_what_it_cannot_read_exactly_it_declines_and_the_others_decode(case):
    good = [msgpack.packb({"user": "ok", "n": 1})] * 3
    bodies = good[:1] + [DECLINED[case]] + good[1:]
    assert _columnar(bodies) is None
    chunk = _chunk(bodies)
    for on_bad in ("fail", "skip"):
        assert _outcome(lambda b: decode_chunk(chunk, SCHEMA, False, b), on_bad) == \
            _outcome(lambda b: _by_message(_records(chunk), chunk, SCHEMA, ARROW, b), on_bad)


def test_schemas_it_does_not_cover_are_declined_whole():
    bodies = [msgpack.packb({"f": 1.5})]
    assert _columnar(bodies, StructType([StructField("f", FloatType())])) is None
    assert _columnar(bodies, StructType([StructField("_seq", LongType())])) is None
    assert _columnar([], SCHEMA) is None
