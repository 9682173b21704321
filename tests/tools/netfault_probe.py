"""gsp's protocols through a network that misbehaves: random loss, a partition that heals, a peer
whose host vanishes (no RST), a rate limit.

    unshare -rn python tests/tools/netfault_probe.py SCENARIO [--scheme tcp] [--loss 10] ...

Runs in a network namespace of its own (``unshare -rn``: as root on CI, or in a user namespace
elsewhere), where it brings ``lo`` up and shapes it with tc: a ``clsact`` qdisc with a classic-BPF
direct-action filter on ingress (random loss: cBPF's random ancillary load against a threshold;
a black hole: ``ret #2``, TC_ACT_SHOT, for every packet, or for one TCP port either way) and a
``tbf`` qdisc for a rate limit. This kernel has no netem and no gact, which is why. It prints one
JSON report of the scenario; tests/transports/test_netfaults.py asserts on it. The namespace, its filters
and the probe's sockets die with the process, whatever happens.

Scenarios (each states what it measures; the invariants are the test's):

- ``loss``: ``--loss`` % of packets dropped at random while each protocol carries its traffic:
  req/rep (8 contexts, 25 requests each; which reply each got), push/pull, pub/sub, pair1, bus
  (every message and its order), surveyor/respondent (every survey and its answers); on tcp
  also push/pull and req/rep (resend on and off) over udp://, which does not retransmit (what
  the filter dropped), and the segments TCP retransmitted meanwhile.
- ``partition``: an idle req/rep pipe, then a black hole for ``--partition`` s, a request sent
  into it; then it heals. Time the listener's end took to notice (keepalive), the time from the
  heal to the reply, the requests that failed. ``--no-resend`` / ``--reconnect-time`` turn
  resend off / redials slow.
- ``partition-push``: a push dialed to two pulls; one pull cut off (its port black-holed) for
  ``--partition`` s, a message every 5 ms: what each pull got before, during and after, and
  until when (from the cut) what was sent got lost.
- ``partition-others``: bus, pair1 and surveyor/respondent through one partition of one peer
  each (``--partition`` s, then ``--after`` s): what the cut-off and the reachable peers got,
  and when each cut-off peer was served again; ``--reconnect-time`` for the redials.
- ``vanish``: a req dialed to two reps; one rep's host vanishes (its port black-holed, no RST)
  while idle; time to notice (keepalive; ``--no-keepalive``), and ``--requests`` then, each
  answered.
- ``partition-pub``: pub/sub through a ``--partition`` s partition, a message every 2 ms: what a
  subscriber lost before, during and after it (messages per second of partition), duplicates,
  order; ``--reconnect-time`` for the subscriber's redials.
- ``rate``: a ``tbf`` rate limit (``--rate`` kbit/s; 0: none, the baseline): push/pull of 200
  messages of 4 KiB, in order, none lost, and the throughput.

``--user-timeout`` sets ``tcp_user_timeout`` on every tcp/tls+tcp endpoint of a scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from netns import lo_is_up, tool  # noqa: E402 (this directory: the script's own, first on sys.path)

import gsp  # noqa: E402

KEEPALIVE = {"tcp_keepalive_idle": 1, "tcp_keepalive_interval": 1, "tcp_keepalive_count": 2}


class Net:
    """tc on this namespace's ``lo``: one ingress filter at a time (replaced), a tbf root qdisc."""

    def __init__(self) -> None:
        if socket.if_nameindex() != [(1, "lo")] or lo_is_up():
            raise SystemExit("netfault_probe: run me in a fresh network namespace "
                             "(unshare -rn python tests/tools/netfault_probe.py ...)")
        self.ip, self.tc = tool("ip"), tool("tc")
        self._run(self.ip, "link", "set", "lo", "up")
        self._run(self.tc, "qdisc", "add", "dev", "lo", "clsact")
        self.filtered = False

    @staticmethod
    def _run(*argv: str) -> None:
        subprocess.run(argv, check=True, timeout=10)

    def _filter(self, bytecode: str) -> None:
        self.clear()
        self._run(self.tc, "filter", "add", "dev", "lo", "ingress", "bpf", "da", "bytecode",
                  bytecode)
        self.filtered = True

    def loss(self, percent: float) -> None:
        """Drop ``percent`` % of the packets arriving on lo, at random (cBPF: A = random u32;
        drop if A > threshold)."""
        threshold = int((1 - percent / 100) * (1 << 32)) - 1
        self._filter(f"4,32 0 0 4294963256,37 0 1 {threshold},6 0 0 2,6 0 0 0")

    def black_hole(self) -> None:
        self._filter("1,6 0 0 2")

    def block_port(self, *ports: int) -> None:
        """Drop every TCP/IPv4 packet from or to any of ``ports``. cls_bpf shows a classic
        program the packet from its link-layer header at ingress too (lo's 14 bytes), then a
        20-byte IP header (loopback's carry no options): the ports are at 34 and 36. The program:
        load the source port, jump to the drop at the end on a match with any; the same for
        the destination port; else pass (``ret #0``)."""
        n = len(ports)
        drop = 3 + 2 * n  # the last instruction's index
        prog = ["40 0 0 34"] + [f"21 {drop - 1 - (1 + i)} 0 {p}" for i, p in enumerate(ports)]
        prog += ["40 0 0 36"] + [f"21 {drop - 1 - (2 + n + i)} 0 {p}"
                                 for i, p in enumerate(ports)]
        prog += ["6 0 0 0", "6 0 0 2"]
        self._filter(f"{len(prog)}," + ",".join(prog))

    def clear(self) -> None:
        if self.filtered:
            self._run(self.tc, "filter", "del", "dev", "lo", "ingress")
            self.filtered = False

    def rate(self, kbit: int) -> None:
        """A token bucket on lo's egress; lo's MTU down to Ethernet's, so that a packet fits the
        bucket (tbf drops what is bigger than its burst)."""
        self._run(self.ip, "link", "set", "lo", "mtu", "1500")
        self._run(self.tc, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{kbit}kbit",
                  "burst", "32kb", "latency", "2s")


def _url(scheme: str) -> str:
    return {"tcp": "tcp://127.0.0.1:0", "tls+tcp": "tls+tcp://127.0.0.1:0",
            "ws": "ws://127.0.0.1:0/sp", "wss": "wss://127.0.0.1:0/sp"}[scheme]


class Setup:
    """Listen and dial options for a scheme (TLS files when given)."""

    def __init__(self, scheme: str, tls: list[str] | None, keepalive: bool,
                 user_timeout: float | None = None) -> None:
        self.scheme = scheme
        ka: dict[str, Any] = dict(KEEPALIVE) if keepalive else {"tcp_keepalive": False}
        ka["tcp_user_timeout"] = user_timeout
        if scheme in ("ws", "wss"):
            ka = {}  # ws keeps its connections alive its own way (ws pings; not these options)
        self.listen: dict[str, Any] = dict(ka)
        self.dial: dict[str, Any] = dict(ka)
        if scheme in ("tls+tcp", "wss"):
            assert tls is not None, "--tls CA CERT KEY for tls+tcp and wss"
            ca, cert, key = tls
            self.listen.update(tls_cert_file=cert, tls_key_file=key)
            self.dial.update(tls_ca_file=ca)

    def pair(self, lproto: str, dproto: str, n: int = 1, client: dict[str, Any] | None = None,
             **opts: Any) -> tuple[gsp.Socket, list[gsp.Socket], gsp.Listener]:
        """A ``lproto`` socket listening, ``n`` ``dproto`` sockets dialed to it (``opts`` for
        all, ``client`` for the dialing ones only)."""
        srv = gsp.socket(lproto, **opts)
        lst = srv.listen(_url(self.scheme), **self.listen)
        clients = []
        for _ in range(n):
            c = gsp.socket(dproto, **opts, **(client or {}))
            c.dial(lst.url, fail_fast=True, **self.dial)
            clients.append(c)
        deadline = time.monotonic() + 10
        while len(srv.pipes) < n and time.monotonic() < deadline:
            gevent.sleep(0.01)
        return srv, clients, lst


def port_of(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


Phases = dict[str, tuple[float, float]]  # phase -> (start, end), monotonic seconds
Timed = list[tuple[float, int]]  # (when, message number)


def _receiver(sock: gsp.Socket, got: Timed) -> None:
    """Receive numbered messages for good, each with when it came (not when it was awaited)."""
    while True:
        body = sock.recv()
        got.append((time.monotonic(), int(body)))


def _answerer(sock: gsp.Socket, name: bytes) -> None:
    """Answer every request or survey with ``name:`` and its body, for good."""
    while True:
        sock.send(name + b":" + sock.recv())


def _echo(sock: gsp.Socket) -> None:
    """Send every message back, for good."""
    while True:
        sock.send(sock.recv())


# -- loss -----------------------------------------------------------------------------------------

def loss_reqrep(st: Setup) -> dict[str, Any]:
    rep, (req,), _ = st.pair("rep", "req", recv_timeout=30, send_timeout=30,
                             client={"resend_time": 1.0})
    served = [0]

    def serve() -> None:
        while True:
            rep.send(rep.recv())
            served[0] += 1

    server = gevent.spawn(serve)
    got: dict[int, list[bytes]] = {}

    def client(i: int) -> None:
        ctx = req.open_context()
        got[i] = []
        for j in range(25):
            body = b"%d.%d" % (i, j)
            ctx.send(body)
            got[i].append(ctx.recv())
        ctx.close()

    t0 = time.monotonic()
    gevent.joinall([gevent.spawn(client, i) for i in range(8)], raise_error=True)
    took = time.monotonic() - t0
    server.kill()
    wrong = sum(r != b"%d.%d" % (i, j) for i, rs in got.items() for j, r in enumerate(rs))
    out = {"requests": 200, "replies": sum(map(len, got.values())), "wrong_context": wrong,
           "served": served[0], "seconds": round(took, 2)}
    req.close()
    rep.close()
    return out


def _stream(st: Setup, lproto: str, dproto: str, n: int, send_side: str,
            **opts: Any) -> dict[str, Any]:
    """``n`` numbered messages from one end to the other: received count, duplicates, order."""
    srv, (cli,), _ = st.pair(lproto, dproto, recv_timeout=10, send_timeout=10, **opts)
    if dproto == "sub":
        cli.subscribe(b"")
        gevent.sleep(0.2)
    tx, rx = (srv, cli) if send_side == "listener" else (cli, srv)
    got: list[int] = []

    def recv() -> None:
        try:
            while len(got) < n:
                got.append(int(rx.recv()))
        except gsp.Timeout:
            pass

    g = gevent.spawn(recv)
    t0 = time.monotonic()
    for i in range(n):
        tx.send(b"%d" % i)
    g.join(timeout=30)
    out = {"sent": n, "received": len(got), "duplicates": len(got) - len(set(got)),
           "in_order": got == sorted(got), "seconds": round(time.monotonic() - t0, 2)}
    srv.close()
    cli.close()
    return out


def loss_survey(st: Setup) -> dict[str, Any]:
    sur, resps, _ = st.pair("surveyor", "respondent", n=3, recv_timeout=None, send_timeout=10)
    # A survey ends when its three answers are in; the 10 s are for a segment TCP has to
    # resend three or four times over (0.2 + 0.4 + 0.8 + 1.6 s: with 3 s, one survey of 20 went
    # unanswered by one respondent in a CI run at 10 % loss).
    sur.survey_time = 10
    sur.recv_timeout = 10

    workers = [gevent.spawn(_answerer, r, b"%d" % i) for i, r in enumerate(resps)]
    complete = dup = 0
    for k in range(20):
        sur.send(b"%d" % k)
        answers = []
        try:
            while len(answers) < 3:
                answers.append(sur.recv())
        except (gsp.Timeout, gsp.ProtocolStateError):
            pass
        dup += len(answers) - len(set(answers))
        complete += sorted(answers) == [b"%d:%d" % (i, k) for i in range(3)]
    gevent.killall(workers)
    for s in (sur, *resps):
        s.close()
    return {"surveys": 20, "complete": complete, "duplicates": dup}


def loss_udp() -> dict[str, Any]:
    """push/pull over udp://, which does not retransmit: what the filter drops is lost. The
    filter's own proof, where TCP's retransmissions hide it."""
    pull = gsp.socket("pull", recv_timeout=None)
    url = pull.listen("udp://127.0.0.1:0").url
    push = gsp.socket("push", send_timeout=10)
    push.dial(url, fail_fast=True)
    n = 500
    got: list[int] = []

    def recv() -> None:
        while True:
            got.append(int(pull.recv()))

    g = gevent.spawn(recv)
    for i in range(n):
        push.send(b"%d" % i)
        gevent.sleep(0.001)  # (paced: no loss in a full socket buffer, only the filter's)
    # Until nothing more came in three looks 0.3 s apart (not a receive timeout: a hub starved
    # by a busy machine for that long would end the count early).
    quiet, last, deadline = 0, -1, time.monotonic() + 30
    while quiet < 3 and time.monotonic() < deadline:
        gevent.sleep(0.3)
        quiet, last = (quiet + 1, last) if len(got) == last else (0, len(got))
    g.kill()
    push.close()
    pull.close()
    return {"sent": n, "received": len(got), "duplicates": len(got) - len(set(got))}


def loss_udp_reqrep(resend: float | None, n: int = 50) -> dict[str, Any]:
    """req/rep over udp://: ``n`` requests; with ``resend`` (resend_time) a lost request or
    reply is sent again (each request given 5 s: 25 tries), without it the request times out
    (given 1 s)."""
    wait = 1 if resend is None else 5
    rep = gsp.socket("rep", recv_timeout=None, send_timeout=wait)
    url = rep.listen("udp://127.0.0.1:0").url
    req = gsp.socket("req", resend_time=resend, recv_timeout=wait, send_timeout=wait)
    req.dial(url, fail_fast=True)
    server = gevent.spawn(_echo, rep)
    answered = wrong = failed = 0
    for i in range(n):
        try:
            req.send(b"%d" % i)
            reply = req.recv()
        except gsp.Timeout:
            failed += 1
            continue
        answered += 1
        wrong += reply != b"%d" % i  # (a late reply to an earlier request is never this one's)
    server.kill()
    req.close()
    rep.close()
    return {"requests": n, "answered": answered, "wrong": wrong, "failed": failed}


def tcp_retransmissions() -> int:
    """Segments TCP retransmitted in this namespace so far (/proc/net/snmp is per namespace)."""
    lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines()
             if ln.startswith("Tcp:")]
    return int(lines[1][lines[0].index("RetransSegs")])


def scenario_loss(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    net.loss(args.loss)
    retrans = tcp_retransmissions()
    out: dict[str, Any] = {"loss_percent": args.loss, "reqrep": loss_reqrep(st)}
    if st.scheme == "tcp":
        out["pushpull"] = _stream(st, "pull", "push", 500, "dialer")
        out["pubsub"] = _stream(st, "pub", "sub", 500, "listener")
        out["pair1"] = _stream(st, "pair1", "pair1", 500, "dialer")
        out["bus"] = _stream(st, "bus", "bus", 500, "listener")
        out["survey"] = loss_survey(st)
        out["udp_pushpull"] = loss_udp()
        out["udp_reqrep"] = loss_udp_reqrep(0.2)
        out["udp_reqrep_no_resend"] = loss_udp_reqrep(None)
    out["tcp_retransmitted_segments"] = tcp_retransmissions() - retrans
    net.clear()
    return out


# -- a partition that heals -------------------------------------------------------------------------

def scenario_partition(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    resend = None if args.no_resend else 1.0
    rep, (req,), lst = st.pair("rep", "req", recv_timeout=args.partition + 8, send_timeout=5,
                               client={"resend_time": resend,
                                       "reconnect_time": args.reconnect_time,
                                       "max_reconnect_time": args.reconnect_time})
    detached: list[float] = []
    rep.on_pipe_event(lambda ev, p: detached.append(time.monotonic())
                      if ev is gsp.PipeEvent.DETACHED else None)

    server = gevent.spawn(_echo, rep)
    req.send(b"before")
    assert req.recv() == b"before"
    t0 = time.monotonic()
    net.black_hole()
    gevent.sleep(0.5)
    result: dict[str, Any] = {}

    def ask() -> None:
        try:
            req.send(b"during")
            result["reply"] = req.recv().decode()
        except gsp.GspError as exc:
            result["error"] = type(exc).__name__
        result["at"] = time.monotonic()

    g = gevent.spawn(ask)
    gevent.sleep(max(args.partition - 0.5, 0))
    healed = time.monotonic()
    net.clear()
    g.join(timeout=args.partition + 10)
    out = {
        "partition_s": args.partition, "resend_time": resend,
        "reconnect_time": args.reconnect_time,
        "listener_noticed_after": round(detached[0] - t0, 2) if detached else None,
        "reply": result.get("reply"), "error": result.get("error"),
        "recovered_after_heal": round(result["at"] - healed, 2) if "reply" in result else None,
    }
    server.kill()
    req.close()
    rep.close()
    return out


def scenario_partition_pub(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    pub, (sub,), _ = st.pair("pub", "sub", recv_timeout=args.partition + 10, send_timeout=5,
                             client={"reconnect_time": args.reconnect_time,
                                     "max_reconnect_time": args.reconnect_time,
                                     # a dial into the partition gives up after 1 s (its
                                     # connect shares the handshake's bound), not after
                                     # the SYN's own retries
                                     "handshake_timeout": 1.0})
    sub.subscribe(b"")
    gevent.sleep(0.2)
    got: Timed = []

    def recv() -> None:
        try:
            while True:
                body = sub.recv()
                got.append((time.monotonic(), int(body)))
        except gsp.Timeout:
            pass

    g = gevent.spawn(recv)
    sent = 0
    phases: dict[str, tuple[int, int]] = {}
    cut = 0.0
    for phase, seconds in (("before", 1.0), ("partition", args.partition), ("after", 4.0)):
        if phase == "partition":
            cut = time.monotonic()
            net.black_hole()
        elif phase == "after":
            net.clear()
        first = sent
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pub.send(b"%d" % sent)
            sent += 1
            gevent.sleep(0.002)
        phases[phase] = (first, sent)
    pub.send(b"%d" % sent)  # (the receiver's last)
    deadline = time.monotonic() + 10
    while (not got or got[-1][1] < sent - 1) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    g.kill()
    seen = [i for _, i in got]
    have = set(seen)
    lost = {ph: sum(i not in have for i in range(a, b)) for ph, (a, b) in phases.items()}
    lost["before"], at_cut = _lost_before(set(range(*phases["before"])), got, cut)
    out = {"partition_s": args.partition, "sent": sent, "received": len(got),
           "sent_by_phase": {ph: b - a for ph, (a, b) in phases.items()},
           "duplicates": len(got) - len(have), "in_order": seen == sorted(seen), "lost": lost,
           "in_flight_at_cut": at_cut, "received_before_cut": sum(t < cut for t, _ in got),
           "lost_per_partition_second": round(lost["partition"] / args.partition, 1)}
    pub.close()
    sub.close()
    return out


def scenario_partition_push(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    """push dialed to two pulls; one pull is cut off (its port black-holed) for ``--partition``
    s while a message goes every 5 ms: where the messages went, per phase."""
    a, b = gsp.socket("pull", recv_timeout=None), gsp.socket("pull", recv_timeout=None)
    la = a.listen(_url(st.scheme), **st.listen)
    lb = b.listen(_url(st.scheme), **st.listen)
    push = gsp.socket("push", send_timeout=5, reconnect_time=0.1, max_reconnect_time=0.5)
    push.dial(la.url, fail_fast=True, **st.dial)
    push.dial(lb.url, fail_fast=True, **st.dial)
    got: dict[str, Timed] = {"a": [], "b": []}
    workers = [gevent.spawn(_receiver, a, got["a"]), gevent.spawn(_receiver, b, got["b"])]
    sent = 0
    marks: dict[str, float] = {}
    first: dict[str, int] = {}  # the first message number sent in each phase
    failed = 0
    when: list[float] = []  # each message's send time
    for phase, seconds in (("before", 1.0), ("partition", args.partition), ("after", 2.0)):
        if phase == "partition":
            net.block_port(port_of(la.url))
        elif phase == "after":
            net.clear()
        marks[phase] = time.monotonic()
        first[phase] = sent
        end = marks[phase] + seconds
        while time.monotonic() < end:
            try:
                push.send(b"%d" % sent)
            except gsp.GspError:
                failed += 1
            when.append(time.monotonic())
            sent += 1
            gevent.sleep(0.005)
    marks["end"] = time.monotonic()
    first["end"] = sent
    gevent.sleep(2.0)
    gevent.killall(workers)

    def during(name: str, start: str, stop: str) -> int:
        """Messages sent in phase ``start`` and received before phase ``stop`` began."""
        return sum(first[start] <= i < first[stop] and t < marks[stop] for t, i in got[name])

    seen = [i for name in got for _, i in got[name]]
    out = {"partition_s": args.partition, "sent": sent, "send_failures": failed,
           "received": len(seen), "duplicates": len(seen) - len(set(seen)),
           "in_order_per_pull": all([i for _, i in got[n]] == sorted(i for _, i in got[n])
                                    for n in got),
           "b_during_partition": during("b", "partition", "after"),
           "a_during_partition": during("a", "partition", "after"),
           # (received after the heal, whenever sent: what the partition held back, too)
           "a_after": sum(marks["after"] <= t < marks["end"] for t, _ in got["a"]),
           "lost": sent - len(set(seen)),
           # the last message lost, in seconds from the cut: from then on work went elsewhere
           "lost_until": round(max(when[i] for i in set(range(sent)) - set(seen))
                               - marks["partition"], 2) if len(set(seen)) < sent else None}
    for s in (push, a, b):
        s.close()
    net.clear()
    return out


def _sender(sock: gsp.Socket, due: Timed, stop: Event, pace: float) -> None:
    """Send a numbered message every ``pace`` s until ``stop``, by the clock: a wake-up that
    came late (a busy machine) sends the messages due meanwhile, up to 4 at once, so that the
    count sent does not shrink with the CPU the probe gets. ``due`` gets the accepted ones (a
    send that timed out, pair1 waiting for its peer, was promised nothing)."""
    i, t0 = 0, time.monotonic()
    while not stop.is_set():
        for _ in range(min(4, max(1, int((time.monotonic() - t0) / pace) - i))):
            try:
                sock.send(b"%d" % i)
                due.append((time.monotonic(), i))
            except gsp.Timeout:
                pass
            i += 1
        gevent.sleep(pace)


def _surveyor(sur: gsp.Socket, surveys: Timed, answers: list[tuple[float, int, bytes]],
              stop: Event) -> None:
    """A survey as soon as the last one's ``survey_time`` ended; every answer, with when it
    came and the survey that was current."""
    k = 0
    while not stop.is_set():
        try:
            sur.send(b"%d" % k)
            surveys.append((time.monotonic(), k))
            while True:
                answers.append((time.monotonic(), k, sur.recv()))
        except (gsp.Timeout, gsp.ProtocolStateError):
            pass  # not sent, or the survey is over
        k += 1


def _lost_before(sent_before: set[int], got: Timed, cut: float) -> tuple[int, int]:
    """What a stream lost while its pipe was up, and what the cut caught on its way.

    ``send()`` returning means the message is queued for the pipe, not that it crossed the
    network: the last few sent before the cut may still wait in the pipe's queue or the kernel's
    when the filter goes up, and are lost with the pipe. So a message sent before the cut counts
    as lost before it only if a later one crossed before the cut (a hole in what the pipe carried
    while it was up); the missing tail after the last one that crossed is counted apart, as in
    flight at the cut."""
    have = {i for _, i in got}
    crossed = max((i for t, i in got if t < cut and i in sent_before), default=-1)
    missing = sent_before - have
    holes = sum(i < crossed for i in missing)
    return holes, len(missing) - holes


def _stream_report(due: Timed, got: Timed, ph: Phases) -> dict[str, Any]:
    seen = [i for _, i in got]
    have = set(seen)
    sent_in = {name: {i for t, i in due if a <= t < b} for name, (a, b) in ph.items()}
    back = [t for t, i in got if i in sent_in["after"]]
    lost = {name: len(ids - have) for name, ids in sent_in.items()}
    lost["before"], at_cut = _lost_before(sent_in["before"], got, ph["partition"][0])
    return {"sent": len(due), "received": len(seen), "duplicates": len(seen) - len(have),
            "in_order": seen == sorted(seen), "lost": lost, "in_flight_at_cut": at_cut,
            "received_before_cut": sum(t < ph["partition"][0] for t, _ in got),
            # sent into the partition and received before it healed (sent after the filter
            # was up: tc runs with the hub held, so nothing is sent meanwhile)
            "during_partition": sum(t < ph["after"][0] and i in sent_in["partition"]
                                    for t, i in got),
            "served_again_after": round(back[0] - ph["after"][0], 2) if back else None}


def _survey_report(surveys: Timed, answers: list[tuple[float, int, bytes]],
                   ph: Phases) -> dict[str, Any]:
    per: dict[str, dict[str, int]] = {}
    for name, (a, b) in ph.items():
        if name == "before":
            b -= 0.3  # a survey sent 0.3 s or more before the cut: its answers came before it
        ks = {k for t, k in surveys if a <= t < b}
        per[name] = {"surveys": len(ks)}
        for r in (b"r0", b"r1", b"r2"):
            per[name][r.decode()] = sum(k in ks and ans.startswith(r + b":")
                                        for _, k, ans in answers)
    back = [t for t, _, ans in answers if ans.startswith(b"r0:") and t >= ph["after"][0]]
    keys = [(k, ans) for _, k, ans in answers]
    return {"by_phase": per, "duplicates": len(keys) - len(set(keys)),
            "stale_answers": sum(ans.split(b":")[1] != b"%d" % k for _, k, ans in answers),
            "r0_served_again_after": round(back[0] - ph["after"][0], 2) if back else None}


def scenario_partition_others(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    """bus, pair1 and surveyor/respondent through one partition at once: in each, the peer that
    is cut off (its listening port black-holed for ``--partition`` s) listens, and the one that
    sends (a message every 5 ms; a survey as soon as the last one's 0.5 s ended) dials it, with
    ``--reconnect-time``. What each cut-off peer got before, during and after, and when it was
    served again after the heal; what the peers that stayed reachable got throughout."""
    dial = dict(st.dial, reconnect_time=args.reconnect_time,
                max_reconnect_time=args.reconnect_time, handshake_timeout=1.0)
    opts: dict[str, Any] = {"recv_timeout": None, "send_timeout": 0.05}
    cut: list[int] = []
    urls: dict[gsp.Socket, str] = {}

    def listen(proto: str, cutoff: bool) -> gsp.Socket:
        s = gsp.socket(proto, **opts)
        urls[s] = s.listen(_url(st.scheme), **st.listen).url
        if cutoff:
            cut.append(port_of(urls[s]))
        return s

    # bus: c dials a (cut off) and b; pair1: q dials p (cut off); surveyor: s dials three
    # respondents, r0 cut off, each answering "name:survey".
    bus_a, bus_b, pair_p = listen("bus", True), listen("bus", False), listen("pair1", True)
    resps = [listen("respondent", i == 0) for i in range(3)]
    bus_c, pair_q = gsp.socket("bus", **opts), gsp.socket("pair1", **opts)
    sur = gsp.socket("surveyor", survey_time=0.5, recv_timeout=None, send_timeout=0.05)
    for sock, targets in ((bus_c, (bus_a, bus_b)), (pair_q, (pair_p,)), (sur, resps)):
        for t in targets:
            sock.dial(urls[t], fail_fast=True, **dial)
    gevent.sleep(0.2)
    got: dict[str, Timed] = {"bus_a": [], "bus_b": [], "pair1": []}
    due: dict[str, Timed] = {"bus": [], "pair1": []}
    surveys: Timed = []
    answers: list[tuple[float, int, bytes]] = []
    stop = Event()
    workers = [gevent.spawn(_receiver, s, got[n])
               for s, n in ((bus_a, "bus_a"), (bus_b, "bus_b"), (pair_p, "pair1"))]
    workers += [gevent.spawn(_answerer, r, b"r%d" % i) for i, r in enumerate(resps)]
    senders = [gevent.spawn(_sender, bus_c, due["bus"], stop, 0.005),
               gevent.spawn(_sender, pair_q, due["pair1"], stop, 0.005),
               gevent.spawn(_surveyor, sur, surveys, answers, stop)]
    ph: Phases = {}
    for phase, seconds in (("before", 1.0), ("partition", args.partition), ("after", args.after)):
        if phase == "partition":
            net.block_port(*cut)
        elif phase == "after":
            net.clear()
        start = time.monotonic()
        gevent.sleep(seconds)
        ph[phase] = (start, time.monotonic())
    stop.set()
    gevent.joinall(senders, timeout=5)
    gevent.sleep(1.0)  # what is still on its way
    gevent.killall(workers)
    out = {"partition_s": args.partition, "reconnect_time": args.reconnect_time,
           "bus": {"cut_off": _stream_report(due["bus"], got["bus_a"], ph),
                   "reachable": _stream_report(due["bus"], got["bus_b"], ph)},
           "pair1": _stream_report(due["pair1"], got["pair1"], ph),
           "survey": _survey_report(surveys, answers, ph)}
    for sock in (bus_a, bus_b, bus_c, pair_p, pair_q, sur, *resps):
        sock.close()
    return out


# -- a peer whose host vanishes ------------------------------------------------------------------

def scenario_vanish(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {"recv_timeout": 10, "send_timeout": 5}
    a, b = gsp.socket("rep", **opts), gsp.socket("rep", **opts)
    la = a.listen(_url(st.scheme), **st.listen)
    lb = b.listen(_url(st.scheme), **st.listen)
    req = gsp.socket("req", resend_time=1.0, **opts)
    gone: list[float] = []
    req.on_pipe_event(lambda ev, p: gone.append(time.monotonic())
                      if ev is gsp.PipeEvent.DETACHED else None)
    req.dial(la.url, fail_fast=True, **st.dial)
    req.dial(lb.url, fail_fast=True, **st.dial)
    served = {"a": 0, "b": 0}

    def serve(s: gsp.Socket, name: str) -> None:
        while True:
            s.send(s.recv())
            served[name] += 1

    workers = [gevent.spawn(serve, a, "a"), gevent.spawn(serve, b, "b")]
    for i in range(4):
        req.send(b"%d" % i)
        req.recv()
    t0 = time.monotonic()
    net.block_port(port_of(la.url))  # a's host vanishes: no RST, no FIN, nothing
    end = t0 + args.limit
    while not gone and time.monotonic() < end:
        gevent.sleep(0.05)
    noticed = round(gone[0] - t0, 2) if gone else None
    answered = failed = 0
    t1 = time.monotonic()
    for i in range(args.requests):
        try:
            req.send(b"after %d" % i)
            req.recv()
            answered += 1
        except gsp.GspError:
            failed += 1
    out = {"keepalive": not args.no_keepalive, "noticed_after": noticed,
           "answered": answered, "failed": failed,
           "seconds": round(time.monotonic() - t1, 2)}
    net.clear()
    gevent.killall(workers)
    for s in (req, a, b):
        s.close()
    return out


# -- a rate limit --------------------------------------------------------------------------------

def scenario_rate(st: Setup, net: Net, args: argparse.Namespace) -> dict[str, Any]:
    if args.rate:  # (--rate 0: no limit, the baseline)
        net.rate(args.rate)
    pull, (push,), _ = st.pair("pull", "push", recv_timeout=30, send_timeout=30)
    body = os.urandom(4096)
    n = 200
    got: list[int] = []

    def recv() -> None:
        while len(got) < n:
            got.append(int.from_bytes(pull.recv()[:4], "big"))

    g = gevent.spawn(recv)
    t0 = time.monotonic()
    for i in range(n):
        push.send(i.to_bytes(4, "big") + body)
    g.join(timeout=60)
    took = time.monotonic() - t0
    out = {"rate_kbit": args.rate, "sent": n, "received": len(got),
           "in_order": got == list(range(n)), "seconds": round(took, 2),
           "kbit_per_s": round(n * 4100 * 8 / 1000 / took)}
    push.close()
    pull.close()
    return out


SCENARIOS: dict[str, Callable[[Setup, Net, argparse.Namespace], dict[str, Any]]] = {
    "loss": scenario_loss, "partition": scenario_partition,
    "partition-pub": scenario_partition_pub, "partition-push": scenario_partition_push,
    "vanish": scenario_vanish, "rate": scenario_rate,
    "partition-others": scenario_partition_others,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--scheme", default="tcp", choices=["tcp", "tls+tcp", "ws", "wss"])
    ap.add_argument("--tls", nargs=3, metavar=("CA", "CERT", "KEY"))
    ap.add_argument("--loss", type=float, default=10.0, help="percent of packets dropped")
    ap.add_argument("--partition", type=float, default=5.0, help="seconds of partition")
    ap.add_argument("--no-resend", action="store_true")
    ap.add_argument("--no-keepalive", action="store_true")
    ap.add_argument("--user-timeout", type=float, default=None,
                    help="tcp_user_timeout (s) of every tcp/tls+tcp endpoint")
    ap.add_argument("--reconnect-time", type=float, default=0.1)
    ap.add_argument("--after", type=float, default=5.0, help="seconds of traffic after a heal")
    ap.add_argument("--rate", type=int, default=2000, help="kbit/s of the rate limit (0: none)")
    ap.add_argument("--requests", type=int, default=50, help="requests after a host vanished")
    ap.add_argument("--limit", type=float, default=8.0, help="seconds to wait for a detection")
    args = ap.parse_args()
    net = Net()
    st = Setup(args.scheme, args.tls, keepalive=not args.no_keepalive,
               user_timeout=args.user_timeout)
    with gevent.Timeout(90, SystemExit("netfault_probe: the scenario took over 90 s")):
        report = SCENARIOS[args.scenario](st, net, args)
    print(json.dumps({"scenario": args.scenario, "scheme": args.scheme, **report}))


if __name__ == "__main__":
    main()
