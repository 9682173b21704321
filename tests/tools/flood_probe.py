"""A flood of connections against a gsp server that keeps serving an existing peer (admission
control: ``max_pipes`` and ``max_handshakes``).

    python tests/tools/flood_probe.py -n 5000 [--max-pipes 64] [--max-handshakes 256] [--json]
    python tests/tools/flood_probe.py -n 1000 --source 127.0.0.2 --admit-cidr 127.0.0.1/32

With ``--source`` the flood's connections come from that (loopback) address; with
``--admit-cidr`` the rep socket admits only that network (``admit=``): the flood from
a refused address is closed at accept.

This process is the server: a rep socket listening on tcp with ``max_pipes`` and
``max_handshakes``, and a req socket of its own that dialed it (the existing peer) and makes a
round trip every 5 ms. After a second of that, a child process (this file with ``--flood``)
opens ``-n`` connections to the listener as fast as it can: every ``--stall-every``-th sends
nothing (a stalled handshake), the others send a REQ's SP header (would-be pipes). It holds them
for ``--hold`` seconds and exits. The server samples its own open fds and RSS every 20 ms and
prints, before / during / after the flood: fds, RSS, the good peer's round trips (count, p50,
p99, max, failures) and the socket's and listener's counters. Both processes raise their soft
``RLIMIT_NOFILE`` to the hard limit (as ``gsp bench`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import socket
import sys
import time
from typing import Any

REQ_HEADER = b"\x00SP\x00\x00\x30\x00\x00"  # a REQ's SP header: a peer of rep


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def flood(port: int, n: int, stall_every: int, hold: float, source: str | None = None) -> None:
    """The child: open ``n`` connections (from ``source`` when given), send a REQ header on all
    but every ``stall_every``-th, hold them ``hold`` seconds."""
    raise_nofile()
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if source:
            s.bind((source, 0))
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        if stall_every and i % stall_every == stall_every - 1:
            continue  # a stalled handshake: sends nothing
        sel.register(s, selectors.EVENT_WRITE)
    print(f"opened {len(socks)}", flush=True)
    end = time.monotonic() + hold
    while time.monotonic() < end:
        for key, _ in sel.select(max(0.0, end - time.monotonic())):
            s = key.fileobj  # type: ignore[assignment]
            sel.unregister(s)
            try:
                s.send(REQ_HEADER)
            except OSError:
                pass  # refused and closed already
        if not sel.get_map():
            time.sleep(max(0.0, end - time.monotonic()))
    for s in socks:
        s.close()


def _run_delay() -> float:
    """Seconds the main thread (the hub's) waited in the run queue (/proc/self/schedstat)."""
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def serve(args: argparse.Namespace) -> dict[str, Any]:  # noqa: C901 -- one measurement script
    import gevent
    from gevent import subprocess as gsub
    from gevent.fileobject import FileObjectPosix

    import gsp

    raise_nofile()
    phase = ["before"]
    rtts: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    fails: dict[str, int] = {"before": 0, "during": 0, "after": 0}
    peak: dict[str, dict[str, float]] = {k: {"fds": 0, "rss_mb": 0.0, "pipes": 0} for k in rtts}
    limits: dict[str, Any] = {} if args.no_limits else {"max_pipes": args.max_pipes,
                                                        "max_handshakes": args.max_handshakes}
    if args.admit_cidr:
        from gsp import admit

        limits["admit"] = admit.cidr(args.admit_cidr)
    with gsp.socket("rep", handshake_timeout=args.handshake_timeout, send_timeout=5,
                    **limits) as rep, \
            gsp.socket("req", recv_timeout=5, send_timeout=5, resend_time=None) as req:
        lst = rep.listen("tcp://127.0.0.1:0")
        req.dial(lst.url, fail_fast=True)
        port = int(lst.url.rsplit(":", 1)[1])

        def echo() -> None:
            while True:
                rep.send(rep.recv())

        def peer() -> None:
            while True:
                t0 = time.perf_counter()
                try:
                    req.send(b"ping")
                    req.recv()
                    rtts[phase[0]].append(time.perf_counter() - t0)
                except gsp.GspError:
                    fails[phase[0]] += 1
                gevent.sleep(0.005)

        def sample() -> None:
            while True:
                p = peak[phase[0]]
                p["fds"] = max(p["fds"], _fds())
                p["rss_mb"] = max(p["rss_mb"], _rss_mb())
                p["pipes"] = max(p["pipes"], len(rep.pipes))
                gevent.sleep(0.02)

        workers = [gevent.spawn(echo), gevent.spawn(peer), gevent.spawn(sample)]
        gevent.sleep(1.0)
        base = {"fds": _fds(), "rss_mb": _rss_mb()}
        phase[0] = "during"
        t0, cpu0, wait0 = time.monotonic(), _cpu(), _run_delay()
        child = gsub.Popen([sys.executable, __file__, "--flood", str(port), "-n", str(args.n),
                            "--stall-every", str(args.stall_every), "--hold", str(args.hold),
                            *(["--source", args.source] if args.source else [])],
                           stdout=gsub.PIPE)
        assert child.stdout is not None
        out = FileObjectPosix(child.stdout.fileno(), "r")
        opened = out.readline().strip()
        opened_s = time.monotonic() - t0
        child.wait()
        phase[0] = "after"
        t1, cpu1 = time.monotonic(), _cpu()
        gevent.sleep(1.0)
        cpu = {"during": (cpu1 - cpu0) / (t1 - t0), "after": _cpu() - cpu1}
        # The share of the flood's time the hub waited for a CPU (a machine busier than its
        # cores): the test stretches its latency bound by 1 / (1 - this).
        run_queue_share = (_run_delay() - wait0) / (time.monotonic() - t0)
        gevent.killall(workers)
        st, ls = rep.stats, lst.stats
    result: dict[str, Any] = {
        "n": args.n, "max_pipes": limits.get("max_pipes"), "source": args.source,
        "admit_cidr": args.admit_cidr,
        "max_handshakes": limits.get("max_handshakes"),
        "handshake_timeout": args.handshake_timeout, "flood": opened, "opened_in_s": opened_s,
        "base": base, "peak": peak, "cpu": cpu, "run_queue_share": run_queue_share,
        "round_trips": {k: {"count": len(v), "p50_ms": _quantile(v, 0.5) * 1e3,
                            "p99_ms": _quantile(v, 0.99) * 1e3,
                            "max_ms": max(v, default=float("nan")) * 1e3, "failures": fails[k]}
                        for k, v in rtts.items()},
        "socket": {k: st.get(k) for k in ("pipes_attached", "pipes_refused_full",
                                          "pipes_refused", "pipes_refused_address")},
        "listener": {k: ls.get(k) for k in ("accepted", "handshakes", "handshakes_shed",
                                            "pipes_refused_full", "pipes_refused_address",
                                            "handshake_failures", "handshake_failures_timeout",
                                            "handshake_failures_closed")},
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5000, help="connections in the flood")
    ap.add_argument("--max-pipes", type=int, default=64)
    ap.add_argument("--max-handshakes", type=int, default=256)
    ap.add_argument("--handshake-timeout", type=float, default=2.0)
    ap.add_argument("--stall-every", type=int, default=2,
                    help="every k-th connection sends nothing (0: none stalls)")
    ap.add_argument("--hold", type=float, default=5.0, help="seconds the flood holds its connections")
    ap.add_argument("--no-limits", action="store_true",
                    help="set neither max_pipes nor max_handshakes (also runs on a gsp without them)")
    ap.add_argument("--source", help="the flood's source address (loopback: 127.0.0.2, ...)")
    ap.add_argument("--admit-cidr", help="the socket admits only this network (admit=cidr(...))")
    ap.add_argument("--flood", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    if args.flood is not None:
        flood(args.flood, args.n, args.stall_every, args.hold, args.source)
        return
    r = serve(args)
    if args.json:
        print(json.dumps(r))
        return
    print(f"{r['n']} connections ({r['flood']} in {r['opened_in_s']:.2f} s), max_pipes "
          f"{r['max_pipes']}, max_handshakes {r['max_handshakes']}, handshake_timeout "
          f"{r['handshake_timeout']} s, from {r['source'] or '127.0.0.1'}, admit "
          f"{r['admit_cidr'] or 'everyone'}")
    print(f"listening, one peer: {r['base']['fds']} fds, {r['base']['rss_mb']:.1f} MB RSS")
    for k in ("before", "during", "after"):
        p, t = r["peak"][k], r["round_trips"][k]
        print(f"{k:>6}: peak {p['fds']:.0f} fds, {p['rss_mb']:.1f} MB; round trips {t['count']}, "
              f"p50 {t['p50_ms']:.2f} ms, p99 {t['p99_ms']:.2f} ms, max {t['max_ms']:.1f} ms, "
              f"failed {t['failures']}")
    print(f"CPU of this process: {r['cpu']['during']:.0%} during, {r['cpu']['after']:.0%} the "
          "second after")
    print("socket:", r["socket"])
    print("listener:", r["listener"])


if __name__ == "__main__":
    main()
