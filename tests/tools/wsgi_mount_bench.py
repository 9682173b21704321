"""The ws SP mount (gsp_ws.wsgi.mount) measured where it is deployed, beside a plain ws listener.

    python tests/tools/wsgi_mount_bench.py [--servers plain,pywsgi,gunicorn,uwsgi]
                                           [--clients 1,64] [--seconds 3] [--runs 3] [--json]

Each server is a process of its own, one worker, serving a REP echo at ``/sp``:

- ``plain``: a gsp REP socket listening on ``ws://127.0.0.1:PORT/sp`` (no WSGI server);
- ``pywsgi``: gevent.pywsgi.WSGIServer serving tests/apps/ws_app.py (the REP is mounted there);
- ``gunicorn``: ``gunicorn -k gevent --workers 1`` serving the same app;
- ``uwsgi``: ``uwsgi --gevent 100 --processes 1 --http-socket`` serving the same app.

The clients, in this process: ``N`` gsp REQ sockets, each dialing the server and asking 16-byte
requests one after the other for ``--seconds``. Printed per server and ``N``: requests a second
(all clients together) and the mean round trip a request (``N / rate``), the median of
``--runs`` runs. Run it from the repository root with the test extra installed (gunicorn, uWSGI).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import gevent  # noqa: E402

import gsp  # noqa: E402
from tests.support import servers  # noqa: E402

APP = "tests.apps.ws_app:application"
_PLAIN = ("import gsp, sys\n"
          "rep = gsp.socket('rep')\n"
          "rep.listen(f'ws://127.0.0.1:{sys.argv[1]}/sp')\n"
          "print('ready', flush=True)\n"
          "while True:\n"
          "    rep.send(rep.recv())\n")
_PYWSGI = ("import sys; from gevent.pywsgi import WSGIServer\n"
           "from tests.apps.ws_app import application\n"
           "s = WSGIServer(('127.0.0.1', int(sys.argv[1])), application, log=None)\n"
           "s.start(); print('ready', flush=True); s.serve_forever()\n")


@contextmanager
def _process(code: str) -> Iterator[str]:
    """``python -c code PORT`` until it prints ready; yields the ws URL of its /sp."""
    port = servers.free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if b"ready" not in line:
            raise SystemExit(f"the server did not start: {line!r}")
        yield f"ws://127.0.0.1:{port}/sp"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def server(kind: str) -> Iterator[str]:
    if kind == "plain":
        with _process(_PLAIN) as url:
            yield url
    elif kind == "pywsgi":
        with _process(_PYWSGI) as url:
            yield url
    elif kind == "gunicorn":
        with servers.gunicorn(APP, pythonpath=ROOT, workers=1) as srv:
            yield srv.url.replace("http://", "ws://") + "/sp"
    elif kind == "uwsgi":
        with servers.uwsgi(APP, pythonpath=ROOT, processes=1, lazy_apps=True) as srv:
            yield srv.url.replace("http://", "ws://") + "/sp"
    else:
        raise SystemExit(f"unknown server {kind!r}")


def run(url: str, clients: int, seconds: float) -> float:
    """Requests a second of ``clients`` REQ sockets asking one after the other."""
    socks = [gsp.socket("req", recv_timeout=10) for _ in range(clients)]
    try:
        for s in socks:
            s.dial(url, fail_fast=True)
        for s in socks:  # warm: every pipe has carried a request
            s.send(b"w" * 16)
            s.recv()
        counts = [0] * clients
        stop = time.monotonic() + seconds

        def ask(i: int, s: Any) -> None:
            n = 0
            msg = b"x" * 16
            while time.monotonic() < stop:
                s.send(msg)
                s.recv()
                n += 1
            counts[i] = n

        t0 = time.monotonic()
        gevent.joinall([gevent.spawn(ask, i, s) for i, s in enumerate(socks)], raise_error=True)
        return sum(counts) / (time.monotonic() - t0)
    finally:
        for s in socks:
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="plain,pywsgi,gunicorn,uwsgi")
    ap.add_argument("--clients", default="1,64")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    result: dict[str, dict[str, dict[str, float]]] = {}
    for kind in a.servers.split(","):
        result[kind] = {}
        with server(kind) as url:
            for n in map(int, a.clients.split(",")):
                rates = [run(url, n, a.seconds) for _ in range(a.runs)]
                rate = statistics.median(rates)
                result[kind][str(n)] = {"req_per_s": rate, "rt_us": n / rate * 1e6,
                                        "runs": len(rates)}
                if not a.json:
                    print(f"{kind:9} {n:3} clients: {rate:9,.0f} req/s, round trip "
                          f"{n / rate * 1e6:7.0f} µs (median of {len(rates)})", flush=True)
    if a.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
