"""A live dashboard in the browser, fed by SP over the web app's own port: no broker, no CDN.

A gevent WSGI app serves a page that draws the figures of a running pipeline on a <canvas>
(a SUB socket in the page, fed by a PUB mounted at ``/sp``) and sends commands to a backend
service (a REQ socket in the page, through a raw REP mounted at ``/sp/commands`` and a device to
the backend's REP). The page's SP client is ``gsp.js``, which the mount serves at
``/sp/gsp.js``. Both mounts check the page's session cookie in ``ws_authorize`` and accept only
this server's own origins (``ws_origins``).

    pip install -e . -e plugins/gsp-ws
    python examples/dashboard.py --port 8080    # then open http://127.0.0.1:8080/login

The pipeline: a source pushes jobs at the target rate to three workers (PUSH/PULL over
inproc://); every 0.25 s a reporter publishes ``figures {"t", "done", "target", "workers"}``.
The backend answers ``faster``, ``slower``, ``pause``, ``resume`` and ``status`` by changing the
target rate. ``--backend tcp://HOST:PORT`` uses a backend REP running elsewhere instead of the
one started here. The server stops on SIGINT/SIGTERM. docs/browsers.md explains the page side.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import time
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Callable, Iterable

import gevent
from gevent.event import Event
from gevent.pywsgi import WSGIServer

import gsp
import gsp_ws
from gsp_ws.wsgi import SPWebSocketApp

PAGE_SCRIPT = (Path(__file__).parent / "dashboard_page.js").read_bytes()
PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>gsp dashboard</title>
<style>body { font: 14px sans-serif; margin: 20px; } canvas { border: 1px solid #ddd; }</style>
</head><body>
<h1>Pipeline</h1>
<p>Jobs done per second (blue) against the target rate (grey). <span id="status">connecting</span></p>
<canvas id="chart" width="720" height="300"></canvas>
<p><button data-command="slower">slower</button> <button data-command="faster">faster</button>
<button data-command="pause">pause</button> <button data-command="resume">resume</button>
<button data-command="status">status</button> <span id="reply"></span></p>
<script type="module" src="/dashboard.js"></script>
</body></html>
"""


class Pipeline:
    """A source pushing jobs at ``target`` per second to workers; counts what they finish."""

    def __init__(self, workers: int = 3) -> None:
        self.target = 40.0
        self.paused = False
        self.done = 0
        self.workers = workers
        name = f"inproc://dashboard-jobs-{os.getpid()}-{id(self)}"
        self.push = gsp.socket("push", listen=name)
        self.pulls = [gsp.socket("pull", dial=name) for _ in range(workers)]

    def source(self) -> None:
        n = 0
        while True:
            if self.paused:
                gevent.sleep(0.1)
                continue
            self.push.send(str(n).encode())
            n += 1
            gevent.sleep(1.0 / self.target)

    def worker(self, pull: gsp.Socket) -> None:
        while True:
            pull.recv()
            gevent.sleep(0.01)  # the work
            self.done += 1

    def reporter(self, pub: gsp.Socket, every: float = 0.25) -> None:
        last, then = self.done, time.monotonic()
        while True:
            gevent.sleep(every)
            now = time.monotonic()
            rate = (self.done - last) / (now - then)
            last, then = self.done, now
            figures = {"t": round(time.time(), 3), "done": round(rate, 1),
                       "target": 0.0 if self.paused else self.target, "workers": self.workers}
            pub.send(b"figures " + json.dumps(figures).encode())

    def command(self, name: str) -> dict[str, Any]:
        if name == "faster":
            self.target = min(self.target * 1.5, 250.0)
        elif name == "slower":
            self.target = max(self.target / 1.5, 2.0)
        elif name in ("pause", "resume"):
            self.paused = name == "pause"
        elif name != "status":
            return {"error": f"unknown command {name!r}"}
        return {"target": round(self.target, 1), "paused": self.paused, "done": self.done}

    def close(self) -> None:
        for s in (self.push, *self.pulls):
            s.close()


def backend(rep: gsp.Socket, pipeline: Pipeline) -> None:
    """The backend service: one JSON reply a command."""
    while True:
        name = rep.recv().decode("utf-8", "replace")
        rep.send(json.dumps({"command": name, **pipeline.command(name)}).encode())


class Dashboard:
    """The WSGI app and everything behind it; ``close()`` stops it all."""

    def __init__(self, origins: Iterable[str], backend_url: str | None = None) -> None:
        self.sessions: set[str] = set()
        self.pipeline = Pipeline()
        self.greenlets: list[gevent.Greenlet] = []
        self.figures = gsp.socket("pub")
        # The commands path: the page's REQ -> raw REP (the mount) -> device -> raw REQ -> backend.
        self.front = gsp.socket("rep", raw=True)
        self.back = gsp.socket("req", raw=True)
        self.service: gsp.Socket | None = None
        if backend_url is None:
            backend_url = f"inproc://dashboard-backend-{os.getpid()}-{id(self)}"
            self.service = gsp.socket("rep", listen=backend_url)
            self.greenlets.append(gevent.spawn(backend, self.service, self.pipeline))
        self.back.dial(backend_url, background=True)
        self.device = gsp.device(self.front, self.back)
        self.app = SPWebSocketApp(self.routes)
        allowed = {"ws_origins": frozenset(origins), "ws_authorize": self.authorize}
        self.app.mount(self.figures, "/sp", **allowed)  # also serves /sp/gsp.js
        self.app.mount(self.front, "/sp/commands", serve_js=False, **allowed)
        p = self.pipeline
        self.greenlets += [gevent.spawn(p.source), gevent.spawn(p.reporter, self.figures),
                           *(gevent.spawn(p.worker, pull) for pull in p.pulls)]

    def authorize(self, request: gsp.transport.WSRequest) -> gsp_ws.Refusal | None:
        """Only pages with a session this server handed out may open the SP endpoints."""
        if request.cookies.get("session") not in self.sessions:
            return gsp_ws.Refusal(401, "log in first: /login")
        return None

    def routes(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO")
        session = SimpleCookie(environ.get("HTTP_COOKIE", "")).get("session")
        logged_in = session is not None and session.value in self.sessions
        if path == "/login":  # a stand-in for a real login: hand out a session
            token = secrets.token_urlsafe(16)
            self.sessions.add(token)
            start_response("303 See Other", [
                ("Location", "/"), ("Content-Length", "0"),
                ("Set-Cookie", f"session={token}; Path=/; HttpOnly; SameSite=Strict")])
            return []
        if path == "/" and logged_in:
            return _ok(start_response, "text/html; charset=utf-8", PAGE)
        if path == "/":
            start_response("303 See Other", [("Location", "/login"), ("Content-Length", "0")])
            return []
        if path == "/dashboard.js":
            return _ok(start_response, "text/javascript; charset=utf-8", PAGE_SCRIPT)
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"not found\n"]

    def close(self) -> None:
        gevent.killall(self.greenlets)
        self.device.stop()
        for s in (self.figures, self.front, self.back, self.service):
            if s is not None:
                s.close()
        self.pipeline.close()


def _ok(start_response: Callable[..., Any], kind: str, body: bytes) -> list[bytes]:
    start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body))),
                              ("Cache-Control", "no-cache")])
    return [body]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--backend", help="a backend REP's URL (default: one started here)")
    args = parser.parse_args(argv)
    server = WSGIServer((args.host, args.port), None, log=None)
    server.init_socket()
    port = server.server_port
    hosts = {args.host, "127.0.0.1", "localhost"} if args.host in ("127.0.0.1", "localhost") \
        else {args.host}
    dashboard = Dashboard({f"http://{h}:{port}" for h in hosts}, args.backend)
    server.application = dashboard.app
    server.start()
    print(f"dashboard at http://{args.host}:{port}/login", flush=True)
    stop = Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(sig, stop.set)
    stop.wait()
    server.stop(timeout=2)
    dashboard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
