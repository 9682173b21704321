"""How ``gsp cat`` prints a received message body: nngcat's formats, plus ``object``."""

from __future__ import annotations

from typing import Callable

import msgpack

from ..objects import unpack

__all__ = ["FORMATS", "Formatter"]

#: body -> the bytes written to stdout for it
Formatter = Callable[[bytes], bytes]

_PRINTABLE = range(0x20, 0x7F)  # C's isprint() in the "C" locale
_QUOTED = {b: bytes([b]) for b in _PRINTABLE}
_QUOTED.update({0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t", 0x22: b'\\"', 0x5C: b"\\\\"})
_QUOTED_TABLE = [_QUOTED.get(b, b"\\x%02x" % b) for b in range(256)]
_HEX_TABLE = [b"\\x%02x" % b for b in range(256)]
_ASCII_TABLE = bytes(b if b in _PRINTABLE else 0x2E for b in range(256))


def _no(body: bytes) -> bytes:
    return b""


def _raw(body: bytes) -> bytes:
    return body


def _ascii(body: bytes) -> bytes:
    # nngcat writes no newline after an --ascii message; gsp cat writes one per message.
    return body.translate(_ASCII_TABLE) + b"\n"


def _quoted(body: bytes) -> bytes:
    return b'"' + b"".join([_QUOTED_TABLE[b] for b in body]) + b'"\n'


def _hex(body: bytes) -> bytes:
    return b'"' + b"".join([_HEX_TABLE[b] for b in body]) + b'"\n'


def _msgpack(body: bytes) -> bytes:
    # nngcat's --msgpack: each body as one msgpack bin (bin8/16/32), so a reader can split them.
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


def _object(body: bytes) -> bytes:
    # gsp's own: the body decoded as msgpack (send_obj), printed as its Python repr.
    return repr(unpack(body)).encode("utf-8", "backslashreplace") + b"\n"


FORMATS: dict[str, Formatter] = {
    "no": _no, "raw": _raw, "ascii": _ascii, "quoted": _quoted, "hex": _hex,
    "msgpack": _msgpack, "object": _object,
}
