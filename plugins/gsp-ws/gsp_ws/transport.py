"""The gsp plugin module: ws:// and wss:// (nng-compatible), and ws+wsgi:// for WSGI mounts.

Every ws/wss listener on one host:port shares one HTTP server that routes upgrade requests by
path (an unknown path gets 404). The server reads each request (after TLS, for wss) in a
greenlet of its own under the first listener's ``handshake_timeout``, so a client that stalls
delays nobody; the listener's ``handshake`` then answers it knowing the socket's protocol.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

import gevent
from gevent import socket as gsocket
from gevent.pool import Group
from wsproto.connection import ConnectionType
from wsproto.events import Request
from wsproto.handshake import H11Handshake
from wsproto.utilities import ProtocolError, RemoteProtocolError

import gsp
from gsp.chan import Chan
from gsp.transport import (
    Connection,
    HandshakeRoom,
    SocketDialer,
    TLSContextSource,
    Transport,
    TransportDialer,
    TransportListener,
    bind_stream_socket,
    bytes_received,
    connect_socket,
    forget_socket,
    hostport,
    parse_host_port,
    resolve,
    source_of,
    split_url,
    tls_handshake,
    tls_wrap,
)

from ._conn import RequestHead, WSClientConnection, WSServerConnection
from ._http import WS_OPTIONS, http_error
from .auth import UpgradeGate

_DEFAULT_PORTS = {"ws": 80, "wss": 443}
_BACKLOG = 128  # upgraded connections a listener holds before the core accepts them
_MAX_HEAD = 16384  # bytes of HTTP request head accepted
_TLS_DONE = 4096  # what a finished TLS handshake counts for among upgrades (as on tls+tcp)
_log = logging.getLogger("gsp.listener")


def parse_ws_url(url: str, listening: bool) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path)`` of ``ws[s]://host[:port][/path]``; a dialer's URL may
    have a query too (``/sp?token=abc``: sent in its upgrade request), a listener's may not."""
    scheme, _ = split_url(url)
    if scheme not in _DEFAULT_PORTS:
        raise gsp.InvalidAddress(f"not a ws:// or wss:// URL: {url!r}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise gsp.InvalidAddress(f"bad address in {url!r}: {exc}") from None
    bare = url if listening or not parts.query else urlunsplit(
        (parts.scheme, parts.netloc, parts.path, "", parts.fragment))
    host, port = parse_host_port(bare, listening=listening, default_port=_DEFAULT_PORTS[scheme])
    return scheme, host, port, parts.path or "/"


def _name(scheme: str, addr: Any) -> str:
    return f"{scheme}://{hostport(addr[0], addr[1])}"


def _head(head: bytes, peer: Any) -> RequestHead:
    """The method and every header of a request head h11 has already checked."""
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return RequestHead(lines[0].split(" ", 1)[0], headers, (str(peer[0]), int(peer[1])))


# -- the shared HTTP server ---------------------------------------------------------------------

_servers: dict[tuple[str, int], "_HTTPServer"] = {}


class _HTTPServer:
    """One bound address: accepts, reads upgrade requests, hands them to listeners by path.

    At most ``max_upgrades`` requests are read at once (the ``max_handshakes`` of the listener
    that made the server; 0 = no bound), and ``per_address`` from one source address: at the
    bound it keeps accepting and closes the request that has sent the fewest bytes (then the
    oldest), as gsp's own listeners do (:mod:`gsp.transport.admission`); ``shed`` counts them by
    reason."""

    def __init__(self, scheme: str, host: str, port: int, tls: TLSContextSource | None,
                 timeout: float | None, max_upgrades: int = 0, per_address: int = 0) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.tls = tls
        self.timeout = timeout
        self.max_upgrades = max_upgrades
        self.per_address = per_address
        self._room: HandshakeRoom[_Upgrade] = HandshakeRoom(_Upgrade.progress)
        self.shed = {"full": 0, "address": 0}  # requests closed to make room, by reason
        self.owner: WSListener | None = None  # the listener whose stats count the sheds
        self._sheds = 0  # since the last WARNING
        self._warned = -1e9
        self.routes: dict[str, WSListener] = {}
        self._group = Group()
        self._sock: Any = None
        self._closed = False

    def bind(self) -> None:
        family, addr = resolve(self.host, self.port, True)
        self._sock = bind_stream_socket(
            family, addr, f"listen {self.scheme}://{hostport(self.host, self.port)}")
        self.port = self._sock.getsockname()[1]
        self._group.spawn(self._accept_loop)

    @property
    def upgrading(self) -> int:
        """Requests being read now."""
        return len(self._room)

    def _accept_loop(self) -> None:
        turns = 0
        while not self._closed:
            turns += 1
            if turns % 8 == 0:  # a full backlog accepts without waiting: let the loop poll
                gevent.sleep(0.0001)
            try:
                sock, peer = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                gevent.sleep(0.01)  # e.g. out of fds: back off briefly, keep serving
                continue
            upgrade = _Upgrade(sock)
            room, limit, per_address = self._room, self.max_upgrades, self.per_address
            for victim, reason in room.admit(upgrade, source_of(str(peer[0])), limit,
                                             per_address):
                self._shed(victim, reason)
            self._group.spawn(self._serve_one, upgrade)

    def _shed(self, upgrade: "_Upgrade", reason: str) -> None:
        """Close a request being read to make room, count it and log it (WARNING at most once
        per 10 s, saying how many since; DEBUG in between)."""
        upgrade.close()
        self.shed[reason] += 1
        self._sheds += 1
        now = gevent.get_hub().loop.now()
        level = logging.WARNING if now - self._warned >= 10 else logging.DEBUG
        if _log.isEnabledFor(level):
            bound = ("max_handshakes", self.max_upgrades) if reason == "full" else \
                ("max_handshakes_per_address", self.per_address)
            _log.log(level, "%s://%s: closed an upgrade request being read to make room: at "
                     "%s (%d), it had sent the least (%d bytes); %d so since the last warning",
                     self.scheme,
                     hostport(self.host or "0.0.0.0", self.port), bound[0], bound[1],
                     upgrade.progress(), self._sheds)
        if level == logging.WARNING:
            self._warned, self._sheds = now, 0

    def _serve_one(self, upgrade: "_Upgrade") -> None:
        try:
            self._serve(upgrade)
        finally:
            self._room.discard(upgrade)

    def _serve(self, upgrade: "_Upgrade") -> None:
        sock = upgrade.sock
        upgrade.got = 0  # started: from now on it counts what it reads
        upgrade.tls = self.tls is not None
        try:
            sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, 1)
            local = _name(self.scheme, sock.getsockname())
            remote = _name(self.scheme, sock.getpeername())
            with gevent.Timeout(self.timeout, gsp.Timeout("upgrade request timed out")):
                props: Mapping[str, Any] = {}
                if self.tls is not None:
                    # The files as they are now (the context is rebuilt when they change).
                    sock = upgrade.sock = tls_wrap(sock, self.tls.get(), server_side=True)
                    props = tls_handshake(sock, f"wss from {remote}")
                    upgrade.got, upgrade.tls = _TLS_DONE, False
                # Split the request head off ourselves: bytes behind it (a client that did not
                # wait for the 101) are WebSocket frames, kept for the connection.
                buf = b""
                while b"\r\n\r\n" not in buf:
                    if len(buf) > _MAX_HEAD:
                        sock.sendall(http_error(431, "request head too large"))
                        return
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                    upgrade.got += len(data)
                head, _, trailing = buf.partition(b"\r\n\r\n")
                hs = H11Handshake(ConnectionType.SERVER)
                try:
                    hs.receive_data(head + b"\r\n\r\n")
                except RemoteProtocolError as exc:
                    hint = getattr(exc.event_hint, "status_code", 400)
                    extra = [("Sec-WebSocket-Version", "13")] if hint == 426 else []
                    sock.sendall(http_error(hint, str(exc), extra))
                    return
                except UnicodeDecodeError:  # wsproto decodes some header values as ASCII
                    sock.sendall(http_error(400, "a header value is not ASCII"))
                    return
                request = next((e for e in hs.events() if isinstance(e, Request)), None)
                if request is None:
                    sock.sendall(http_error(400, "not an HTTP/1.1 upgrade request"))
                    return
            path = request.target.split("?", 1)[0]
            lst = self.routes.get(path)
            if lst is None:
                sock.sendall(http_error(404, f"no SP endpoint at {path}"))
                return
            lst.deliver(WSServerConnection(
                sock, lst.options, local, remote, hs, request, props, trailing,
                head=_head(head, sock.getpeername()), gate=lst.gate))
            sock = upgrade.sock = None  # the listener owns it now
        except (gsp.GspError, OSError, ProtocolError):
            pass  # this one connection failed; the server carries on
        finally:
            if sock is not None:
                sock.close()

    def close(self) -> None:
        self._closed = True
        if _servers.get((self.host, self.port)) is self:
            del _servers[(self.host, self.port)]
        if self._sock is not None:
            self._sock.close()
        self._group.kill(block=True)  # requests still being read are dropped with their sockets

    def forget(self) -> None:
        """In a child after fork: close this process's copy of the listening socket only (the
        parent keeps serving); the greenlets reading requests end, closing their copies."""
        self._closed = True
        if _servers.get((self.host, self.port)) is self:
            del _servers[(self.host, self.port)]
        forget_socket(self._sock)
        self._group.kill(block=False)


class _Upgrade:
    """A connection whose upgrade request (and, on wss, TLS handshake) is being read."""

    __slots__ = ("sock", "got", "tls", "_kernel", "_read_at")

    def __init__(self, sock: Any) -> None:
        self.sock: Any = sock  # None once handed to a listener
        #: Bytes of the request read (a finished TLS handshake: _TLS_DONE more); before its
        #: greenlet ran (it had no chance to read yet) it counts as the most advanced.
        self.got = 1 << 62
        self.tls = False  # in its TLS handshake: the kernel counts what came (OpenSSL reads it)
        self._kernel = 0  # the kernel's count, as last read (a system call: at most every 50 ms)
        self._read_at = -1.0

    def progress(self) -> int:
        if self.tls:
            now = time.monotonic()
            if now - self._read_at >= 0.05:
                self._kernel = min(bytes_received(self.sock), _TLS_DONE - 1)
                self._read_at = now
            return self._kernel
        return self.got

    def close(self) -> None:
        sock = self.sock
        if sock is not None:
            sock.close()  # the greenlet reading it gets an error and ends


def _server_for(lst: "WSListener") -> _HTTPServer:
    srv = _servers.get((lst.host, lst.port)) if lst.port else None
    if srv is not None:
        if srv.scheme != lst.scheme:
            raise gsp.AddressInUse(f"listen {lst.url}: {srv.scheme} already serves that address")
        return srv
    srv = _HTTPServer(lst.scheme, lst.host, lst.port, lst.tls, lst.options["handshake_timeout"],
                      lst.options["max_handshakes"], lst.options["max_handshakes_per_address"])
    srv.owner = lst
    srv.bind()
    _servers[(srv.host, srv.port)] = srv
    return srv


# -- ws / wss endpoints -------------------------------------------------------------------------

class RouteListener(TransportListener):
    """A listener fed upgraded connections by a front end (the HTTP server or a WSGI app)."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = options
        self._incoming: Chan[Connection] = Chan(_BACKLOG)
        self._closed = False
        #: Who gets the 101: the page's origin and the ``ws_authorize`` check (gsp_ws.auth).
        self.gate = UpgradeGate(options, url)

    def deliver(self, conn: Connection) -> None:
        """Queue an upgraded connection for :meth:`accept` (closed when the backlog is full)."""
        try:
            self._incoming.send(conn, block=False)
        except (gsp.WouldBlock, gsp.Closed):
            conn.close()  # closed, or the backlog is full: the client will redial

    def accept(self) -> Connection:
        try:
            return self._incoming.recv()
        except gsp.Closed:
            raise gsp.Closed("listener closed") from None
        except BaseException:
            # Killed by close(): an item being handed over went back into the channel.
            if self._closed:
                self._drop_queued()
            raise

    def _drop_queued(self) -> None:
        for conn in self._incoming.drain(1 << 30):
            conn.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._incoming.close()
        self._drop_queued()
        self._unroute()

    def forget(self) -> None:
        """In a child after fork: stop here without touching the parent's connections."""
        self._closed = True
        self._incoming.close()
        for conn in self._incoming.drain(1 << 30):
            conn.forget()
        self._unroute(forget=True)

    def _unroute(self, forget: bool = False) -> None:
        pass


class WSListener(RouteListener):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.scheme, self.host, self.port, self.path = parse_ws_url(url, listening=True)
        self.tls = (TLSContextSource(options, server=True, url=url)
                    if self.scheme == "wss" else None)
        self._server: _HTTPServer | None = None

    def bind(self) -> None:
        srv = _server_for(self)
        if self.path in srv.routes:
            raise gsp.AddressInUse(f"listen {self.url}: another listener serves that path")
        srv.routes[self.path] = self
        self._server = srv
        self.url = f"{self.scheme}://{hostport(self.host or '0.0.0.0', srv.port)}{self.path}"
        self.gate.where = self.url
        if srv.tls is not None and srv.tls is self.tls:
            srv.tls.url = self.url  # the bound port, for the log

    def handshakes_shed(self) -> dict[str, int]:
        """Upgrade requests the HTTP server closed to make room, by reason, for the listener
        that made it (its ``max_handshakes``): counted in that listener's stats."""
        srv = self._server
        return dict(srv.shed) if srv is not None and srv.owner is self else {}

    def reload(self) -> None:
        # The server's context: the first wss listener's on this address serves them all.
        srv = self._server
        tls = srv.tls if srv is not None else self.tls
        if tls is not None:
            tls.reload()

    def _unroute(self, forget: bool = False) -> None:
        srv, self._server = self._server, None
        if srv is not None and srv.routes.get(self.path) is self:
            del srv.routes[self.path]
            if not srv.routes:
                srv.forget() if forget else srv.close()


class WSDialer(SocketDialer):
    """Connects a tcp socket (as :class:`gsp.transport.SocketDialer`, which aborts it on
    ``close``), then makes it a ws client connection: the upgrade (after TLS, for wss) is its
    handshake."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.scheme, self.host, self.port, self.path = parse_ws_url(url, listening=False)
        query = urlsplit(url).query
        #: The upgrade request's target: the path and the URL's query (``/sp?token=abc``).
        self.target = self.path + ("?" + query if query else "")
        self.tls = (TLSContextSource(options, server=False, url=url)
                    if self.scheme == "wss" else None)
        self.server_hostname = options["tls_server_name"] or self.host

    def connect(self) -> Any:
        family, addr = resolve(self.host, self.port, False)
        return connect_socket(self.url, family, addr, park=self.park_connecting)

    def configure(self, sock: Any) -> None:
        sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, 1)

    def address_name(self, addr: Any) -> str:
        return _name(self.scheme, addr)

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return WSClientConnection(
            sock, self.options, local, remote,
            url=self.url, host_header=hostport(self.host, self.port), path=self.path,
            tls=self.tls, server_hostname=self.server_hostname, target=self.target)

    def reload(self) -> None:
        if self.tls is not None:
            self.tls.reload()


class WSTransport(Transport):
    schemes = ("ws", "wss")
    options = WS_OPTIONS
    listener_class = WSListener
    dialer_class = WSDialer

    def free_url(self, scheme: str, directory: str | None = None) -> str:
        """For ``gsp.testing.free_url`` (the ``gsp_free_url`` fixture): a URL on 127.0.0.1 that
        nothing listens on yet."""
        from gsp.testing import free_port

        return f"{scheme}://127.0.0.1:{free_port()}/sp"


# -- ws+wsgi: a path of a WSGI app (see gsp_ws.wsgi) ------------------------------------------

class WSGIRouteListener(RouteListener):
    """Listens at ``ws+wsgi://<app name>/<path>``: upgrades arrive through the WSGI app."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        _, rest = split_url(url)
        name, slash, path = rest.partition("/")
        if not name or not slash:
            raise gsp.InvalidAddress(f"{url!r}: expected ws+wsgi://<app>/<path>; "
                                     "use gsp_ws.wsgi.mount() rather than this URL")
        self.app_name = name
        self.path = "/" + path
        self.protocol: str | None = None  # set by SPWebSocketApp.mount()
        self._app: Any = None

    def bind(self) -> None:
        from .wsgi import find_app

        app = find_app(self.app_name)
        if app is None:
            raise gsp.InvalidAddress(f"{self.url!r}: no SPWebSocketApp named {self.app_name!r}")
        app.add_route(self.path, self)
        self._app = app

    def keep_after_fork(self) -> bool:
        """In a child after fork the route is the child's own (its copy of the app routes to
        it), so the mount serves on there; upgrades queued in the parent are the parent's."""
        queued, self._incoming = self._incoming, Chan(_BACKLOG)
        for conn in queued.drain(1 << 30):
            conn.forget()
        return True

    def _unroute(self, forget: bool = False) -> None:
        app, self._app = self._app, None
        if app is not None:
            app.remove_route(self.path, self)


class WSGITransport(Transport):
    schemes = ("ws+wsgi",)
    options = WS_OPTIONS
    listener_class = WSGIRouteListener

    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        raise gsp.InvalidAddress(f"cannot dial {url!r}: ws+wsgi is listen-only; dial the WSGI "
                                 "server's ws:// URL instead")


@gsp.hookimpl
def gsp_transports() -> list[Transport]:
    return [WSTransport(), WSGITransport()]
