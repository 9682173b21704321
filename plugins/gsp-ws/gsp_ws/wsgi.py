"""SP over WebSocket at a path of a WSGI app served by a gevent WSGI server.

::

    app = SPWebSocketApp(my_wsgi_app)      # everything else still goes to my_wsgi_app
    app.mount(rep_socket, "/sp")           # rep_socket gets a listener: ws://<server>/sp
    WSGIServer(("0.0.0.0", 8080), app).serve_forever()

or ``app = mount(rep_socket, my_wsgi_app, "/sp")``. The socket comes first in both (as in every
call of gsp that takes a socket); the function returns the app to serve, the method the
:class:`gsp.Listener` (``close()`` unmounts). Any protocol works; both take the ws listener
options (``ws_origins``, ``ws_response_headers``, ``recv_max_size``, ...).

A mount serves the pages of its own origin: an upgrade request whose ``Origin`` is another
site's gets 403 unless ``ws_origins`` names it (clients that send no Origin, such as gsp, nng
and pynng, are not browsers and are not asked).

The mount also serves the browser SP client, the ES module ``gsp.js`` shipped in this package,
at ``GET <path>/gsp.js`` (``/sp/gsp.js`` above); ``mount(..., serve_js=False)`` turns it off
(docs/browsers.md).

The servers that carry it (each has a small adapter below that knows how to take the
connection over; the one to use is chosen from the request's environ):

- ``gevent.pywsgi.WSGIServer`` (HTTP or HTTPS, with or without monkey-patching) and gunicorn
  ``-k gevent_pywsgi``: pywsgi hands its buffered reader of the connection to the app as
  ``environ["wsgi.input"]``;
- gunicorn ``-k gevent``: the worker puts the connection's socket in the environ
  (``gunicorn.socket``) and its parser's read-ahead is taken with it;
- uWSGI ``--gevent N`` with ``--http-socket`` (or behind its ``--http`` router with
  ``--http-websockets``): the connection's descriptor is ``uwsgi.connection_fd()``.

How the upgrade works: the app checks the request, answers 101 through ``start_response`` (the
server writes the head; none adds body framing to a 101), takes the socket over and parks the
request's greenlet until the SP pipe closes, so the server never reads or writes the socket
meanwhile. Bytes the server read past the request head (a client that did not wait for the 101,
against RFC 6455) go to the WebSocket first, except under uWSGI, which keeps them out of reach.
When the pipe ends the connection goes back to the server closed.

A server that cannot carry it is refused when the socket is mounted, not at the first upgrade:
mounting raises :class:`gsp.NotSupported` under gunicorn with a worker that is not gevent's
(``sync``, ``gthread``, ...) and under uWSGI without ``--gevent``, with ``--https-socket``
(uWSGI keeps that connection's TLS to itself) or with its ``--http`` router but not
``--http-websockets`` (the router would answer 101 and then pass no frames on). Any other
server is told at its first upgrade request (one ERROR log line; such requests get a 500 naming
the servers that work).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import typing
import warnings
import weakref
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

from gevent import socket as gsocket
from wsproto.utilities import generate_accept_token

import gsp
from gsp.transport import Headers, WSRequest, tls_properties

from ._conn import WSConnection, WSGIConnection
from ._http import check_upgrade, status_line, subprotocol
from .auth import UpgradeGate
from .js import serve_client


class MountRoute(typing.Protocol):
    """A mounted path's listener, as the app sees it (``gsp_ws.transport.WSGIRouteListener``):
    the subprotocol it answers to, its options, and where an upgraded connection goes."""

    protocol: str | None
    options: Mapping[str, Any]
    gate: UpgradeGate

    def deliver(self, conn: WSConnection) -> None: ...

__all__ = ["SPWebSocketApp", "mount"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

log = logging.getLogger("gsp.listener")

_apps: "weakref.WeakValueDictionary[str, SPWebSocketApp]" = weakref.WeakValueDictionary()
_ids = itertools.count(1)
_WORKS_ON = ("gevent.pywsgi.WSGIServer, gunicorn -k gevent or -k gevent_pywsgi, "
             "uWSGI --gevent N with --http-socket (or --http and --http-websockets)")


def find_app(name: str) -> "SPWebSocketApp | None":
    return _apps.get(name)


def _not_found(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
    return [b"not found\n"]


class SPWebSocketApp:
    """WSGI middleware: WebSocket upgrades at mounted paths become SP pipes; the rest goes to
    ``app`` (default: 404)."""

    def __init__(self, app: WSGIApp | None = None) -> None:
        self.app: WSGIApp = app if app is not None else _not_found
        self.name = f"app{next(_ids)}"
        self._routes: dict[str, MountRoute] = {}
        self._client_js: dict[str, str] = {}  # "<path>/gsp.js" -> the mount path serving it
        self._warned = False
        _apps[self.name] = self

    def mount(self, sock: gsp.Socket, path: str, *, serve_js: bool = True,
              **options: Any) -> gsp.Listener:
        """Give ``sock`` a listener at ``path``; ``listener.close()`` unmounts it. With
        ``serve_js`` (the default) ``GET <path>/gsp.js`` answers the browser client module.
        ``options`` are the ws listener options (``ws_origins``: the other sites whose pages
        may connect).

        Raises :class:`gsp.NotSupported` when the process is a WSGI server that cannot carry
        WebSocket pipes (see the module's doc)."""
        sock, path = _socket_first("app.mount(sock, path)", sock, path)
        if not isinstance(path, str) or not path.startswith("/") or "?" in path:
            raise gsp.InvalidAddress(f"a mount path starts with '/' and has no query: {path!r}")
        refusal = _startup_refusal()
        if refusal is not None:
            raise gsp.NotSupported(f"cannot mount a WebSocket SP endpoint at {path}: {refusal}")
        lst = sock.listen(f"ws+wsgi://{self.name}{path}", **options)
        self._routes[path].protocol = sock.protocol  # the subprotocol this path answers to
        if serve_js:
            self._client_js[path.rstrip("/") + "/gsp.js"] = path
        return lst

    def add_route(self, path: str, lst: "MountRoute") -> None:
        """Route upgrades to ``path`` to ``lst`` (a ``ws+wsgi://`` listener binding: use
        :meth:`mount`). :class:`gsp.AddressInUse` when ``path`` is routed already."""
        if path in self._routes:
            raise gsp.AddressInUse(f"{path} is already mounted on this app")
        self._routes[path] = lst

    def remove_route(self, path: str, lst: "MountRoute") -> None:
        """Stop routing ``path`` to ``lst`` (its listener closed), if it still does."""
        if self._routes.get(path) is lst:
            del self._routes[path]
            self._client_js = {k: v for k, v in self._client_js.items() if v != path}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = self._routes.get(environ.get("PATH_INFO") or "/")
        if route is None:
            if (environ.get("PATH_INFO") or "/") in self._client_js:
                return serve_client(environ, start_response)
            return self.app(environ, start_response)
        return _upgrade(self, route, environ, start_response)


def mount(sock: gsp.Socket, app: WSGIApp | None, path: str, *, serve_js: bool = True,
          **options: Any) -> SPWebSocketApp:
    """Mount ``sock`` at ``path`` of ``app``; serve the returned app instead of ``app``
    (``serve_js``: also answer ``GET <path>/gsp.js`` with the browser client; ``options``: the
    ws listener options, as :meth:`SPWebSocketApp.mount`).

    Raises :class:`gsp.NotSupported` when the process is a WSGI server that cannot carry
    WebSocket pipes (see the module's doc)."""
    if not isinstance(sock, gsp.Socket):
        raise TypeError(f"mount(sock, app, path) takes the gsp socket first, not {sock!r}: "
                        f"{_CALLS}")
    if not isinstance(path, str):
        raise TypeError(f"mount(sock, app, path) takes the mount path third (a str such as "
                        f"'/sp'), not {path!r}: {_CALLS}")
    if isinstance(app, (str, gsp.Socket)) or (app is not None and not callable(app)):
        raise TypeError(f"mount(sock, app, path) takes the WSGI app second (or None), not "
                        f"{app!r}: {_CALLS}")
    sp_app = app if isinstance(app, SPWebSocketApp) else SPWebSocketApp(app)
    sp_app.mount(sock, path, serve_js=serve_js, **options)
    return sp_app


_CALLS = ("the calls are mount(sock, app, '/sp') (returns the app to serve) and "
          "app.mount(sock, '/sp') (returns the listener)")


def _socket_first(call: str, sock: Any, path: Any) -> tuple[gsp.Socket, str]:
    """``(sock, path)`` of a call written socket first; the old order (path, socket) still
    works for one minor version, with a DeprecationWarning."""
    if isinstance(sock, str) and isinstance(path, gsp.Socket):
        warnings.warn(f"{call} takes the socket first now: app.mount({sock!r}, sock) is "
                      f"app.mount(sock, {sock!r}); the old order goes in the next minor "
                      "version", DeprecationWarning, stacklevel=3)
        return path, sock
    if not isinstance(sock, gsp.Socket):
        raise TypeError(f"{call} takes the gsp socket first, not {sock!r}: {_CALLS}")
    return sock, path


def _refuse(start_response: Callable[..., Any], status: int, text: str,
            headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(status_line(status), [
        ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
        *headers])
    return [body]


# -- the servers: how each lets the app take a connection over --------------------------------

class _Taken(NamedTuple):
    sock: Any  # the connection's socket (a gevent socket)
    trailing: bytes  # bytes the server read past the request head
    release: Callable[[], None]  # gives the connection back to the server, closed


class _Server:
    """One kind of WSGI server. ``refusal`` runs before the 101 (a reason to answer 500
    instead, or None); ``take`` after the 101 has been written."""

    def serves(self, environ: dict[str, Any]) -> bool:
        raise NotImplementedError

    def refusal(self, environ: dict[str, Any]) -> str | None:
        return None

    def socket(self, environ: dict[str, Any]) -> Any:
        """The connection's socket before the upgrade, where the server shows it (for the TLS
        properties of a ``ws_authorize`` request), else None."""
        return None

    def take(self, environ: dict[str, Any]) -> _Taken:
        raise NotImplementedError


def _cooperative(sock: Any) -> bool:
    # A stdlib socket (a server that is not running on gevent, or a stdlib ssl.SSLSocket given
    # to pywsgi without monkey-patching) blocks the whole process on every read; gevent's
    # sockets (and patched ones) do not.
    return isinstance(sock, gsocket.socket)


def _quietly(*calls: Callable[[], Any]) -> None:
    for call in calls:
        try:
            call()
        except (OSError, ValueError):
            pass


class _PyWSGI(_Server):
    """gevent.pywsgi (also gunicorn -k gevent_pywsgi): for an upgrade request pywsgi passes its
    buffered reader of the connection as ``wsgi.input`` (other requests get an ``Input``
    wrapping it as ``.rfile``)."""

    @staticmethod
    def _reader(environ: dict[str, Any]) -> tuple[Any, Any]:
        stream = environ.get("wsgi.input")
        for reader in (stream, getattr(stream, "rfile", None)):
            sock = getattr(getattr(reader, "raw", None), "_sock", None)
            if sock is not None and hasattr(sock, "recv"):
                return sock, reader
        return None, None

    def serves(self, environ: dict[str, Any]) -> bool:
        return self._reader(environ)[0] is not None

    def socket(self, environ: dict[str, Any]) -> Any:
        return self._reader(environ)[0]

    def refusal(self, environ: dict[str, Any]) -> str | None:
        if not _cooperative(self._reader(environ)[0]):
            return ("the connection's socket is not a gevent socket; give WSGIServer a "
                    "gevent.ssl.SSLContext (or monkey-patch) for HTTPS")
        return None

    def take(self, environ: dict[str, Any]) -> _Taken:
        sock, rfile = self._reader(environ)
        # The reader keeps a reference on the socket: close it first, or closing the socket
        # would leave the descriptor open (and a blocked recv would never wake).
        return _Taken(sock, self._buffered(sock, rfile), lambda: _quietly(rfile.close, sock.close))

    @staticmethod
    def _buffered(sock: Any, rfile: Any) -> bytes:
        """What pywsgi's reader already holds past the request head, read without blocking."""
        timeout = sock.gettimeout()
        sock.settimeout(0)
        try:
            data = rfile.peek(1)
            return rfile.read(len(data)) if data else b""
        except OSError:  # nothing buffered and nothing readable now (TLS says "want read")
            return b""
        finally:
            sock.settimeout(timeout)


class _Gunicorn(_Server):
    """gunicorn -k gevent: ``gunicorn.socket`` is the connection; what its parser read past the
    head waits in the request body's unreader. At the end the socket is shut down rather than
    closed: gunicorn then reads end-of-stream where it would look for a next request, and
    closes the connection itself."""

    def serves(self, environ: dict[str, Any]) -> bool:
        return "gunicorn.socket" in environ

    def socket(self, environ: dict[str, Any]) -> Any:
        return environ["gunicorn.socket"]

    def refusal(self, environ: dict[str, Any]) -> str | None:
        if not _cooperative(environ["gunicorn.socket"]):
            return "this gunicorn worker does not run on gevent; use -k gevent"
        return None

    def take(self, environ: dict[str, Any]) -> _Taken:
        sock = environ["gunicorn.socket"]
        unreader: Any = getattr(getattr(environ.get("wsgi.input"), "reader", None), "unreader",
                                None)
        trailing = b""
        if hasattr(unreader, "take_buffered"):
            trailing = unreader.take_buffered()
        elif hasattr(unreader, "buf"):  # older gunicorn: the same buffer, taken by hand
            trailing, unreader.buf = unreader.buf.getvalue(), type(unreader.buf)()
        return _Taken(sock, trailing, lambda: _quietly(lambda: sock.shutdown(gsocket.SHUT_RDWR)))


class _UWSGI(_Server):
    """uWSGI (--gevent): the connection's descriptor is ``uwsgi.connection_fd()``. The pipe
    works on a duplicate of it (uWSGI closes its own when the request ends). Behind its --http
    router the connection's peer is the router."""

    def serves(self, environ: dict[str, Any]) -> bool:
        return "uwsgi.version" in environ and sys.modules.get("uwsgi") is not None

    def take(self, environ: dict[str, Any]) -> _Taken:
        fd = os.dup(sys.modules["uwsgi"].connection_fd())
        sock = gsocket.socket(fileno=fd)

        def release() -> None:
            _quietly(lambda: sock.shutdown(gsocket.SHUT_RDWR), sock.close)

        return _Taken(sock, b"", release)


_SERVERS: tuple[_Server, ...] = (_UWSGI(), _Gunicorn(), _PyWSGI())


def _startup_refusal() -> str | None:
    """Why the WSGI server this process runs cannot carry a mount, or None. Only the servers
    that can be recognised without a request are checked here."""
    uwsgi = sys.modules.get("uwsgi")
    opts = getattr(uwsgi, "opt", None)
    if isinstance(opts, dict):  # inside uWSGI
        if "gevent" not in opts:
            return ("uWSGI runs this app without gevent; the ws mount needs uWSGI's gevent loop "
                    "(--gevent N, e.g. --gevent 100)")
        if ("http" in opts or "https" in opts) and "http-websockets" not in opts \
                and "http-raw-body" not in opts:
            return ("uWSGI's --http router passes WebSocket frames on only with "
                    "--http-websockets; add it (or serve --http-socket)")
        if "https-socket" in opts:
            return ("uWSGI keeps the TLS of --https-socket connections to itself, so they "
                    "cannot be taken over; serve --http-socket and terminate TLS in front "
                    "(nginx, a load balancer)")
        return None
    if "gunicorn.arbiter" in sys.modules and "gunicorn.workers.ggevent" not in sys.modules:
        return ("gunicorn runs this app with a worker that is not gevent's; run it with "
                "-k gevent (or -k gevent_pywsgi)")
    return None


def _server_of(app: SPWebSocketApp, environ: dict[str, Any]) -> _Server | None:
    for server in _SERVERS:
        if server.serves(environ):
            return server
    if not app._warned:
        app._warned = True
        log.error("the WSGI server %r cannot hand a WebSocket connection over to gsp; the SP "
                  "endpoints mounted with gsp_ws.wsgi answer 500 to every upgrade. Servers "
                  "that work: %s", environ.get("SERVER_SOFTWARE", "?"), _WORKS_ON)
    return None


def _upgrade(app: SPWebSocketApp, route: "MountRoute", environ: dict[str, Any],
             start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO") or "/"
    tokens = {t.strip().lower() for t in environ.get("HTTP_CONNECTION", "").split(",")}
    if environ.get("HTTP_UPGRADE", "").lower() != "websocket" or "upgrade" not in tokens:
        return _refuse(start_response, 426, f"{path} is a WebSocket SP endpoint",
                       [("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")])
    if environ.get("HTTP_SEC_WEBSOCKET_VERSION") != "13":
        return _refuse(start_response, 426, "only WebSocket version 13 is spoken here",
                       [("Sec-WebSocket-Version", "13")])
    key = environ.get("HTTP_SEC_WEBSOCKET_KEY")
    if environ.get("REQUEST_METHOD") != "GET" or not key:
        return _refuse(start_response, 400, "a WebSocket upgrade is a GET with Sec-WebSocket-Key")
    if route.protocol is None:
        return _refuse(start_response, 503, "this endpoint is being set up")
    offered = [p.strip() for p in environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL", "").split(",")
               if p.strip()]
    refusal = check_upgrade(offered, route.protocol)
    if refusal is not None:
        return _refuse(start_response, 400, refusal)
    server = _server_of(app, environ)
    if server is None:
        return _refuse(start_response, 500, "this WSGI server cannot hand the connection over "
                       f"to a WebSocket endpoint; servers that can: {_WORKS_ON}")
    why = server.refusal(environ)
    if why is not None:
        return _refuse(start_response, 500, why)
    headers = [(k[5:].replace("_", "-").lower(), v) for k, v in environ.items()
               if k.startswith("HTTP_")]
    request = _request(environ, server, path, headers)
    refused = route.gate(request, route.protocol)
    if refused is not None:
        return _refuse(start_response, refused.status, refused.reason, refused.headers)
    write = start_response("101 Switching Protocols", [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", generate_accept_token(key.encode("latin-1")).decode("ascii")),
        ("Sec-WebSocket-Protocol", subprotocol(route.protocol)),
        *(route.options["ws_response_headers"] or ())])
    return _serve(route, server, environ, write, request)


def _address(sock_addr: Any, host: Any, port: Any, scheme: str) -> str:
    if isinstance(sock_addr, tuple):  # the socket's own address where it has one (TCP)
        host, port = sock_addr[0], sock_addr[1]
    host, port = str(host or "?"), port or "?"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _socket_names(sock: Any) -> tuple[Any, Any]:
    """``(peer, local)`` addresses of the connection's socket; None where unknown (no socket
    shown, or the client already left)."""
    try:
        return sock.getpeername(), sock.getsockname()
    except (AttributeError, OSError):
        return None, None


def _request(environ: dict[str, Any], server: _Server, path: str,
             headers: list[tuple[str, str]]) -> WSRequest:
    """The upgrade request, before the socket is taken: what the ``ws_authorize`` check sees,
    and the pipe's ``peer.ws_request``."""
    sock = server.socket(environ)
    tls = hasattr(sock, "getpeercert")
    scheme = "wss" if tls else "ws"  # as the pipe's addresses will say
    peer, local = _socket_names(sock)
    if not isinstance(peer, tuple):  # uWSGI, or a unix socket: the server's word for it
        port = str(environ.get("REMOTE_PORT") or "")
        peer = (environ.get("REMOTE_ADDR") or "?", int(port) if port.isdigit() else 0)
    query = environ.get("QUERY_STRING") or ""
    return WSRequest(
        method=environ.get("REQUEST_METHOD") or "GET", target=path + ("?" + query if query else ""),
        headers=Headers(headers), remote_address=_address(peer, None, None, scheme),
        local_address=_address(local, environ.get("SERVER_NAME"), environ.get("SERVER_PORT"),
                               scheme),
        peer=(str(peer[0]), int(peer[1])), tls=tls_properties(sock) if tls else None)


def _serve(route: "MountRoute", server: _Server, environ: dict[str, Any],
           write: Callable[[bytes], Any], request: WSRequest) -> Iterator[bytes]:
    # A generator: the server iterates it after start_response, so the 101 goes out from here
    # and the request greenlet stays parked in it for the life of the pipe.
    conn = taken = None
    try:
        write(b"")  # sends the 101 head now
        taken = server.take(environ)
        sock = taken.sock
        tls = hasattr(sock, "getpeercert")
        scheme = "wss" if tls else "ws"
        local = _address(sock.getsockname(), environ.get("SERVER_NAME"),
                         environ.get("SERVER_PORT"), scheme)
        remote = _address(sock.getpeername(), environ.get("REMOTE_ADDR"),
                          environ.get("REMOTE_PORT"), scheme)
        conn = WSGIConnection(sock, taken.release, route.options, local, remote, request,
                              route.protocol or "", taken.trailing,
                              tls_properties(sock) if tls else {})
        route.deliver(conn)
        conn.done.wait()
    except OSError:
        pass  # the client left during the upgrade
    finally:
        if conn is not None:
            conn.close()
        elif taken is not None:
            taken.release()
    return
    yield b""  # unreachable: makes this function a generator
