"""A gsp.prefork server for tests/serving/test_prefork.py, run in a fresh interpreter:

    python tests/apps/prefork_app.py MODE PROCS [DIR] [--monkey] [--kernel] [--stall SECONDS]
                                     [--tls CERT KEY]

It prints ``URL PID...`` once every worker listens (the supervisor's ``on_ready``), and ``done``
when ``gsp.prefork`` returned (exit 0), or ``failed INDEX EXITCODE`` when it raised
``gsp.WorkerFailed`` (exit 3). Modes:

* ``rep``   each worker answers ``PID REQUEST``; at its end it prints ``served PID N``
* ``slow``  REP with 8 contexts per worker, each printing ``took REQUEST``, then answering 1 s later
* ``pull``  each worker appends every message it receives to DIR/PID, one a line
* ``sub``   the same with a SUB socket subscribed to everything
* ``crash`` each worker raises as soon as it listens (the supervisor gives up: ``failed``)
* ``stuck`` ``rep``, but worker 0 first blocks its process for 3 s (its hub runs nothing)

``--kernel`` serves with ``balance="kernel"`` (the default is ``"pipes"``); ``--stall`` sets
``gsp._core.prefork.ACCEPT_STALL`` (how long a connection waits for a less busy worker); ``--tls``
serves ``tls+tcp://`` with that certificate and key.
"""

from __future__ import annotations

import sys

if "--monkey" in sys.argv:
    from gevent import monkey

    monkey.patch_all()

import logging
import os
from typing import Any

import gevent

import gsp
import gsp._core.prefork

MODE, PROCS = sys.argv[1], int(sys.argv[2])
DIR = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else ""
BALANCE = "kernel" if "--kernel" in sys.argv else "pipes"
if "--stall" in sys.argv:
    gsp._core.prefork.ACCEPT_STALL = float(sys.argv[sys.argv.index("--stall") + 1])
TLS: dict[str, str] = {}
if "--tls" in sys.argv:
    at = sys.argv.index("--tls")
    TLS = {"tls_cert_file": sys.argv[at + 1], "tls_key_file": sys.argv[at + 2]}


def say(*words: object) -> None:
    """One line on stdout in one write: the workers share the supervisor's stdout."""
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


def rep(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    n = 0
    try:
        while True:
            msg = sock.recv()
            n += 1
            sock.send(b"%d %s" % (worker.pid, msg))
    finally:
        say("served", worker.pid, n)


def slow(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    def answer() -> None:
        with sock.open_context() as ctx:
            while True:
                msg = ctx.recv()
                say("took", msg.decode())
                gevent.sleep(1.0)
                ctx.send(b"%d %s" % (worker.pid, msg))

    gevent.joinall([gevent.spawn(answer) for _ in range(8)])


def pull(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    with open(os.path.join(DIR, str(worker.pid)), "ab", buffering=0) as f:
        while True:
            f.write(sock.recv() + b"\n")


def sub(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    sock.subscribe(b"")
    pull(sock, worker)


def stuck(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    if worker.index == 0 and worker.generation == 0:
        import time
        sleep = time.sleep if "--monkey" not in sys.argv else gevent.monkey.get_original(
            "time", "sleep")
        sleep(3.0)  # the hub too: this worker accepts nothing meanwhile
    rep(sock, worker)


def crash(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    raise RuntimeError(f"worker {worker.index} fails at once")


def ready(p: gsp.Prefork) -> None:
    print(p.url, *p.pids.values(), flush=True)


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    serve: Any = {"rep": rep, "slow": slow, "pull": pull, "sub": sub, "crash": crash,
                  "stuck": stuck}[MODE]
    protocol = MODE if MODE in ("pull", "sub") else "rep"
    try:
        gsp.prefork(protocol, ("tls+tcp" if TLS else "tcp") + "://127.0.0.1:0", serve,
                    procs=PROCS, on_ready=ready, drain_timeout=10, max_restarts=2,
                    max_recv_size=0, balance=BALANCE, **TLS)
    except gsp.WorkerFailed as exc:
        print("failed", exc.index, exc.exitcode, flush=True)
        return 3
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
