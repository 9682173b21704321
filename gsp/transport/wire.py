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
from typing import Any, Callable, Final, Iterable, Sequence

from ..errors import (
    BadFrame,
    BadMagic,
    BadReserved,
    BadVersion,
    MessageTooLarge,
    WrongProtocol,
)

__all__ = [
    "HANDSHAKE_SIZE", "handshake", "parse_handshake", "check_handshake_start", "PROTOCOL_NAMES",
    "protocol_name",
    "wrong_protocol", "Framing", "TCP", "IPC",
    "encode_frames", "prefixer", "prefix_cache", "FrameDecoder", "DIRECT_SIZE",
]

HANDSHAKE_SIZE = 8
_HS = struct.Struct(">4sH2s")
_LEN = struct.Struct(">Q")
_IPC_LEN = struct.Struct(">BQ")


#: Protocol numbers → names, for error messages: the SP protocols nng knows, plus every protocol
#: an installed plugin registers (gsp's registry adds them when it loads plugins).
PROTOCOL_NAMES: dict[int, str] = {
    0x10: "pair", 0x11: "pair1", 0x20: "pub", 0x21: "sub", 0x30: "req", 0x31: "rep",
    0x50: "push", 0x51: "pull", 0x62: "surveyor", 0x63: "respondent", 0x70: "bus",
}


def protocol_name(number: int) -> str:
    """``"rep (0x31)"`` for a known protocol number, ``"0x99"`` for an unknown one."""
    name = PROTOCOL_NAMES.get(number)
    return f"0x{number:x}" if name is None else f"{name} (0x{number:x})"


def handshake(protocol: int) -> bytes:
    """The 8 bytes a side sends to announce ``protocol``."""
    return _HS.pack(b"\x00SP\x00", protocol, b"\x00\x00")


def parse_handshake(data: bytes | bytearray | memoryview, expected_peer: int | None = None, *,
                    own: int | None = None) -> int:
    """Check a peer's 8-byte header and return its protocol number.

    Raises :class:`BadMagic`, :class:`BadVersion`, :class:`BadReserved` or (when
    ``expected_peer`` is given and differs) :class:`WrongProtocol`, whose message names both
    protocols (``own``, this side's number, makes it say which socket needs which peer).
    """
    if len(data) != HANDSHAKE_SIZE:
        raise ValueError(f"a handshake is {HANDSHAKE_SIZE} bytes, got {len(data)}")
    data = bytes(data)
    check_handshake_start(data)
    proto = (data[4] << 8) | data[5]
    if expected_peer is not None and proto != expected_peer:
        raise wrong_protocol(proto, expected_peer, own)
    return proto


def check_handshake_start(data: bytes | bytearray) -> None:
    """Check the first bytes of a peer's header, as many as came (up to 8): raises
    :class:`BadMagic`, :class:`BadVersion` or :class:`BadReserved` as :func:`parse_handshake`
    does, so that a peer sending anything but an SP header is refused at its first read instead
    of when eight bytes have come (or never)."""
    n = len(data)
    magic = bytes(data[0:3])
    if magic != b"\x00SP"[:n]:
        raise BadMagic(f"bad SP header magic {magic.hex()}")
    if n > 3 and data[3] != 0:
        raise BadVersion(f"unsupported SP header version {data[3]}")
    reserved = bytes(data[6:8])
    if n > 6 and reserved != b"\x00\x00"[:n - 6]:
        raise BadReserved(f"SP header reserved bytes not zero: {reserved.hex()}")


def wrong_protocol(got: int, expected: int, own: int | None = None) -> WrongProtocol:
    """The :class:`WrongProtocol` for a peer speaking ``got`` where ``expected`` was needed:
    ``peer speaks rep (0x31), this push socket needs pull (0x51)``."""
    if own is None:
        need = f"expected {protocol_name(expected)}"
    else:
        me = PROTOCOL_NAMES.get(own, f"0x{own:x} protocol")
        need = f"this {me} socket needs {protocol_name(expected)}"
    return WrongProtocol(f"peer speaks {protocol_name(got)}, {need}", expected=expected, got=got)


class Framing:
    """How one stream transport frames messages: the length prefix, with or without a type byte."""

    __slots__ = ("name", "prefix_size", "type_byte")

    def __init__(self, name: str, type_byte: int | None) -> None:
        self.name = name
        self.type_byte = type_byte
        self.prefix_size = 8 if type_byte is None else 9

    def __repr__(self) -> str:
        return f"<Framing {self.name}>"


TCP: Framing = Framing("tcp", None)  # (typed: modules compiled with this one need the type)
IPC: Framing = Framing("ipc", 0x01)


_RUN_MIN = 8  # frames of one size in a chunk before the split fast path is worth trying
# split() searches every body byte for the prefix (~0.4 ns/byte here) while the Python loop
# costs ~150 ns per frame whatever its size: past ~300 bytes the loop wins.
_RUN_MAX_SIZE = 256
_CACHED = 1024  # length prefixes of small messages are made once, not packed per message
_TCP_PREFIXES = [_LEN.pack(n) for n in range(_CACHED)]
_IPC_PREFIXES = [_IPC_LEN.pack(1, n) for n in range(_CACHED)]


def _tcp_prefix(n: int, cache: list[bytes] = _TCP_PREFIXES, pack: Any = _LEN.pack) -> bytes:
    return cache[n] if n < _CACHED else pack(n)


def _ipc_prefix(n: int, cache: list[bytes] = _IPC_PREFIXES, pack: Any = _IPC_LEN.pack) -> bytes:
    return cache[n] if n < _CACHED else pack(1, n)


def prefix_cache(framing: Framing) -> list[bytes]:
    """``cache[n]`` announces an ``n``-byte frame for every ``n < len(cache)`` (may be empty)."""
    if framing.type_byte is None:
        return _TCP_PREFIXES
    return _IPC_PREFIXES if framing.type_byte == 1 else []


def prefixer(framing: Framing) -> Callable[[int], bytes]:
    """``prefix(n)``: the bytes that announce an ``n``-byte frame (cached for small ``n``)."""
    if framing.type_byte is None:
        return _tcp_prefix
    if framing.type_byte == 1:
        return _ipc_prefix
    t = framing.type_byte
    return lambda n: _IPC_LEN.pack(t, n)


def join_bodies(cache: list[bytes], items: Sequence[Any]) -> bytes | None:
    """Frame a batch of header-less messages in one piece with C loops (no Python per message),
    or return None when that does not apply: an item that is not ``bytes`` (a
    :class:`~gsp.Message` with its header), or a body of ``len(cache)`` bytes or more.

    ``cache`` is :func:`prefix_cache`'s list. A run of equal-size bodies (fixed-size records)
    is one ``join`` with their common prefix as the separator.
    """
    if not cache or type(items[0]) is not bytes:
        return None
    sizes = list(map(len, items))
    n = sizes[0]
    try:
        if sizes.count(n) == len(sizes):
            return cache[n].join([b"", *items]) if n < len(cache) else None
        if max(sizes) >= len(cache):
            return None
        parts: list[Any] = [b""] * (2 * len(items))
        parts[0::2] = map(cache.__getitem__, sizes)
        parts[1::2] = items
        return b"".join(parts)
    except TypeError:  # a Message among the bodies
        return None


def encode_frames(framing: Framing, messages: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """Return the byte strings that put ``(header, body)`` messages on the wire, in order.

    The caller writes them with one ``sendall(b"".join(...))`` or a scatter write; bodies are not
    copied here.
    """
    out: list[bytes] = []
    append = out.append
    prefix = prefixer(framing)
    for header, body in messages:
        append(prefix(len(header) + len(body)))
        if header:
            append(header)
        append(body)
    return out


#: Frames at least this big are worth reading whole: when their body is all in the kernel a
#: transport can ``recv`` exactly :attr:`FrameDecoder.body_left` bytes and get the message itself.
DIRECT_SIZE: Final = 32 * 1024  # (Final: the compiled stream connection inlines it)
_SMALL = 4096  # body pieces under this are gathered in one bytearray (no per-piece object)
_GATHER_MAX = 64 * 1024


class FrameDecoder:
    """Incremental frame decoder: ``feed`` any split of the stream, get whole messages back.

    ``max_size`` (0 = unlimited) is enforced as soon as a length prefix is read, before any of
    the body is buffered. After an error the decoder is dead: the stream has no
    resynchronisation point, so the pipe must be closed.

    Memory follows the bytes received, never the size a peer announces: complete frames in a fed
    chunk are sliced out of it (no copy beyond the slice); of an incomplete frame only what
    arrived is kept, its prefix bytes, then the pieces of its body (joined, one copy, when the
    last one comes). A peer announcing 2 GiB and sending nothing costs nothing.
    """

    __slots__ = ("framing", "max_size", "buffered", "error", "_head", "_parts", "_have", "_need",
                 "_tcp")

    def __init__(self, framing: Framing = TCP, max_size: int = 0) -> None:
        self.framing = framing
        self.max_size = max_size
        #: Bytes received for an incomplete frame (kept by :meth:`feed`; read it, never set it).
        self.buffered = 0
        #: The error that ended the stream, once one has been seen (read it, never set it).
        self.error: Exception | None = None
        self._head = b""  # prefix bytes of the next frame while fewer than prefix_size arrived
        self._parts: list[bytes | bytearray | memoryview] = []  # the body in progress so far
        self._have = 0  # body bytes in _parts
        self._need = -1  # body size of the frame in progress, -1 while its length is unknown
        self._tcp = framing.type_byte is None

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Consume ``data`` and return every message it completes (header+body as one bytes).

        Messages that precede a bad frame in ``data`` are still returned; the error is then kept
        in :attr:`error` and raised by the next ``feed`` (callers check :attr:`error` after
        handling the messages, so nothing a peer sent before its mistake is lost).
        """
        if self.buffered == 0 and self._tcp and type(data) is bytes and self.error is None:
            # The usual read of a request or a reply: exactly one whole tcp frame, between
            # frames. Its message is one slice, with nothing to keep and no loop to run.
            end = len(data)
            if end >= 8:
                (n,) = _LEN.unpack_from(data)
                if n + 8 == end and (n <= self.max_size or not self.max_size):
                    return [data[8:]]
        if self.error is not None:
            raise self.error.with_traceback(None)
        if type(data) is not bytes:
            data = bytes(data)  # one copy; then every message is a cheap slice, never a view
        out: list[bytes] = []
        try:
            pos = 0
            if self._head or self._need >= 0:
                pos = self._continue(data, out)
                if self._need >= 0 or self._head:  # still incomplete: everything was consumed
                    return out
            self._parse(data, pos, out)
        except Exception as exc:
            self.error = exc
            self._head, self._parts, self._need = b"", [], -1
            if not out:
                raise
        finally:
            self.buffered = len(self._head) if self._need < 0 else \
                self.framing.prefix_size + self._have
        return out

    @property
    def body_wanted(self) -> int:
        """The body size of a frame whose prefix is read but none of its body, else 0. A reader
        that can get exactly that many bytes in one piece feeds them and gets them back as the
        message itself, without a copy."""
        return self._need if self._have == 0 and self._need > 0 else 0

    @property
    def body_left(self) -> int:
        """Body bytes still to come of the frame in progress (0 between frames)."""
        return self._need - self._have if self._need > 0 else 0

    def _length(self, buf: bytes, pos: int) -> int:
        n: int
        t = self.framing.type_byte
        if t is None:
            (n,) = _LEN.unpack_from(buf, pos)
        else:
            kind, n = _IPC_LEN.unpack_from(buf, pos)
            if kind != t:
                raise BadFrame(f"ipc frame type byte 0x{kind:02x}, expected 0x{t:02x}")
        if self.max_size and n > self.max_size:
            raise MessageTooLarge(f"peer announced a {n}-byte message; the limit is {self.max_size}",
                                  size=n, limit=self.max_size)
        return n

    def _start_body(self, n: int, data: bytes, pos: int) -> int:
        """The frame in progress has an ``n``-byte body: keep what ``data`` has of it from pos."""
        self._need = n
        self._parts = []
        self._have = 0
        return self._fill(data, pos)

    def _fill(self, data: bytes, pos: int) -> int:
        take = min(self._need - self._have, len(data) - pos)
        if take <= 0:
            return pos
        parts = self._parts
        if take >= _SMALL:  # the chunk itself, or a view of it: no copy (until the join)
            parts.append(data if take == len(data) else memoryview(data)[pos:pos + take])
        elif parts and type(parts[-1]) is bytearray and len(parts[-1]) < _GATHER_MAX:
            parts[-1] += memoryview(data)[pos:pos + take]  # a dribble makes no object per byte
        else:
            parts.append(bytearray(memoryview(data)[pos:pos + take]))
        self._have += take
        return pos + take

    def _continue(self, data: bytes, out: list[bytes]) -> int:
        """Carry on with the frame in progress; return how much of ``data`` it used."""
        pos = 0
        if self._need < 0:  # still reading the length prefix
            prefix = self.framing.prefix_size
            take = prefix - len(self._head)
            head = self._head + data[:take]
            if len(head) < prefix:
                self._head = head
                return len(data)
            self._head = b""
            pos = self._start_body(self._length(head, 0), data, take)
        elif self._have == 0 and len(data) >= self._need:
            # The whole body in one piece: the message is a slice (the chunk itself if exact).
            pos = self._need
            # (Not data[:pos] when that is all of it: compiled with mypyc, the slice copies.)
            out.append(data if pos == len(data) else data[:pos])
            self._need = -1
            return pos
        else:
            pos = self._fill(data, 0)
        if self._have == self._need:
            parts, self._parts, self._need = self._parts, [], -1
            one = len(parts) == 1 and type(parts[0]) is bytes
            out.append(parts[0] if one else b"".join(parts))  # type: ignore[arg-type]
        return pos

    def _parse_run(self, data: bytes, pos: int, out: list[bytes]) -> int:
        """Take a run of equal-size frames from ``pos`` with C loops; return where it ends.

        Guess that the next frames repeat the first one's size ``n`` (fixed-size records, a
        steady stream), split that stretch on the first prefix, and keep the result only if it
        proves the guess: the stretch starts with the prefix, and splitting it left to right
        yields exactly one piece per frame, each ``n`` bytes, so every separator found is exactly
        where a frame begins. Anything else (a body containing the prefix bytes, sizes that
        vary) leaves ``pos`` where it was, for the general loop.
        """
        prefix = self.framing.prefix_size
        n = self._length(data, pos)  # validates the size (and ipc type byte) for the whole run
        stride = prefix + n
        k = (len(data) - pos) // stride
        if n == 0 or n > _RUN_MAX_SIZE or k < _RUN_MIN:
            return pos
        stop = pos + k * stride
        pieces = data[pos:stop].split(data[pos:pos + prefix])
        if len(pieces) != k + 1 or list(map(len, pieces)).count(n) != k:
            return pos
        del pieces[0]  # the empty bytes before the first prefix
        out += pieces
        return stop

    def _parse(self, data: bytes, pos: int, out: list[bytes]) -> None:
        end = len(data)
        append = out.append
        prefix = self.framing.prefix_size
        if end - pos >= _RUN_MIN * (prefix + 1):
            pos = self._parse_run(data, pos, out)
        if self.framing.type_byte is None:  # tcp: the hot loop, inlined
            unpack = _LEN.unpack_from
            limit = self.max_size or (1 << 64)
            while end - pos >= 8:
                (n,) = unpack(data, pos)
                if n > limit:
                    raise MessageTooLarge(
                        f"peer announced a {n}-byte message; the limit is {self.max_size}",
                        size=n, limit=self.max_size)
                start = pos + 8
                stop = start + n
                if stop > end:
                    break
                append(data[start:stop])
                pos = stop
        else:
            length = self._length
            while end - pos >= prefix:
                n = length(data, pos)
                start = pos + prefix
                stop = start + n
                if stop > end:
                    break
                append(data[start:stop])
                pos = stop
        if pos < end:  # an incomplete frame: keep its prefix, or start its body
            if end - pos < prefix:
                self._head = data[pos:end]
            else:
                self._start_body(self._length(data, pos), data, pos + prefix)
