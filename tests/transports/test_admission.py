"""Admission control: ``max_pipes`` refuses new connections right after accept and
dialers wait for room; ``max_handshakes`` bounds the connections in their handshake per
listener; a flood of 5,000 connections leaves the socket serving its existing peer with the
process's fds and RSS bounded (tests/tools/flood_probe.py measures it)."""

from __future__ import annotations

import json
import logging
import pathlib
import resource
import subprocess
import sys
from typing import Any, Callable, Iterator, Mapping

import gevent
import gevent.event
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import WAIT, wait_for
from gsp.transport import Connection, Transport, TransportDialer, TransportListener
from tests.support import HDR_REQ, TCP, plugged_transports, raw_connect

HDR_REP = b"\x00SP\x00\x00\x31\x00\x00"  # what a rep listener sends first

Mk = Callable[..., gsp.Socket]
PROBE = pathlib.Path(__file__).resolve().parents[1] / "tools" / "flood_probe.py"


def round_trip(req: gsp.Socket, rep: gsp.Socket, body: bytes = b"ping") -> None:
    g = gevent.spawn(lambda: rep.send(rep.recv()))
    req.send(body)
    assert req.recv() == body
    g.get(timeout=WAIT)


def prometheus_samples(sock: gsp.Socket, url: str) -> dict[str, float]:
    """The admission metrics of ``sock`` (and its listener on ``url``) as a scrape shows them."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import gsp.prometheus

    registry = CollectorRegistry()
    gsp.prometheus.register(registry)
    wanted = {"gsp_pipes_refused_full_total", "gsp_endpoint_pipes_refused_full_total",
              "gsp_handshakes_shed_total", "gsp_endpoint_handshakes"}
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in fam.samples:
            labels = sample.labels
            if sample.name in wanted and labels["socket"] == str(sock.id) \
                    and labels.get("url", url) == url:
                reason = labels.get("reason")
                out[sample.name if reason is None else f"{sample.name}:{reason}"] = sample.value
    return out


def closed_by_peer(sock: Any) -> bool:
    """Whether the listener closed this raw connection without a word (an end of stream, or a
    reset when it closed with our header unread)."""
    try:
        return bool(sock.recv(8) == b"")
    except ConnectionResetError:
        return True
    finally:
        sock.close()


@pytest.mark.parametrize("scheme", ["tcp", "ipc"])
def test_max_pipes_refuses_the_next_peer_and_serves_again_when_one_leaves(
        gsp_socket: Mk, caplog: pytest.LogCaptureFixture, scheme: str, ipc_dir: str) -> None:
    caplog.set_level(logging.DEBUG, logger="gsp.listener")
    rep = gsp_socket("rep", max_pipes=2, recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen(TCP if scheme == "tcp" else f"ipc://{ipc_dir}/rep")
    a, b = gsp_socket("req", recv_timeout=WAIT), gsp_socket("req", recv_timeout=WAIT)
    a.dial(lst.url, fail_fast=True)
    b.dial(lst.url, fail_fast=True)
    wait_for(lambda: len(rep.pipes) == 2, what="two pipes")
    # The third peer: closed right after accept, before its handshake, so it reads an end of
    # stream and gets no header back; counted and logged.
    third = raw_connect(lst.url)
    third.sendall(HDR_REQ)
    assert closed_by_peer(third)
    assert closed_by_peer(raw_connect(lst.url))
    assert len(rep.pipes) == 2 and lst.handshakes == 0
    assert lst.stats["pipes_refused_full"] == rep.stats["pipes_refused_full"] == 2
    assert lst.stats["accepted"] == 4
    entry = next(e for e in gsp.stats() if e["id"] == rep.id)
    assert entry["stats"]["pipes_refused_full"] == 2
    assert entry["listeners"][0]["stats"]["pipes_refused_full"] == 2
    assert prometheus_samples(rep, lst.url) == {
        "gsp_pipes_refused_full_total": 2, "gsp_endpoint_pipes_refused_full_total": 2,
        "gsp_endpoint_handshakes": 0, "gsp_handshakes_shed_total:full": 0,
        "gsp_handshakes_shed_total:address": 0}
    refusals = [r for r in caplog.records
                if r.name == "gsp.listener" and "at max_pipes (2)" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.WARNING, logging.DEBUG]  # rate limited
    # The two peers are served; once one leaves, a new peer gets in and is served too.
    round_trip(a, rep)
    round_trip(b, rep)
    a.close()
    c = gsp_socket("req", recv_timeout=WAIT)
    wait_for(lambda: len(rep.pipes) == 1, what="a's pipe gone")
    c.dial(lst.url, fail_fast=True)
    wait_for(lambda: len(rep.pipes) == 2, what="c's pipe")
    round_trip(c, rep)
    round_trip(b, rep)
    assert rep.stats["pipes_refused_full"] == 2


def test_a_listeners_own_max_pipes_and_the_socket_bound_changed_later(gsp_socket: Mk) -> None:
    rep = gsp_socket("rep", recv_timeout=WAIT, send_timeout=WAIT)
    small = rep.listen(TCP, max_pipes=1)
    big = rep.listen(TCP)
    peers = [gsp_socket("req", recv_timeout=WAIT) for _ in range(4)]
    peers[0].dial(small.url, fail_fast=True)
    peers[1].dial(big.url, fail_fast=True)
    wait_for(lambda: len(rep.pipes) == 2, what="two pipes")
    with pytest.raises(gsp.ConnectionBroken):  # small is full: closed in the handshake
        peers[2].dial(small.url, fail_fast=True, reconnect_time=5)
    wait_for(lambda: small.stats["pipes_refused_full"] == 1, what="the refusal counted")
    assert big.stats["pipes_refused_full"] == 0
    rep.max_pipes = 2  # now the socket is full for every listener
    assert closed_by_peer(raw_connect(big.url))
    assert big.stats["pipes_refused_full"] == 1 and rep.stats["pipes_refused_full"] == 2
    rep.max_pipes = 0
    peers[3].dial(big.url, fail_fast=True)
    wait_for(lambda: len(rep.pipes) == 3, what="a third pipe once the bound is lifted")
    round_trip(peers[3], rep)


def test_a_dialer_at_max_pipes_waits_for_room_instead_of_dialing(gsp_socket: Mk) -> None:
    pull = gsp_socket("pull", recv_timeout=WAIT)
    one, two = pull.listen(TCP), pull.listen(TCP)
    push = gsp_socket("push", max_pipes=1, send_timeout=WAIT, reconnect_time=0.01)
    first = push.dial(one.url, fail_fast=True)
    with pytest.raises(gsp.ConnectionRefused, match="max_pipes"):
        push.dial(two.url, fail_fast=True)
    waiting = push.dial(two.url)  # block=None: dials in background once there is room
    gevent.sleep(0.05)  # with reconnect_time 0.01 a dialer that retried would have tried ~5 times
    assert waiting.stats["dial_attempts"] == 0 and len(push.pipes) == 1
    first.close()
    wait_for(lambda: waiting.pipe is not None and len(push.pipes) == 1, what="the waiting dial")
    assert waiting.stats["dial_attempts"] == 1
    push.send(b"through two")
    assert pull.recv() == b"through two"
    assert push.pipes[0].dialer is waiting


def shed(sock: Any, timeout: float = WAIT) -> bool:
    """Whether the listener closed this raw connection in its handshake (it may have sent its
    own SP header first); False if it is still open after ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(64):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def in_handshake(lst: gsp.Listener, sock: Any, n: int) -> None:
    """Wait until ``lst`` has ``n`` connections in their handshake, the newest being ``sock``
    (its handshake has started: it read gsp's header)."""
    wait_for(lambda: lst.handshakes == n, what=f"{n} in their handshake")
    sock.settimeout(WAIT)
    assert sock.recv(8) == HDR_REP


class RecordingListener(TransportListener):
    """A tcp listener that keeps every connection it accepts."""

    def __init__(self, inner: TransportListener, accepted: list[Connection]) -> None:
        self.inner, self.accepted = inner, accepted
        self.url = inner.url

    def bind(self) -> None:
        self.inner.bind()
        self.url = "tcprec://" + self.inner.url.partition("://")[2]

    def accept(self) -> Connection:
        conn = self.inner.accept()
        self.accepted.append(conn)
        return conn

    def close(self) -> None:
        self.inner.close()


class RecordingTcp(Transport):
    """tcp under the scheme ``tcprec``, its listeners keeping the connections they accept in
    :attr:`accepted`: how far each handshake has come is then theirs to say
    (``Connection.handshake_progress``)."""

    schemes = ("tcprec",)

    def __init__(self) -> None:
        self.accepted: list[Connection] = []

    @staticmethod
    def tcp() -> Transport:
        tcp: Transport = gsp.registry.transport_for(TCP)
        return tcp

    def listener(self, url: str, options: Mapping[str, Any]) -> TransportListener:
        return RecordingListener(self.tcp().listener(url.replace("tcprec", "tcp", 1), options),
                                 self.accepted)

    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        return self.tcp().dialer(url.replace("tcprec", "tcp", 1), options)


def handshake_read(transport: RecordingTcp, socks: list[Any]) -> list[int]:
    """How many bytes of its SP header the listener has read from each raw client of
    ``socks``."""
    by_address = {c.remote_address: c for c in transport.accepted}
    return [by_address["tcp://%s:%d" % s.getsockname()[:2]].handshake_progress() for s in socks]


@pytest.fixture
def recording() -> Iterator[RecordingTcp]:
    transport = RecordingTcp()
    with plugged_transports(transport):
        yield transport


def test_at_max_handshakes_the_least_advanced_handshake_is_shed_and_a_good_peer_gets_in(
        gsp_socket: Mk, recording: RecordingTcp, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gsp.listener")
    rep = gsp_socket("rep", recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen("tcprec://127.0.0.1:0", max_handshakes=4,
                     handshake_timeout=30)  # no timeouts here: sheds
    old = gsp_socket("req", recv_timeout=WAIT)
    old.dial(lst.url, fail_fast=True)  # an existing peer
    wait_for(lambda: len(rep.pipes) == 1, what="the existing pipe")
    socks: list[Any] = []
    seen: list[int] = []  # the listener's handshakes under way, every 5 ms all along

    def sample() -> None:
        while True:
            seen.append(lst.handshakes)
            gevent.sleep(0.005)

    sampler = gevent.spawn(sample)
    try:
        for i in range(2):  # two send half an SP header, two nothing: the room is full
            socks.append(raw_connect(lst.url))
            socks[-1].sendall(HDR_REQ[:4])
            in_handshake(lst, socks[-1], i + 1)
        wait_for(lambda: handshake_read(recording, socks) == [4, 4], what="read")
        half = socks[:]
        silent = [raw_connect(lst.url), raw_connect(lst.url)]
        in_handshake(lst, silent[0], 3)
        in_handshake(lst, silent[1], 4)
        # A newcomer at the bound is taken; the oldest of those that sent nothing goes.
        late = raw_connect(lst.url)
        assert shed(silent[0]) and lst.handshakes == 4
        assert lst.stats["handshakes_shed_full"] == lst.stats["handshakes_shed"] == 1
        # A good peer gets in at once, and is served: its header read at accept when it was
        # there already (then it takes no room), or else in the room, the next silent one
        # shed for it.
        newcomer = gsp_socket("req", recv_timeout=WAIT)
        with gevent.Timeout(WAIT, AssertionError("the good peer waited")):
            newcomer.dial(lst.url, fail_fast=True)
        round_trip(newcomer, rep)
        assert lst.stats["handshakes_shed_full"] in (1, 2)
        # The good peer left (or never took) a place in the room as a pipe: the next newcomer
        # takes a place, and the silent ones go, oldest first, while the half ones stay.
        more = [raw_connect(lst.url)]
        socks += silent + more + [late]
        in_handshake(lst, more[0], 4)
        assert shed(silent[1]) and lst.stats["handshakes_shed_full"] == 2
        more.append(raw_connect(lst.url))
        socks.append(more[-1])
        assert shed(late)
        in_handshake(lst, more[1], 4)
        more.append(raw_connect(lst.url))
        socks.append(more[-1])
        assert shed(more[0])
        in_handshake(lst, more[2], 4)
        assert not shed(half[0], 0.2) and not shed(half[1], 0.2)  # they sent the most
        # Once all sent as much, the oldest goes.
        for s in more[1:]:
            s.sendall(HDR_REQ[:4])
        wait_for(lambda: handshake_read(recording, half + more[1:]) == [4] * 4, what="read")
        more.append(raw_connect(lst.url))
        socks.append(more[-1])
        assert shed(half[0]) and not shed(half[1], 0.2) and not shed(more[1], 0.1)
        assert lst.stats["handshakes_shed_full"] == 5
        round_trip(old, rep)  # the existing peer is served all along
        sampler.kill()
        assert max(seen) <= 4 and lst.stats["handshake_failures"] == 0  # sheds are no failures
        entry = next(e for e in gsp.stats() if e["id"] == rep.id)
        assert entry["listeners"][0]["stats"]["handshakes_shed_full"] == 5
        assert prometheus_samples(rep, lst.url)["gsp_handshakes_shed_total:full"] == 5
        logged = [r for r in caplog.records if "to make room: at max_handshakes (4)" in
                  r.getMessage()]
        assert [r.levelno for r in logged] == [logging.WARNING] + [logging.DEBUG] * 4
        assert "it had sent the least (0 bytes)" in logged[0].getMessage()
    finally:
        sampler.kill()
        for s in socks:
            s.close()


def test_the_per_address_bound_sheds_within_the_address(gsp_socket: Mk) -> None:
    rep = gsp_socket("rep", recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen(TCP, max_handshakes_per_address=2, handshake_timeout=30)
    host, port = lst.url.split("://", 1)[1].rsplit(":", 1)
    other = gsocket.create_connection((host, int(port)), source_address=("127.0.0.2", 0))
    socks = [other]
    try:
        in_handshake(lst, other, 1)  # the oldest, from another address
        a, b = raw_connect(lst.url), raw_connect(lst.url)
        socks += [a, b]
        in_handshake(lst, a, 2)
        in_handshake(lst, b, 3)
        c = raw_connect(lst.url)  # 127.0.0.1 is full: taken, and 127.0.0.1's oldest goes
        socks.append(c)
        assert shed(a) and not shed(other, 0.2) and not shed(b, 0.2)
        in_handshake(lst, c, 3)
        assert lst.stats["handshakes_shed_address"] == 1
        assert lst.stats["handshakes_shed_full"] == 0
        newcomer = gsp_socket("req", recv_timeout=WAIT)
        newcomer.dial(lst.url, fail_fast=True)  # a good peer from a full address gets in too
        round_trip(newcomer, rep)
        if lst.stats["handshakes_shed_address"] == 2:  # it took a place: the address's oldest went
            assert shed(b)
        else:  # its whole header was read at accept: it took no place
            assert lst.stats["handshakes_shed_address"] == 1 and not shed(b, 0.2)
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("options", [
    {"max_pipes": -1}, {"max_pipes": 1.5}, {"max_pipes": "8"}, {"max_pipes": True},
    {"max_pipes": None}, {"max_handshakes": -1}, {"max_handshakes": 2.0},
    {"max_handshakes": "256"}, {"max_handshakes": False},
])
def test_bad_admission_values_are_refused(gsp_socket: Mk, options: dict[str, Any]) -> None:
    with pytest.raises(gsp.BadOption):
        gsp.socket("rep", **options)
    s = gsp_socket("rep")
    ((name, value),) = options.items()
    with pytest.raises(gsp.BadOption, match=name):
        setattr(s, name, value)
    with pytest.raises(gsp.BadOption, match=name):
        s.listen(TCP, **options)
    assert s.get_option(name) == {"max_pipes": 0, "max_handshakes": 256}[name]


@pytest.mark.parametrize("name", ["max_pipes", "max_handshakes"])
def test_admission_options_are_for_listeners_not_dialers(gsp_socket: Mk, name: str) -> None:
    with pytest.raises(gsp.BadOption, match="listeners only"):
        gsp_socket("req").dial("tcp://127.0.0.1:1", background=True, **{name: 4})


# The two floods take the machine's CPU for seconds: never at once (pytest-xdist's loadgroup
# runs a group on one worker).
@pytest.mark.xdist_group("floods")
def test_a_flood_of_5000_connections_leaves_the_socket_serving_with_fds_and_rss_bounded() -> None:
    # The server and its existing peer run in the probe's process (RLIMIT_NOFILE raised to the
    # hard limit), the flood in a child of it: half the connections send a REQ header (would-be
    # pipes, refused at max_pipes), half stall (bounded by max_handshakes).
    max_pipes, max_handshakes = 64, 256
    out = subprocess.run(
        [sys.executable, str(PROBE), "-n", "5000", "--max-pipes", str(max_pipes),
         "--max-handshakes", str(max_handshakes), "--handshake-timeout", "1", "--hold", "3",
         "--json"], capture_output=True, text=True, timeout=60, check=True)
    r = json.loads(out.stdout)
    why = json.dumps(r, indent=1)
    assert r["flood"] == "opened 5000", why
    base, during = r["base"], r["peak"]["during"]
    # fds: the listener, the existing pipe and a few of the process, plus at most max_pipes
    # pipes and max_handshakes connections in their handshake (and one being refused).
    assert during["fds"] <= base["fds"] + max_pipes + max_handshakes + 2, why
    assert during["rss_mb"] - base["rss_mb"] < 32, why  # ~25 KiB a connection at most: ~8 MB
    rt = r["round_trips"]
    # (A round trip every 5 ms for ~3 s: 187 made it beside the slowloris test on a machine
    # at load 18, where the listener, shedding stalled handshakes as it accepts on, works
    # through the whole flood rather than waiting at max_handshakes.)
    assert rt["during"]["failures"] == 0 and rt["during"]["count"] >= 100, why
    # p99 under 250 ms, stretched by the share of the time the hub waited for a CPU on a
    # machine busier than its cores (as the slowloris test below does).
    stretch = 1 / max(1 - r["run_queue_share"], 0.2)
    assert rt["during"]["p99_ms"] < 250 * stretch and rt["after"]["count"] > 0, why
    # Never more pipes than max_pipes at once (the existing peer's among them). Connections
    # still in the listen backlog when the flood lets go may become pipes after it, having sent
    # their header: pipes_attached counts those too.
    assert max(p["pipes"] for p in r["peak"].values()) <= max_pipes, why
    lst = r["listener"]
    # Every connection that reached accept ended one way: a pipe, refused at accept once the
    # socket was full, shed at max_handshakes for a newcomer, or a failed handshake (a stalled
    # one timed out, or closed by the flood as it let go), or is in its handshake still (a
    # loaded machine drains the backlog after the flood). None is left over.
    assert lst["accepted"] == r["socket"]["pipes_attached"] + lst["pipes_refused_full"] + \
        lst["handshakes_shed"] + lst["handshake_failures"] + lst["handshakes"], why
    # Once full, the socket turns the flood away at accept: most of it. (How many handshakes
    # were under way as the pipes filled moves with the load: 83-90 % refused in runs here, and
    # a fixed 4,000 of the 5,000 failed on a loaded CI machine at 3,987 of 4,777 accepted.
    # Shedding stalled handshakes while the pipes fill takes some more: 57 % refused at accept
    # beside the TLS tests on two workers at load 20.)
    assert lst["pipes_refused_full"] >= 0.5 * lst["accepted"], why
    # Most reached accept (the rest: still in the backlog, or their SYNs still retrying, when
    # the flood lets go: 4,364 to 5,001 accepted in runs here on a quiet machine, 3,890 beside
    # the suite's other worker, 3,247 beside the TLS tests at load 20).
    assert lst["accepted"] >= 2500, why


@pytest.mark.plugins("gsp_ws")
def test_a_ws_listener_sheds_the_least_advanced_upgrade_request_at_max_handshakes(
        gsp_socket: Mk) -> None:
    # gsp-ws's HTTP server reads upgrade requests before gsp's listener sees a connection: it
    # holds the same bound (the max_handshakes of the listener that made it) the same way.
    rep = gsp_socket("rep", recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen("ws://127.0.0.1:0/sp", max_handshakes=4, handshake_timeout=30)
    old = gsp_socket("req", recv_timeout=WAIT)
    old.dial(lst.url, fail_fast=True)
    wait_for(lambda: len(rep.pipes) == 1, what="the existing pipe")
    tcp = "tcp://" + lst.url.split("://", 1)[1].split("/", 1)[0]
    half = raw_connect(tcp)
    half.sendall(b"GET /sp HTTP/1.1\r\n")  # part of a request: more progress than nothing
    with raw_connect(tcp) as probe:  # answered once the server has read what came before it
        probe.sendall(b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert probe.recv(100).startswith(b"HTTP/1.1 4")
    stalled = [raw_connect(tcp) for _ in range(3)]  # never send their request
    late = raw_connect(tcp)
    try:
        late.sendall(b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        late.settimeout(WAIT)
        assert late.recv(100).startswith(b"HTTP/1.1 4")  # read at once, and answered
        assert shed(stalled[0]) and not shed(half, 0.2) and not shed(stalled[1], 0.1)
        assert lst.stats["handshakes_shed_full"] == lst.stats["handshakes_shed"] == 1
        round_trip(old, rep)  # the existing peer is served meanwhile
        stalled.append(raw_connect(tcp))  # the room is full again
        wait_for(lambda: lst.stats["handshakes_shed_full"] == 1, what="no shed yet")
        gevent.sleep(0.1)
        newcomer = gsp_socket("req", recv_timeout=WAIT)
        with gevent.Timeout(WAIT, AssertionError("the good peer waited")):
            newcomer.dial(lst.url, fail_fast=True)
        round_trip(newcomer, rep)
        assert shed(stalled[1]) and not shed(half, 0.2)
        assert lst.stats["handshakes_shed_full"] == 2
    finally:
        late.close()
        half.close()
        for s in stalled:
            s.close()


def test_an_adopted_socket_beyond_max_pipes_is_refused_like_an_accepted_one(gsp_socket: Mk) -> None:
    rep = gsp_socket("rep", max_pipes=1, recv_timeout=WAIT, send_timeout=WAIT)
    at = rep.listen("socket://")
    first, second = gsocket.socketpair(), gsocket.socketpair()
    try:
        at.adopt(first[0])
        first[1].settimeout(WAIT)
        first[1].sendall(HDR_REQ)
        assert first[1].recv(8) == b"\x00SP\x00\x00\x31\x00\x00"  # rep's header: a pipe
        wait_for(lambda: len(rep.pipes) == 1, what="the adopted pipe")
        at.adopt(second[0])  # the socket is full: closed at once, before any handshake
        second[1].settimeout(WAIT)
        assert second[1].recv(8) == b""
        assert at.stats["pipes_refused_full"] == 1 and len(rep.pipes) == 1
    finally:
        for end in (*first, *second):
            end.close()


# -- accept_gate: a listener that takes its next connection when its gate says so ---------------

def test_an_accept_gate_holds_the_next_connection_in_the_backlog_until_it_returns(
        gsp_socket: Mk) -> None:
    open_gate = gevent.event.Event()
    calls: list[gsp.Listener] = []

    def gate(listener: gsp.Listener) -> None:
        calls.append(listener)
        if len(calls) > 1:  # the first accept goes at once, the second waits for the event
            open_gate.wait()

    rep = gsp_socket("rep")
    lst = rep.listen(TCP, accept_gate=gate)
    first = gsp_socket("req", dial=lst.url)
    round_trip(first, rep)
    wait_for(lambda: len(calls) == 2, what="the gate asked for the next accept")
    second = raw_connect(lst.url)  # the kernel completes the connection; gsp does not take it
    try:
        second.sendall(HDR_REQ)
        second.settimeout(0.1)
        with pytest.raises(TimeoutError):  # no header back: the listener has not taken it
            second.recv(8)
        assert lst.stats["accepted"] == 1 and len(rep.pipes) == 1
        assert calls == [lst, lst]
        open_gate.set()
        second.settimeout(WAIT)
        assert second.recv(8) == HDR_REP  # taken and answered once the gate returned
        wait_for(lambda: len(rep.pipes) == 2, what="the second pipe")
        assert lst.stats["accepted"] == 2
    finally:
        second.close()


def test_an_accept_gate_that_raises_is_logged_and_the_listener_accepts_anyway(
        gsp_socket: Mk, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gsp.listener")

    def gate(listener: gsp.Listener) -> None:
        raise ValueError("a broken gate")

    rep = gsp_socket("rep")
    lst = rep.listen(TCP, accept_gate=gate)
    for _ in range(3):
        round_trip(gsp_socket("req", dial=lst.url), rep)
    warned = [r for r in caplog.records if "the accept gate" in r.getMessage()]
    assert warned and "raised ValueError: accepting anyway" in warned[0].getMessage()
    assert warned[0].exc_info is not None  # with its traceback
    assert len(warned) == 1  # rate limited: one WARNING an interval, the rest at DEBUG


def test_an_accept_gate_must_be_callable(gsp_socket: Mk) -> None:
    rep = gsp_socket("rep")
    with pytest.raises(gsp.BadOption, match="accept_gate must be a callable"):
        rep.listen(TCP, accept_gate="yes")
    assert rep.listeners == []


def test_closing_a_listener_whose_gate_waits_ends_its_accepting(gsp_socket: Mk) -> None:
    waiting = gevent.event.Event()

    def gate(listener: gsp.Listener) -> None:
        waiting.set()
        gevent.event.Event().wait()  # never returns

    rep = gsp_socket("rep")
    lst = rep.listen(TCP, accept_gate=gate)
    assert waiting.wait(WAIT)
    with gevent.Timeout(WAIT, AssertionError("close() waited for the gate")):
        lst.close()
    assert rep.listeners == [] and lst.stats["accepted"] == 0


SLOWLORIS = PROBE.parent / "slowloris_probe.py"


@pytest.mark.interop
@pytest.mark.xdist_group("floods")
@pytest.mark.parametrize("scheme", ["tcp"])
def test_a_slowloris_does_not_lock_out_a_good_peer(scheme: str) -> None:
    # The bar: 2,000 stalled connections (1,000 sending half an SP header, 1,000 nothing,
    # each reopened as soon as it is dropped) from a child process against a rep listening with
    # handshake_timeout=1 and every other option at its default (max_handshakes 256). A good
    # pynng REQ connects within 2 s, its median round trip stays under 25 ms, every stalled
    # connection is closed within 3 s of its connect, and the server's fds stay within
    # listening + max_handshakes + a few. The attacker needs 2,000 fds: the hard limit allows it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 2300, f"ulimit -Hn is {hard}: the attack needs 2,000 descriptors and more"
    out = subprocess.run([sys.executable, str(SLOWLORIS), "--scheme", scheme, "-n", "2000",
                          "--measure", "3", "--json"],
                         capture_output=True, text=True, timeout=90, check=True)
    r = json.loads(out.stdout)
    why = json.dumps(r, indent=1)
    # On a machine busier than its cores the server's hub waits for a CPU part of the time
    # (its run-queue share, from /proc/self/schedstat): the time bounds stretch by as much, as
    # if it had had a core (1.0 on an idle machine; 2-3 beside the other jobs here).
    stretch = 1 / max(1 - r["run_queue_share"], 0.2)
    assert r["connect_s"] is not None and r["connect_s"] < 2.0 * stretch, why
    rt = r["round_trips"]
    assert rt["failures"] == 0 and rt["count"] >= 20, why
    assert rt["median_ms"] < 25 * stretch, why
    attackers = r["attackers"]
    assert attackers["opened"] > 2000, why  # the attack kept reconnecting
    assert attackers["longest_s"] < 3.0 * stretch, why
    assert attackers["oldest_open_s"] < 3.0 * stretch, why
    # fds: what the process had listening (with pynng's socket), max_handshakes in their
    # handshake, the good peer's pipe at both ends, what nng opens at its first dial (its
    # poller's descriptors), one connection being accepted; a few to spare.
    assert r["peak_fds"] <= r["base_fds"] + 256 + 12, why
    assert r["listener"]["handshakes_shed_full"] >= 256, why  # the room filled, and shed
