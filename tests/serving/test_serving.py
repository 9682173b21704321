"""gsp inside the servers gevent users deploy: gunicorn -k gevent (--preload and not) and uWSGI
--gevent (the app loaded in the master, and --lazy-apps), real processes from this venv.

The app (tests/apps/serving_app.py) makes its REQ socket at import time, so with --preload and
uWSGI's default the master makes it and forks the workers: the fork rule (gsp._core.fork,
docs/serving.md) is what makes it work there. The REP backend runs in this process.

Under load, a signal (HUP: reload; TERM: graceful shutdown) must lose no request a handler took.
Precisely, each request the clients make ends one of three ways:

- answered: a complete ``200`` whose body is the backend's answer to that request;
- refused: the connection was refused, or closed (EOF or reset) before a single byte of a
  response came: no handler answered it, and the check below proves none took it;
- anything else (another status, a short or malformed response, a wrong body): a failure.

"No request a handler took is lost": every request that reached the backend (its handler ran
and did its round trip) was answered, and no request fails. And the server writes no traceback.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from typing import Iterator

import gevent
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import wait_for
from tests.support import servers

APPS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "apps")
APP = "serving_app:application"
CONCURRENT = 300

pytestmark = pytest.mark.timeout(90)


class Backend:
    """A REP backend in this process: 400 contexts answering ``ok <request>``, remembering every
    request that reached it."""

    def __init__(self) -> None:
        self.sock = gsp.socket("rep", listen="tcp://127.0.0.1:0")
        self.url = self.sock.listeners[0].url
        self.seen: set[bytes] = set()
        self.workers = [gevent.spawn(self.serve) for _ in range(400)]

    def serve(self) -> None:
        ctx = self.sock.open_context()
        while True:
            try:
                request = ctx.recv()
                self.seen.add(request)
                if request.startswith(b"burst-"):
                    gevent.sleep(0.05)  # held a while: no one worker can take the whole burst
                ctx.send(b"ok " + request)
            except gsp.Closed:
                return

    def close(self) -> None:
        self.sock.close()
        gevent.joinall(self.workers, timeout=5)
        gevent.killall(self.workers)


@pytest.fixture
def backend() -> Iterator[Backend]:
    b = Backend()
    try:
        yield b
    finally:
        b.close()


ANSWERED, REFUSED = "answered", "refused"


def request(port: int, q: str) -> tuple[str, str]:
    """GET /?q: (ANSWERED, pid) or (REFUSED, why) as defined above; else ("failed", why)."""
    try:
        s = gsocket.create_connection(("127.0.0.1", port), timeout=30)
    except OSError as exc:
        return REFUSED, f"connect: {exc}"
    data = b""
    try:
        s.sendall(f"GET /?{q} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                  .encode())
        while chunk := s.recv(65536):
            data += chunk
    except OSError as exc:
        if not data and exc.errno in (errno.ECONNRESET, errno.EPIPE):
            return REFUSED, f"reset before any response: {exc}"
        return "failed", f"{exc} after {data[:200]!r}"
    finally:
        s.close()
    if not data:
        return REFUSED, "closed before any response"
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0]
    prefix = f"ok {q} pid=".encode()
    if not status.startswith(b"HTTP/1.") or status.split()[1:2] != [b"200"] \
            or not body.startswith(prefix) or not body[len(prefix):].isdigit():
        return "failed", f"{status!r} {body[:300]!r}"
    return ANSWERED, body[len(prefix):].decode()


def burst(port: int, tag: str, n: int = CONCURRENT) -> dict[str, tuple[str, str]]:
    """``n`` requests at once, each on its own connection."""
    names = [f"{tag}-{i}" for i in range(n)]
    jobs = [gevent.spawn(request, port, q) for q in names]
    gevent.joinall(jobs, timeout=60, raise_error=True)
    return {q: job.value for q, job in zip(names, jobs)}


class Load:
    """``clients`` greenlets sending requests back to back until stopped (or until the server
    refuses them: a shut-down server)."""

    def __init__(self, port: int, tag: str, clients: int = 40) -> None:
        self.port = port
        self.results: dict[str, tuple[str, str]] = {}
        self.stopped = False
        self.jobs = [gevent.spawn(self.client, f"{tag}{c}") for c in range(clients)]

    def client(self, tag: str) -> None:
        i = 0
        while not self.stopped:
            q = f"{tag}-{i}"
            i += 1
            self.results[q] = outcome = request(self.port, q)
            if outcome[0] == REFUSED:
                gevent.sleep(0.02)

    def answered_by(self) -> list[str]:
        """The pid of the worker that answered each request answered so far."""
        return [r[1] for r in list(self.results.values()) if r[0] == ANSWERED]

    def flowing(self, n: int = 40) -> None:
        """Wait until ``n`` of its requests were answered."""
        wait_for(lambda: len(self.answered_by()) >= n, 30, what=f"{n} answered requests")

    def stop(self) -> dict[str, tuple[str, str]]:
        self.stopped = True
        gevent.joinall(self.jobs, timeout=40, raise_error=True)
        return self.results


def check(results: dict[str, tuple[str, str]], backend: Backend, what: str) -> dict[str, int]:
    """No failure, and every request that reached the backend answered; the counts."""
    failed = {q: r for q, r in results.items() if r[0] not in (ANSWERED, REFUSED)}
    assert not failed, f"{what}: {len(failed)} failed, e.g. {list(failed.items())[:5]}"
    taken = {q for q in results if q.encode() in backend.seen}
    lost = {q: results[q] for q in taken if results[q][0] != ANSWERED}
    assert not lost, f"{what}: handlers took {len(lost)} requests never answered: " \
                     f"{list(lost.items())[:5]}"
    answered = [r[1] for r in results.values() if r[0] == ANSWERED]
    return {"requests": len(results), "answered": len(answered),
            "refused": len(results) - len(answered), "pids": len(set(answered))}


def exercise(srv: servers.Server, backend: Backend, case: str) -> None:
    t0 = time.monotonic()
    port = srv.port
    results = burst(port, "burst")
    counts = check(results, backend, f"{case}: {CONCURRENT} at once")
    assert counts["answered"] == CONCURRENT, counts
    assert counts["pids"] >= 2, f"{case}: one worker answered everything: {counts}"
    summary = [f"burst {counts}"]

    load = Load(port, "hup")
    load.flowing()
    old = set(load.answered_by()) | {r[1] for r in results.values()}
    ready = srv.ready_lines()
    srv.send_signal(signal.SIGHUP)
    # The reload under load: new workers (forked anew) answer a good share while it goes on.
    wait_for(lambda: sum(pid not in old for pid in load.answered_by()) >= 60, 60,
             what="the new workers answering")
    results = load.stop()
    counts = check(results, backend, f"{case}: HUP under load")
    assert counts["answered"] > 0, counts
    summary.append(f"HUP {counts}")
    # Serving again after the reload (new workers, forked anew).
    again = burst(port, "again", 60)
    counts = check(again, backend, f"{case}: after HUP")
    assert counts["answered"] == 60, counts
    summary.append(f"after HUP {counts}")

    # Every new worker has loaded the app before the TERM: a uWSGI --lazy-apps worker ignores
    # the master's SIGHUP while it imports the app (SIGHUP is ignored from the fork until the
    # worker's handlers are set), so a TERM then leaves the master waiting on it for good
    # (docs/serving.md).
    wait_for(lambda: srv.ready_lines() >= ready + srv.ready_count, 60,
             what="every new worker ready")
    load = Load(port, "term")
    load.flowing()
    code = srv.stop(signal.SIGTERM, timeout=40)
    results = load.stop()
    counts = check(results, backend, f"{case}: TERM under load")
    assert counts["answered"] > 0, counts
    summary.append(f"TERM {counts} exit {code}")
    out = srv.output()
    assert "Traceback" not in out, out[-5000:]
    # Each worker drained its socket on exit (gunicorn's worker_exit, uwsgi.atexit).
    assert out.count(" drained") >= 3, out[-5000:]
    print(f"\n{case}: {'; '.join(summary)}; {time.monotonic() - t0:.1f} s")


# docs/serving.md's worker_exit: each worker drains the app's socket when it exits.
WORKER_EXIT = """
def worker_exit(server, worker):
    import serving_app
    serving_app.drain()
"""


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "no-preload"])
def test_gunicorn_gevent(backend: Backend, preload: bool) -> None:
    # At most 100 connections a worker (as uWSGI's --gevent 100): the burst needs them all.
    with servers.gunicorn(APP, pythonpath=APPS, workers=3, preload=preload,
                          extra=["--worker-connections", "100"],
                          env={"GSP_SERVING_BACKEND": backend.url},
                          hooks=WORKER_EXIT) as srv:
        exercise(srv, backend, f"gunicorn -k gevent {'--preload' if preload else ''}")


@pytest.mark.parametrize("lazy", [False, True], ids=["default", "lazy-apps"])
def test_uwsgi_gevent(backend: Backend, lazy: bool) -> None:
    with servers.uwsgi(APP, pythonpath=APPS, processes=3, gevent=100, lazy_apps=lazy,
                       env={"GSP_SERVING_BACKEND": backend.url}) as srv:
        exercise(srv, backend, f"uwsgi --gevent {'--lazy-apps' if lazy else '(default)'}")
