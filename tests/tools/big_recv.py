"""A pull in this process receiving big messages from a push in a child process: MB/s, the
receiver's CPU and its page faults per message.

    python tests/tools/big_recv.py 1048576 1000
    python tests/tools/big_recv.py 65536 8000 --recv-buffer-bytes 1048576 --tune
    python tests/tools/big_recv.py 262144 3000 --url ipc:///tmp/big.sock

Run it with two checkouts alternately (``PYTHONPATH=<tree>``; the child inherits it) to compare
them. Page faults are the receiver's ``ru_minflt``: what fresh pages under each body cost.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import gevent

import gsp


def send(url: str, size: int, n: int) -> None:
    with gsp.socket("push") as push:
        push.dial(url, fail_fast=True)
        payload = b"x" * size
        for _ in range(n):
            push.send(payload)
        gevent.sleep(2)  # linger: let the queued tail reach the receiver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("size", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--recv-buffer-bytes", type=int, default=16 << 20)
    ap.add_argument("--url", default="tcp://127.0.0.1:0", help="where the pull listens")
    ap.add_argument("--tune", action="store_true", help="gsp.tune_allocator() in the receiver")
    ap.add_argument("--send-to", help=argparse.SUPPRESS)  # the child's role
    a = ap.parse_args()
    warm = 10
    if a.send_to:
        send(a.send_to, a.size, a.n + warm)
        return
    if a.tune:
        gsp.tune_allocator()
    with gsp.socket("pull", recv_buffer_size=a.recv_buffer_size) as pull:
        url = pull.listen(a.url).url
        child = subprocess.Popen([sys.executable, __file__, str(a.size), str(a.n),
                                  "--send-to", url])
        try:
            for _ in range(warm):
                pull.recv(timeout=30)
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            for _ in range(a.n):
                pull.recv(timeout=30)
            dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        finally:
            child.wait(30)
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / a.n * 1e6
    print(f"{a.size} B x {a.n}: {a.size * a.n / dt / 1e6:.0f} MB/s, receiver CPU {cpu:.1f} µs "
          f"and {(r1.ru_minflt - r0.ru_minflt) / a.n:.1f} page faults a message "
          f"(gsp from {gsp.__file__})")


if __name__ == "__main__":
    main()
