"""SP over WebSocket connections (RFC 6455 framing by wsproto).

nng's mapping: no SP handshake and no length prefix; one SP message (header+body) is one binary
WebSocket message. The protocol check is the HTTP upgrade's subprotocol ``<name>.sp.nanomsg.org``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import gevent
from gevent.event import Event
from gevent.lock import Semaphore
from wsproto.connection import Connection as WSProto
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
)
from wsproto.frame_protocol import CloseReason
from wsproto.handshake import H11Handshake
from wsproto.utilities import ProtocolError

import gsp
from gsp.message import message_bytes
from gsp.transport import (
    Connection,
    Holding,
    RecvLimits,
    TLSContextSource,
    forget_socket,
    tls_handshake,
    tls_refusal,
    tls_wrap,
)

from ._http import _as_bytes_headers, check_upgrade, http_error, subprotocol
from .auth import Authorize, Refusal, UpgradeRequest

if TYPE_CHECKING:
    from gsp.protocol import ProtocolSpec

_CHUNK = 256 * 1024
_CLOSE_WAIT = 0.5  # seconds a closing side spends on the close handshake at most


# -- connections ------------------------------------------------------------------------------

class WSConnection(Connection):
    """One WebSocket carrying SP messages; subclasses do the upgrade in ``_upgrade``."""

    def __init__(self, sock: Any, options: Mapping[str, Any], local: str, remote: str,
                 path: str) -> None:
        self.sock = sock
        self.local_address = local
        self.remote_address = remote
        self.properties: dict[str, Any] = {"ws_path": path}
        self._options = options
        self._max_msg: int = options["recv_max_size"]
        self._max_frame: int = options["ws_recv_frame_max"]
        self._tx_frame: int = options["ws_send_frame_max"]
        self._text_ok: bool = options["ws_recv_text"]
        self._ping_every: float | None = options["ws_ping_interval"]
        self._ping_wait: float = options["ws_ping_timeout"]
        self._ws: WSProto | None = None
        self._lock = Semaphore()  # one writer at a time: frames must not interleave
        self._closed = False
        self._peer_closed = Event()
        self._reader: Any = None  # the greenlet inside recv_messages, if any
        self._parts: list[bytes] = []
        self._msg_len = 0
        self._frame_len = 0
        self._error: gsp.GspError | None = None
        self._holding = Holding(None, remote)  # see use_recv_limits
        #: Set once closed (the WSGI request greenlet waits on it).
        self.done = Event()

    def refuse(self, reason: str) -> None:
        """No room for this connection (``max_pipes``) once it is a WebSocket: end it with close
        code 1013 (Try Again Later), then close."""
        if self._ws is not None and not self._closed:
            self._closed = True
            try:
                self._send_close(CloseReason.TRY_AGAIN_LATER, f"SP socket full: {reason}")
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

    def _recv(self) -> bytes:
        try:
            data = self._recv_alive()
        except gsp.GspError:  # gsp.Timeout is an OSError too: keep it as it is
            raise
        except OSError as exc:
            raise self._io_error(exc, "recv") from None
        if not data:
            if self._closed:
                raise gsp.Closed("connection closed locally")
            raise gsp.ConnectionBroken(f"{self.remote_address} closed the connection")
        return data

    def _recv_alive(self) -> bytes:
        """``sock.recv``, checking the peer is alive once open: after ``ws_ping_interval`` s of
        silence it gets a Ping, and if nothing at all arrives ``ws_ping_timeout`` s after that,
        the pipe ends (a peer gone without a FIN, a connection black-holed on the way)."""
        every = self._ping_every
        if every is None or self._ws is None or self._ws.state is not ConnectionState.OPEN:
            data: bytes = self.sock.recv(_CHUNK)
            return data
        pinged = False
        while True:
            timer = gevent.Timeout(self._ping_wait if pinged else every)
            timer.start()
            try:
                data = self.sock.recv(_CHUNK)
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
            if ws.state is not ConnectionState.OPEN:
                return self.sock.recv(_CHUNK)  # type: ignore[no-any-return]  # closing: no Ping
            self._send(ws.send(Ping(b"gsp")))
            pinged = True

    def _send(self, data: bytes | bytearray) -> None:
        with self._lock:
            try:
                self.sock.sendall(data)
            except gsp.GspError:
                raise
            except OSError as exc:
                raise self._io_error(exc, "send") from None

    def _send_close(self, code: int, reason: str | None = None) -> None:
        """Best effort and bounded: a close frame must never hang whoever is closing."""
        ws = self._ws
        if ws is None or ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return
        data = ws.send(CloseConnection(code=code, reason=reason))
        with gevent.Timeout(_CLOSE_WAIT, False):
            with self._lock:
                try:
                    self.sock.sendall(data)
                except OSError:
                    pass

    # -- Connection --------------------------------------------------------------------------------
    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        exc = gsp.Timeout(f"WebSocket handshake with {self.remote_address} timed out")
        with gevent.Timeout(timeout, exc):
            try:
                self._ws = self._upgrade(spec)
            except ProtocolError as err:
                raise gsp.BadFrame(f"bad HTTP upgrade with {self.remote_address}: {err}") from None
            except UnicodeDecodeError:  # wsproto decodes some header values as ASCII
                raise gsp.BadFrame(f"bad HTTP upgrade with {self.remote_address}: a header "
                                   "value is not ASCII") from None
        if self._closed:
            raise gsp.Closed("connection closed locally")

    def _upgrade(self, spec: "ProtocolSpec") -> WSProto:
        raise NotImplementedError

    def send_messages(self, messages: Sequence[Any]) -> None:
        ws = self._ws
        assert ws is not None
        out = bytearray()
        try:
            for m in messages:
                out += self._frames(ws, message_bytes(m))
        except ProtocolError:  # not OPEN any more: the peer or we began closing
            raise (gsp.Closed("connection closed locally") if self._closed else
                   gsp.ConnectionBroken(f"{self.remote_address} is closing the WebSocket")) from None
        self._send(out)

    def _frames(self, ws: WSProto, payload: bytes) -> bytes:
        n = self._tx_frame
        if not n or len(payload) <= n:
            return ws.send(BytesMessage(data=payload))
        view = memoryview(payload)  # like nng, cut big messages into frames the peer accepts
        size = len(payload)
        # wsproto's hints say bytes, but it takes any buffer: slicing the view copies nothing.
        return b"".join(ws.send(BytesMessage(data=view[i:i + n],  # type: ignore[arg-type]
                                             message_finished=i + n >= size))
                        for i in range(0, size, n))

    def recv_messages(self) -> list[bytes]:
        if self._error is not None:
            raise self._error
        ws = self._ws
        assert ws is not None
        out: list[bytes] = []
        self._reader = gevent.getcurrent()
        try:
            holding = self._holding
            while True:
                # Events first: bytes that came with the upgrade (or a previous read) may
                # already hold whole messages.
                for ev in ws.events():
                    self._on_event(ws, ev, out)
                holding.hold(self._msg_len)  # wsproto hands on partial payloads as they come
                if out:
                    break
                if holding.held:  # mid-message: wait while at recv_partial_max; bound the read
                    holding.before_read()
                try:
                    ws.receive_data(self._recv())
                finally:
                    holding.reading = False
        except gsp.GspError as exc:
            if not out:
                raise
            self._error = exc  # deliver what came before the failure first
        finally:
            self._reader = None
        return out

    def _on_event(self, ws: WSProto, ev: Any, out: list[bytes]) -> None:
        if isinstance(ev, Message):
            data = ev.data
            if isinstance(data, str):
                if not self._text_ok:
                    self._fail(CloseReason.UNSUPPORTED_DATA, "text frames are not accepted",
                               gsp.BadFrame)
                data = data.encode()
            self._frame_len += len(data)
            if self._max_frame and self._frame_len > self._max_frame:
                self._fail(CloseReason.MESSAGE_TOO_BIG,
                           f"frame over ws_recv_frame_max ({self._max_frame})", gsp.MessageTooLarge)
            if ev.frame_finished:
                self._frame_len = 0
            self._msg_len += len(data)
            if self._max_msg and self._msg_len > self._max_msg:
                self._fail(CloseReason.MESSAGE_TOO_BIG,
                           f"message over recv_max_size ({self._max_msg})", gsp.MessageTooLarge)
            self._parts.append(data)
            if ev.message_finished:
                parts = self._parts
                out.append(parts[0] if len(parts) == 1 else b"".join(parts))
                self._parts = []
                self._msg_len = 0
        else:
            self._on_control(ws, ev)

    def _on_control(self, ws: WSProto, ev: Any) -> None:
        """A control frame: a Ping is answered, a Close answered or ended; Pongs need nothing."""
        if isinstance(ev, Ping):
            if ws.state is ConnectionState.OPEN:  # closing: no Pong may follow our Close
                self._send(ws.send(ev.response()))
        elif isinstance(ev, CloseConnection):
            self._peer_closed.set()
            if ws.state is ConnectionState.REMOTE_CLOSING:  # the peer closes: answer, then go
                self._send_close(ev.code)
                raise gsp.ConnectionBroken(
                    f"{self.remote_address} closed the WebSocket ({ev.code} {ev.reason or ''})")
            if ws.state is ConnectionState.CLOSED:  # the answer to our own close
                raise gsp.Closed("connection closed locally")
            self._fail(ev.code, ev.reason or "protocol error", gsp.BadFrame)  # wsproto's verdict

    def _fail(self, code: int, reason: str, error: type[gsp.GspError]) -> None:
        self._send_close(code, reason)
        raise error(f"{self.remote_address}: {reason}; closed with {int(code)}")

    def use_recv_limits(self, limits: RecvLimits) -> None:
        self._holding = Holding(limits, self.remote_address)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._holding.release()
        try:
            ws = self._ws
            if ws is not None and ws.state is ConnectionState.OPEN:
                self._send_close(CloseReason.NORMAL_CLOSURE)
                reader = self._reader
                if reader is not None and reader is not gevent.getcurrent():
                    # Our reader sees the peer's answering close frame; closing TCP after it
                    # ends the WebSocket cleanly on both sides.
                    self._peer_closed.wait(_CLOSE_WAIT)
        finally:
            self._release()
            self.done.set()

    def _release(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def forget(self) -> None:
        """In a child after fork: close this process's copy of the socket only; no close frame
        (the parent still uses the connection)."""
        self._closed = True
        forget_socket(self.sock)


class WSClientConnection(WSConnection):
    """A dialer's connection: TLS (wss), then the upgrade request, in ``handshake``."""

    def __init__(self, sock: Any, options: Mapping[str, Any], local: str, remote: str, *,
                 url: str, host_header: str, path: str, tls: TLSContextSource | None,
                 server_hostname: str | None) -> None:
        super().__init__(sock, options, local, remote, path)
        self._url = url
        self._host_header = host_header
        self._tls = tls
        self._server_hostname = server_hostname

    def _upgrade(self, spec: "ProtocolSpec") -> WSProto:
        if self._tls is not None:
            # The CA/CRL/certificate files as they are now (TLSContextSource.get).
            self.sock = tls_wrap(self.sock, self._tls.get(), server_side=False,
                                 server_hostname=self._server_hostname)
            self.properties.update(tls_handshake(self.sock, f"wss to {self.remote_address}"))
        want = subprotocol(spec.peer_name)  # nng: the dialer names the protocol it wants to reach
        hs = H11Handshake(ConnectionType.CLIENT)
        self._send(hs.send(Request(
            host=self._host_header, target=self.properties["ws_path"], subprotocols=[want],
            extra_headers=_as_bytes_headers(self._options["ws_request_headers"]))))
        refused: RejectConnection | None = None
        body = b""
        while True:
            hs.receive_data(self._recv())
            for ev in hs.events():
                if isinstance(ev, AcceptConnection):
                    if ev.subprotocol != want:
                        raise gsp.WrongProtocol(
                            f"{self._url} accepted with subprotocol {ev.subprotocol!r}, "
                            f"not {want!r}", expected=spec.peer_number)
                    self.properties["ws_subprotocol"] = want
                    conn = hs.connection
                    assert conn is not None
                    return conn
                if isinstance(ev, RejectConnection):
                    refused = ev
                    if not ev.has_body:
                        self._refused(ev.status_code, b"")
                elif isinstance(ev, RejectData) and refused is not None:
                    body += ev.data
                    if ev.body_finished or len(body) > 4096:
                        self._refused(refused.status_code, body)

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
                 trailing: bytes = b"", *, head: RequestHead, authorize: Authorize) -> None:
        path = request.target.split("?", 1)[0]
        super().__init__(sock, options, local, remote, path)
        self._hs = hs
        self._request = request
        self._trailing = trailing
        self._head = head
        self._authorize = authorize
        self._tls_props = tls_props
        self.properties.update(tls_props)
        self.properties["ws_request_headers"] = head.headers
        self.properties["ws_origin"] = next((v for k, v in head.headers if k == "origin"), None)

    def _upgrade_request(self) -> UpgradeRequest:
        return UpgradeRequest(
            method=self._head.method, target=self._request.target, headers=self._head.headers,
            remote_address=self.remote_address, local_address=self.local_address,
            peer=self._head.peer, tls=self._tls_props or None)  # wss: never empty

    def _upgrade(self, spec: "ProtocolSpec") -> WSProto:
        refusal = check_upgrade(self._request.subprotocols, self.properties["ws_origin"],
                                spec.name, self._options)
        if refusal is not None:
            status, reason = refusal
            self._send(http_error(status, reason))
            if status == 400:
                raise gsp.WrongProtocol(
                    f"refused the WebSocket upgrade from {self.remote_address}: {reason}")
            self._refuse(Refusal(status, reason))
        refused = self._authorize(self._upgrade_request, spec.name)
        if refused is not None:
            self._send(http_error(refused.status, refused.reason, refused.headers))
            self._refuse(refused)
        want = subprotocol(spec.name)
        self._send(self._hs.send(AcceptConnection(
            subprotocol=want,
            extra_headers=_as_bytes_headers(self._options["ws_response_headers"]))))
        self.properties["ws_subprotocol"] = want
        conn = self._hs.connection
        assert conn is not None
        if self._trailing:
            conn.receive_data(self._trailing)
        return conn

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

    def _refuse(self, refusal: Refusal) -> None:
        raise gsp.UpgradeRefused(f"refused the WebSocket upgrade from {self.remote_address}: "
                                 f"{refusal}", status=refusal.status, reason=refusal.reason)


class WSGIConnection(WSConnection):
    """A connection a WSGI server upgraded (101 already sent): only framing is left to do.
    ``release`` gives the socket back to the server that lent it (see gsp_ws.wsgi)."""

    def __init__(self, sock: Any, release: Callable[[], None], options: Mapping[str, Any],
                 local: str, remote: str, path: str, headers: list[tuple[str, str]],
                 protocol: str, trailing: bytes, tls_props: Mapping[str, Any]) -> None:
        super().__init__(sock, options, local, remote, path)
        self._give_back = release
        self._trailing = trailing
        self.properties.update(tls_props)
        self.properties["ws_request_headers"] = headers
        self.properties["ws_origin"] = next((v for k, v in headers if k == "origin"), None)
        self.properties["ws_subprotocol"] = subprotocol(protocol)

    def _upgrade(self, spec: "ProtocolSpec") -> WSProto:
        return WSProto(ConnectionType.SERVER, trailing_data=self._trailing)

    def refuse(self, reason: str) -> None:
        """No room for this connection (``max_pipes``): the WSGI server has answered 101
        already, so end the WebSocket with close code 1013 (Try Again Later), then close."""
        if self._ws is not None:
            super().refuse(reason)
            return
        ws = WSProto(ConnectionType.SERVER)
        self._last_word(ws.send(CloseConnection(code=CloseReason.TRY_AGAIN_LATER,
                                                reason=f"SP socket full: {reason}")))

    def _release(self) -> None:
        self._give_back()
