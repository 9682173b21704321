"""Admission control (issue 27): ``max_pipes`` refuses new connections right after accept and
dialers wait for room; ``max_handshakes`` bounds the connections in their handshake per
listener; a flood of 5,000 connections leaves the socket serving its existing peer with the
process's fds and RSS bounded (tests/tools/flood_probe.py measures it)."""

from __future__ import annotations

import json
import logging
import pathlib
import subprocess
import sys
import time
from typing import Any, Callable

import gevent
import gevent.event
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import WAIT, wait_for
from tests.support import HDR_REQ, TCP, raw_connect

Mk = Callable[..., gsp.Socket]
PROBE = pathlib.Path(__file__).resolve().parent / "tools" / "flood_probe.py"


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
              "gsp_accept_waits_total", "gsp_endpoint_handshakes"}
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in fam.samples:
            labels = sample.labels
            if sample.name in wanted and labels["socket"] == str(sock.id) \
                    and labels.get("url", url) == url:
                out[sample.name] = sample.value
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
        mk: Mk, caplog: pytest.LogCaptureFixture, scheme: str, ipc_dir: str) -> None:
    caplog.set_level(logging.DEBUG, logger="gsp.listener")
    rep = mk("rep", max_pipes=2, recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen(TCP if scheme == "tcp" else f"ipc://{ipc_dir}/rep")
    a, b = mk("req", recv_timeout=WAIT), mk("req", recv_timeout=WAIT)
    a.dial(lst.url, block=True)
    b.dial(lst.url, block=True)
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
        "gsp_accept_waits_total": 0, "gsp_endpoint_handshakes": 0}
    refusals = [r for r in caplog.records
                if r.name == "gsp.listener" and "at max_pipes (2)" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.WARNING, logging.DEBUG]  # rate limited
    # The two peers are served; once one leaves, a new peer gets in and is served too.
    round_trip(a, rep)
    round_trip(b, rep)
    a.close()
    c = mk("req", recv_timeout=WAIT)
    wait_for(lambda: len(rep.pipes) == 1, what="a's pipe gone")
    c.dial(lst.url, block=True)
    wait_for(lambda: len(rep.pipes) == 2, what="c's pipe")
    round_trip(c, rep)
    round_trip(b, rep)
    assert rep.stats["pipes_refused_full"] == 2


def test_a_listeners_own_max_pipes_and_the_socket_bound_changed_later(mk: Mk) -> None:
    rep = mk("rep", recv_timeout=WAIT, send_timeout=WAIT)
    small = rep.listen(TCP, max_pipes=1)
    big = rep.listen(TCP)
    peers = [mk("req", recv_timeout=WAIT) for _ in range(4)]
    peers[0].dial(small.url, block=True)
    peers[1].dial(big.url, block=True)
    wait_for(lambda: len(rep.pipes) == 2, what="two pipes")
    with pytest.raises(gsp.ConnectionBroken):  # small is full: closed in the handshake
        peers[2].dial(small.url, block=True, reconnect_time=5)
    wait_for(lambda: small.stats["pipes_refused_full"] == 1, what="the refusal counted")
    assert big.stats["pipes_refused_full"] == 0
    rep.max_pipes = 2  # now the socket is full for every listener
    assert closed_by_peer(raw_connect(big.url))
    assert big.stats["pipes_refused_full"] == 1 and rep.stats["pipes_refused_full"] == 2
    rep.max_pipes = 0
    peers[3].dial(big.url, block=True)
    wait_for(lambda: len(rep.pipes) == 3, what="a third pipe once the bound is lifted")
    round_trip(peers[3], rep)


def test_a_dialer_at_max_pipes_waits_for_room_instead_of_dialing(mk: Mk) -> None:
    pull = mk("pull", recv_timeout=WAIT)
    one, two = pull.listen(TCP), pull.listen(TCP)
    push = mk("push", max_pipes=1, send_timeout=WAIT, reconnect_time=0.01)
    first = push.dial(one.url, block=True)
    with pytest.raises(gsp.ConnectionRefused, match="max_pipes"):
        push.dial(two.url, block=True)
    waiting = push.dial(two.url)  # block=None: dials in background once there is room
    gevent.sleep(0.3)  # with reconnect_time 0.01 a dialer that retried would have tried ~10 times
    assert waiting.stats["dial_attempts"] == 0 and len(push.pipes) == 1
    first.close()
    wait_for(lambda: waiting.pipe is not None and len(push.pipes) == 1, what="the waiting dial")
    assert waiting.stats["dial_attempts"] == 1
    push.send(b"through two")
    assert pull.recv() == b"through two"
    assert push.pipes[0].dialer is waiting


def test_the_handshake_bound_holds_under_stalled_connections(mk: Mk) -> None:
    rep = mk("rep", recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen(TCP, max_handshakes=4, handshake_timeout=0.5)
    old = mk("req", recv_timeout=WAIT)
    old.dial(lst.url, block=True)  # an existing peer
    wait_for(lambda: len(rep.pipes) == 1, what="the existing pipe")
    stalled = [raw_connect(lst.url) for _ in range(20)]  # never send the SP header
    try:
        seen: list[int] = []
        newcomer = mk("req", recv_timeout=WAIT)
        newcomer.dial(lst.url, block=False, reconnect_time=0.05, handshake_timeout=WAIT)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # the existing peer is served all along
            seen.append(lst.handshakes)
            round_trip(old, rep)
            gevent.sleep(0.01)
        assert max(seen) == 4 and lst.stats["accept_waits"] >= 1
        # The newcomer waits in the kernel's backlog behind the stalled ones and gets in as
        # their handshakes time out (20 stalled / 4 at a time × 0.5 s: ~2.5 s at most).
        wait_for(lambda: len(rep.pipes) == 2, timeout=15, what="the newcomer's pipe")
        round_trip(newcomer, rep)
        round_trip(old, rep)
        assert max(seen + [lst.handshakes]) <= 4
        assert lst.stats["handshake_failures_timeout"] >= 4
    finally:
        for s in stalled:
            s.close()


@pytest.mark.parametrize("options", [
    {"max_pipes": -1}, {"max_pipes": 1.5}, {"max_pipes": "8"}, {"max_pipes": True},
    {"max_pipes": None}, {"max_handshakes": -1}, {"max_handshakes": 2.0},
    {"max_handshakes": "256"}, {"max_handshakes": False},
])
def test_bad_admission_values_are_refused(mk: Mk, options: dict[str, Any]) -> None:
    with pytest.raises(gsp.BadOption):
        gsp.socket("rep", **options)
    s = mk("rep")
    ((name, value),) = options.items()
    with pytest.raises(gsp.BadOption, match=name):
        setattr(s, name, value)
    with pytest.raises(gsp.BadOption, match=name):
        s.listen(TCP, **options)
    assert s.get_option(name) == {"max_pipes": 0, "max_handshakes": 256}[name]


@pytest.mark.parametrize("name", ["max_pipes", "max_handshakes"])
def test_admission_options_are_for_listeners_not_dialers(mk: Mk, name: str) -> None:
    with pytest.raises(gsp.BadOption, match="listeners only"):
        mk("req").dial("tcp://127.0.0.1:1", block=False, **{name: 4})


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
    assert rt["during"]["failures"] == 0 and rt["during"]["count"] >= 200, why
    assert rt["during"]["p99_ms"] < 250 and rt["after"]["count"] > 0, why
    assert r["socket"]["pipes_attached"] <= max_pipes, why
    lst = r["listener"]
    # Every connection that reached accept ended one way: a pipe, refused at accept once the
    # socket was full, or a failed handshake (a stalled one timed out, or closed by the flood as
    # it let go). None is left over, whatever the machine's load.
    assert lst["accepted"] == r["socket"]["pipes_attached"] + lst["pipes_refused_full"] + \
        lst["handshake_failures"], why
    # Once full, the socket turns the flood away at accept: most of it. (How many handshakes
    # were under way as the pipes filled moves with the load: 83-90 % refused in runs here, and
    # a fixed 4,000 of the 5,000 failed on a loaded CI machine at 3,987 of 4,777 accepted.)
    assert lst["pipes_refused_full"] >= 0.75 * lst["accepted"], why
    # Most reached accept (the rest: SYNs dropped at the full backlog, still retrying when the
    # flood lets go: 4,364 to 5,001 accepted in runs here on a quiet machine, 3,890 beside the
    # suite's other worker).
    assert lst["accepted"] >= 3000, why


def test_a_ws_listener_reads_at_most_max_handshakes_upgrade_requests_at_once(mk: Mk) -> None:
    # gsp-ws's HTTP server reads upgrade requests before gsp's listener sees a connection: it
    # holds the same bound (the max_handshakes of the listener that made it).
    rep = mk("rep", recv_timeout=WAIT, send_timeout=WAIT)
    lst = rep.listen("ws://127.0.0.1:0/sp", max_handshakes=4)
    old = mk("req", recv_timeout=WAIT)
    old.dial(lst.url, block=True)
    wait_for(lambda: len(rep.pipes) == 1, what="the existing pipe")
    tcp = "tcp://" + lst.url.split("://", 1)[1].split("/", 1)[0]
    stalled = [raw_connect(tcp) for _ in range(4)]  # never send their request
    late = raw_connect(tcp)
    try:
        late.sendall(b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        late.settimeout(0.5)
        with pytest.raises(TimeoutError):  # not read: it waits in the kernel's backlog
            late.recv(100)
        round_trip(old, rep)  # the existing peer is served meanwhile
        stalled.pop().close()
        late.settimeout(WAIT)
        assert late.recv(100).startswith(b"HTTP/1.1 4")  # read now, and answered
        round_trip(old, rep)
    finally:
        late.close()
        for s in stalled:
            s.close()


def test_an_adopted_socket_beyond_max_pipes_is_refused_like_an_accepted_one(mk: Mk) -> None:
    rep = mk("rep", max_pipes=1, recv_timeout=WAIT, send_timeout=WAIT)
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
        mk: Mk) -> None:
    open_gate = gevent.event.Event()
    calls: list[gsp.Listener] = []

    def gate(listener: gsp.Listener) -> None:
        calls.append(listener)
        if len(calls) > 1:  # the first accept goes at once, the second waits for the event
            open_gate.wait()

    rep = mk("rep")
    lst = rep.listen(TCP, accept_gate=gate)
    first = mk("req", dial=lst.url)
    round_trip(first, rep)
    second = mk("req")
    second.dial(lst.url, block=False)  # the kernel completes the connection; gsp does not take it
    gevent.sleep(0.2)
    assert lst.stats["accepted"] == 1 and len(rep.pipes) == 1
    assert calls == [lst, lst]
    open_gate.set()
    round_trip(second, rep)
    assert lst.stats["accepted"] == 2 and len(rep.pipes) == 2


def test_an_accept_gate_that_raises_is_logged_and_the_listener_accepts_anyway(
        mk: Mk, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gsp.listener")

    def gate(listener: gsp.Listener) -> None:
        raise ValueError("a broken gate")

    rep = mk("rep")
    lst = rep.listen(TCP, accept_gate=gate)
    for _ in range(3):
        round_trip(mk("req", dial=lst.url), rep)
    warned = [r for r in caplog.records if "the accept gate" in r.getMessage()]
    assert warned and "raised ValueError: accepting anyway" in warned[0].getMessage()
    assert warned[0].exc_info is not None  # with its traceback
    assert len(warned) == 1  # rate limited: one WARNING an interval, the rest at DEBUG


def test_an_accept_gate_must_be_callable(mk: Mk) -> None:
    rep = mk("rep")
    with pytest.raises(gsp.BadOption, match="accept_gate must be a callable"):
        rep.listen(TCP, accept_gate="yes")
    assert rep.listeners == []


def test_closing_a_listener_whose_gate_waits_ends_its_accepting(mk: Mk) -> None:
    waiting = gevent.event.Event()

    def gate(listener: gsp.Listener) -> None:
        waiting.set()
        gevent.sleep(3600)

    rep = mk("rep")
    lst = rep.listen(TCP, accept_gate=gate)
    assert waiting.wait(WAIT)
    with gevent.Timeout(WAIT, AssertionError("close() waited for the gate")):
        lst.close()
    assert rep.listeners == [] and lst.stats["accepted"] == 0
