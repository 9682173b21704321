"""Decoding the source's spooled records into Arrow record batches, in Spark's executors.

A micro-batch reaches an executor as a :class:`_Chunk`: the spool's records (16-byte header, then
the body) as one ``bytes`` plus where each record starts, both cut out by the planner. The records
become one Arrow ``large_binary`` array over those bytes without a copy, and Arrow slices the
bodies and the header fields out of it (no Python call per record).

Four decoders, the quickest that fits first; whenever one refuses a batch (a message that is not
a map, a value of another type), the next decodes the whole batch again, and the last one,
:func:`gsp_spark.unpack` message by message, names the culprit or skips it:

* a schema of flat scalar columns but float: :func:`gsp_spark._columnar.decode_maps` reads every
  map of the batch at once with numpy, no Python object per message (about a third of the
  next one's time), where every map is flat and fits the schema exactly;
* a schema of flat scalar columns (strings, integers, floats, booleans, binaries): msgspec
  decodes each message straight into a typed struct of those columns (about half the time of
  ``msgpack.unpackb`` into a dict), and each column is gathered with one ``attrgetter``;
* no timestamp anywhere in the schema: ``msgpack.unpackb`` (see :func:`_decoder`);
* anything: :func:`gsp_spark.unpack`.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import json
import struct
import sys
from array import array
from itertools import repeat
from operator import attrgetter
from typing import Any, Optional

import msgpack
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    MapType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

import gsp

from ._columnar import decode_maps
from ._spool import REC, scan
from ._types import META
from ._wire import unpack

_END = struct.Struct("=q")  # one more offset, native like array("q")
_CODEC: str | None = "lz4"  # how a pickled chunk's bytes are compressed (None: not at all)


class SourceError(gsp.GspError):
    """The source's receiver failed, or a message does not fit the declared schema."""


class _Chunk(InputPartition):
    """Spooled records ``first_seq..`` for one Spark task, safe to pickle: ``data`` holds them
    back to back, ``offsets`` (native ``int64`` bytes) where each starts; found by scanning
    ``data`` when not given.

    Pickled (the planner's partitions, on their way through the JVM to a task's Python worker),
    the records are LZ4-compressed and the offsets become record lengths, compressed too: every
    megabyte on that way costs tens of milliseconds (copies in the planner, the JVM's task and
    Arrow hand-off, the worker), compressing and expanding it about one. Where pyarrow lacks
    LZ4 they go as they are."""

    def __init__(self, first_seq: int, data: bytes, offsets: bytes | None = None) -> None:
        self.first_seq = first_seq
        self.data = data
        self.offsets = offsets if offsets is not None else array("q", scan(data)[0]).tobytes()

    @property
    def records(self) -> int:
        return len(self.offsets) // 8

    def __getstate__(self) -> dict[str, Any]:
        n = self.records
        lens_bytes = b""
        if n:
            ends = self.offsets[8:] + _END.pack(len(self.data))
            lens = pc.subtract(
                pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(ends)]),
                pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.offsets)]))
            lens_bytes = memoryview(lens.cast(pa.uint32()).buffers()[1])[:4 * n].tobytes()
        codec = _CODEC if _CODEC is not None and pa.Codec.is_available(_CODEC) else None
        data, lens_out = self.data, lens_bytes
        if codec is not None:
            z = pa.Codec(codec)
            data, lens_out = z.compress(data, asbytes=True), z.compress(lens_bytes, asbytes=True)
        return {"first_seq": self.first_seq, "n": n, "size": len(self.data), "codec": codec,
                "data": data, "lens": lens_out}

    def __setstate__(self, state: dict[str, Any]) -> None:
        n, codec = state["n"], state["codec"]
        data, lens = state["data"], state["lens"]
        if codec is not None:
            z = pa.Codec(codec)
            data = z.decompress(data, state["size"], asbytes=True)
            lens = z.decompress(lens, 4 * n, asbytes=True)
        self.first_seq = state["first_seq"]
        self.data = data
        self.offsets = b""
        if n:  # where each record starts: 0, then where each but the last one ends
            ends = pc.cumulative_sum(pa.Array.from_buffers(pa.uint32(), n,
                                                           [None, pa.py_buffer(lens)])
                                     .cast(pa.int64()))
            self.offsets = _END.pack(0) + memoryview(ends.buffers()[1])[:8 * (n - 1)].tobytes()

    def __repr__(self) -> str:
        return f"_Chunk(first_seq={self.first_seq}, records={self.records}, " \
               f"bytes={len(self.data)})"


def _records(chunk: _Chunk) -> Any:
    """The chunk's records as a ``large_binary`` array over its bytes (no copy)."""
    offsets = pa.py_buffer(chunk.offsets + _END.pack(len(chunk.data)))
    recs = pa.Array.from_buffers(pa.large_binary(), chunk.records, [None, offsets,
                                                                  pa.py_buffer(chunk.data)])
    recs.validate(full=True)  # offsets in order and inside the data
    return recs


def _header_field(recs: Any, start: int, code: str, typ: Any) -> Any:
    """One little-endian field of every record's header (``code``: an ``array`` type code of
    its width) as an Arrow array of ``typ``."""
    width = array(code).itemsize
    raw = pc.binary_slice(recs, start, start + width).cast(pa.binary(width))
    vals = array(code)
    vals.frombytes(memoryview(raw.buffers()[1])[:width * len(raw)])
    if sys.byteorder == "big":
        vals.byteswap()
    return pa.Array.from_buffers(typ, len(vals), [None, pa.py_buffer(vals)])


def _meta(name: str, recs: Any, first_seq: int, typ: Any) -> Any:
    """A metadata column for every record: its receive time, pipe id or sequence number."""
    if name == "_received":
        secs = _header_field(recs, 8, "d", pa.float64())
        micros = pc.cast(pc.multiply(secs, 1e6), pa.int64(), safe=False)
        return pc.cast(micros, typ)
    if name == "_pipe":
        return pc.cast(_header_field(recs, 4, "I", pa.uint32()), typ)
    return pa.array(range(first_seq, first_seq + len(recs)), typ)


def _values(bodies: Any, typ: Any) -> Any:
    """Raw bodies as the value column's type (STRING: invalid UTF-8 replaced, as ``decode``)."""
    try:
        return bodies.cast(typ)
    except pa.ArrowInvalid:
        if not pa.types.is_string(typ) and not pa.types.is_large_string(typ):
            raise
        return pa.array([b.decode("utf-8", "replace") for b in bodies.to_pylist()], typ)


def _maps(bodies: list[bytes], seqs: range, on_bad: str,
          decode: Any = unpack) -> tuple[list[Any], list[int] | None]:
    """The bodies msgpack-decoded, and which of them to keep (None: all), skipping (or, with
    ``on_bad`` 'fail', raising on) any that is not a msgpack map. When ``decode`` makes a map
    of every body, its results are returned; else all are decoded again with :func:`unpack`."""
    try:
        objs = list(map(decode, bodies))
        if all(type(o) is dict for o in objs):
            return objs, None
    except Exception:  # noqa: BLE001 - the slow path below finds and names the culprit
        pass
    rows: list[Any] = []
    keep: list[int] = []
    for i, body in enumerate(bodies):
        try:
            obj = unpack(body)
        except Exception:
            obj = None
        if isinstance(obj, dict):
            rows.append(obj)
            keep.append(i)
        elif on_bad == "fail":
            raise SourceError(f"gsp source: message seq {seqs[i]} is not a msgpack map "
                              f"({bytes(body[:40])!r}); read it raw (no schema, or format 'raw') "
                              "or set on_bad_message 'skip'")
    return rows, keep


class _Redo(Exception):
    """The quick decoding met something only :func:`unpack` reads right: decode again with it."""


def _has_timestamps(dt: Any) -> bool:
    if isinstance(dt, (TimestampType, TimestampNTZType)):
        return True
    if isinstance(dt, ArrayType):
        return _has_timestamps(dt.elementType)
    if isinstance(dt, MapType):
        return _has_timestamps(dt.keyType) or _has_timestamps(dt.valueType)
    if isinstance(dt, StructType):
        return any(_has_timestamps(f.dataType) for f in dt.fields)
    return False


def _decoder(schema: StructType) -> Any:
    """The quick decoder for ``schema``'s messages, or None to use :func:`unpack` only.

    ``msgpack.unpackb`` with its defaults skips parsing :func:`unpack`'s keyword arguments on
    every call (~0.15 us a message) and decodes the same values, except that it leaves msgpack
    Timestamps as ``msgpack.Timestamp`` and refuses map keys that are not strings. A schema
    with a timestamp anywhere needs :func:`unpack`; anywhere else a Timestamp fits no Arrow type
    and a refused key raises, and either way the batch is decoded again with :func:`unpack`."""
    data = [f for f in schema.fields if f.name not in META]
    return None if any(_has_timestamps(f.dataType) for f in data) else msgpack.unpackb


# Spark types a msgspec struct field decodes exactly as the other decoders do, and its type there.
_SCALARS: dict[str, Any] = {
    "StringType": str, "LongType": int, "IntegerType": int, "ShortType": int, "ByteType": int,
    "DoubleType": float, "FloatType": float, "BooleanType": bool, "BinaryType": bytes,
}


@functools.lru_cache(maxsize=32)
def _struct_decoder(schema_json: str) -> tuple[Any, list[tuple[str, Any]]] | None:
    """For a schema (as JSON) of flat scalar columns: a msgspec decoder of one message into a
    struct of those columns (absent keys None, other keys ignored: as ``dict.get``), and each
    column's name with the getter of its values; None for any other schema."""
    schema = StructType.fromJson(json.loads(schema_json))
    data = [f for f in schema.fields if f.name not in META]
    types = [_SCALARS.get(type(f.dataType).__name__) for f in data]
    if not data or any(t is None for t in types):
        return None
    attrs = [f"c{i}" for i in range(len(data))]  # column names need not be identifiers
    row = msgspec.defstruct("GspRow", [(a, Optional[t], None) for a, t in zip(attrs, types)],
                            rename=dict(zip(attrs, (f.name for f in data))))
    return msgspec.msgpack.Decoder(row), [(f.name, attrgetter(a)) for f, a in zip(data, attrs)]


def _struct_batch(recs: Any, bodies: list[bytes], first_seq: int, schema: StructType,
                  arrow: Any) -> Any:
    """The record batch by :func:`_struct_decoder`, or None where it does not fit (the schema,
    or any message)."""
    found = _struct_decoder(schema.json())
    if found is None:
        return None
    decoder, getters = found
    try:
        rows = list(map(decoder.decode, bodies))
        columns = {name: pa.array(list(map(get, rows)), type=arrow.field(name).type)
                   for name, get in getters}
    except (msgspec.MsgspecError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError,
            OverflowError):
        return None
    return pa.RecordBatch.from_arrays(
        [_meta(f.name, recs, first_seq, arrow.field(f.name).type) if f.name in META
         else columns[f.name] for f in schema.fields], schema=arrow)


def _columnar_batch(recs: Any, chunk: _Chunk, schema: StructType, arrow: Any) -> Any:
    """The record batch by :func:`gsp_spark._columnar.decode_maps`, for the schemas of
    :func:`_struct_decoder` (as it would decode them), or None where it declines."""
    if _struct_decoder(schema.json()) is None:
        return None
    starts = np.frombuffer(chunk.offsets, np.int64)
    ends = np.empty_like(starts)
    ends[:-1], ends[-1:] = starts[1:], len(chunk.data)
    data = [f.name for f in schema.fields if f.name not in META]
    columns = decode_maps(chunk.data, starts + REC.size, ends,
                          [(name, arrow.field(name).type) for name in data])
    if columns is None:
        return None
    by_name = dict(zip(data, columns))
    return pa.RecordBatch.from_arrays(
        [_meta(f.name, recs, chunk.first_seq, arrow.field(f.name).type) if f.name in META
         else by_name[f.name] for f in schema.fields], schema=arrow)


def decode_chunk(chunk: _Chunk, schema: StructType, raw: bool, on_bad: str) -> Any:
    """One Arrow record batch of ``schema`` from a chunk of spooled records."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema, timezone="UTC")  # exactly what Spark checks batches against
    recs = _records(chunk)
    if raw:
        bodies = pc.binary_slice(recs, REC.size, len(chunk.data) + 1)
        return pa.RecordBatch.from_arrays(
            [_meta(f.name, recs, chunk.first_seq, arrow.field(f.name).type) if f.name in META
             else _values(bodies, arrow.field(f.name).type) for f in schema.fields],
            schema=arrow)
    batch = _columnar_batch(recs, chunk, schema, arrow)
    if batch is not None:
        return batch
    return _by_message(recs, chunk, schema, arrow, on_bad)


def _by_message(recs: Any, chunk: _Chunk, schema: StructType, arrow: Any, on_bad: str) -> Any:
    """The record batch by the decoders that take one message at a time (the module's
    docstring lists them), from the chunk and its records ``recs``."""
    first_seq = chunk.first_seq
    bodies_list = pc.binary_slice(recs, REC.size, len(chunk.data) + 1).to_pylist()
    seqs = range(first_seq, first_seq + len(recs))
    batch = _struct_batch(recs, bodies_list, first_seq, schema, arrow)
    if batch is not None:
        return batch
    quick = _decoder(schema)
    if quick is not None:
        rows, keep = _maps(bodies_list, seqs, on_bad, quick)
        try:  # keep is None: every row is from the quick decoder (else all are from unpack)
            return _batch(recs, first_seq, schema, arrow, seqs, on_bad, rows, keep,
                          quick=keep is None)
        except _Redo:
            pass
    return _batch(recs, first_seq, schema, arrow, seqs, on_bad, *_maps(bodies_list, seqs, on_bad))


def _batch(recs: Any, first_seq: int, schema: StructType, arrow: Any, seqs: range, on_bad: str,
           rows: list[Any], keep: list[int] | None, quick: bool = False) -> Any:
    """The record batch of decoded ``rows`` (the messages ``keep`` names, None: all); with
    ``quick``, :class:`_Redo` instead of dropping or naming a row."""
    while True:
        try:
            arrays = []
            for f in schema.fields:
                typ = arrow.field(f.name).type
                if f.name in META:
                    col = _meta(f.name, recs, first_seq, typ)
                    arrays.append(col if keep is None else col.take(pa.array(keep, pa.int64())))
                else:
                    arrays.append(_column(list(map(dict.get, rows, repeat(f.name))),
                                          f.dataType, typ, f.name))
            return pa.RecordBatch.from_arrays(arrays, schema=arrow)
        except _BadValue as bad:
            if quick:
                raise _Redo from None
            if on_bad == "fail":
                raise SourceError(
                    f"gsp source: message seq {seqs[keep[bad.row] if keep else bad.row]}: field "
                    f"{bad.field!r} = {bad.value!r} does not fit {bad.type}; fix the producer or "
                    "the schema, or set on_bad_message 'skip'") from None
            if keep is None:
                keep = list(range(len(rows)))
            del rows[bad.row], keep[bad.row]


class _BadValue(Exception):
    def __init__(self, row: int, field: str, value: Any, typ: Any) -> None:
        self.row, self.field, self.value, self.type = row, field, value, typ


def _column(values: list[Any], dtype: Any, typ: Any, name: str) -> Any:
    """An Arrow array of ``values`` as ``typ``, taking the forms the sink writes: timestamps as
    msgpack Timestamps, epoch seconds or ISO strings; dates and decimals as strings."""
    import pyarrow as pa

    conv = _CONVERT.get(type(dtype).__name__)
    if conv is not None:
        values = [v if v is None else conv(v) if not isinstance(v, _NATIVE[conv]) else v
                  for v in values]
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        for i, v in enumerate(values):  # slow path, only to name the culprit
            try:
                pa.array([v], type=typ)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                raise _BadValue(i, name, v, dtype.simpleString()) from None
        raise


def _to_datetime(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _dt.datetime.fromtimestamp(v, _dt.timezone.utc)
    if isinstance(v, str):
        d = _dt.datetime.fromisoformat(v)
        return d if d.tzinfo else d.replace(tzinfo=_dt.timezone.utc)
    return v


def _to_date(v: Any) -> Any:
    return _dt.date.fromisoformat(v) if isinstance(v, str) else v


def _to_decimal(v: Any) -> Any:
    return decimal.Decimal(v) if isinstance(v, (str, int, float)) else v


def _safe(conv: Any) -> Any:
    def f(v: Any) -> Any:
        try:
            return conv(v)
        except (ValueError, OverflowError, OSError, decimal.InvalidOperation):
            # Left as is: the Arrow conversion then names the bad value. (OSError: a timestamp
            # far out of range, e.g. 10**17 s, is EOVERFLOW from the C library on Linux.)
            return v
    return f


_TS, _DATE, _DEC = _safe(_to_datetime), _safe(_to_date), _safe(_to_decimal)
_CONVERT = {"TimestampType": _TS, "TimestampNTZType": _TS, "DateType": _DATE,
            "DecimalType": _DEC}
_NATIVE = {_TS: _dt.datetime, _DATE: _dt.date, _DEC: decimal.Decimal}
