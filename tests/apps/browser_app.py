"""A WSGI app for the browser tests under real servers (plugins/gsp-ws/tests/test_browser_servers.py): the page
the in-process tests load (tests/support/browser_support.py's INDEX, importing gsp.js from the mount at
/sp, a REP echo), a PUB at /ticks publishing ``tick <n>`` every 50 ms, and a PULL at /pull whose
messages /pulled lists (as hex)."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import gevent

import gsp
from gsp_ws.wsgi import SPWebSocketApp
from tests.support.browser_support import INDEX
from tests.support.ws_support import echo, not_found, respond, serve

pulled: list[bytes] = []


def routes(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO")
    if path == "/":
        return respond(start_response, INDEX, "text/html; charset=utf-8")
    if path == "/pulled":
        return respond(start_response, (" ".join(m.hex() or "-" for m in pulled) + "\n").encode())
    return not_found(start_response)


def _ticks(sock: gsp.Socket) -> None:
    n = 0
    while not sock.closed:
        sock.send(f"tick {n}".encode())
        n += 1
        gevent.sleep(0.05)


rep = gsp.socket("rep", max_recv_size=0)
pub = gsp.socket("pub")
pull = gsp.socket("pull", max_recv_size=0)
application = SPWebSocketApp(routes)
application.mount(rep, "/sp")
application.mount(pub, "/ticks", serve_js=False)
application.mount(pull, "/pull", serve_js=False)
gevent.spawn(echo, rep)
gevent.spawn(_ticks, pub)
gevent.spawn(serve, pull, pulled.append)
