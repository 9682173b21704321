"""Which Spark schemas the source and sink can carry, checked when a query is planned."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

import gsp

#: Source columns filled from the receiver instead of the message, under any format.
META = {"_received": (TimestampType,), "_pipe": (IntegerType, LongType), "_seq": (LongType,)}
#: The source's schema when none is declared: each message's bytes plus its metadata.
DEFAULT_SOURCE_SCHEMA = "value BINARY, _received TIMESTAMP, _pipe BIGINT, _seq BIGINT"

_ATOMIC = (NullType, BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType,
           DoubleType, DecimalType, StringType, BinaryType, DateType, TimestampType,
           TimestampNTZType)


class SchemaMismatch(gsp.GspError, ValueError):
    """A DataFrame's or a declared schema's columns do not fit the chosen format."""


def _unsupported(dt: DataType, sink: bool) -> DataType | None:
    """The first type inside ``dt`` the msgpack format cannot carry, or None."""
    if isinstance(dt, _ATOMIC) or (sink and isinstance(dt, DayTimeIntervalType)):
        return None
    if isinstance(dt, ArrayType):
        return _unsupported(dt.elementType, sink)
    if isinstance(dt, MapType):
        return _unsupported(dt.keyType, sink) or _unsupported(dt.valueType, sink)
    if isinstance(dt, StructType):
        for f in dt.fields:
            bad = _unsupported(f.dataType, sink)
            if bad is not None:
                return bad
        return None
    return dt


def check_source_schema(schema: StructType, fmt: str) -> bool:
    """Validate a source schema; True when messages are read raw (bytes into one column)."""
    for f in schema.fields:
        want = META.get(f.name)
        if want is not None and not isinstance(f.dataType, want):
            names = " or ".join(t.typeName() for t in want)
            raise SchemaMismatch(f"gsp source: metadata column {f.name!r} must be {names}, "
                                 f"not {f.dataType.simpleString()}")
    data = [f for f in schema.fields if f.name not in META]
    one_bytes = len(data) == 1 and isinstance(data[0].dataType, (BinaryType, StringType))
    if fmt == "raw":
        if not one_bytes:
            raise SchemaMismatch(
                "gsp source: format 'raw' needs exactly one BINARY or STRING column besides the "
                f"metadata columns {', '.join(META)}; got {schema.simpleString()}")
        return True
    if fmt == "auto" and one_bytes and data[0].name == "value" \
            and isinstance(data[0].dataType, BinaryType):
        return True
    if not data:
        raise SchemaMismatch("gsp source: the schema has no column to decode messages into")
    for f in data:
        bad = _unsupported(f.dataType, sink=False)
        if bad is not None:
            raise SchemaMismatch(f"gsp source: column {f.name!r} has type {bad.simpleString()}, "
                                 "which msgpack decoding does not support")
    return False


def check_sink_schema(schema: StructType, fmt: str) -> int:
    """Validate a sink's input schema; for format 'raw' the index of its ``value`` column."""
    if fmt == "raw":
        for i, f in enumerate(schema.fields):
            if f.name == "value":
                if not isinstance(f.dataType, (BinaryType, StringType)):
                    raise SchemaMismatch("gsp sink: format 'raw' sends column 'value', which "
                                         f"must be BINARY or STRING, not "
                                         f"{f.dataType.simpleString()}")
                return i
        raise SchemaMismatch("gsp sink: format 'raw' sends column 'value' as-is, but the "
                             f"DataFrame has none: {schema.simpleString()}")
    for f in schema.fields:
        if f.name == "_gsp_key":
            raise SchemaMismatch("gsp sink: column name '_gsp_key' is reserved for the "
                                 "idempotency key")
        bad = _unsupported(f.dataType, sink=True)
        if bad is not None:
            raise SchemaMismatch(f"gsp sink: column {f.name!r} has type {bad.simpleString()}, "
                                 "which the msgpack format cannot carry; cast it first")
    return -1
