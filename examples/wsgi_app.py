"""One port, two faces: a WSGI app answers ``GET /health`` and a gsp REP socket answers SP
requests over WebSocket at ``ws://HOST:PORT/sp`` (nng and gsp REQ dialers alike).

    pip install -e . -e plugins/gsp-ws
    python examples/wsgi_app.py --port 8080 [--monkey]
    curl http://127.0.0.1:8080/health
    python -c "import pynng; s = pynng.Req0(dial='ws://127.0.0.1:8080/sp'); s.send(b'hi'); print(s.recv())"

``--protocol pair`` serves a PAIR echo instead of REP. The server stops on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--protocol", default="rep", choices=["rep", "pair"])
    parser.add_argument("--monkey", action="store_true", help="gevent.monkey.patch_all() first")
    args = parser.parse_args(argv)
    if args.monkey:
        from gevent import monkey

        monkey.patch_all()

    import gevent
    from gevent.event import Event
    from gevent.pywsgi import WSGIServer

    import gsp
    from gsp_ws.wsgi import mount

    def app(environ: dict, start_response) -> list[bytes]:
        if environ["PATH_INFO"] == "/health":
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
            return [b"ok\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"not found\n"]

    sock = gsp.socket(args.protocol)
    server = WSGIServer((args.host, args.port), mount(sock, app, "/sp"), log=None)

    def answer() -> None:  # REP: one reply per request; PAIR: echo
        while True:
            try:
                msg = sock.recv()
                sock.send(b"echo: " + msg)
            except gsp.Closed:
                return
            except gsp.GspError:
                continue  # e.g. the requester left before the reply

    stop = Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(sig, stop.set)
    server.start()
    worker = gevent.spawn(answer)
    port = server.server_port
    print(f"serving http://{args.host}:{port}/health and ws://{args.host}:{port}/sp", flush=True)
    try:
        stop.wait()
    finally:
        server.stop(timeout=1)
        sock.close()
        worker.join(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
