"""SP over WebSocket connections: the HTTP upgrade by wsproto, then frames by :mod:`._frames`.

nng's mapping: no SP handshake and no length prefix; one SP message (header+body) is one binary
WebSocket message. The protocol check is the HTTP upgrade's subprotocol ``<name>.sp.nanomsg.org``.
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import gevent
from gevent import socket as gsocket
from gevent.event import Event
from gevent.lock import Semaphore
from wsproto.connection import ConnectionType
from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request
from wsproto.handshake import H11Handshake
from wsproto.utilities import ProtocolError

import gsp
from gsp.message import message_bytes
from gsp.transport import (
    Headers,
    Holding,
    ParkingConnection,
    RecvLimits,
    TLSContextSource,
    WSRequest,
    forget_socket,
    nonblocking_socket,
    tls_close_notify,
    tls_handshake,
    tls_refusal,
    tls_wrap,
)

from . import _frames
from ._frames import (
    CLOSED,
    OP_BINARY,
    OP_CONT,
    OPEN,
    REMOTE_CLOSING,
    FrameError,
    Framer,
    header,
    mask_into,
)
from ._http import _as_bytes_headers, check_upgrade, http_error, subprotocol
from .auth import Refusal, UpgradeGate

if TYPE_CHECKING:
    from gsp.protocol import ProtocolSpec

_CHUNK = 256 * 1024
_MAX_HEAD = 16384  # bytes of an HTTP response head accepted (the upgrade's answer)
#: Pieces at least this big go to the kernel as they are (a plain socket's sendmsg), not copied
#: into the buffer of the frames around them.
_BIG = 16 * 1024
_JOIN_LIMIT = 256 * 1024  # bytes joined before a write (over TLS: records filled)
_IOV_MAX = 512  # pieces in one sendmsg (the kernel's IOV_MAX is 1024)
_CLOSE_WAIT = 0.5  # seconds a closing side spends on the close handshake at most


# -- connections ------------------------------------------------------------------------------

class WSConnection(ParkingConnection):
    """One WebSocket carrying SP messages; subclasses do the upgrade in ``_upgrade``. On a plain
    socket an idle pipe parks (:class:`gsp.transport.ParkingConnection`), woken after
    ``ws_ping_interval`` of silence too, so that its reader pings the peer."""

    def __init__(self, sock: Any, options: Mapping[str, Any], local: str, remote: str,
                 path: str) -> None:
        super().__init__()
        self.sock = sock
        self.local_address = local
        self.remote_address = remote
        self.properties: dict[str, Any] = {"ws_path": path}
        self._options = options
        self._max_msg: int = options["max_recv_size"]
        self._max_frame: int = options["ws_max_frame_size"]
        self._tx_frame: int = options["ws_max_send_frame_size"]
        self._text_ok: bool = options["ws_recv_text"]
        self._ping_every: float | None = options["ws_ping_interval"]
        self.idle_wake = self._ping_every  # (a parked pipe's reader pings after that silence)
        self._ping_wait: float = options["ws_ping_timeout"]
        self._ws: Framer | None = None
        self._lock = Semaphore()  # one writer at a time: frames must not interleave
        self._closed = False
        self._peer_closed = Event()
        self._reader: Any = None  # the greenlet inside recv_messages, if any
        self._early = b""  # frames that came with the upgrade, for the first recv_messages
        self._plain = False  # a plain gevent socket (not TLS): sendmsg writes pieces as they are
        self._tail: memoryview | None = None  # what send_now could not write yet
        self._error: gsp.GspError | None = None
        self._holding = Holding(None, remote)  # see use_recv_limits
        #: What a client's big messages are masked into before they are written (see
        #: _send_masked); made at the first, given back when a batch has none.
        self._txbuf: bytearray | None = None
        #: Set once closed (the WSGI request greenlet waits on it).
        self.done = Event()

    def refuse(self, reason: str) -> None:
        """No room for this connection (``max_pipes``) once it is a WebSocket: end it with close
        code 1013 (Try Again Later), then close."""
        self._end_with(_frames.TRY_AGAIN_LATER, f"SP socket full: {reason}")

    def deny(self, reason: str) -> None:
        """The listener's ``admit`` rule refused this peer once it is a WebSocket: end it with
        close code 1008 (Policy Violation, no word of which rule), then close."""
        self._end_with(_frames.POLICY_VIOLATION, "not admitted")

    def _end_with(self, code: int, reason: str) -> None:
        """``refuse``'s and ``deny``'s end: a WebSocket gets a Close frame of ``code``, then
        the connection closes (before the upgrade: just closes)."""
        if self._ws is not None and not self._closed:
            self._closed = True
            try:
                self._send_close(code, reason)
            finally:
                self._release()
                self.done.set()
        else:
            self.close()

    def _last_word(self, data: bytes) -> None:
        """Write ``data`` if the socket takes it at once (never wait: a refusal must not stall
        the listener), then close."""
        try:
            self.sock.settimeout(0.0)
            self.sock.send(data)
        except (OSError, ValueError):
            pass  # the peer is gone, or its window is full: closing says enough
        finally:
            self.close()

    # -- plumbing --------------------------------------------------------------------------------
    def _io_error(self, exc: OSError, what: str) -> gsp.GspError:
        if self._closed:
            return gsp.Closed("connection closed locally")
        if self._ws is None:  # wss upgrading: a TLS alert here is a refusal, as on tls+tcp
            refusal = tls_refusal(exc, f"TLS with {self.remote_address}")
            if refusal is not None:
                return refusal
        return gsp.ConnectionBroken(f"{what} on {self.remote_address}: {exc.strerror or exc}")

    def _eof(self) -> gsp.GspError:
        """What a read that met the end of the stream raises."""
        if self._closed:
            return gsp.Closed("connection closed locally")
        return gsp.ConnectionBroken(f"{self.remote_address} closed the connection")

    def _recv(self, room: memoryview | None = None, size: int = _CHUNK) -> Any:
        """One read: the bytes that came (``size`` at most), or given ``room`` (a big message's
        buffer) how many came into it; a failure, or the end of the stream, raised as gsp's
        error."""
        try:
            got = self._recv_alive(room, size)
        except gsp.GspError:  # gsp.Timeout is an OSError too: keep it as it is
            raise
        except OSError as exc:
            raise self._io_error(exc, "recv") from None
        if not got:
            raise self._eof()
        return got

    def _read(self, room: memoryview | None, size: int) -> Any:
        return self.sock.recv(size) if room is None else self.sock.recv_into(room)

    def _recv_alive(self, room: memoryview | None, size: int) -> Any:
        """``sock.recv`` (``recv_into(room)`` given a ``room``), checking the peer is alive
        once open: after ``ws_ping_interval`` s of silence it gets a Ping, and if nothing at all
        arrives ``ws_ping_timeout`` s after that, the pipe ends (a peer gone without a FIN, a
        connection black-holed on the way)."""
        every = self._ping_every
        if every is None or self._ws is None or self._ws.state != OPEN:
            return self.sock.recv(size) if room is None else self.sock.recv_into(room)
        pinged = False
        # (silence counts from the last bytes received: a parked pipe was silent meanwhile)
        first = max(0.0, every - (monotonic() - self.heard_at))
        while True:
            timer = gevent.Timeout(self._ping_wait if pinged else first)
            timer.start()
            try:
                data = self._read(room, size)
                self.heard_at = monotonic()
                return data
            except gevent.Timeout as exc:
                if exc is not timer:
                    raise
            finally:
                timer.close()
            if pinged:
                raise gsp.ConnectionBroken(
                    f"{self.remote_address} sent nothing for {every:g} s (ws_ping_interval) and "
                    f"did not answer a Ping within {self._ping_wait:g} s (ws_ping_timeout)")
            ws = self._ws
            if ws.state != OPEN:
                return self._read(room, size)  # closing: no Ping
            self._send(ws.control(_frames.OP_PING, b"gsp"))
            pinged = True

    def _send(self, data: bytes | bytearray) -> None:
        with self._lock:
            self._writev([data])

    def send_now(self, msg: Any) -> int:
        """A message of one small frame written at once, without waiting, for a pipe whose
        writer is idle (no greenlet switch): 2 written, 0 not (queue it), 1 in part (the rest
        goes first in the next write). A plain socket only, as on tcp."""
        ws = self._ws
        raw = self.nowait_socket
        if raw is None or self._tail is not None or ws is None or ws.state != OPEN \
                or self._lock.locked():
            return 0
        data = msg if type(msg) is bytes else message_bytes(msg)
        n = len(data)
        if n >= _BIG or (self._tx_frame and n > self._tx_frame):
            return 0  # a big payload goes through the writer: joining it here would copy it
        frame = ws.frame(data)
        try:
            sent = raw.send(frame)  # the non-blocking socket under gevent's: EAGAIN raises
        except BlockingIOError:
            return 0
        except OSError:
            self._tail = memoryview(frame)  # the writer meets the error
            return 1
        if sent == len(frame):
            return 2
        self._tail = memoryview(frame)[sent:]
        return 1

    def _write(self, pieces: list[Any]) -> None:
        """Write the pieces of a batch of frames in order, with as few system calls as can be:
        small pieces joined, a big payload (a plain socket) passed to ``sendmsg`` as it is."""
        if len(pieces) == 2 and (len(pieces[1]) < _BIG or not self._plain) \
                and self._tail is None:
            self._send(pieces[0] + pieces[1])  # one frame: its header and payload in one write
            return
        plain = self._plain
        iov: list[Any] = []
        buf = bytearray()
        total = 0
        with self._lock:
            if self._tail is not None:
                iov.append(self._tail)  # what send_now could not write: first
                self._tail = None
            for piece in pieces:
                n = len(piece)
                if plain and n >= _BIG:
                    if buf:
                        iov.append(buf)
                        buf = bytearray()
                    iov.append(piece)
                else:
                    buf += piece
                total += n
                if total >= _JOIN_LIMIT or len(iov) >= _IOV_MAX:
                    if buf:
                        iov.append(buf)
                        buf = bytearray()
                    self._writev(iov)
                    iov = []
                    total = 0
            if buf:
                iov.append(buf)
            if iov:
                self._writev(iov)

    def _writev(self, iov: list[Any]) -> None:
        """Write ``iov`` (under the lock): one ``send`` for one piece, else ``sendmsg`` (a plain
        socket), the rest of a partial write after it."""
        sock = self.sock
        tail, self._tail = self._tail, None
        if tail is not None:  # (a control frame's write: send_now's rest first)
            iov.insert(0, tail)
        try:
            if len(iov) == 1:
                data = iov[0]
                sent = sock.send(data)  # send() first: gevent's sendall asks for SO_SNDBUF
                if sent < len(data):
                    sock.sendall(memoryview(data)[sent:])
                return
            while iov:
                sent = sock.sendmsg(iov)  # (gevent's: waits while the buffer is full)
                while iov and sent >= len(iov[0]):
                    sent -= len(iov.pop(0))
                if sent:
                    iov[0] = memoryview(iov[0])[sent:]
        except gsp.GspError:
            raise
        except OSError as exc:
            raise self._io_error(exc, "send") from None

    def _send_close(self, code: int, reason: str | None = None) -> None:
        """Best effort and bounded: a close frame must never hang whoever is closing."""
        ws = self._ws
        data = ws.close_frame(code, reason) if ws is not None else None
        if data is None:
            return
        with gevent.Timeout(_CLOSE_WAIT, False):
            with self._lock:
                try:
                    self._writev([data])
                except (gsp.GspError, OSError):
                    pass

    # -- Connection --------------------------------------------------------------------------------
    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        exc = gsp.Timeout(f"WebSocket handshake with {self.remote_address} timed out")
        with gevent.Timeout(timeout, exc):
            try:
                self._ws = self._upgrade(spec)
                self._plain = type(self.sock) is gsocket.socket
                self.nowait_socket = nonblocking_socket(self.sock)
            except ProtocolError as err:
                raise gsp.BadFrame(f"bad HTTP upgrade with {self.remote_address}: {err}") from None
            except UnicodeDecodeError:  # wsproto decodes some header values as ASCII
                raise gsp.BadFrame(f"bad HTTP upgrade with {self.remote_address}: a header "
                                   "value is not ASCII") from None
        if self._closed:
            raise gsp.Closed("connection closed locally")

    def _upgrade(self, spec: "ProtocolSpec") -> Framer:
        raise NotImplementedError

    def _framer(self, client: bool, early: bytes) -> Framer:
        """The framing of the upgraded connection; ``early``: bytes that came behind the upgrade
        (frames a peer sent at once), read by the first :meth:`recv_messages`."""
        self._early = early
        return Framer(client, max_msg=self._max_msg, max_frame=self._max_frame,
                      text_ok=self._text_ok)

    def send_messages(self, messages: Sequence[Any]) -> None:
        ws = self._ws
        assert ws is not None
        if ws.state != OPEN:  # the peer or we began closing
            raise (gsp.Closed("connection closed locally") if self._closed else
                   gsp.ConnectionBroken(f"{self.remote_address} is closing the WebSocket"))
        pieces: list[Any] = []
        frames, frame_max = ws.frames, self._tx_frame
        client = ws.client
        k = 0
        for m in messages:
            data = m if type(m) is bytes else message_bytes(m)
            n = len(data)
            if client and n >= _BIG:  # masked into a buffer kept for it, not fresh copies
                if pieces:
                    self._write(pieces)
                self._send_masked(ws, messages, k)
                return
            frames(data, n, pieces, frame_max)
            k += 1
        if pieces or self._tail is not None:
            self._write(pieces)
        self._txbuf = None  # a batch of small messages: the big ones' buffer goes

    def _send_masked(self, ws: Framer, messages: Sequence[Any], start: int) -> None:
        """A client's batch from its first big message on (``messages[start]``): every frame
        (headers and masked payloads) written into one buffer, sent every ``_JOIN_LIMIT`` bytes,
        the buffer used again after each write. A frame of its own fresh object each would cost
        fresh pages per frame (the allocator gives memory of that size back to the kernel when
        freed); and TLS records are filled."""
        buf = self._txbuf
        if buf is None:
            buf = self._txbuf = bytearray(_JOIN_LIMIT)
        view = memoryview(buf)
        cap = len(buf)
        pos = 0
        with self._lock:  # (a frame's bytes may span writes: nothing may come between them)
            for m in messages[start:]:
                data = m if type(m) is bytes else message_bytes(m)
                size = len(data)
                src = memoryview(data)
                frame_max = self._tx_frame or size or 1
                first = OP_BINARY
                for i in range(0, size, frame_max) if size else (0,):
                    n = min(frame_max, size - i)
                    key = ws.mask_key()
                    head = header((0x80 if i + n >= size else 0) | first, n, key)
                    first = OP_CONT
                    if pos + len(head) > cap:
                        self._writev([view[:pos]])
                        pos = 0
                    view[pos:pos + len(head)] = head
                    pos += len(head)
                    j = 0
                    while j < n:
                        take = min(n - j, cap - pos)
                        if not take:
                            self._writev([view[:pos]])
                            pos = 0
                            continue
                        mask_into(view[pos:pos + take], src[i + j:i + j + take], key, j)
                        pos += take
                        j += take
            if pos or self._tail is not None:
                self._writev([view[:pos]])

    def recv_messages(self) -> list[bytes]:
        if self._error is not None:
            raise self._error
        ws = self._ws
        assert ws is not None
        out: list[bytes] = []
        self._reader = gevent.getcurrent()
        try:
            holding = self._holding
            data, self._early = self._early, b""
            while True:
                if data:
                    self._take(ws, data, out)
                    if out:
                        break
                if holding.held:  # mid-message: wait while at max_recv_partial; bound the read
                    holding.before_read()
                room = ws.room()  # a big message's payload: received where it goes
                try:
                    if room is None:
                        data = self._recv(None, ws.read_size(_CHUNK))
                        continue
                    n = self._recv(room)
                finally:
                    holding.reading = False
                room = None
                data = b""
                self._filled(ws, n, out)
                if out:
                    break
        except gsp.GspError as exc:
            if not out:
                raise
            self._error = exc  # deliver what came before the failure first
        finally:
            self._reader = None
        return out

    def read_ready(self, raw: Any) -> list[bytes] | None:
        """One read of what is there, without waiting (see
        :meth:`gsp.transport.ParkingConnection.read_ready`), between frames of an open
        WebSocket only: the messages it completes, control frames answered; an empty list where
        a read would wait (part of a frame held, the peer silent for ``ws_ping_interval``: then
        :meth:`recv_messages` pings it)."""
        ws = self._ws
        if ws is None or self._error is not None or self._early or not ws.between_frames \
                or ws.held or ws.state != OPEN:
            self.between = False
            return []
        every = self._ping_every
        if every is not None and monotonic() - self.heard_at >= every:
            return []  # silent for long enough: recv_messages pings it
        # (between big messages: the next one's header and body in one read, into its buffer)
        room = None if ws.big_buffer is None else ws.room()
        try:
            if room is None:
                data = raw.recv(_CHUNK)
                got = len(data)
            else:
                got = raw.recv_into(room)
        except BlockingIOError:
            self.between = True
            return None
        except OSError as exc:
            raise self._io_error(exc, "recv") from None
        if not got:
            raise self._eof()
        if every is not None:
            self.heard_at = monotonic()
        out: list[bytes] = []
        try:
            if room is None:
                self._take(ws, data, out)
            else:
                self._filled(ws, got, out)
        except gsp.GspError as exc:
            if not out:
                raise
            self._error = exc  # deliver what came before the failure first
        self.between = self._error is None and ws.state == OPEN and not ws.held \
            and ws.between_frames
        return out

    def _take(self, ws: Framer, data: bytes, out: list[bytes]) -> None:
        """Feed ``data`` to the framing: the messages it completes go to ``out`` (before any
        error it raises), control frames are answered."""
        try:
            out += ws.feed(data)
        except FrameError as exc:
            self._fail(exc)
        if ws.controls:
            self._on_controls(ws)
        if ws.error is not None:
            self._fail(ws.error)  # after the messages before it
        self._holding.hold(ws.held)

    def _filled(self, ws: Framer, n: int, out: list[bytes]) -> None:
        """``n`` bytes were received into the framing's room: as :meth:`_take` (between big
        messages, they are the next frame's header and payload, and what follows it).

        Its tail is :meth:`_take`'s, written out in both on purpose: ``_take`` runs for every
        read of small messages, and that tail as a method of its own cost a ws round trip 0.8 %
        more instructions (131,899 -> 133,007, ``tests/tools/work_count.py ws-rt``)."""
        try:
            out += ws.filled(n)
        except FrameError as exc:
            self._fail(exc)
        if ws.controls:
            self._on_controls(ws)
        if ws.error is not None:
            self._fail(ws.error)  # after the messages before it
        self._holding.hold(ws.held)

    def _on_controls(self, ws: Framer) -> None:
        """Control frames: a Ping is answered, a Close answered or ended; Pongs need nothing."""
        controls, ws.controls = ws.controls, []
        for op, payload in controls:
            if op == _frames.OP_PING:
                if ws.state == OPEN:  # closing: no Pong may follow our Close
                    self._send(ws.control(_frames.OP_PONG, payload))
            elif op == _frames.OP_CLOSE:
                try:
                    code, reason = _frames.parse_close(payload)
                except FrameError as exc:
                    self._fail(exc)
                self._peer_closed.set()
                if ws.state == OPEN:  # the peer closes: answer, then go
                    ws.state = REMOTE_CLOSING
                    self._send_close(code)
                    raise gsp.ConnectionBroken(
                        f"{self.remote_address} closed the WebSocket ({code} {reason})")
                ws.state = CLOSED  # the answer to our own close
                raise gsp.Closed("connection closed locally")

    def _fail(self, exc: FrameError) -> None:
        self._send_close(exc.code, exc.reason)
        raise exc.error(f"{self.remote_address}: {exc.reason}; closed with {exc.code}")

    def use_recv_limits(self, limits: RecvLimits) -> None:
        self._holding = Holding(limits, self.remote_address)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._holding.release()
        self.stop_parking()  # before the fd goes: no wake after close
        try:
            ws = self._ws
            if ws is not None and ws.state == OPEN:
                self._send_close(_frames.NORMAL_CLOSURE)
                reader = self._reader
                if reader is not None and reader is not gevent.getcurrent():
                    # Our reader sees the peer's answering close frame; closing TCP after it
                    # ends the WebSocket cleanly on both sides.
                    self._peer_closed.wait(_CLOSE_WAIT)
                elif reader is None and self.nowait_socket is not None:
                    self._await_close_answer(ws)  # a parked pipe: no reader to see it
        finally:
            self._release()
            self.done.set()

    def _await_close_answer(self, ws: Framer) -> None:
        """Read (at most ``_CLOSE_WAIT`` s) until the peer answers our Close; what comes before
        it is dropped (we are closing)."""
        with gevent.Timeout(_CLOSE_WAIT, False):
            try:
                while ws.state != CLOSED:
                    data = self.sock.recv(_CHUNK)
                    if not data:
                        return
                    ws.feed(data)
                    if any(op == _frames.OP_CLOSE for op, _ in ws.controls):
                        ws.state = CLOSED
                        self._peer_closed.set()
                    ws.controls = []
            except (OSError, FrameError):
                pass

    def _release(self) -> None:
        tls_close_notify(self.sock)  # wss: TLS's own end after the WebSocket's; ws: nothing
        try:
            self.sock.close()
        except OSError:
            pass

    def forget(self) -> None:
        """In a child after fork: close this process's copy of the socket only; no close frame
        (the parent still uses the connection)."""
        self._closed = True
        self.stop_parking()
        forget_socket(self.sock)


class WSClientConnection(WSConnection):
    """A dialer's connection: TLS (wss), then the upgrade request, in ``handshake``."""

    def __init__(self, sock: Any, options: Mapping[str, Any], local: str, remote: str, *,
                 url: str, host_header: str, path: str, tls: TLSContextSource | None,
                 server_hostname: str | None, target: str = "") -> None:
        super().__init__(sock, options, local, remote, path)
        self._target = target or path  # the path and the URL's query, as the request sends it
        self._url = url
        self._host_header = host_header
        self._tls = tls
        self._server_hostname = server_hostname

    def _upgrade(self, spec: "ProtocolSpec") -> Framer:
        if self._tls is not None:
            # The CA/CRL/certificate files as they are now (TLSContextSource.get).
            self.sock = tls_wrap(self.sock, self._tls.get(), server_side=False,
                                 server_hostname=self._server_hostname)
            self.properties.update(tls_handshake(self.sock, f"wss to {self.remote_address}"))
        want = subprotocol(spec.peer_name)  # nng: the dialer names the protocol it wants to reach
        hs = H11Handshake(ConnectionType.CLIENT)
        self._send(hs.send(Request(
            host=self._host_header, target=self._target, subprotocols=[want],
            extra_headers=_as_bytes_headers(self._options["ws_request_headers"]))))
        # Split the answer's head off ourselves: bytes behind a 101 are frames (a server may
        # send its first message at once), kept for the connection.
        buf = b""
        while b"\r\n\r\n" not in buf:
            if len(buf) > _MAX_HEAD:
                raise gsp.BadFrame(f"{self._url} answered the upgrade with a head over "
                                   f"{_MAX_HEAD} bytes")
            buf += self._recv()
        head, _, rest = buf.partition(b"\r\n\r\n")
        hs.receive_data(head + b"\r\n\r\n")
        refused: RejectConnection | None = None
        body = b""
        while True:
            for ev in hs.events():
                if isinstance(ev, AcceptConnection):
                    if ev.subprotocol != want:
                        raise gsp.WrongProtocol(
                            f"{self._url} accepted with subprotocol {ev.subprotocol!r}, "
                            f"not {want!r}", expected=spec.peer_number)
                    self.properties["ws_subprotocol"] = want
                    return self._framer(True, rest)
                if isinstance(ev, RejectConnection):
                    refused = ev
                    if not ev.has_body:
                        self._refused(ev.status_code, b"")
                elif isinstance(ev, RejectData) and refused is not None:
                    body += ev.data
                    if ev.body_finished or len(body) > 4096:
                        self._refused(refused.status_code, body)
            hs.receive_data(rest or self._recv())  # a refusal's body, an answer after a 1xx
            rest = b""

    def _refused(self, status: int, body: bytes) -> None:
        why = body[:300].decode("utf-8", "replace").strip()
        raise gsp.UpgradeRefused(f"{self._url} refused the WebSocket upgrade: HTTP {status}"
                                 + (f": {why}" if why else ""), status=status, reason=why)


class RequestHead(NamedTuple):
    """What the HTTP server read of an upgrade request besides wsproto's event."""

    method: str
    headers: list[tuple[str, str]]  # every header, names in lower case, in the order sent
    peer: tuple[str, int]


class WSServerConnection(WSConnection):
    """A listener's connection whose upgrade request was read by the HTTP server; ``handshake``
    answers it (101, or 400/403, or the refusal of the ``ws_authorize`` check) now that the
    socket's protocol is known."""

    def __init__(self, sock: Any, options: Mapping[str, Any], local: str, remote: str,
                 hs: H11Handshake, request: Request, tls_props: Mapping[str, Any],
                 trailing: bytes = b"", *, head: RequestHead, gate: UpgradeGate) -> None:
        path = request.target.split("?", 1)[0]
        super().__init__(sock, options, local, remote, path)
        self._hs = hs
        self._request = request
        self._trailing = trailing
        self._gate = gate
        self.properties.update(tls_props)
        self.properties["ws_request_headers"] = head.headers
        self.properties["ws_target"] = request.target  # the path and its query
        self.properties["ws_origin"] = next((v for k, v in head.headers if k == "origin"), None)
        #: The request as the ws_authorize check and pipe.peer.ws_request see it.
        self.properties["ws_request"] = self._ws_request = WSRequest(
            method=head.method, target=request.target, headers=Headers(head.headers),
            remote_address=remote, local_address=local, peer=head.peer,
            tls=tls_props or None)  # wss: never empty

    def _upgrade(self, spec: "ProtocolSpec") -> Framer:
        refusal = check_upgrade(self._request.subprotocols, spec.name)
        if refusal is not None:
            self._send(http_error(400, refusal))
            raise gsp.WrongProtocol(
                f"refused the WebSocket upgrade from {self.remote_address}: {refusal}")
        refused = self._gate(self._ws_request, spec.name)
        if refused is not None:
            self._send(http_error(refused.status, refused.reason, refused.headers))
            self._refuse(refused)
        want = subprotocol(spec.name)
        self._send(self._hs.send(AcceptConnection(
            subprotocol=want,
            extra_headers=_as_bytes_headers(self._options["ws_response_headers"]))))
        self.properties["ws_subprotocol"] = want
        return self._framer(False, self._trailing)

    def refuse(self, reason: str) -> None:
        """No room for this connection (``max_pipes``): answer its upgrade request
        ``503 Service Unavailable`` with ``Retry-After``, then close. A gsp dialer sees
        :class:`gsp.UpgradeRefused` with status 503 and redials after its backoff. (Once
        upgraded: close code 1013, as every WebSocket here.)"""
        if self._ws is not None:
            super().refuse(reason)
            return
        self._last_word(http_error(503, f"the SP socket is full ({reason}); try again later",
                                   [("Retry-After", "1")]))

    def deny(self, reason: str) -> None:
        """The listener's ``admit`` rule refused this peer: answer its upgrade request
        ``403 Forbidden`` (no word of which rule), then close. A gsp dialer sees
        :class:`gsp.UpgradeRefused` with status 403 and redials after its backoff. (Once
        upgraded, after an SP handshake: close code 1008, Policy Violation.)"""
        if self._ws is not None:
            super().deny(reason)
            return
        self._last_word(http_error(403, "not admitted"))

    def _refuse(self, refusal: Refusal) -> None:
        raise gsp.UpgradeRefused(f"refused the WebSocket upgrade from {self.remote_address}: "
                                 f"{refusal}", status=refusal.status, reason=refusal.reason)


class WSGIConnection(WSConnection):
    """A connection a WSGI server upgraded (101 already sent): only framing is left to do.
    ``release`` gives the socket back to the server that lent it (see gsp_ws.wsgi)."""

    def __init__(self, sock: Any, release: Callable[[], None], options: Mapping[str, Any],
                 local: str, remote: str, request: WSRequest, protocol: str, trailing: bytes,
                 tls_props: Mapping[str, Any]) -> None:
        super().__init__(sock, options, local, remote, request.path)
        self._give_back = release
        self._trailing = trailing
        self.properties.update(tls_props)
        self.properties["ws_request"] = request
        self.properties["ws_request_headers"] = list(request.headers.raw)
        self.properties["ws_target"] = request.target  # the path and its query
        self.properties["ws_origin"] = request.header("origin")
        self.properties["ws_subprotocol"] = subprotocol(protocol)

    def _upgrade(self, spec: "ProtocolSpec") -> Framer:
        return self._framer(False, self._trailing)

    def _end_with(self, code: int, reason: str) -> None:
        """The WSGI server has answered 101 already: a WebSocket even before ``handshake``, so
        ``refuse`` (1013) and ``deny`` (1008) end it with their Close frame either way."""
        if self._ws is not None:
            super()._end_with(code, reason)
            return
        data = Framer(False).close_frame(code, reason)
        assert data is not None
        self._last_word(data)

    def _release(self) -> None:
        self._give_back()
