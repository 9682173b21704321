"""gsp in a web app: HTTP requests answered by an SP backend, one REQ context per request.

    pip install -e . -e plugins/gsp-ws
    python examples/webapp.py --port 8080          # serve until SIGINT/SIGTERM
    curl 'http://127.0.0.1:8080/quote?sym=ACME'    # 200 ACME 42.17
    curl 'http://127.0.0.1:8080/quote?sym=SLOW'    # 504: the backend did not answer in time
    python examples/webapp.py --self-test          # serve on a free port, check itself, exit

- The backend is a REP service (here in this process, with a few worker greenlets, each on a REP
  context; in production another process or host, or any nng/pynng/mangos REP).
- The web app (gevent.pywsgi) shares **one REQ socket** among all its requests: each request
  opens **its own context** with its own timeouts, so concurrent requests never cancel each
  other and a slow one times out alone (HTTP 504).
- The same service is mounted for SP clients at ``ws://HOST:PORT/sp`` on the same port
  (``gsp_ws.wsgi.mount``): a REP socket whose workers relay through the shared REQ socket.

See docs/webapp.md.
"""

from gevent import monkey

monkey.patch_all()  # first: before anything else imports socket, ssl, threading, time ...

import argparse  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import zlib  # noqa: E402
from typing import Any, Callable, Iterable  # noqa: E402
from urllib.parse import parse_qs  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pywsgi import WSGIServer  # noqa: E402

import gsp  # noqa: E402
from gsp_ws.wsgi import mount  # noqa: E402

#: Seconds one HTTP request waits for the backend's answer before it answers 504.
REQUEST_TIMEOUT = 2.0
#: Seconds before an unanswered request is sent again: longer than a normal answer takes (each
#: resend is more work for the backend), shorter than REQUEST_TIMEOUT so that a request lost with
#: a stuck backend gets one more try within it. Quotes are idempotent, so resending is safe.
RESEND_TIME = 1.0


# -- the backend (another service in real life) -------------------------------------------------

def quote(sym: str) -> str:
    if sym == "SLOW":
        gevent.sleep(REQUEST_TIMEOUT + 1)  # longer than the web app waits
    return f"{sym} {zlib.crc32(sym.encode()) % 10000 / 100:.2f}"


def serve_backend(rep: gsp.Socket, workers: int = 4) -> list[gevent.Greenlet]:
    """REP workers, one context each: up to ``workers`` requests in progress at once."""
    def work() -> None:
        with rep.open_context() as ctx:
            while True:
                try:
                    sym = ctx.recv().decode()
                    ctx.send(quote(sym).encode())
                except gsp.Closed:
                    return
                except gsp.GspError:
                    continue  # e.g. the requester gave up and left
    return [gevent.spawn(work) for _ in range(workers)]


# -- the web app ---------------------------------------------------------------------------------

def ask(req: gsp.Socket, sym: str) -> bytes:
    """One request to the backend on its own context: its own timeouts, its own reply."""
    with req.open_context() as ctx:
        ctx.send_timeout = 1.0             # no backend connected for 1 s: give up
        ctx.recv_timeout = REQUEST_TIMEOUT  # the whole answer, resends included
        ctx.send(sym.encode())
        reply: bytes = ctx.recv()
        return reply


def make_app(req: gsp.Socket) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["PATH_INFO"] != "/quote":
            return respond(start_response, "404 Not Found", b"not found\n")
        sym = parse_qs(environ.get("QUERY_STRING", "")).get("sym", [""])[0]
        if not sym.isalnum():
            return respond(start_response, "400 Bad Request", b"?sym=ALNUM\n")
        try:
            return respond(start_response, "200 OK", ask(req, sym) + b"\n")
        except gsp.Timeout:
            return respond(start_response, "504 Gateway Timeout", b"backend too slow\n")
        except gsp.GspError as exc:  # ConnectionBroken (resend off), Closed while stopping, ...
            return respond(start_response, "502 Bad Gateway", f"{exc}\n".encode())
    return app


def respond(start_response: Callable[..., Any], status: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def relay(sp_rep: gsp.Socket, req: gsp.Socket, workers: int = 4) -> list[gevent.Greenlet]:
    """The SP face: REP contexts on the mounted socket, each request relayed by ``ask``."""
    def work() -> None:
        with sp_rep.open_context() as ctx:
            while True:
                try:
                    sym = ctx.recv().decode()
                    try:
                        ctx.send(ask(req, sym))
                    except gsp.Timeout:
                        ctx.send(b"error: backend too slow")
                except gsp.Closed:
                    return
                except gsp.GspError:
                    continue
    return [gevent.spawn(work) for _ in range(workers)]


# -- running it ----------------------------------------------------------------------------------

class WebApp:
    """Backend, shared REQ socket, HTTP server with the SP endpoint mounted; ``close()`` stops all."""

    def __init__(self, host: str, port: int) -> None:
        self.backend = gsp.socket("rep", listen="tcp://127.0.0.1:0")
        self.req = gsp.socket("req", dial=self.backend.listeners[0].url, resend_time=RESEND_TIME)
        self.sp_rep = gsp.socket("rep")
        self.server = WSGIServer((host, port), mount(self.sp_rep, make_app(self.req), "/sp"),
                                 log=None)
        self.server.start()
        self.port: int = self.server.server_port
        self.greenlets = serve_backend(self.backend) + relay(self.sp_rep, self.req)

    def close(self) -> None:
        self.server.stop(timeout=1)
        for s in (self.sp_rep, self.req, self.backend):
            s.close()
        gevent.joinall(self.greenlets, timeout=2)


def http_get(port: int, path: str) -> tuple[int, bytes]:
    import http.client  # patched: cooperative

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def self_test(web: WebApp, n: int) -> str:
    syms = [f"S{i}" for i in range(n)]
    jobs = [gevent.spawn(http_get, web.port, f"/quote?sym={s}") for s in syms]
    slow = gevent.spawn(http_get, web.port, "/quote?sym=SLOW")
    with gsp.socket("req", dial=f"ws://127.0.0.1:{web.port}/sp", recv_timeout=10) as ws_req:
        ws_req.send(b"WS")
        ws_answer = ws_req.recv()
    gevent.joinall([*jobs, slow], timeout=15, raise_error=True)
    answers = [j.value for j in jobs]
    assert answers == [(200, quote(s).encode() + b"\n") for s in syms], answers
    assert slow.value == (504, b"backend too slow\n"), slow.value  # the others did not wait
    assert ws_answer == quote("WS").encode(), ws_answer
    assert http_get(web.port, "/quote?sym=a%20b")[0] == 400
    return (f"webapp OK: {n} concurrent HTTP requests answered, SLOW got 504 after "
            f"{REQUEST_TIMEOUT:g} s, ws:// REQ answered {ws_answer.decode()!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--self-test", type=int, nargs="?", const=20, metavar="N",
                        help="serve on a free port, send N (20) concurrent requests, exit")
    args = parser.parse_args(argv)
    web = WebApp(args.host, 0 if args.self_test else args.port)
    try:
        if args.self_test:
            print(self_test(web, args.self_test), flush=True)
            return 0
        stop = Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(sig, stop.set)
        print(f"serving http://{args.host}:{web.port}/quote?sym=... and "
              f"ws://{args.host}:{web.port}/sp", flush=True)
        stop.wait()
        return 0
    finally:
        web.close()


if __name__ == "__main__":
    sys.exit(main())
