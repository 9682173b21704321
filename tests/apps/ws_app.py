"""A WSGI app with SP endpoints mounted beside a normal route, for the real-server tests
(plugins/gsp-ws/tests/test_wsgi_servers.py): a REP echo at /sp, a REP answering its worker's pid at /who, a
PULL at /pull whose messages' sizes /pulled reports, a REP at /private behind a bearer token
(ws_authorize; it answers the Authorization header its pipe carries), /peers (the addresses of
the echo's pipes) and /health (200, the worker's pid).

The sockets are made at import: in the worker, or before the fork in the master (uWSGI's
default, gunicorn --preload); a ws mount has no descriptor of its own, so each worker serves the
upgrades it accepts."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

import gevent

import gsp
import gsp_ws
from gsp_ws.wsgi import SPWebSocketApp
from tests.support.ws_support import echo, not_found, respond, serve

TOKEN = "t0ken"

pulled: list[int] = []


def routes(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO")
    if path == "/health":
        body = f"ok {os.getpid()}\n".encode()
    elif path == "/peers":  # the addresses of the echo's pipes, as the server names them
        body = (" ".join(p.remote_address for p in rep.pipes) + "\n").encode()
    elif path == "/pulled":
        body = (" ".join(map(str, pulled)) + "\n").encode()
    else:
        return not_found(start_response)
    return respond(start_response, body)


def _who(request: bytes) -> bytes:
    return str(os.getpid()).encode()


def _pull(body: bytes) -> None:
    pulled.append(len(body))


def _token(request: gsp.transport.WSRequest) -> gsp_ws.Refusal | None:
    if request.headers.get("authorization") != f"Bearer {TOKEN}":
        return gsp_ws.Refusal(401, "no entry without the token",
                              headers={"WWW-Authenticate": "Bearer"})
    return None


def _private(sock: gsp.Socket) -> None:
    while True:
        try:
            msg = sock.recv_msg()
            sock.send(dict(msg.pipe.properties["ws_request_headers"])["authorization"].encode())
        except gsp.Closed:
            return


rep = gsp.socket("rep", max_recv_size=0)
who = gsp.socket("rep")
pull = gsp.socket("pull", max_recv_size=0)
private = gsp.socket("rep")
application = SPWebSocketApp(routes)
application.mount(rep, "/sp")
application.mount(who, "/who")
application.mount(pull, "/pull")
application.mount(private, "/private", ws_authorize=_token)
gevent.spawn(echo, rep)
gevent.spawn(serve, who, _who)
gevent.spawn(serve, pull, _pull)
gevent.spawn(_private, private)
