"""Sans-IO codec for the SP stream wire format (tcp, tls+tcp, ipc).

Nothing here touches a socket, a greenlet or a clock: feed bytes in, get messages (or a typed
error) out, and ask for the bytes to write. That keeps the codec fuzzable and lets every stream
transport (built-in or third-party) share one implementation.

Connection header (both directions, once)::

    00 'S' 'P' 00 <protocol u16 BE> 00 00

Frames: ``<u64 BE length><header+body>`` on tcp; ipc puts a type byte ``0x01`` before each frame.
"""

from __future__ import annotations

import struct
from typing import Iterable

from ._errors import (
    BadFrame, BadMagic, BadReserved, BadVersion, MessageTooLarge, WrongProtocol,
)

__all__ = [
    "HANDSHAKE_SIZE", "handshake", "parse_handshake", "Framing", "TCP", "IPC",
    "encode_frames", "FrameDecoder",
]

HANDSHAKE_SIZE = 8
_HS = struct.Struct(">4sH2s")
_LEN = struct.Struct(">Q")
_IPC_LEN = struct.Struct(">BQ")


def handshake(protocol: int) -> bytes:
    """The 8 bytes a side sends to announce ``protocol``."""
    return _HS.pack(b"\x00SP\x00", protocol, b"\x00\x00")


def parse_handshake(data: bytes, expected_peer: int | None = None) -> int:
    """Check a peer's 8-byte header and return its protocol number.

    Raises :class:`BadMagic`, :class:`BadVersion`, :class:`BadReserved` or (when
    ``expected_peer`` is given and differs) :class:`WrongProtocol`.
    """
    if len(data) != HANDSHAKE_SIZE:
        raise ValueError(f"a handshake is {HANDSHAKE_SIZE} bytes, got {len(data)}")
    data = bytes(data)
    if data[0:3] != b"\x00SP":
        raise BadMagic(f"bad SP header magic {data[0:3].hex()}")
    if data[3] != 0:
        raise BadVersion(f"unsupported SP header version {data[3]}")
    if data[6:8] != b"\x00\x00":
        raise BadReserved(f"SP header reserved bytes not zero: {data[6:8].hex()}")
    proto = (data[4] << 8) | data[5]
    if expected_peer is not None and proto != expected_peer:
        raise WrongProtocol(
            f"peer speaks protocol 0x{proto:x}, expected 0x{expected_peer:x}",
            expected=expected_peer, got=proto,
        )
    return proto


class Framing:
    """How one stream transport frames messages: the length prefix, with or without a type byte."""

    __slots__ = ("name", "prefix_size", "type_byte")

    def __init__(self, name: str, type_byte: int | None) -> None:
        self.name = name
        self.type_byte = type_byte
        self.prefix_size = 8 if type_byte is None else 9

    def __repr__(self) -> str:
        return f"<Framing {self.name}>"


TCP = Framing("tcp", None)
IPC = Framing("ipc", 0x01)


def encode_frames(framing: Framing, messages: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """Return the byte strings that put ``(header, body)`` messages on the wire, in order.

    The caller writes them with one ``sendall(b"".join(...))`` or a scatter write; bodies are not
    copied here.
    """
    out: list[bytes] = []
    append = out.append
    if framing.type_byte is None:
        pack = _LEN.pack
        for header, body in messages:
            append(pack(len(header) + len(body)))
            if header:
                append(header)
            append(body)
    else:
        pack2 = _IPC_LEN.pack
        t = framing.type_byte
        for header, body in messages:
            append(pack2(t, len(header) + len(body)))
            if header:
                append(header)
            append(body)
    return out


class FrameDecoder:
    """Incremental frame decoder: ``feed`` any split of the stream, get whole messages back.

    ``max_size`` (0 = unlimited) is enforced as soon as a length prefix is read, before any of
    the body is buffered, so a peer announcing 2 GiB costs nothing. After an error the decoder is
    dead: the stream has no resynchronisation point, so the pipe must be closed.
    """

    __slots__ = ("framing", "max_size", "_pending", "_need", "_error")

    def __init__(self, framing: Framing = TCP, max_size: int = 0) -> None:
        self.framing = framing
        self.max_size = max_size
        self._pending = bytearray()  # bytes of an incomplete frame carried between feeds
        self._need = 0  # total size of the frame being assembled in _pending, 0 if unknown
        self._error: Exception | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._pending)

    @property
    def error(self) -> Exception | None:
        """The error that ended the stream, once one has been seen."""
        return self._error

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Consume ``data`` and return every message it completes (header+body as one bytes).

        Messages that precede a bad frame in ``data`` are still returned; the error is then kept
        in :attr:`error` and raised by the next ``feed`` (callers check :attr:`error` after
        handling the messages, so nothing a peer sent before its mistake is lost).
        """
        if self._error is not None:
            raise self._error.with_traceback(None)
        out: list[bytes] = []
        try:
            pending = self._pending
            if pending:
                # Finish the frame in progress first; only its missing bytes are copied.
                view = memoryview(data)
                used = self._complete_pending(view, out)
                if pending:  # still incomplete: everything was consumed
                    return out
                data = view[used:]
            self._parse(data, out)
        except Exception as exc:
            self._error = exc
            self._pending = bytearray()
            if not out:
                raise
        return out

    def _complete_pending(self, view: memoryview, out: list[bytes]) -> int:
        pending = self._pending
        prefix = self.framing.prefix_size
        used = 0
        if self._need == 0:  # still reading the length prefix
            take = min(prefix - len(pending), len(view))
            pending += view[:take]
            used = take
            if len(pending) < prefix:
                return used
            self._need = prefix + self._check_length(pending, 0)
        take = min(self._need - len(pending), len(view) - used)
        pending += view[used:used + take]
        used += take
        if len(pending) == self._need:
            out.append(bytes(memoryview(pending)[prefix:]))
            pending.clear()
            self._need = 0
        return used

    def _check_length(self, buf: bytes | bytearray | memoryview, pos: int) -> int:
        t = self.framing.type_byte
        if t is None:
            (n,) = _LEN.unpack_from(buf, pos)
        else:
            kind, n = _IPC_LEN.unpack_from(buf, pos)
            if kind != t:
                raise BadFrame(f"ipc frame type byte 0x{kind:02x}, expected 0x{t:02x}")
        if self.max_size and n > self.max_size:
            raise MessageTooLarge(f"peer announced a {n}-byte message; the limit is {self.max_size}")
        return n

    def _parse(self, data: bytes | bytearray | memoryview, out: list[bytes]) -> None:
        prefix = self.framing.prefix_size
        end = len(data)
        pos = 0
        check = self._check_length
        view = data if isinstance(data, memoryview) else memoryview(data)
        while end - pos >= prefix:
            n = check(view, pos)
            start = pos + prefix
            if end - start < n:
                break
            pos = start + n
            out.append(bytes(view[start:pos]))
        if pos < end:
            self._pending += view[pos:end]
            if end - pos >= prefix:
                self._need = prefix + check(self._pending, 0)
