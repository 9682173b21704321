"""RFC 6455 framing, sans-IO, for SP messages: frame headers built and parsed here, masking by
compiled code (``websockets``' C ``apply_mask``; for big messages ``gsp_ws._mask.mask_into``,
into a buffer kept for them), bodies sliced, never copied byte by byte.

What a WebSocket pipe needs of the RFC and no more: binary messages cut into frames of at most
``ws_max_send_frame_size`` (nng does the same), text frames only where ``ws_recv_text`` allows them,
Ping answered by Pong, the Close handshake, and every malformed frame refused with the close code
the RFC gives it (1002 protocol error, 1003 text refused, 1007 bad UTF-8, 1009 too big). No
extensions are negotiated, so a frame with an RSV bit set is an error.

Nothing here does I/O: :class:`Framer` turns bytes received into messages and control frames,
and messages into the bytes to write, as :mod:`gsp.transport.wire` does for tcp.

A big message (a frame of at least ``DIRECT_MIN`` bytes not all received, or any fragment of a
message cut into such frames) is assembled in one buffer kept by the framer: what came with a
header is unmasked into it, the rest is received into it (:meth:`Framer.room`, then
:meth:`Framer.filled`, which unmasks in place), and the message is one copy out of it. Without
it a fragment was unmasked into a fresh object, the fragments joined, and a 1 MiB message cost
three copies and fresh pages for each.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Callable, Final

import gsp

try:  # websockets' C extension: XOR at memory speed (3 µs per 64 KiB against wsproto's 171)
    from websockets.speedups import apply_mask as _apply_mask
    COMPILED_MASK = True
except ImportError:  # pragma: no cover - websockets without its wheel: its pure-Python XOR
    from websockets.utils import apply_mask as _apply_mask
    COMPILED_MASK = False

#: ``apply_mask(data, key)``: ``data`` (any buffer) XOR the 4-byte ``key`` repeated, as bytes.
apply_mask: Callable[[Any, bytes], bytes] = _apply_mask


def _mask_into_py(dst: Any, src: Any, key: bytes, phase: int) -> None:
    """``mask_into`` without gsp_ws._mask: websockets' XOR into a new object, then a copy."""
    phase &= 3
    if phase:
        key = key[phase:] + key[:phase]
    masked = apply_mask(src, key)
    memoryview(dst)[:len(masked)] = masked


try:  # gsp_ws._mask, built with the wheel: the XOR into a buffer we own (no allocation)
    from ._mask import mask_into as _mask_into
    COMPILED_MASK_INTO = True
except ImportError:  # pragma: no cover - built without a C compiler
    _mask_into = _mask_into_py
    COMPILED_MASK_INTO = False

#: ``mask_into(dst, src, key, phase)``: ``dst[i] = src[i] ^ key[(i + phase) % 4]`` for every
#: byte of ``src``; ``dst`` a writable buffer at least as long, which may be ``src`` itself.
mask_into: Callable[[Any, Any, bytes, int], None] = _mask_into

OP_CONT: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA

# Close codes (RFC 6455 7.4.1)
NORMAL_CLOSURE: Final = 1000
PROTOCOL_ERROR: Final = 1002
UNSUPPORTED_DATA: Final = 1003
NO_STATUS_RCVD: Final = 1005
INVALID_FRAME_PAYLOAD_DATA: Final = 1007
MESSAGE_TOO_BIG: Final = 1009
TRY_AGAIN_LATER: Final = 1013
POLICY_VIOLATION: Final = 1008
_KNOWN_CODES = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013,
                          1014})
_LOCAL_ONLY = frozenset({1005, 1006, 1015})

# The states of the closing handshake (as wsproto names them).
OPEN: Final = 0
LOCAL_CLOSING: Final = 1  # we sent Close, the peer has not answered
REMOTE_CLOSING: Final = 2  # the peer sent Close, we have not answered
CLOSED: Final = 3

_H: Final = struct.Struct(">H")
_Q: Final = struct.Struct(">Q")
_BIN_FIN: Final = 0x80 | OP_BINARY
_CACHED: Final = 126
#: Unmasked headers of final binary frames of 0..125 bytes (a server's small messages).
_SMALL_HEADERS = [bytes([_BIN_FIN, n]) for n in range(_CACHED)]
_KEYS_AT_ONCE: Final = 1024  # mask keys drawn from the OS at a time (one getrandom per 1024)
#: A data frame at least this big, not all received, goes straight into the message's buffer.
DIRECT_MIN: Final = 16 * 1024
#: Room made ahead in that buffer when it is full (it grows to twice the bytes received and
#: this at most: a peer that announces a big frame and stalls costs what it sent).
_ROOM: Final = 1024
_NO_LIMIT: Final = 1 << 63  # (a frame's length is below 2**63: RFC 6455 5.2)
#: The longest frame headers: 2 bytes, a 64-bit length, and a client's 4-byte mask key.
_HEADER_MAX_UNMASKED: Final = 10
_HEADER_MAX_MASKED: Final = 14


class FrameError(gsp.WireError):
    """A frame the RFC forbids (or over a limit): the pipe answers Close with :attr:`code`."""

    def __init__(self, code: int, reason: str, error: type[gsp.GspError] = gsp.BadFrame) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.error = error


def header(first: int, n: int, key: bytes | None = None) -> bytes:
    """The header of a frame: ``first`` its first byte (FIN, opcode), ``n`` its payload size,
    ``key`` the mask key of a client's frame."""
    if n < 126:
        head = bytes((first, n | 0x80)) if key is not None else \
            (_SMALL_HEADERS[n] if first == _BIN_FIN else bytes((first, n)))
    elif n < 65536:
        head = bytes((first, 126 | (0x80 if key is not None else 0))) + _H.pack(n)
    else:
        head = bytes((first, 127 | (0x80 if key is not None else 0))) + _Q.pack(n)
    return head if key is None else head + key


def close_payload(code: int, reason: str | None) -> bytes:
    if code == NO_STATUS_RCVD:  # "no status" is never sent: an empty Close says it
        return b""
    data = _H.pack(code) + (reason or "").encode("utf-8")
    return data[:125]  # a control frame's payload is at most 125 bytes (the reason cut)


def parse_close(data: bytes) -> tuple[int, str]:
    """The code and reason of a Close frame's payload (RFC 6455 5.5.1, 7.4)."""
    if not data:
        return NO_STATUS_RCVD, ""
    if len(data) == 1:
        raise FrameError(PROTOCOL_ERROR, "Close frame with a 1-byte payload")
    (code,) = _H.unpack_from(data)
    if code < 1000 or code > 4999:
        raise FrameError(PROTOCOL_ERROR, f"Close frame with invalid code {code}")
    if code in _LOCAL_ONLY:
        raise FrameError(PROTOCOL_ERROR, f"Close frame with the local-only code {code}")
    if code < 3000 and code not in _KNOWN_CODES:
        raise FrameError(PROTOCOL_ERROR, f"Close frame with the reserved code {code}")
    try:
        reason = data[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(INVALID_FRAME_PAYLOAD_DATA, "Close reason is not UTF-8") from None
    return code, reason


class Framer:
    """One WebSocket's frames, both ways, for a client (masks what it sends, expects unmasked
    frames) or a server (the other way round).

    :meth:`feed` takes bytes as they come and returns the whole messages they complete; control
    frames wait in :attr:`controls` as ``(opcode, payload)``. Memory follows the bytes received,
    never a size announced: a frame's payload is kept in the pieces that came (unmasked as they
    come), joined once when the last one does; a big message's in one buffer (see the module),
    which grows with the bytes received (to twice them at most), never to a size announced.
    The limits, ``max_msg`` and ``max_frame`` (0: none), are fixed when it is made.
    """

    __slots__ = ("client", "state", "max_msg", "max_frame", "text_ok", "controls", "error",
                 "held", "big_buffer", "_buf", "_parts", "_msg_len", "_text", "_in_msg", "_op",
                 "_fin", "_key", "_need", "_have", "_fparts", "_keys", "_kpos", "_direct",
                 "_small", "_expect", "_ahead")

    def __init__(self, client: bool, *, max_msg: int = 0, max_frame: int = 0,
                 text_ok: bool = False) -> None:
        self.client = client
        self.state = OPEN
        self.max_msg = max_msg
        self.max_frame = max_frame
        # (the biggest frame neither limit refuses, for the parser's usual case: the limits are
        # fixed once the framer is made)
        self._small = min(max_frame or _NO_LIMIT, max_msg or _NO_LIMIT)
        self.text_ok = text_ok
        #: Control frames received, ``(opcode, payload)``, oldest first (the caller empties it).
        self.controls: list[tuple[int, bytes]] = []
        #: The :class:`FrameError` that ended the stream (raised again by later feeds).
        self.error: FrameError | None = None
        #: Payload bytes of the message in progress held here (for max_recv_partial).
        self.held = 0
        self._buf = b""  # bytes of the next frame's header while it is incomplete
        self._parts: list[bytes] = []  # finished frames of the message in progress
        self._msg_len = 0  # their bytes
        self._text = False  # the message in progress is text
        self._in_msg = False  # a message is in progress (a continuation is expected)
        # The frame whose payload is arriving: opcode, FIN, mask key, size, bytes in, pieces.
        self._op = -1  # -1: between frames
        self._fin = False
        self._key: bytes | None = None
        self._need = 0
        self._have = 0
        self._fparts: list[bytes] = []
        self._keys = b""
        self._kpos = 0
        #: The buffer a big message is assembled in, kept while messages are big (None while
        #: they are small: :meth:`room` is then None between frames). Read-only.
        self.big_buffer: bytearray | None = None
        self._direct = False  # the message in progress is assembled in big_buffer
        self._expect = 0  # the size of the last big frame, header and payload (see room)
        self._ahead = False  # room's view is between frames: a header first (see filled)

    # -- writing ---------------------------------------------------------------------------------
    def mask_key(self) -> bytes:
        """A fresh mask key for a client's frame (RFC 6455 5.3: from a strong source)."""
        pos = self._kpos
        if pos >= len(self._keys):
            self._keys = os.urandom(4 * _KEYS_AT_ONCE)
            pos = 0
        self._kpos = pos + 4
        return self._keys[pos:pos + 4]

    def frame(self, payload: bytes) -> bytes:
        """One whole final binary frame carrying ``payload`` (a small message's, sent at once)."""
        n = len(payload)
        if self.client:
            key = self.mask_key()
            return header(_BIN_FIN, n, key) + apply_mask(payload, key)
        return (_SMALL_HEADERS[n] if n < _CACHED else header(_BIN_FIN, n)) + payload

    def frames(self, payload: Any, size: int, out: list[Any], frame_max: int) -> None:
        """Append to ``out`` the pieces (headers, payloads or their views) of one binary message
        cut into frames of at most ``frame_max`` bytes (0: one frame). A server's payloads are
        the message's own bytes; a client's are masked copies."""
        client = self.client
        if not frame_max or size <= frame_max:
            if client:
                key = self.mask_key()
                out.append(header(_BIN_FIN, size, key))
                out.append(apply_mask(payload, key))
            else:
                out.append(_SMALL_HEADERS[size] if size < _CACHED else header(_BIN_FIN, size))
                out.append(payload)
            return
        view = memoryview(payload)
        first = OP_BINARY
        for i in range(0, size, frame_max):
            piece = view[i:i + frame_max]
            fin = 0x80 if i + frame_max >= size else 0
            if client:
                key = self.mask_key()
                out.append(header(fin | first, len(piece), key))
                out.append(apply_mask(piece, key))
            else:
                out.append(header(fin | first, len(piece)))
                out.append(piece)
            first = OP_CONT

    def control(self, opcode: int, payload: bytes = b"") -> bytes:
        """A whole control frame (payload at most 125 bytes)."""
        if self.client:
            key = self.mask_key()
            return header(0x80 | opcode, len(payload), key) + apply_mask(payload, key)
        return header(0x80 | opcode, len(payload)) + payload

    def close_frame(self, code: int, reason: str | None = None) -> bytes | None:
        """The Close frame to send now, or None when none may be (one was sent, or the closing
        handshake is over); moves the state on."""
        if self.state == OPEN:
            self.state = LOCAL_CLOSING
        elif self.state == REMOTE_CLOSING:
            self.state = CLOSED
        else:
            return None
        return self.control(OP_CLOSE, close_payload(code, reason))

    # -- reading ---------------------------------------------------------------------------------
    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the messages it completes (control frames go to
        :attr:`controls`). A bad frame raises :class:`FrameError` — after the messages before it
        are returned: it is kept in :attr:`error` and raised by the next call."""
        if self._op < 0 and not self._buf and not self._in_msg and self.error is None:
            # The usual read of a request or a reply: one whole small binary frame, between
            # messages. Its message is one slice (or one unmasking), with no loop to run.
            end = len(data)
            if end >= 2 and data[0] == _BIN_FIN:
                b1 = data[1]
                n = b1 & 0x7F
                if n < 126 and not (self.max_frame and n > self.max_frame) and \
                        not (self.max_msg and n > self.max_msg):
                    self.big_buffer = None  # small messages again: the big one's buffer goes
                    if self.client:
                        if b1 == n and end == n + 2:  # (unmasked, 7-bit length)
                            return [data[2:]]
                    elif b1 & 0x80 and end == n + 6:
                        return [apply_mask(memoryview(data)[6:], data[2:6])]
        if self.error is not None:
            raise self.error
        out: list[bytes] = []
        try:
            pos = 0
            if self._op >= 0:
                pos = self._body(data, 0, out)
            elif self._buf:
                data = self._buf + data
                self._buf = b""
            self._parse(data, pos, out)
        except FrameError as exc:
            self.error = exc
            if not out:
                raise
        finally:
            self.held = self._msg_len + self._have
        return out

    def _parse(self, data: bytes, pos: int, out: list[bytes]) -> None:
        end = len(data)
        expect_mask = 0 if self.client else 0x80
        small = self._small
        while end - pos >= 2:
            b0 = data[pos]
            b1 = data[pos + 1]
            n = b1 & 0x7F
            hl = 2
            if n >= 126:
                n, hl = _extended(data, pos, end, n)
                if n < 0:
                    break
            if b1 & 0x80 != expect_mask:
                raise FrameError(PROTOCOL_ERROR, "a masked frame from the server" if b1 & 0x80
                                 else "an unmasked frame from a client")
            key: bytes | None = None
            if expect_mask:
                hl += 4
                if end - pos < hl:
                    break
                key = data[pos + hl - 4:pos + hl]
            # (the usual frame, a whole binary message within the limits, is past at one test)
            op = OP_BINARY if b0 == _BIN_FIN and n <= small and not self._in_msg else \
                self._check(b0, n)
            start = pos + hl
            stop = start + n
            fin = b0 & 0x80
            # (n first: a small frame is past at one test; a control frame is never this big)
            if n >= DIRECT_MIN and not self._direct:
                self._big(stop - pos, bool(fin) and stop <= end)
            if self._direct and stop <= end and op < OP_CLOSE:
                self._put(data, start, n, 0)  # a whole frame of a big message
                self._data_done(op, fin, key, n, out)
                pos = stop
                continue
            if stop <= end:  # the whole frame is here: its payload is one slice (or unmasking)
                payload = data[start:stop] if key is None else \
                    apply_mask(memoryview(data)[start:stop], key)
                if op == OP_BINARY and fin and self.big_buffer is None:
                    out.append(payload)  # a message in one frame (what _frame_done does)
                else:
                    self._frame_done(op, fin, payload, out)
                pos = stop
                continue
            # The payload is still arriving: keep what came.
            self._op = op
            self._fin = bool(fin)
            self._key = key
            self._need = n
            self._have = 0
            self._fparts = []
            self._body(data, start, out)
            return
        if pos < end:
            self._buf = data[pos:]

    def _big(self, size: int, whole: bool) -> None:
        """A big frame (``size`` bytes with its header) begins: its message is assembled in one
        buffer unless it is a ``whole`` message already; then the next is (see :meth:`room`)."""
        self._expect = size
        if not whole:
            self._to_direct()
        elif self.big_buffer is None:
            self.big_buffer = bytearray(size)  # (kept while messages are big)

    def _check(self, b0: int, n: int) -> int:
        """The opcode of a frame whose header is read, checked against the RFC and the limits."""
        if b0 & 0x70:
            raise FrameError(PROTOCOL_ERROR, "a frame with RSV bits set (no extension is agreed)")
        op = b0 & 0x0F
        if op >= OP_CLOSE:
            if op > OP_PONG:
                raise FrameError(PROTOCOL_ERROR, f"unknown opcode {op}")
            if not b0 & 0x80 or n > 125:
                raise FrameError(PROTOCOL_ERROR, "a fragmented or oversized control frame")
            return op
        if op == OP_CONT:
            if not self._in_msg:
                raise FrameError(PROTOCOL_ERROR, "a continuation frame outside a message")
        elif op > OP_BINARY:
            raise FrameError(PROTOCOL_ERROR, f"unknown opcode {op}")
        elif self._in_msg:
            raise FrameError(PROTOCOL_ERROR, "a new message before the last one's final frame")
        elif op == OP_TEXT and not self.text_ok:
            raise FrameError(UNSUPPORTED_DATA, "text frames are not accepted")
        if self.max_frame and n > self.max_frame:
            raise FrameError(MESSAGE_TOO_BIG, f"frame over ws_max_frame_size ({self.max_frame})",
                             gsp.MessageTooLarge)
        if self.max_msg and self._msg_len + n > self.max_msg:
            raise FrameError(MESSAGE_TOO_BIG, f"message over max_recv_size ({self.max_msg})",
                             gsp.MessageTooLarge)
        return op

    def _body(self, data: bytes, pos: int, out: list[bytes]) -> int:
        """Take what ``data`` has from ``pos`` of the payload arriving; return where it ends."""
        take = min(self._need - self._have, len(data) - pos)
        if self._direct and self._op < OP_CLOSE:  # a big message's frame: into its buffer
            if take > 0:
                self._put(data, pos, take, self._have)
                self._have += take
            if self._have < self._need:
                return len(data)
            self._frame_in(out)
            return pos + take
        if take > 0:
            piece: Any = data if pos == 0 and take == len(data) else memoryview(data)[pos:pos + take]
            key = self._key
            if key is not None:
                k = self._have & 3
                piece = apply_mask(piece, key[k:] + key[:k] if k else key)
            elif type(piece) is not bytes:
                piece = bytes(piece)
            self._fparts.append(piece)
            self._have += take
        if self._have < self._need:
            return len(data)
        parts = self._fparts
        payload = parts[0] if len(parts) == 1 else b"".join(parts)
        op, fin = self._op, self._fin
        self._op, self._fparts, self._have, self._need = -1, [], 0, 0
        self._frame_done(op, fin, payload, out)
        return pos + take

    def _frame_done(self, op: int, fin: Any, payload: bytes, out: list[bytes]) -> None:
        if op >= OP_CLOSE:
            self.controls.append((op, payload))
            return
        if op == OP_TEXT:
            self._text = True
        if fin and not self._parts:  # the usual case: a message in one frame
            self._in_msg = False
            if self.big_buffer is not None and len(payload) < DIRECT_MIN:
                self.big_buffer = None  # small messages again: the big one's buffer goes
            if self._text:
                self._text = False
                _utf8(payload)
            out.append(payload)
            return
        self._parts.append(payload)
        self._msg_len += len(payload)
        if not fin:
            self._in_msg = True
            return
        message = b"".join(self._parts)
        self._parts, self._msg_len, self._in_msg = [], 0, False
        if self._text:
            self._text = False
            _utf8(message)
        out.append(message)

    # -- big messages: assembled in one buffer ---------------------------------------------------
    def _to_direct(self) -> None:
        """Assemble the message in progress in :attr:`big_buffer` from here on (its frames so far
        copied in)."""
        parts = self._parts
        dst = self._reserve(self._msg_len, self._msg_len)
        at = 0
        for part in parts:
            memoryview(dst)[at:at + len(part)] = part
            at += len(part)
        self._parts = []
        self._direct = True

    def _reserve(self, end: int, limit: int) -> bytearray:
        """:attr:`big_buffer` with room for ``end`` bytes of the message: a new buffer (what it holds
        copied) when it has not, made as big as ``limit`` allows up to twice ``end``."""
        dst = self.big_buffer
        if dst is not None and len(dst) >= end:
            return dst
        new = bytearray(max(end, min(limit, 2 * end)))
        keep = self._msg_len + self._have
        if dst is not None and keep:
            memoryview(new)[:keep] = memoryview(dst)[:keep]
        self.big_buffer = new
        return new

    def _put(self, data: Any, pos: int, n: int, at: int) -> None:
        """Copy ``n`` payload bytes of ``data`` from ``pos`` into the message's buffer, as the
        frame's bytes from ``at`` on (still masked: see :meth:`_data_done`)."""
        at += self._msg_len
        dst = self._reserve(at + n, self._msg_len + self._need if self._op >= 0 else at + n)
        memoryview(dst)[at:at + n] = memoryview(data)[pos:pos + n]

    def _frame_in(self, out: list[bytes]) -> None:
        """The frame arriving is all in the message's buffer."""
        op, fin, n = self._op, self._fin, self._need
        self._op, self._have, self._need = -1, 0, 0
        self._data_done(op, fin, self._key, n, out)

    def _data_done(self, op: int, fin: Any, key: bytes | None, n: int,
                   out: list[bytes]) -> None:
        """A frame of a big message, ``n`` bytes, is in its buffer after the frames before it:
        unmasked there (in place, in one pass, while the bytes are fresh in the cache), or, a
        message of one frame, unmasked as it is copied out; the message, once this is the last
        frame."""
        start = self._msg_len
        end = self._msg_len = start + n
        if op == OP_TEXT:
            self._text = True
        dst = self.big_buffer
        assert dst is not None
        view = memoryview(dst)
        if not fin:
            if key is not None:
                mask_into(view[start:end], view[start:end], key, 0)
            self._in_msg = True
            return
        if key is None:
            message = bytes(view[:end])
        elif start == 0:
            message = apply_mask(view[:end], key)  # the XOR and the copy out in one pass
        else:
            mask_into(view[start:end], view[start:end], key, 0)
            message = bytes(view[:end])
        self._msg_len, self._in_msg, self._direct = 0, False, False
        if self._text:
            self._text = False
            _utf8(message)
        out.append(message)

    def room(self) -> memoryview | None:
        """Where the next bytes go when they go straight into a big message's buffer, for the
        reader to receive them into (``recv_into``); else None: a read of its own then, of
        :meth:`read_size`. Report what was received with :meth:`filled` (no other call in
        between).

        Mid-frame, the payload's next bytes. Between messages, once they are big (the last one
        was, and its buffer is kept): the next frame's header and payload, as big as the last
        one's, in one read; a final binary frame is then the message, one copy out of the buffer
        (unmasked as it is copied), as gsp's tcp receives a big body as the message. The end of
        a message's last frame (less than ``DIRECT_MIN`` to come) is read the same way, with
        room for the next frame after it. Never a read of several big messages at once into
        fresh objects: each costs fresh pages (glibc gives a heap top of freed big bodies back
        to the kernel, and the next read faults it in again: 20 page faults a 64 KiB
        message)."""
        op = self._op
        if op < 0:
            dst = self.big_buffer
            if dst is None or self._buf or self._in_msg or self.error is not None:
                return None
            want = self._expect
            self._ahead = True
            return memoryview(self._reserve(want, want))[:want]
        if not self._direct or op >= OP_CLOSE or self.error is not None:
            return None
        at = self._msg_len + self._have
        end = self._msg_len + self._need
        if end - at < DIRECT_MIN:
            if not self._fin:
                return None  # (read with the frames after it)
            end += self._expect  # the message's end, and the next frame's header and payload
            self._ahead = True
            return memoryview(self._reserve(end, end))[at:end]
        self._ahead = False
        dst = self.big_buffer
        if dst is None or len(dst) <= at:  # full: twice what came (kept for the next message)
            dst = self._reserve(min(end, at + _ROOM), end)
        return memoryview(dst)[at:min(end, len(dst))]

    def read_size(self, chunk: int) -> int:
        """How many bytes the next read of its own (not into :meth:`room`) should ask for:
        ``chunk`` (the reader's usual read), but while messages are big and between them, only
        what the frame's header (part of it came into :meth:`room`) or payload still lacks, so
        that the next read is into :meth:`room` again."""
        if self.big_buffer is None or self._in_msg or self.error is not None:
            return chunk
        if self._op >= 0:
            return self._need - self._have or chunk
        return (_HEADER_MAX_UNMASKED if self.client else _HEADER_MAX_MASKED) - len(self._buf)

    def filled(self, n: int) -> list[bytes]:
        """``n`` bytes were received into :meth:`room`'s view; return the messages they
        complete."""
        if self._ahead:
            self._ahead = False
            if self._op < 0:
                return self._filled_ahead(0, n)
        out: list[bytes] = []
        rest = self._need - self._have
        self._have += n
        try:
            if self._have >= self._need:
                base = self._msg_len + self._need
                self._have = self._need
                self._frame_in(out)
                if n > rest:  # the start of the next frame came after the message's end
                    try:
                        out += self._filled_ahead(base, n - rest)
                    except FrameError:
                        pass  # kept in self.error: raised by the next call, after this message
        except FrameError as exc:
            self.error = exc
            raise
        finally:
            self.held = self._msg_len + self._have
        return out

    def _filled_ahead(self, base: int, n: int) -> list[bytes]:
        """``n`` bytes of the next frame and what follows it came into the buffer from
        ``base``. The usual one, a final binary frame of at least ``DIRECT_MIN`` bytes within
        the limits, is taken where it is: whole, it is the message (what came after it is fed);
        not, what came of its payload moves to the buffer's start and the rest is received after
        it. Anything else is fed, as the bytes of a read of its own (the checks and errors are
        feed's)."""
        dst = self.big_buffer
        assert dst is not None
        view = memoryview(dst)[base:base + n]
        masked = not self.client
        size = hl = -1
        if n >= 4 and view[0] == _BIN_FIN and bool(view[1] & 0x80) is masked \
                and view[1] & 0x7F >= 126:
            try:
                size, hl = _extended(view, 0, n, view[1] & 0x7F)
            except FrameError:
                size = -1  # (not the shortest form: feed refuses it)
            hl += 4 if masked else 0
        if size < DIRECT_MIN or size > self._small or n < hl:
            return self.feed(bytes(view))
        end = hl + size
        self._expect = end
        key = bytes(view[hl - 4:hl]) if masked else None
        if n >= end:  # the whole frame: the message
            out = [apply_mask(view[hl:end], key) if key is not None else bytes(view[hl:end])]
            if n > end:
                try:
                    out += self.feed(bytes(view[end:]))
                except FrameError:
                    pass  # kept in self.error: raised by the next call, after this message
            return out
        got = n - hl
        memoryview(dst)[:got] = view[hl:]  # the payload so far, to the buffer's start
        self._op, self._fin, self._key, self._need, self._have = OP_BINARY, True, key, size, got
        self._direct = True
        self.held = got
        return []

    @property
    def between_frames(self) -> bool:
        """Nothing of a frame is held (its header or payload)."""
        return self._op < 0 and not self._buf

    @property
    def payload_left(self) -> int:
        """Payload bytes still to come of the frame arriving (0 between frames)."""
        return self._need - self._have if self._op >= 0 else 0


def _extended(data: bytes | memoryview, pos: int, end: int, n: int) -> tuple[int, int]:
    """The payload size and header size (without the mask key) of a frame at ``pos`` whose
    7-bit length is ``n`` (126: 16 bits follow, 127: 64); ``(-1, 0)`` while they are not here."""
    if n == 126:
        if end - pos < 4:
            return -1, 0
        (n,) = _H.unpack_from(data, pos + 2)
        if n < 126:
            raise FrameError(PROTOCOL_ERROR, f"a {n}-byte frame with a 16-bit length")
        return n, 4
    if end - pos < 10:
        return -1, 0
    (n,) = _Q.unpack_from(data, pos + 2)
    if n < 65536 or n >> 63:
        raise FrameError(PROTOCOL_ERROR, f"a {n}-byte frame with a 64-bit length")
    return n, 10


def _utf8(data: bytes) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(INVALID_FRAME_PAYLOAD_DATA, "a text message that is not UTF-8") from None
