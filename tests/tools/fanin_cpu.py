"""Receiver CPU per message with several pushers into one pull over tcp (the fair queue's
several-sources path), one run:

    python tests/tools/fanin_cpu.py --pushers 2 --size 16 -n 1000000

Each pusher is its own process; the figure is the pulling process's CPU time (user + system,
``resource.getrusage``) per message, steadier than wall time on a shared machine. Run two
checkouts alternately (``PYTHONPATH=<tree>``) to compare them.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import gsp


def push(url: str, size: int, n: int) -> None:
    s = gsp.socket("push")
    s.dial(url, fail_fast=True)
    body = b"x" * size
    for _ in range(n):
        s.send(body)
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pushers", type=int, default=2)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("-n", type=int, default=1_000_000, help="messages in all")
    ap.add_argument("--push", metavar="URL", help=argparse.SUPPRESS)  # a pusher's own process
    args = ap.parse_args()
    per = args.n // args.pushers
    if args.push:
        push(args.push, args.size, per)
        return
    s = gsp.socket("pull")
    url = s.listen("tcp://127.0.0.1:0").url
    procs = [subprocess.Popen([sys.executable, __file__, "--push", url, "--size", str(args.size),
                               "-n", str(args.n), "--pushers", str(args.pushers)])
             for _ in range(args.pushers)]
    try:
        s.recv()
        n = per * args.pushers - 1
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        for _ in range(n):
            s.recv()
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        for p in procs:
            p.wait(timeout=60)
        s.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(f"{args.pushers} pushers, {args.size} B: receiver CPU {cpu / n * 1e9:.0f} ns/msg, "
          f"{n / wall / 1e6:.2f} M msg/s")


if __name__ == "__main__":
    main()
