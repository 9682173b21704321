"""SP over WebSocket at a path of a WSGI app served by ``gevent.pywsgi.WSGIServer``.

::

    app = SPWebSocketApp(my_wsgi_app)      # everything else still goes to my_wsgi_app
    app.mount("/sp", rep_socket)           # rep_socket gets a listener: ws://<server>/sp
    WSGIServer(("0.0.0.0", 8080), app).serve_forever()

or ``app = mount(rep_socket, my_wsgi_app, "/sp")``. Any protocol works; ``mount`` takes the ws
listener options (``ws_origins``, ``ws_response_headers``, ``recv_max_size``, ...).

How the upgrade works: for an upgrade request pywsgi hands its buffered reader of the connection
to the app as ``environ["wsgi.input"]`` (other requests get an ``Input`` wrapping it as
``.rfile``). The app checks the request, answers 101 through ``start_response`` (pywsgi adds no
body framing to a 101), takes the socket from that reader and parks the request's greenlet until
the SP pipe closes, so pywsgi never reads or writes the socket meanwhile. Works with or without
``gevent.monkey.patch_all()``, over HTTP or HTTPS (``WSGIServer(..., ssl_context=...)``).
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from gevent import socket as gsocket
from wsproto.utilities import generate_accept_token

import gsp
from gsp.tls import tls_properties

from ._conn import WSGIConnection
from ._http import check_upgrade, subprotocol

if TYPE_CHECKING:
    from .transport import WSGIRouteListener

__all__ = ["SPWebSocketApp", "mount"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_apps: "weakref.WeakValueDictionary[str, SPWebSocketApp]" = weakref.WeakValueDictionary()
_ids = itertools.count(1)
_REASONS = {400: "Bad Request", 403: "Forbidden", 426: "Upgrade Required",
            500: "Internal Server Error", 503: "Service Unavailable"}


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
        self._routes: dict[str, WSGIRouteListener] = {}
        _apps[self.name] = self

    def mount(self, path: str, sock: gsp.Socket, **options: Any) -> gsp.Listener:
        """Give ``sock`` a listener at ``path``; ``listener.close()`` unmounts it."""
        if not isinstance(path, str) or not path.startswith("/") or "?" in path:
            raise gsp.InvalidAddress(f"a mount path starts with '/' and has no query: {path!r}")
        lst = sock.listen(f"ws+wsgi://{self.name}{path}", **options)
        self._routes[path].protocol = sock.protocol  # the subprotocol this path answers to
        return lst

    def _add_route(self, path: str, lst: "WSGIRouteListener") -> None:
        if path in self._routes:
            raise gsp.AddressInUse(f"{path} is already mounted on this app")
        self._routes[path] = lst

    def _remove_route(self, path: str, lst: "WSGIRouteListener") -> None:
        if self._routes.get(path) is lst:
            del self._routes[path]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = self._routes.get(environ.get("PATH_INFO") or "/")
        if route is None:
            return self.app(environ, start_response)
        return _upgrade(route, environ, start_response)


def mount(sock: gsp.Socket, app: WSGIApp | None, path: str, **options: Any) -> SPWebSocketApp:
    """Mount ``sock`` at ``path`` of ``app``; serve the returned app instead of ``app``."""
    sp_app = app if isinstance(app, SPWebSocketApp) else SPWebSocketApp(app)
    sp_app.mount(path, sock, **options)
    return sp_app


def _refuse(start_response: Callable[..., Any], status: int, text: str,
            headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(f"{status} {_REASONS[status]}", [
        ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
        *headers])
    return [body]


def _raw_socket(environ: dict[str, Any]) -> tuple[Any, Any]:
    """The connection's socket and pywsgi's buffered reader of it, or ``(None, None)``."""
    stream = environ.get("wsgi.input")
    for reader in (stream, getattr(stream, "rfile", None)):
        sock = getattr(getattr(reader, "raw", None), "_sock", None)
        if sock is not None and hasattr(sock, "recv"):
            return sock, reader
    return None, None


def _cooperative(sock: Any) -> bool:
    # A stdlib ssl.SSLSocket (pywsgi given a plain ssl.SSLContext without monkey-patching)
    # blocks the whole process on every read; gevent's sockets (and patched ones) do not.
    return isinstance(sock, gsocket.socket)


def _upgrade(route: "WSGIRouteListener", environ: dict[str, Any],
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
    refusal = check_upgrade(offered, environ.get("HTTP_ORIGIN"), route.protocol, route.options)
    if refusal is not None:
        return _refuse(start_response, *refusal)
    sock, rfile = _raw_socket(environ)
    if sock is None:
        return _refuse(start_response, 500, "this WSGI server does not expose the connection's "
                       "socket; serve the app with gevent.pywsgi.WSGIServer")
    if not _cooperative(sock):
        return _refuse(start_response, 500, "the connection's socket is not a gevent socket; "
                       "give WSGIServer a gevent.ssl.SSLContext (or monkey-patch) for HTTPS")
    write = start_response("101 Switching Protocols", [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", generate_accept_token(key.encode("latin-1")).decode("ascii")),
        ("Sec-WebSocket-Protocol", subprotocol(route.protocol)),
        *(route.options["ws_response_headers"] or ())])
    headers = [(k[5:].replace("_", "-").lower(), v) for k, v in environ.items()
               if k.startswith("HTTP_")]
    return _serve(route, write, sock, rfile, path, headers)


def _take_buffered(sock: Any, rfile: Any) -> bytes:
    """Bytes pywsgi's reader already buffered past the request head (a client that did not wait
    for the 101); read without blocking."""
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        data = rfile.peek(1)
        return rfile.read(len(data)) if data else b""
    except OSError:  # nothing buffered and nothing readable now (TLS says "want read")
        return b""
    finally:
        sock.settimeout(timeout)


def _serve(route: "WSGIRouteListener", write: Callable[[bytes], Any], sock: Any, rfile: Any,
           path: str, headers: list[tuple[str, str]]) -> Iterator[bytes]:
    # A generator: pywsgi iterates it after start_response, so the 101 goes out from here and
    # the request greenlet stays parked in it for the life of the pipe.
    conn = None
    try:
        write(b"")  # sends the 101 headers now
        trailing = _take_buffered(sock, rfile)
        tls = hasattr(sock, "getpeercert")
        scheme = "wss" if tls else "ws"

        def name(addr: Any) -> str:
            host = f"[{addr[0]}]" if ":" in addr[0] else addr[0]
            return f"{scheme}://{host}:{addr[1]}"

        conn = WSGIConnection(sock, rfile, route.options, name(sock.getsockname()),
                              name(sock.getpeername()), path, headers, route.protocol or "",
                              trailing, tls_properties(sock) if tls else {})
        route._deliver(conn)
        conn.done.wait()
    except OSError:
        pass  # the client left during the upgrade
    finally:
        if conn is not None:
            conn.close()
    return
    yield b""  # noqa: unreachable - makes this function a generator
