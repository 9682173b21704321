"""Decoding a whole batch of msgpack maps into Arrow columns at once, with numpy.

The source's usual batch is many small maps of the same few scalar fields. Decoded one message at
a time, every message costs a Python object or two, however quick the decoder: about 0.5 us a
message. Here the batch is walked in lockstep instead: all maps' first entries, then all their
second entries, and so on, every step one numpy operation over every message at once, and each
column's values are gathered straight out of the records into an Arrow array.

The fields this reads are exactly those of :func:`gsp_spark._decode._struct_decoder`'s typed
structs (strings, integers, doubles, booleans, binaries), and what it accepts it decodes as that
decoder and ``pyarrow.array`` do. Everything else it declines (returns None) for that decoder to
decode the batch: a map with a nested container or more than :data:`MAX_KEYS` entries, a duplicate
or non-string key, a value of another type, an integer out of its column's range, invalid UTF-8,
anything malformed or with bytes after the map. Declining is always safe; accepting is only done
where the result is the same.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

#: Most entries a map may have here; a batch with a bigger one goes to the next decoder.
MAX_KEYS = 64

_NIL, _FALSE, _TRUE = 0xC0, 0xC2, 0xC3

# A value's size from its first byte, where that byte says it (0: it does not, or not here).
_FIXED = np.zeros(256, np.int64)
_FIXED[0x00:0x80] = 1  # positive fixint
_FIXED[0xE0:0x100] = 1  # negative fixint
_FIXED[[_NIL, _FALSE, _TRUE]] = 1
_FIXED[0xA0:0xC0] = 1 + np.arange(32)  # fixstr
_FIXED[0xCA], _FIXED[0xCB] = 5, 9  # float 32, 64
_FIXED[0xCC:0xD0] = [2, 3, 5, 9]  # uint 8..64
_FIXED[0xD0:0xD4] = [2, 3, 5, 9]  # int 8..64
_FIXED[0xD4:0xD9] = [3, 4, 6, 10, 18]  # fixext 1..16
# Values whose size follows their first byte: (first byte, width of the length, bytes before
# the payload) for str, bin and ext of 8-, 16- and 32-bit lengths.
_SIZED = ((0xD9, 1, 2), (0xC4, 1, 2), (0xC7, 1, 3), (0xDA, 2, 3), (0xC5, 2, 3), (0xC8, 2, 4),
          (0xDB, 4, 5), (0xC6, 4, 5), (0xC9, 4, 6))
_STR = ((0xD9, 1), (0xDA, 2), (0xDB, 4))  # str 8, 16, 32: (first byte, width of the length)
_BIN = ((0xC4, 1), (0xC5, 2), (0xC6, 4))
# Integers: first byte -> (width, signed); fixints aside.
_INTS = {0xCC: (1, False), 0xCD: (2, False), 0xCE: (4, False), 0xCF: (8, False),
         0xD0: (1, True), 0xD1: (2, True), 0xD2: (4, True), 0xD3: (8, True)}
_INT_TYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32,
              pa.int64(): np.int64}


class _Decline(Exception):
    """This batch is not for this decoder."""


class _Bytes:
    """The batch's bytes, read at many positions at once: ``u(pos, width)`` and friends give the
    big-endian field of that width at every position in ``pos`` (one numpy gather each, through
    views of the bytes at every byte offset)."""

    PAD = 16  # bytes after the data, so a field read before its bounds are checked stays inside

    def __init__(self, data: bytes) -> None:
        self.b = np.frombuffer(data + bytes(self.PAD), np.uint8)
        self._views: dict[str, Any] = {}

    def view(self, dtype: str) -> Any:
        v = self._views.get(dtype)
        if v is None:
            size = np.dtype(dtype).itemsize
            v = self._views[dtype] = np.ndarray((len(self.b) - size + 1,), dtype=dtype,
                                                buffer=self.b, strides=(1,))
        return v

    def u(self, pos: Any, width: int) -> Any:
        return self.view(f">u{width}")[pos].astype(np.int64)

    def i(self, pos: Any, width: int) -> Any:
        return self.view(f">i{width}")[pos].astype(np.int64)


def decode_maps(data: bytes, starts: Any, ends: Any,
                columns: Sequence[tuple[str, Any]]) -> list[Any] | None:
    """The columns ``(name, Arrow type)`` of the msgpack maps ``data[starts[k]:ends[k]]`` (int64
    numpy arrays), one Arrow array each, or None where this decoder declines the batch."""
    if not len(starts) or not columns:
        return None
    if any(not _supported(typ) for _, typ in columns):
        return None
    try:
        buf = _Bytes(data)
        where = _walk(buf, starts, ends, [name.encode() for name, _ in columns])
        return [_column(buf, pos, typ) for pos, (_, typ) in zip(where, columns)]
    except _Decline:
        return None


def _supported(typ: Any) -> bool:
    return (typ in _INT_TYPES or pa.types.is_float64(typ) or pa.types.is_boolean(typ)
            or pa.types.is_string(typ) or pa.types.is_binary(typ))


def _walk(buf: _Bytes, starts: Any, ends: Any, names: list[bytes]) -> list[Any]:
    """Where each column's value starts in every map (-1: the map has no such key)."""
    count, pos = _map_headers(buf, starts, ends)
    found = [np.full(len(starts), -1, np.int64) for _ in names]
    every = int(count.min())  # entries every map has: those steps need no row selection
    for entry in range(int(count.max())):
        rows: Any = slice(None) if entry < every else np.flatnonzero(count > entry)
        pos[rows] = _entry(buf, pos[rows], ends[rows], rows, names, found)
    if (pos != ends).any():  # bytes after the map
        raise _Decline
    return found


def _map_headers(buf: _Bytes, starts: Any, ends: Any) -> tuple[Any, Any]:
    """Every map's entry count, and where its first entry starts."""
    if (starts >= ends).any():  # an empty body
        raise _Decline
    head = buf.b[starts]
    count = np.zeros(len(starts), np.int64)
    pos = starts + 1
    fix = (head & 0xF0) == 0x80
    count[fix] = head[fix] & 0x0F
    m16, m32 = head == 0xDE, head == 0xDF
    if not (fix | m16 | m32).all():  # not a map
        raise _Decline
    if m16.any():
        count[m16], pos[m16] = buf.u(starts[m16] + 1, 2), starts[m16] + 3
    if m32.any():
        count[m32], pos[m32] = buf.u(starts[m32] + 1, 4), starts[m32] + 5
    if count.max() > MAX_KEYS:
        raise _Decline
    return count, pos


def _entry(buf: _Bytes, p: Any, end: Any, rows: Any, names: list[bytes],
           found: list[Any]) -> Any:
    """One entry of the maps ``rows``, at ``p`` (their bodies end at ``end``): notes where the
    value of any key in ``names`` starts, in ``found``; returns where the next entry starts."""
    if (p >= end).any():
        raise _Decline
    key_len, key_at = _str_header(buf, p)
    value_at = key_at + key_len
    if (value_at >= end).any():
        raise _Decline
    words = buf.view("<u8")
    first_word = words[key_at]
    for name, col in zip(names, found):
        hit = _matches(words, key_len, key_at, first_word, name)
        if hit.any():
            now = col[rows]
            if ((now >= 0) & hit).any():  # the same key twice in one map
                raise _Decline
            col[rows] = np.where(hit, value_at, now)
    after = value_at + _value_size(buf, value_at)
    if (after > end).any():
        raise _Decline
    return after


def _str_header(buf: _Bytes, p: Any) -> tuple[Any, Any]:
    """The length and start of the string whose header is at each ``p``; declines any other."""
    t = buf.b[p]
    fix = (t & 0xE0) == 0xA0
    length = (t & 0x1F).astype(np.int64)
    start = p + 1
    if fix.all():
        return length, start
    length[~fix] = 0
    return _lengths(buf, p, t, _STR, length, start, fix)


def _lengths(buf: _Bytes, at: Any, t: Any, forms: Any, length: Any, start: Any,
             ok: Any) -> tuple[Any, Any]:
    """``length`` and ``start`` with the values at ``at`` whose first byte ``t`` is one of
    ``forms`` (first byte, width of the length that follows it) filled in; declines unless
    every value is one of them or already ``ok``."""
    for first, width in forms:
        sel = t == first
        if sel.any():
            length[sel], start[sel] = buf.u(at[sel] + 1, width), at[sel] + 1 + width
            ok = ok | sel
    if not ok.all():
        raise _Decline
    return length, start


def _matches(words: Any, key_len: Any, key_at: Any, first_word: Any, name: bytes) -> Any:
    """Which keys equal ``name``: compared eight bytes at a time, little-endian words read at
    the key (the bytes after a short key masked off)."""
    hit = key_len == len(name)
    for k in range(0, max(len(name), 1), 8):
        part = name[k:k + 8]
        mask = np.uint64((1 << (8 * len(part))) - 1)
        want = np.uint64(int.from_bytes(part, "little"))
        word = first_word if k == 0 else words[np.where(hit, key_at + k, 0)]
        hit &= (word & mask) == want
    return hit


def _value_size(buf: _Bytes, at: Any) -> Any:
    """The size of the value at each position in ``at``; declines containers and unknown bytes."""
    t = buf.b[at]
    size = _FIXED[t]
    rest = np.flatnonzero(size == 0)
    if not len(rest):
        return size
    t, at = t[rest], at[rest]
    for first, width, before in _SIZED:
        sel = t == first
        if sel.any():
            size[rest[sel]] = before + buf.u(at[sel] + 1, width)
    if (size == 0).any():  # a map or an array (even inside an ignored field), or 0xc1
        raise _Decline
    return size


def _column(buf: _Bytes, at: Any, typ: Any) -> Any:
    """One column from where its values start (-1: absent, as nil), as ``typ``."""
    present = at >= 0
    at = np.where(present, at, 0)
    t = np.where(present, buf.b[at], _NIL)
    valid = t != _NIL
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return _sized_column(buf, at, t, valid, typ)
    if pa.types.is_boolean(typ):
        if not (~valid | (t == _FALSE) | (t == _TRUE)).all():
            raise _Decline
        return pa.array(t == _TRUE, pa.bool_(), mask=~valid)
    if pa.types.is_float64(typ) and ((t == 0xCB) | ~valid).all():  # doubles only: the usual
        return pa.array(buf.view(">f8")[at + 1].astype(np.float64), pa.float64(), mask=~valid)
    ints, is_int = _ints(buf, at, t)
    if pa.types.is_float64(typ):
        vals = ints.astype(np.float64)
        f32, f64 = t == 0xCA, t == 0xCB
        if f32.any():
            vals[f32] = buf.view(">f4")[at[f32] + 1].astype(np.float64)
        if f64.any():
            vals[f64] = buf.view(">f8")[at[f64] + 1].astype(np.float64)
        if not (~valid | is_int | f32 | f64).all():
            raise _Decline
        return pa.array(vals, pa.float64(), mask=~valid)
    if not (~valid | is_int).all():
        raise _Decline
    kind = _INT_TYPES[typ]
    lo, hi = np.iinfo(kind).min, np.iinfo(kind).max
    if ((ints[valid] < lo) | (ints[valid] > hi)).any():
        raise _Decline
    return pa.array(ints.astype(kind), typ, mask=~valid)


def _ints(buf: _Bytes, at: Any, t: Any) -> tuple[Any, Any]:
    """Every integer value's value (0 elsewhere), and which values are integers; declines a
    uint64 above int64's range (``pyarrow.array`` refuses those too)."""
    pos_fix, neg_fix = t < 0x80, t >= 0xE0
    vals = np.where(pos_fix, t, 0).astype(np.int64)
    vals[neg_fix] = t[neg_fix].astype(np.int64) - 256
    is_int = pos_fix | neg_fix
    for first, (width, signed) in _INTS.items():
        sel = t == first
        if not sel.any():
            continue
        is_int = is_int | sel
        if width == 8 and not signed:
            raw = buf.view(">u8")[at[sel] + 1]
            if (raw >= np.uint64(1 << 63)).any():
                raise _Decline
            vals[sel] = raw.astype(np.int64)
        else:
            vals[sel] = (buf.i if signed else buf.u)(at[sel] + 1, width)
    return vals, is_int


def _sized_column(buf: _Bytes, at: Any, t: Any, valid: Any, typ: Any) -> Any:
    """A string or binary column: its values' bytes gathered into one buffer, behind offsets."""
    text = pa.types.is_string(typ)
    length = np.zeros(len(at), np.int64)
    start = at + 1
    ok = ~valid
    if text:
        fix = (t & 0xE0) == 0xA0
        length[fix] = t[fix] & 0x1F
        ok = ok | fix
    length, start = _lengths(buf, at, t, _STR if text else _BIN, length, start, ok)
    offsets = np.zeros(len(at) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:  # beyond a 32-bit offset: let the other decoder build it
        raise _Decline
    gather = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    body = buf.b[gather]
    bitmap = np.packbits(valid, bitorder="little")
    arr = pa.Array.from_buffers(typ, len(at), [pa.py_buffer(bitmap),
                                               pa.py_buffer(offsets.astype(np.int32)),
                                               pa.py_buffer(body)],
                                null_count=int(len(at) - valid.sum()))
    try:
        arr.validate(full=True)  # UTF-8, for strings: as msgspec, which refuses invalid text
    except pa.ArrowInvalid:
        raise _Decline from None
    return arr
