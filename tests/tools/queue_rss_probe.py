"""Peak RSS of a pusher and a slow puller moving big messages, each in its own process.

    python tests/tools/queue_rss_probe.py                      # 1,500 x 1 MiB over tcp
    python tests/tools/queue_rss_probe.py --scheme ipc -n 500 --size 262144

The pusher sends ``n`` distinct messages of ``size`` bytes as fast as it may; the puller takes
one every ``--delay`` seconds (a slow consumer). Both use the default queue options, so what
they hold is what ``send_buffer``/``send_buffer_size`` and ``recv_buffer``/``recv_buffer_size``
let them hold. Prints each side's peak RSS (ru_maxrss, the whole process: interpreter, gevent
and gsp included), its growth from when its socket was open, and the time taken.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import tempfile
import time


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pull(url: str, n: int, size: int, delay: float, out: "mp.Queue[tuple[str, float, float]]",
          ready: "mp.Event") -> None:  # type: ignore[type-arg]
    import gevent

    import gsp

    pull = gsp.socket("pull", listen=url, max_recv_size=0)
    ready.set()
    base = _peak_mb()
    for i in range(n):
        m = pull.recv()
        assert len(m) == size and m[0] == i % 256, "lost or reordered"
        if delay:
            gevent.sleep(delay)
    out.put(("pull", _peak_mb(), _peak_mb() - base))
    pull.close()


def _push(url: str, n: int, size: int, out: "mp.Queue[tuple[str, float, float]]") -> None:
    import gsp

    push = gsp.socket("push", dial=url)
    base = _peak_mb()
    for i in range(n):
        push.send(bytes([i % 256]) * size)  # a new message each time
    out.put(("push", _peak_mb(), _peak_mb() - base))
    push.close()  # lingers until the rest is written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="tcp", choices=["tcp", "ipc"])
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("-n", type=int, default=1500)
    ap.add_argument("--delay", type=float, default=0.002, help="seconds the puller waits a message")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        if args.scheme == "tcp":
            from gsp.testing import free_port

            url = f"tcp://127.0.0.1:{free_port()}"
        else:
            url = f"ipc://{os.path.join(d, 'probe.sock')}"
        ctx = mp.get_context("spawn")
        out: mp.Queue[tuple[str, float, float]] = ctx.Queue()
        ready = ctx.Event()
        t0 = time.monotonic()
        puller = ctx.Process(target=_pull, args=(url, args.n, args.size, args.delay, out, ready))
        puller.start()
        ready.wait(30)
        pusher = ctx.Process(target=_push, args=(url, args.n, args.size, out))
        pusher.start()
        got = {side: (peak, grew) for side, peak, grew in (out.get(timeout=600) for _ in range(2))}
        pusher.join(60)
        puller.join(60)
        took = time.monotonic() - t0
    import gsp

    print(f"{args.n} x {args.size} B over {args.scheme}, puller {args.delay * 1000:g} ms a "
          f"message ({gsp.__file__}): peak RSS pusher {got['push'][0]:.0f} MB "
          f"(grew {got['push'][1]:.0f}), puller {got['pull'][0]:.0f} MB (grew {got['pull'][1]:.0f}) "
          f"({took:.1f} s)")


if __name__ == "__main__":
    main()
