"""A WSGI app for the browser tests under real servers (tests/test_browser_servers.py): a page
at / that imports gsp.js from the mount at /sp (a REP echo), a PUB at /ticks publishing
``tick <n>`` every 50 ms, and a PULL at /pull whose messages /pulled lists (as hex)."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import gevent

import gsp
from gsp_ws.wsgi import SPWebSocketApp

PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>loading</title></head>
<body><script type="module">
import * as gsp from "/sp/gsp.js";
window.gsp = gsp;
document.title = "ready";
</script></body></html>
"""

pulled: list[bytes] = []


def routes(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO")
    if path == "/":
        kind, body = "text/html; charset=utf-8", PAGE
    elif path == "/pulled":
        kind, body = "text/plain", (" ".join(m.hex() or "-" for m in pulled) + "\n").encode()
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"no!\n"]
    start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
    return [body]


def _echo(sock: gsp.Socket) -> None:
    while True:
        try:
            sock.send(sock.recv())
        except gsp.Closed:
            return


def _ticks(sock: gsp.Socket) -> None:
    n = 0
    while not sock.closed:
        sock.send(f"tick {n}".encode())
        n += 1
        gevent.sleep(0.05)


def _pull(sock: gsp.Socket) -> None:
    while True:
        try:
            pulled.append(sock.recv())
        except gsp.Closed:
            return


rep = gsp.socket("rep", recv_max_size=0)
pub = gsp.socket("pub")
pull = gsp.socket("pull", recv_max_size=0)
application = SPWebSocketApp(routes)
application.mount("/sp", rep)
application.mount("/ticks", pub, serve_js=False)
application.mount("/pull", pull, serve_js=False)
gevent.spawn(_echo, rep)
gevent.spawn(_ticks, pub)
gevent.spawn(_pull, pull)
