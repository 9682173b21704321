"""gsp demo: a parallel pipeline (ventilator → workers → sink) across real processes.

The ventilator PUSHes tasks over tcp to worker processes; each worker PULLs a task, does real
work (counts primes in a range), and PUSHes the result over ipc to the sink, which PULLs and
checks every result. The same code runs over inproc inside one process to show the transport is
a URL away. Run:  python examples/pipeline_demo.py [--workers N] [--tasks N]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time

import gevent
from gevent import subprocess  # waits without blocking the hub

import gsp

TASK = struct.Struct(">III")  # task id, range start, range end
RESULT = struct.Struct(">III")  # task id, primes found, worker pid


def count_primes(lo: int, hi: int) -> int:
    n = 0
    for k in range(max(lo, 2), hi):
        if all(k % d for d in range(2, int(k ** 0.5) + 1)):
            n += 1
    return n


def worker(task_url: str, result_url: str) -> None:
    """Runs in a worker process until the ventilator sends an empty task (the stop signal)."""
    with gsp.socket("pull", dial=task_url) as tasks, gsp.socket("push", dial=result_url) as out:
        while True:
            data = tasks.recv()
            if not data:
                return
            tid, lo, hi = TASK.unpack(data)
            out.send(RESULT.pack(tid, count_primes(lo, hi), os.getpid()))


def run(n_workers: int, n_tasks: int, span: int) -> int:
    # The sink's ipc socket file lives in a directory of its own, removed with it at the end.
    with tempfile.TemporaryDirectory(prefix="gsp-demo-") as tmp, \
            gsp.socket("push", listen="tcp://127.0.0.1:0", send_timeout=30) as vent, \
            gsp.socket("pull", listen=f"ipc://{tmp}/results.sock", recv_timeout=60) as sink:
        task_url = vent.listeners[0].url
        result_url = sink.listeners[0].url
        print(f"ventilator  PUSH {task_url}\nsink        PULL {result_url}")
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", task_url, result_url])
                 for _ in range(n_workers)]
        # Wait for every worker's task pipe so the round-robin spreads work from the start.
        deadline = time.monotonic() + 30
        while len(vent.pipes) < n_workers and time.monotonic() < deadline:
            gevent.sleep(0.02)
        print(f"workers     {len(vent.pipes)} processes connected")

        t0 = time.perf_counter()
        expect = {}

        def ventilate() -> None:
            for tid in range(n_tasks):
                lo = tid * span
                expect[tid] = (lo, lo + span)
                vent.send(TASK.pack(tid, lo, lo + span))

        sender = gevent.spawn(ventilate)
        total, by_worker, seen = 0, {}, set()
        for _ in range(n_tasks):
            tid, primes, pid = RESULT.unpack(sink.recv())
            seen.add(tid)
            total += primes
            by_worker[pid] = by_worker.get(pid, 0) + 1
        sender.get()
        elapsed = time.perf_counter() - t0
        for _ in procs:
            vent.send(b"")  # one stop signal per worker
        for p in procs:
            p.wait(timeout=30)

    check = count_primes(0, n_tasks * span)
    ok = len(seen) == n_tasks and total == check
    print(f"results     {len(seen)}/{n_tasks} tasks, {total} primes below {n_tasks * span} "
          f"(single-process check: {check}) in {elapsed:.2f} s")
    print("spread      " + ", ".join(f"pid {p}: {n}" for p, n in sorted(by_worker.items())))

    # The same PUSH/PULL pair over inproc, in this process: the transport is only a URL.
    with gsp.socket("pull", listen="inproc://demo", recv_timeout=10) as pull, \
            gsp.socket("push", dial="inproc://demo") as push:
        n = 50_000
        t0 = time.perf_counter()
        g = gevent.spawn(lambda: [push.send(b"x" * 16) for _ in range(n)])
        for _ in range(n):
            pull.recv()
        g.get()
        rate = n / (time.perf_counter() - t0)
    print(f"inproc      {n} messages at {rate:,.0f} msg/s")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--span", type=int, default=2000, help="numbers per task")
    ap.add_argument("--worker", nargs=2, metavar=("TASK_URL", "RESULT_URL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    return run(args.workers, args.tasks, args.span)


if __name__ == "__main__":
    sys.exit(main())
