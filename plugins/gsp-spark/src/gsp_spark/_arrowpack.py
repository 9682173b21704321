"""msgpack encoding of whole Arrow columns at once, for the sink: the same bytes as
:func:`gsp_spark._wire.packer` gives row by row, in a few Arrow compute calls per column.

Integers, floats, booleans, strings and binaries are encoded here without one Python call per
value: each value becomes a msgpack header plus payload as an Arrow ``binary`` element, and a
row is the element-wise concatenation of its columns' elements with the constant bytes between
them (map header, packed keys). Every other type (timestamps, dates, decimals, nested types, ...)
is packed value by value with the sink's ``Packer``, into the same kind of column. Byte for byte
what the row-by-row encoder produces (``tests/test_spark_arrow.py`` compares the two on every
form msgpack picks and every type the sink carries).
"""

from __future__ import annotations

import functools
import struct
import sys
from array import array
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

_BIN = pa.binary()


@functools.cache
def _bin(value: bytes) -> Any:
    """A binary Arrow scalar, made on first use: pyarrow imports pandas (where installed, some
    0.5 s of CPU) on its first scalar or array from Python values, and importing gsp_spark —
    Spark's planner and data source lookup processes do, which never pack — must not."""
    return pa.scalar(value, _BIN)
_I64 = pa.int64()

# msgpack's integer forms, as msgpack-c (and so msgpack-python) picks them: the smallest that
# holds the value, unsigned forms for positive values. (lo, hi, header, payload bytes).
_INT_FORMS = (
    (-(1 << 63), -(1 << 31) - 1, 0xD3, 8),
    (-(1 << 31), -(1 << 15) - 1, 0xD2, 4),
    (-(1 << 15), -(1 << 7) - 1, 0xD1, 2),
    (-(1 << 7), -(1 << 5) - 1, 0xD0, 1),
    (-(1 << 5), (1 << 7) - 1, None, 0),  # fixint: the value's low byte is the whole encoding
    (1 << 7, (1 << 8) - 1, 0xCC, 1),
    (1 << 8, (1 << 16) - 1, 0xCD, 2),
    (1 << 16, (1 << 32) - 1, 0xCE, 4),
    (1 << 32, (1 << 63) - 1, 0xCF, 8),
)
# A str/bin header: (largest length, header byte or fixstr base, length bytes).
_STR_FORMS = ((31, 0xA0, 0), (255, 0xD9, 1), (65535, 0xDA, 2), ((1 << 32) - 1, 0xDB, 4))
_BIN_FORMS = ((255, 0xC4, 1), (65535, 0xC5, 2), ((1 << 32) - 1, 0xC6, 4))


def container_header(n: int, fix: int, b16: int, b32: int) -> bytes:
    """A map (0x80, 0xde, 0xdf) or array (0x90, 0xdc, 0xdd) header for ``n`` entries."""
    if n < 16:
        return bytes([fix | n])
    if n < 1 << 16:
        return struct.pack(">BH", b16, n)
    return struct.pack(">BI", b32, n)


def map_header(n: int) -> bytes:
    return container_header(n, 0x80, 0xDE, 0xDF)


def array_header(n: int) -> bytes:
    return container_header(n, 0x90, 0xDC, 0xDD)


def _big_endian(values: Any) -> Any:
    """int64 array (no nulls) → binary array of each value's 8 big-endian bytes."""
    n = len(values)
    raw = array("q")
    raw.frombytes(memoryview(values.buffers()[1])[values.offset * 8:(values.offset + n) * 8])
    if sys.byteorder == "little":
        raw.byteswap()
    return pa.Array.from_buffers(pa.binary(8), n, [None, pa.py_buffer(raw)]).cast(_BIN)


def _tails(composed: Any, widths: Any, used: Sequence[int]) -> Any:
    """Element i: the last ``widths[i]`` bytes of ``composed[i]`` big-endian (widths in ``used``)."""
    be = _big_endian(composed)
    if len(used) == 1:
        return pc.binary_slice(be, 8 - used[0], 8)
    conds = [pc.equal(widths, w) for w in used]
    return pc.case_when(pc.make_struct(*conds, field_names=[str(w) for w in used]),
                        *[pc.binary_slice(be, 8 - w, 8) for w in used])


def _encode(forms: list[tuple[Any, Any, int]]) -> Any:
    """From ``(condition, composed value, width)`` per form present: element i is the last
    ``width`` bytes, big-endian, of the composed value of the first form whose condition holds."""
    used = sorted({w for _, _, w in forms})
    if len(forms) == 1:
        composed, widths = forms[0][1], None
    else:
        conds = pc.make_struct(*[f[0] for f in forms],
                               field_names=[str(i) for i in range(len(forms))])
        composed = pc.case_when(conds, *[f[1] for f in forms])
        widths = pc.case_when(conds, *[pa.scalar(f[2], _I64) for f in forms])
    return _tails(pc.cast(composed, _I64), widths, used)


def pack_ints(values: Any) -> Any:
    """msgpack integers of an int64 array without nulls, as a binary array."""
    if len(values) == 0:
        return pa.array([], _BIN)
    mm = pc.min_max(values)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    forms: list[tuple[Any, Any, int]] = []
    prefix: Any = None  # the 9-byte forms' header byte, joined in front separately
    for a, b, head, nbytes in _INT_FORMS:
        if b < lo or a > hi:
            continue
        cond = pc.and_(pc.greater_equal(values, a), pc.less_equal(values, b))
        if head is None:
            forms.append((cond, pc.bit_wise_and(values, 0xFF), 1))
        elif nbytes == 8:
            forms.append((cond, values, 8))
            byte = pa.scalar(bytes([head]), _BIN)
            prefix = byte if prefix is None else pc.if_else(cond, byte, prefix)
        else:
            forms.append((cond, pc.bit_wise_or(pc.bit_wise_and(values, (1 << 8 * nbytes) - 1),
                                               head << 8 * nbytes), nbytes + 1))
    out = _encode(forms)
    if prefix is not None:
        if len(forms) > 1:  # only where a 9-byte form was chosen
            prefix = pc.if_else(pc.or_(pc.less(values, -(1 << 31)),
                                       pc.greater_equal(values, 1 << 32)), prefix, _bin(b""))
        out = pc.binary_join_element_wise(prefix, out, _bin(b""))
    return out


def _pack_lengths(lengths: Any, forms: tuple[tuple[int, int, int], ...], kind: str) -> Any:
    """msgpack str/bin headers for an int64 array of byte lengths (no nulls)."""
    hi = pc.max(lengths).as_py() if len(lengths) else 0
    if hi > forms[-1][0]:
        raise ValueError(f"a {kind} of {hi} bytes is too long for msgpack")
    chosen: list[tuple[Any, Any, int]] = []
    lo = 0
    for top, head, nbytes in forms:
        if lo <= hi:
            cond = pc.and_(pc.greater_equal(lengths, lo), pc.less_equal(lengths, top))
            chosen.append((cond, pc.bit_wise_or(lengths, head << 8 * nbytes), nbytes + 1))
        lo = top + 1
    return _encode(chosen)


def _fill(values: Any, default: Any) -> Any:
    return values if values.null_count == 0 else pc.fill_null(values, default)


def pack_column(col: Any, pack: Callable[[Any], bytes]) -> Any:
    """Each value of ``col`` msgpack-encoded (NULL as nil), as a binary array."""
    t = col.type
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        out = pack_ints(_fill(pc.cast(col, _I64), 0))
    elif pa.types.is_floating(t):
        bits = pa.Array.from_buffers(_I64, len(col), [None, _f64_buffer(col)])
        out = pc.binary_join_element_wise(pa.scalar(b"\xcb", _BIN), _big_endian(bits), _bin(b""))
    elif pa.types.is_boolean(t):
        out = pc.if_else(_fill(col, False), pa.scalar(b"\xc3", _BIN), pa.scalar(b"\xc2", _BIN))
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        data = pc.cast(_fill(col, ""), _BIN)
        heads = _pack_lengths(pc.cast(pc.binary_length(data), _I64),
                              _STR_FORMS if pa.types.is_string(t) else _BIN_FORMS,
                              "string" if pa.types.is_string(t) else "binary value")
        out = pc.binary_join_element_wise(heads, data, _bin(b""))
    else:  # one Python call per value: timestamps, dates, decimals, nested, large types, ...
        return pa.array([pack(v) for v in col.to_pylist(maps_as_pydicts="strict")], _BIN)
    if col.null_count:
        out = pc.if_else(pc.is_valid(col), out, _bin(b"\xc0"))
    return out


def _f64_buffer(col: Any) -> Any:
    """The float64 value buffer of ``col`` (a float array), from its first element."""
    if not pa.types.is_float64(col.type):
        col = pc.cast(col, pa.float64())
    return pa.py_buffer(memoryview(col.buffers()[1])[col.offset * 8:(col.offset + len(col)) * 8])


def pack_maps(batch: Any, pack: Callable[[Any], bytes], tail_key: str | None = None,
              tail_prefix: bytes = b"", tail_first: int = 0) -> Any:
    """Each row of ``batch`` as a msgpack map of its columns (in order), as a binary array.

    With ``tail_key``, every map ends with that key and an array: ``tail_prefix`` (the packed
    array header and its constant items) followed by the row's number, ``tail_first`` + i.
    """
    n = batch.num_rows
    # As a dict of the row would have it: a repeated column name keeps its first place and
    # its last value.
    where = {name: i for i, name in enumerate(batch.schema.names)}
    parts: list[Any] = []
    const = map_header(len(where) + (tail_key is not None))
    for name, i in where.items():
        parts += [pa.scalar(const + pack(name), _BIN), pack_column(batch.column(i), pack)]
        const = b""
    if tail_key is not None:
        parts += [pa.scalar(const + pack(tail_key) + tail_prefix, _BIN),
                  pack_ints(pa.array(range(tail_first, tail_first + n), _I64))]
    elif const:  # no columns at all: every row is the empty map
        return pa.array([const] * n, _BIN)
    if n == 0:
        return pa.array([], _BIN)
    return pc.binary_join_element_wise(*parts, _bin(b""))


def split(packed: Any, per: int) -> list[bytes]:
    """Messages of up to ``per`` consecutive elements of ``packed`` each: the elements themselves
    (``per`` 1), else a msgpack array of them."""
    if per == 1:
        return packed.to_pylist()  # type: ignore[no-any-return]
    n = len(packed)
    offs = array("i")
    offs.frombytes(memoryview(packed.buffers()[1])[packed.offset * 4:(packed.offset + n + 1) * 4])
    data = packed.buffers()[2].to_pybytes() if n else b""
    out = []
    for i in range(0, n, per):
        j = min(i + per, n)
        out.append(array_header(j - i) + data[offs[i]:offs[j]])
    return out
