"""A slowloris against a gsp REP while a good pynng REQ peer connects and makes round trips
(admission that sheds attackers, not good peers).

    python tests/tools/slowloris_probe.py [--scheme tcp|wss] [-n 2000] [--max-handshakes 256]
                                          [--handshake-timeout 1] [--json]

This process is the server: a gsp rep socket listening on 127.0.0.1 with ``handshake_timeout``
and every other option at its default (``--max-handshakes 0``: no bound). A child process (this
file with ``--attack``) keeps ``-n`` connections open against it: half send half an SP header
(on wss: the first bytes of a TLS ClientHello), half send nothing; each is reopened as soon as
the server drops it, and the child records how long each one lived (from its connect to the
end of stream or reset it saw). Once every attacker has connected, a pynng REQ (nng, its own
threads) dials the server (the time ``dial(block=True)`` took is the connect time) and makes a
round trip every 10 ms for ``--measure`` seconds; the server's open fds are sampled every 20 ms
throughout. It prints the connect time, the share of the time the server's hub waited for
a CPU (``run_queue_share``: a machine busier than its cores), the round trips (count, median, p99, failures), the fds
(listening, peak), the attackers' connections (opened, closed, the longest lifetime, the
oldest still open at the end) and the listener's counters. Both processes raise their soft
``RLIMIT_NOFILE`` to the hard limit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HALF = {"tcp": b"\x00SP\x00", "wss": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"}


def raise_nofile() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def attack(port: int, n: int, scheme: str, duration: float) -> None:
    """The child: keep ``n`` stalled connections open, reopening each as soon as it is dropped;
    print a JSON summary of their lifetimes when ``duration`` is over (or stdin closes)."""
    raise_nofile()
    sel = selectors.DefaultSelector()
    half = HALF[scheme]
    opened = closed = refused = 0
    longest = 0.0
    lifetimes: list[float] = []

    def open_one(i: int) -> None:
        nonlocal opened
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        opened += 1
        # (index, opened at, sent yet): the half ones send once the connect completes.
        sel.register(s, selectors.EVENT_WRITE if i % 2 else selectors.EVENT_READ,
                     [i, time.monotonic(), False])

    for i in range(n):
        open_one(i)
    print("ready", flush=True)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        for key, events in sel.select(0.05):
            s: Any = key.fileobj
            i, t0, sent = key.data
            if events & selectors.EVENT_WRITE and not sent:
                try:
                    s.send(half)
                except OSError:
                    pass
                key.data[2] = True
                sel.modify(s, selectors.EVENT_READ, key.data)
                continue
            try:
                data = s.recv(4096)
                if data:
                    continue  # the server's own handshake bytes: still open
            except BlockingIOError:
                continue
            except OSError as exc:
                refused += exc.errno == 111
            now = time.monotonic()
            life = now - t0
            longest = max(longest, life)
            lifetimes.append(life)
            closed += 1
            sel.unregister(s)
            s.close()
            open_one(i)
    now = time.monotonic()
    still = [now - k.data[1] for k in sel.get_map().values()]
    lifetimes.sort()
    print(json.dumps({
        "opened": opened, "closed": closed, "refused": refused,
        "longest_s": round(longest, 3),
        "p50_s": round(lifetimes[len(lifetimes) // 2], 3) if lifetimes else None,
        "p99_s": round(lifetimes[int(len(lifetimes) * 0.99)], 3) if lifetimes else None,
        "open_at_end": len(still), "oldest_open_s": round(max(still, default=0.0), 3),
    }), flush=True)
    for k in list(sel.get_map().values()):
        k.fileobj.close()  # type: ignore[union-attr]


def run_delay() -> float:
    """Seconds this process's main thread (the hub's) has waited in the run queue for a CPU
    (/proc/self/schedstat)."""
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def good_peer(req: Any, url: str, measure: float) -> dict[str, Any]:
    """The pynng REQ dials ``url`` (timed), then makes a round trip every 10 ms."""
    import gevent
    import pynng

    from tests.support import nng

    out: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        nng.run(req.dial, url, block=True)
        out["connect_s"] = round(time.monotonic() - t0, 3)
    except pynng.NNGException as exc:
        out["connect_s"] = None
        out["connect_error"] = f"{exc} (after {time.monotonic() - t0:.1f} s)"
        return out
    rtts: list[float] = []
    failures = 0
    end = time.monotonic() + measure
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            nng.run(req.send, b"ping")
            assert nng.run(req.recv) == b"ping"
            rtts.append((time.monotonic() - t) * 1000)
        except pynng.NNGException:
            failures += 1
        gevent.sleep(0.01)
    rtts.sort()
    out["round_trips"] = {
        "count": len(rtts), "failures": failures,
        "median_ms": round(statistics.median(rtts), 2) if rtts else None,
        "p99_ms": round(rtts[int(len(rtts) * 0.99)], 2) if rtts else None}
    return out


def serve(args: argparse.Namespace) -> dict[str, Any]:
    import gevent
    import pynng

    import gsp
    from tests.support import nng
    from tests.support.certs import make_pki

    limits = raise_nofile()
    options: dict[str, Any] = {"handshake_timeout": args.handshake_timeout,
                               "max_handshakes": args.max_handshakes}
    tmp = tempfile.TemporaryDirectory()
    url = "tcp://127.0.0.1:0"
    dial_tls = None
    if args.scheme == "wss":
        pki = make_pki(Path(tmp.name))
        options.update(pki.listen_options())
        url = "wss://127.0.0.1:0/sp"
        dial_tls = pki.nng_client()
    rep = gsp.socket("rep", recv_timeout=None)
    lst = rep.listen(url, **options)
    port = int(lst.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])

    def serve_loop() -> None:
        while True:
            try:
                rep.send(rep.recv())
            except gsp.GspError:
                if rep.closed:
                    return

    server_g = gevent.spawn(serve_loop)
    req = pynng.Req0(recv_timeout=10000, send_timeout=10000, reconnect_time_min=50,
                     reconnect_time_max=200)
    if dial_tls is not None:
        req.tls_config = dial_tls
    base_fds = _fds()
    peak = [base_fds]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], _fds())
            gevent.sleep(0.02)

    sampler = gevent.spawn(sample)
    child = subprocess.Popen(
        [sys.executable, __file__, "--attack", str(port), "-n", str(args.n), "--scheme",
         args.scheme, "--duration", str(args.measure + args.warmup + 0.5)],
        stdout=subprocess.PIPE, text=True)
    out: dict[str, Any] = {"scheme": args.scheme, "nofile": list(limits), "n": args.n,
                           "max_handshakes": args.max_handshakes,
                           "handshake_timeout": args.handshake_timeout, "base_fds": base_fds}
    try:
        assert child.stdout is not None
        ready = nng.run(child.stdout.readline)
        assert ready.strip() == "ready", ready
        cpu0, t0, wait0 = time.process_time(), time.monotonic(), run_delay()
        gevent.sleep(args.warmup)  # the attack in full swing
        out.update(good_peer(req, lst.url, args.measure))
        wall = time.monotonic() - t0
        out["server_cpu"] = round((time.process_time() - cpu0) / wall, 2)
        # The share of the time the server's hub waited for a CPU (load above the cores): the
        # test stretches its time bounds by 1 / (1 - this), as if the server had had a core.
        out["run_queue_share"] = round((run_delay() - wait0) / wall, 2)
        out["peak_fds"] = peak[0]
        out["pipes"] = len(rep.pipes)
        out["listener"] = {k: v for k, v in lst.stats.items()
                           if k.startswith(("accepted", "handshake"))}
    finally:
        try:
            summary, _ = child.communicate(timeout=args.measure + args.warmup + 30)
        except subprocess.TimeoutExpired:
            child.kill()
            summary, _ = child.communicate()
        sampler.kill()
        req.close()
        rep.close()
        server_g.kill()
        tmp.cleanup()
    lines = [ln for ln in summary.splitlines() if ln.startswith("{")]
    out["attackers"] = json.loads(lines[-1]) if lines else {"error": summary[-500:]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", choices=sorted(HALF), default="tcp")
    ap.add_argument("-n", type=int, default=2000, help="stalled connections (half, half)")
    ap.add_argument("--max-handshakes", type=int, default=256)
    ap.add_argument("--handshake-timeout", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of attack before the peer")
    ap.add_argument("--measure", type=float, default=4.0, help="seconds of round trips")
    ap.add_argument("--attack", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--duration", type=float, default=10.0, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.attack:
        attack(args.attack, args.n, args.scheme, args.duration)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    r = serve(args)
    print(json.dumps(r) if args.json else json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
