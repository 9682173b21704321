"""A storm of bad connections against six gsp listeners, then the time a good peer takes to get a
message through: the accept path must dispose of dead and bad connections at the speed of the
kernel, not queue good peers behind them (docs/reliability.md, admission control).

    python tests/tools/storm_probe.py [--rounds 1] [--duration 10] [--rate 1500] [--procs 3]
                                      [--greenlets 16] [--storm-on pull-tcp,...]
                                      [--py-spy FILE] [--json]

This process is the server: a gsp pull, rep and sub socket, each listening on tcp (127.0.0.1)
and on an ipc path, every option at its default (the listen backlog is 4,096). Each round,
``--procs`` child processes (this file with ``--storm``), ``--greenlets`` greenlets each, open
about ``--rate`` connections a second in all for ``--duration`` seconds, spread over the six
listeners (or those ``--storm-on`` names), and close each at once after sending one of: nothing (closed with a FIN, or reset
with a RST), random bytes, half an SP header, or a valid SP header of the listener's peer
followed by a frame announcing a huge length.
When the children have exited, a good pynng Push0 and a good gsp push socket each dial the pull
listener on tcp and send one message; a peer's time is from the start of its dial to the pull
socket's receipt of its message (``--peer-timeout`` at most). Then the server waits until it has
accepted every connection the storm made (``drain_s``; at most ``--drain-timeout``).

Per round it prints the storm's connections (made, by kind, connects that failed), each peer's
time, the connections accepted when the storm stopped and when the peers got through, the share
of the time until then that this process waited for a CPU (``run_queue_share``), the drain
time and rate, the log records of WARNING and above the gsp loggers emitted, and the listeners'
counters. ``--py-spy FILE`` samples this process with py-spy (pip install py-spy) through the
rounds, writes the collapsed stacks to FILE and prints the functions with the most samples,
where they ran (self) and under them (total).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import random
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: What a storm connection sends before it closes, by kind (the valid header's protocol is the
#: listener's peer's: ``{peer}`` is filled in per listener).
KINDS = ("closed", "reset", "garbage", "half", "huge")
HALF = b"\x00SP\x00"
LISTENERS = ["pull-tcp", "pull-ipc", "rep-tcp", "rep-ipc", "sub-tcp", "sub-ipc"]


def raise_nofile() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def payload(kind: str, peer: int, ipc: bool, rng: random.Random) -> bytes:
    """The bytes a storm connection of ``kind`` sends to a listener whose peer protocol is
    ``peer`` before it closes."""
    if kind in ("closed", "reset"):
        return b""
    if kind == "garbage":
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    if kind == "half":
        return HALF
    header = struct.pack(">4sH2s", HALF, peer, b"\0\0")
    huge = struct.pack(">BQ", 1, 1 << 62) if ipc else struct.pack(">Q", 1 << 62)
    return header + huge + b"x" * 16


def storm(targets: list[list[Any]], duration: float, rate: float, greenlets: int,
          seed: int) -> dict[str, Any]:
    """The child: ``greenlets`` greenlets open ``rate`` connections a second in all for
    ``duration`` seconds, round robin over ``targets`` ([url, peer protocol] pairs), each
    sending one kind's bytes and closing; returns the counts."""
    import gevent
    from gevent import socket as gsocket

    raise_nofile()
    made = [0] * len(targets)
    kinds: collections.Counter[str] = collections.Counter()
    failed = collections.Counter[str]()
    end = time.monotonic() + duration
    period = greenlets / rate if rate else 0.0  # each greenlet's interval (0: no pause)

    def one(g: int) -> None:
        rng = random.Random(seed * 1000 + g)
        i = g
        due = time.monotonic() + rng.random() * period
        while True:
            now = time.monotonic()
            if now >= end:
                return
            if due > now:
                gevent.sleep(due - now)
            elif not period:
                gevent.sleep(0)
            due += period
            t = i % len(targets)
            url, peer = targets[t]
            kind = KINDS[(i // len(targets)) % len(KINDS)]
            i += greenlets
            ipc = url.startswith("ipc://")
            s = gsocket.socket(gsocket.AF_UNIX if ipc else gsocket.AF_INET, gsocket.SOCK_STREAM)
            s.settimeout(1.0)
            try:
                if ipc:
                    s.connect(url[len("ipc://"):])
                else:
                    host, port = url[len("tcp://"):].rsplit(":", 1)
                    s.connect((host, int(port)))
                made[t] += 1
                kinds[kind] += 1
                data = payload(kind, peer, ipc, rng)
                if data:
                    s.sendall(data)
                if kind == "reset":  # closes with a RST, not a FIN
                    s.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError as exc:
                failed[type(exc).__name__] += 1
            finally:
                s.close()

    gevent.joinall([gevent.spawn(one, g) for g in range(greenlets)])
    return {"made": made, "kinds": dict(kinds), "failed": dict(failed)}


def run_delay() -> float:
    """Seconds this process's main thread (the hub's) has waited in the run queue for a CPU
    (/proc/self/schedstat)."""
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _accepted(listeners: list[Any]) -> int:
    """Connections the listeners took from the kernel's queue: accepted, or failed at accept
    (a peer that reset the connection while it waited there)."""
    return sum(st["accepted"] + st["accept_failures"] for st in (lst.stats for lst in listeners))


class _Count(logging.Handler):
    """Counts the records that reach it, by level name."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1


def good_peers(url: str, got: dict[bytes, float], timeout: float) -> dict[str, Any]:
    """A pynng Push0 and a gsp push socket dial ``url`` at once and each send a message; the
    seconds from each one's dial to the pull socket's receipt (``got``: token -> when)."""
    import gevent
    import pynng

    import gsp
    from tests.support import nng

    t0 = time.monotonic()
    out: dict[str, Any] = {}

    def via_pynng() -> None:
        token = os.urandom(8)
        with pynng.Push0(send_timeout=int(timeout * 1000)) as push:
            try:
                nng.run(push.dial, url, block=False)
                nng.run(push.send, token)
            except pynng.NNGException as exc:
                out["pynng_error"] = str(exc)
                return
            arrived(token, "pynng")

    def via_gsp() -> None:
        token = os.urandom(8)
        with gsp.socket("push", send_timeout=timeout, handshake_timeout=timeout) as push:
            try:
                push.dial(url, background=True)
                push.send(token)
            except gsp.GspError as exc:
                out["gsp_error"] = str(exc)
                return
            arrived(token, "gsp")

    def arrived(token: bytes, who: str) -> None:
        while token not in got and time.monotonic() - t0 < timeout:
            gevent.sleep(0.002)
        when = got.get(token)
        out[f"{who}_s"] = None if when is None else round(when - t0, 3)

    gevent.joinall([gevent.spawn(via_pynng), gevent.spawn(via_gsp)], timeout=timeout + 5)
    return out


def _spy(path: str) -> "subprocess.Popen[bytes] | None":
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(exe):
        raise SystemExit("--py-spy needs py-spy (pip install py-spy)")
    spy = subprocess.Popen([exe, "record", "--pid", str(os.getpid()), "--format", "raw",
                            "--rate", "250", "--nonblocking", "-o", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # it attaches
    return spy


def top_of_profile(path: str, n: int = 15) -> dict[str, list[list[Any]]]:
    """The functions with the most samples in py-spy's collapsed stacks at ``path``: where the
    samples ran (self) and the samples under them (total), as [function, share %]."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            k = int(count)
            samples += k
            frames = [fr.split(" (", 1)[0] + " " + fr.rsplit("/", 1)[-1].rstrip(")")
                      for fr in stack.split(";")]
            if any("importlib" in fr for fr in frames):
                continue  # a late import, not the storm's
            own[frames[-1]] += k
            for fr in set(frames):
                total[fr] += k
    pct = lambda c: [[f, round(100 * v / max(samples, 1), 1)] for f, v in c.most_common(n)]  # noqa: E731
    return {"samples": [[str(samples), 100.0]], "self": pct(own), "total": pct(total)}


def serve(args: argparse.Namespace) -> dict[str, Any]:  # noqa: C901 -- one measurement script
    import gevent
    import pynng  # noqa: F401 (imported before the profile starts: no import in it)
    from gevent import subprocess as gsub

    import gsp
    from tests.support import nng  # noqa: F401

    limits = raise_nofile()
    counter = _Count()
    gsp_log = logging.getLogger("gsp")
    gsp_log.addHandler(counter)
    gsp_log.propagate = False  # counted, not printed
    tmp = tempfile.mkdtemp(prefix="gsp-storm-")
    socks = {"pull": gsp.socket("pull"), "rep": gsp.socket("rep"), "sub": gsp.socket("sub")}
    socks["sub"].subscribe(b"")
    peers = {"pull": 0x50, "rep": 0x30, "sub": 0x20}  # push, req, pub
    listeners, targets = [], []
    for name, sock in socks.items():
        for scheme, url in (("tcp", "tcp://127.0.0.1:0"), ("ipc", f"ipc://{tmp}/{name}.ipc")):
            lst = sock.listen(url)
            listeners.append(lst)
            if f"{name}-{scheme}" in args.storm_on:
                targets.append([lst.url, peers[name]])
    good_url = listeners[0].url
    got: dict[bytes, float] = {}

    def pull_loop() -> None:
        while True:
            msg = socks["pull"].recv()
            got[msg] = time.monotonic()

    def rep_loop() -> None:
        while True:
            try:
                socks["rep"].send(socks["rep"].recv())
            except gsp.GspError:
                pass

    def sub_loop() -> None:
        while True:
            socks["sub"].recv()

    loops = [gevent.spawn(f) for f in (pull_loop, rep_loop, sub_loop)]
    spy = _spy(args.py_spy) if args.py_spy else None
    out: dict[str, Any] = {"nofile": list(limits), "duration": args.duration, "rate": args.rate,
                           "procs": args.procs, "greenlets": args.greenlets, "rounds": []}
    try:
        for r in range(args.rounds):
            before = _accepted(listeners)
            counter.counts.clear()
            t0, wait0 = time.monotonic(), run_delay()
            kids = [gsub.Popen([sys.executable, __file__, "--storm", json.dumps(targets),
                                "--duration", str(args.duration),
                                "--rate", str(args.rate / args.procs),
                                "--greenlets", str(args.greenlets), "--seed", str(r * 100 + k)],
                               stdout=gsub.PIPE, text=True) for k in range(args.procs)]
            made = [0] * len(targets)
            kinds: collections.Counter[str] = collections.Counter()
            failed: collections.Counter[str] = collections.Counter()
            for kid in kids:
                text, _ = kid.communicate(timeout=args.duration + 60)
                c = json.loads(text.strip().splitlines()[-1])
                made = [a + b for a, b in zip(made, c["made"])]
                kinds.update(c["kinds"])
                failed.update(c["failed"])
            storm_s = time.monotonic() - t0
            at_stop = _accepted(listeners) - before
            peers_out = good_peers(good_url, got, args.peer_timeout)
            at_peers = _accepted(listeners) - before
            t1 = time.monotonic()
            # The share of the round the hub waited for a CPU (a machine busier than its
            # cores): a time bound stretches by 1 / (1 - this), as if the server had had a core.
            share = (run_delay() - wait0) / (t1 - t0)
            n = sum(made)
            while _accepted(listeners) - before < n and time.monotonic() - t1 < args.drain_timeout:
                gevent.sleep(0.05)
            drained = _accepted(listeners) - before
            drain_s = time.monotonic() - t0
            stats = collections.Counter[str]()
            for lst in listeners:
                stats.update({k: v for k, v in lst.stats.items()
                              if k.startswith(("accept", "handshake")) and v})
            for sock in socks.values():
                stats.update({k: v for k, v in sock.stats.items()
                              if k.startswith(("pipes_", "dropped")) and v})
            out["rounds"].append({
                "connections": n, "rate": round(n / storm_s), "kinds": dict(kinds),
                "connect_failures": dict(failed), "storm_s": round(storm_s, 2),
                "accepted_at_stop": at_stop, "accepted_at_peers": at_peers, **peers_out,
                "run_queue_share": round(share, 2),
                "drained": drained >= n, "drain_s": round(drain_s, 2),
                "accept_rate": round(drained / drain_s),
                "log_records": dict(counter.counts), "stats": dict(stats)})
            print(json.dumps({"round": r + 1, **out["rounds"][-1]}), file=sys.stderr, flush=True)
    finally:
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its file and exits
            spy.wait(30)
        gevent.killall(loops)
        for sock in socks.values():
            sock.close()
        shutil.rmtree(tmp, ignore_errors=True)
        gsp_log.removeHandler(counter)
        gsp_log.propagate = True
    rounds = out["rounds"]
    ok = [r for r in rounds if r.get("pynng_s") is not None and r["pynng_s"] <= 1.0
          and r.get("gsp_s") is not None and r["gsp_s"] <= 1.0]
    out["rounds_within_1s"] = f"{len(ok)} of {len(rounds)}"
    for who in ("pynng", "gsp"):
        times = [r.get(f"{who}_s") for r in rounds]
        done = [t for t in times if t is not None]
        out[f"{who}_median_s"] = round(statistics.median(done), 3) if done else None
        out[f"{who}_max_s"] = max(done) if len(done) == len(times) and done else None
    if args.py_spy:
        out["profile"] = top_of_profile(args.py_spy)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of storm per round")
    ap.add_argument("--rate", type=float, default=1500.0, help="connections a second in all (0: as fast as they go)")
    ap.add_argument("--procs", type=int, default=3, help="storm processes")
    ap.add_argument("--greenlets", type=int, default=16, help="greenlets per storm process")
    ap.add_argument("--storm-on", type=lambda t: t.split(","), default=LISTENERS,
                    help=f"the listeners the storm hits (default: all six, {','.join(LISTENERS)})")
    ap.add_argument("--peer-timeout", type=float, default=10.0)
    ap.add_argument("--drain-timeout", type=float, default=60.0)
    ap.add_argument("--py-spy", metavar="FILE", help="sample this process with py-spy")
    ap.add_argument("--storm", metavar="TARGETS", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.storm:
        print(json.dumps(storm(json.loads(args.storm), args.duration, args.rate, args.greenlets,
                               args.seed)), flush=True)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    r = serve(args)
    print(json.dumps(r) if args.json else json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
