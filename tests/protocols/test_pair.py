"""pair (v0) raw mode and pair1 (cooked, raw, polyamorous), named after mangos' test categories.

What every protocol must do (identity, options, closing, raw mode, pipe churn) is checked by the
conformance kit's ProtocolSuite; this file adds what is particular to pair and pair1.
"""

from __future__ import annotations

import time

import gevent
import pytest

import gsp
from gsp.testing import WAIT, ProtocolSuite, RawPeer, wait_for
from tests.support import BAD_TTL, TCP, connect, hops, recv_across_resize, scaled


class TestPairProtocol(ProtocolSuite):
    protocol = peer = "pair"
    number = peer_number = 0x10
    send_blocks = True


class TestPair1Protocol(ProtocolSuite):
    protocol = peer = "pair1"
    number = peer_number = 0x11
    send_blocks = True
    raw_header = hops(0)
    options = {"ttl": (8, [1, 2, 254, 255], BAD_TTL)}


# ================================ pair v0 =======================================================

def test_raw_pair_header_passthrough(gsp_socket):
    # No pair0 header exists: a raw send puts its header on the wire as-is, before the body, and a
    # receiver gets everything as the body.
    a = gsp_socket("pair", raw=True, recv_timeout=WAIT)
    b = gsp_socket("pair", raw=True, recv_timeout=WAIT)
    connect(a, b)
    a.send_msg(gsp.Message(b"body", b"HDR!"))
    got = b.recv_msg()
    assert (got.header, got.body) == (b"", b"HDR!body")
    assert got.pipe is b.pipes[0]


def test_raw_pair_garbage_is_just_body(gsp_socket):
    s = gsp_socket("pair", raw=True, recv_timeout=WAIT)
    url = s.listen(TCP).url
    with RawPeer(url, 0x10) as peer:
        peer.send(b"", b"\xff\x00garbage")
        assert s.recv_msg().body == b""
        assert s.recv_msg().body == b"\xff\x00garbage"
        s.send_msg(gsp.Message(b"b", b"h"))
        assert peer.recv() == b"hb"


@pytest.mark.parametrize("proto,raw", [("pair", False), ("pair", True), ("pair1", False),
                                       ("pair1", True)])
def test_reject_second_pipe(gsp_socket, proto, raw):
    """pair and (monogamous) pair1 have one peer: a second pipe is refused at attach."""
    events: list[gsp.PipeEvent] = []
    a = gsp_socket(proto, raw=raw)
    b = gsp_socket(proto, raw=raw)
    connect(a, b)
    c = gsp_socket(proto, raw=raw, reconnect_time=5.0)
    c.on_pipe_event(lambda ev, p: events.append(ev))
    c.dial(a.listeners[0].url, fail_fast=True)
    wait_for(lambda: gsp.PipeEvent.DETACHED in events, what="the second pipe to be refused")
    assert events[:2] == [gsp.PipeEvent.ATTACHING, gsp.PipeEvent.ATTACHED]
    assert len(a.pipes) == 1 and a.pipes[0].remote_address == b.pipes[0].local_address
@pytest.mark.parametrize("raw", [False, True])
def test_raw_pair_send_deadline(gsp_socket, raw):
    s = gsp_socket("pair", raw=raw, send_timeout=0.02)  # no peer: nowhere to send
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout):
        s.send(b"x")
    assert time.monotonic() - t0 < scaled(1)


def test_raw_pair_send_best_effort(gsp_socket):
    s = gsp_socket("pair", raw=True, best_effort=True, send_timeout=5)
    t0 = time.monotonic()
    for _ in range(100):
        s.send(b"yep")  # dropped at once, never waits
    assert time.monotonic() - t0 < scaled(1)


BIG = b"x" * 65536


def fill_until_timeout(sender: gsp.Socket, limit: int = 5000) -> int:
    """Send BIG until back-pressure makes a send time out; returns how many went through."""
    for n in range(limit):
        try:
            sender.send(BIG)
        except gsp.Timeout:
            return n
    raise AssertionError(f"{limit} sends never met back-pressure")


@pytest.mark.parametrize("raw", [False, True])
def test_raw_pair_back_pressure_and_close_pipe(gsp_socket, raw):
    # A receiver that never reads pushes back all the way to the sender; closing its pipe frees
    # both sides, and the redialed pipe carries messages again.
    a = gsp_socket("pair", raw=raw, recv_buffer=2, recv_timeout=WAIT, linger=0)
    b = gsp_socket("pair", raw=raw, send_buffer=1, send_timeout=0.05, reconnect_time=0.05, linger=0)
    connect(a, b)
    assert fill_until_timeout(b) >= 3
    old = a.pipes[0]
    old.close()
    wait_for(lambda: a.pipes and a.pipes[0] is not old and b.pipes, what="redial")
    b.send_timeout = WAIT
    b.send(b"after")
    got = [a.recv() for _ in range(2)]
    assert got[0] == BIG  # queued before the close: still delivered
    if got[1] == BIG:  # at most recv_buffer (2) messages were queued
        got.append(a.recv())
    assert got[-1] == b"after"


@pytest.mark.parametrize("raw", [False, True])
def test_raw_pair_resize_recv(gsp_socket, raw):
    # Shrinking keeps the newest messages that fit; growing keeps everything.
    a = gsp_socket("pair", raw=raw, recv_buffer=10, recv_timeout=0.05)
    b = gsp_socket("pair", raw=raw)
    connect(a, b)
    for i in range(4):
        b.send(b"%d" % i)
    wait_for(lambda: a.stats["recv_queue"] == 4, what="four queued")
    a.recv_buffer = 20
    assert a.recv() == b"0"
    a.recv_buffer = 1
    assert a.recv() == b"3"
    with pytest.raises(gsp.Timeout):
        a.recv()


@pytest.mark.parametrize("raw", [False, True])
def test_raw_pair_resize_recv_posted(gsp_socket, raw):
    # A receive already waiting survives a resize and gets the next message.
    a = gsp_socket("pair", raw=raw, recv_buffer=1, recv_timeout=WAIT)
    b = gsp_socket("pair", raw=raw)
    connect(a, b)
    recv_across_resize(a, b, 3, b"one")


def test_raw_pair_resize_unblocks_reader(gsp_socket):
    # A full queue blocks the pipe reader; growing the queue lets the waiting message in.
    a = gsp_socket("pair", raw=True, recv_buffer=1, recv_timeout=0.05)
    b = gsp_socket("pair", raw=True)
    connect(a, b)
    b.send(b"1")
    b.send(b"2")
    wait_for(lambda: a.stats["recv_queue"] == 1, what="first queued")
    gevent.sleep(0.05)
    assert a.stats["recv_queue"] == 1  # the second waits in the blocked reader
    a.recv_buffer = 5
    wait_for(lambda: a.stats["recv_queue"] == 2, what="the blocked message to enter")
    assert [a.recv(), a.recv()] == [b"1", b"2"]


# ================================ pair v1 =======================================================

def test_pair1_cooked(gsp_socket):
    s = gsp_socket("pair1")
    assert s.polyamorous is False


def test_pair1_send_receive(gsp_socket):
    a = gsp_socket("pair1", recv_timeout=WAIT)
    b = gsp_socket("pair1", recv_timeout=WAIT)
    connect(a, b)
    a.send(b"ping")
    m = b.recv_msg()
    assert (m.header, m.body, m.pipe) == (b"", b"ping", b.pipes[0])  # cooked hides hops
    b.send_msg(gsp.Message(b"pong", b"ignored header"))
    assert a.recv() == b"pong"


def test_pair1_wire_hop_count(gsp_socket):
    # nng: a cooked send puts hop count 0 and the pipe adds one, so the first hop arrives as 1.
    s = gsp_socket("pair1", recv_timeout=WAIT)
    with RawPeer(s.listen(TCP).url, 0x11) as peer:
        assert peer.peer_protocol == 0x11
        wait_for(lambda: s.pipes, what="the pipe")
        s.send(b"out")
        assert peer.recv() == hops(1) + b"out"
        peer.send(hops(3) + b"in")
        assert s.recv_msg().body == b"in"


def test_pair1_ttl_drop(gsp_socket):
    s = gsp_socket("pair1", ttl=4, recv_timeout=0.1)
    with RawPeer(s.listen(TCP).url, 0x11) as peer:
        peer.send(hops(4) + b"four", hops(5) + b"five", hops(0xff) + b"max", hops(1) + b"one")
        assert [s.recv(), s.recv()] == [b"four", b"one"]
        with pytest.raises(gsp.Timeout):
            s.recv()
        assert s.stats["dropped_ttl"] == 2


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("frame", [b"", b"\x00\x00\x01", hops(0x100) + b"x", hops(1 << 31)],
                         ids=["empty", "short", "over-0xff", "high-bit"])
def test_pair1_recv_garbage_closes_pipe(gsp_socket, raw, frame):
    s = gsp_socket("pair1", raw=raw, recv_timeout=0.05)
    with RawPeer(s.listen(TCP).url, 0x11) as peer:
        peer.send(frame)
        peer.wait_closed()
        wait_for(lambda: not s.pipes, what="the pipe to go")
        with pytest.raises(gsp.Timeout):
            s.recv()
        assert s.stats["dropped_malformed"] == 1


# -- raw pair1 ------------------------------------------------------------------------------------

def test_raw_pair1_enforce_ttl(gsp_socket):
    # Raw receive shows the hop count as it arrived; more than ttl is dropped.
    s = gsp_socket("pair1", raw=True, ttl=4, recv_timeout=0.1)
    with RawPeer(s.listen(TCP).url, 0x11) as peer:
        peer.send(hops(1) + b"one", hops(5) + b"drop", hops(2) + b"two")
        m1, m2 = s.recv_msg(), s.recv_msg()
        assert (m1.header, m1.body) == (hops(1), b"one")
        assert (m2.header, m2.body) == (hops(2), b"two")
        with pytest.raises(gsp.Timeout):
            s.recv_msg()


def test_raw_pair1_send_adds_hop(gsp_socket):
    s = gsp_socket("pair1", raw=True)
    with RawPeer(s.listen(TCP).url, 0x11) as peer:
        wait_for(lambda: s.pipes, what="the pipe")
        s.send_msg(gsp.Message(b"a", hops(0)))
        s.send_msg(gsp.Message(b"b", hops(0xfe)))
        assert [peer.recv(), peer.recv()] == [hops(1) + b"a", hops(0xff) + b"b"]


def test_raw_pair1_device_hops_accumulate(gsp_socket):
    # cooked a -> raw b | raw c -> cooked d, forwarded by hand: each hop adds one.
    a = gsp_socket("pair1")
    b = gsp_socket("pair1", raw=True, recv_timeout=WAIT)
    connect(a, b)
    c = gsp_socket("pair1", raw=True, recv_timeout=WAIT)
    d = gsp_socket("pair1", recv_timeout=WAIT)
    connect(c, d)
    a.send(b"x")
    m = b.recv_msg()
    assert m.header == hops(1)
    c.send_msg(m)
    assert d.recv() == b"x"
    d.send(b"back")
    back = c.recv_msg()
    assert back.header == hops(1)
    b.send_msg(back)
    assert a.recv() == b"back"


@pytest.mark.parametrize("header", [b"", hops(1)[:3], hops(1) + b"\x00", b"\x01\x00\x00\x00",
                                    b"\x00\x01\x00\x00", hops(0xff)],
                         ids=["missing", "short", "long", "byte0", "byte1", "0xff"])
def test_raw_pair1_send_malformed_header(gsp_socket, header):
    a = gsp_socket("pair1", raw=True)
    b = gsp_socket("pair1", raw=True, recv_timeout=0.05)
    connect(a, b)
    with pytest.raises(gsp.ProtocolStateError):
        a.send_msg(gsp.Message(b"bad", header))
    with pytest.raises(gsp.ProtocolStateError):
        a.send(b"raw send() has no header at all")
    with pytest.raises(gsp.Timeout):
        b.recv_msg()


def test_raw_pair1_send_deadline_and_best_effort(gsp_socket):
    s = gsp_socket("pair1", raw=True, send_timeout=0.02)
    with pytest.raises(gsp.Timeout):
        s.send_msg(gsp.Message(b"x", hops(1)))
    s.best_effort = True
    for _ in range(100):
        s.send_msg(gsp.Message(b"x", hops(1)))  # dropped, never waits


def test_raw_pair1_back_pressure_and_resize(gsp_socket):
    a = gsp_socket("pair1", raw=True, recv_buffer=1, recv_timeout=0.05, linger=0)
    b = gsp_socket("pair1", raw=True, send_buffer=1, send_timeout=0.05, linger=0)
    connect(a, b)
    sent = 0
    while True:
        try:
            b.send_msg(gsp.Message(BIG, hops(0)))
        except gsp.Timeout:
            break
        sent += 1
        assert sent < 5000, "no back-pressure"
    a.recv_buffer = 3  # room appears: the reader moves on
    got = [a.recv_msg() for _ in range(3)]
    assert all(m.header == hops(1) and m.body == BIG for m in got)
    assert sent >= 3


# -- polyamorous pair1 -----------------------------------------------------------------------------

def test_pair1_monogamous_rejects_second_pipe(gsp_socket):
    a = gsp_socket("pair1")
    b = gsp_socket("pair1")
    connect(a, b)
    c = gsp_socket("pair1", reconnect_time=5.0)
    events: list[gsp.PipeEvent] = []
    c.on_pipe_event(lambda ev, p: events.append(ev))
    c.dial(a.listeners[0].url, fail_fast=True)
    wait_for(lambda: gsp.PipeEvent.DETACHED in events, what="rejection")
    assert len(a.pipes) == 1


def test_pair1_polyamorous_routes_by_pipe(gsp_socket):
    hub = gsp_socket("pair1", polyamorous=True, recv_timeout=WAIT)
    url = hub.listen(TCP).url
    peers = [gsp_socket("pair1", recv_timeout=WAIT) for _ in range(3)]
    for p in peers:
        p.dial(url, fail_fast=True)
    wait_for(lambda: len(hub.pipes) == 3, what="three peers")
    for i, p in enumerate(peers):
        p.send(b"I am %d" % i)
    for _ in peers:
        m = hub.recv_msg()
        assert m.header == b"" and m.pipe in hub.pipes
        hub.send_msg(gsp.Message(b"you said: " + m.body, pipe=m.pipe))
    for i, p in enumerate(peers):
        assert p.recv() == b"you said: I am %d" % i


def test_pair1_polyamorous_no_pipe_goes_to_oldest_peer(gsp_socket):
    hub = gsp_socket("pair1", polyamorous=True)
    url = hub.listen(TCP).url
    first = gsp_socket("pair1", recv_timeout=WAIT)
    first.dial(url, fail_fast=True)
    wait_for(lambda: len(hub.pipes) == 1, what="first peer")
    second = gsp_socket("pair1", recv_timeout=0.1)
    second.dial(url, fail_fast=True)
    wait_for(lambda: len(hub.pipes) == 2, what="second peer")
    hub.send(b"to whoever came first")
    assert first.recv() == b"to whoever came first"
    with pytest.raises(gsp.Timeout):
        second.recv()


def test_pair1_polyamorous_send_never_blocks(gsp_socket):
    # Unknown or foreign pipe, no peers, or a full peer queue: the message is dropped at once.
    hub = gsp_socket("pair1", polyamorous=True, send_buffer=1, linger=0,
                                      send_timeout=60)
    t0 = time.monotonic()
    hub.send(b"no peers")
    assert hub.stats["dropped_no_peer"] == 1 and hub.stats["dropped_queue_full"] == 0
    with RawPeer(hub.listen(TCP).url, 0x11) as stalled:  # never reads
        wait_for(lambda: hub.pipes, what="the stalled peer")
        huge = b"h" * (1 << 18)
        for _ in range(200):  # 50 MiB: far more than the kernel buffers take
            hub.send(huge)
        dropped = hub.stats["dropped_queue_full"]
        assert dropped > 1 and hub.stats["dropped_no_peer"] == 1
        a = gsp_socket("pair1")
        b = gsp_socket("pair1")
        connect(a, b)
        hub.send_msg(gsp.Message(b"foreign pipe", pipe=a.pipes[0]))
        assert hub.stats["dropped_no_peer"] == 2
        assert hub.stats["dropped"] == dropped + 2
        assert time.monotonic() - t0 < scaled(3)
        assert stalled.recv() == hops(1) + huge


def test_pair1_polyamorous_only_before_start(gsp_socket):
    with gsp.socket("pair1") as s:
        s.polyamorous = True
        s.polyamorous = False
        s.polyamorous = True
        s.listen(TCP)
        with pytest.raises(gsp.ProtocolStateError):
            s.polyamorous = False
        s.polyamorous = True  # unchanged value: fine
        assert s.polyamorous is True
    s = gsp_socket("pair1")
    s.dial(TCP.replace(":0", ":1"), background=True)
    with pytest.raises(gsp.ProtocolStateError):
        s.polyamorous = True
    assert s.polyamorous is False


def test_pair1_polyamorous_has_no_raw_mode(gsp_socket):
    with pytest.raises(gsp.NotSupported):
        gsp.socket("pair1", raw=True, polyamorous=True)
    s = gsp_socket("pair1", raw=True)
    with pytest.raises(gsp.NotSupported):
        s.polyamorous = True
    assert s.polyamorous is False


def test_pair1_polyamorous_ttl_and_garbage(gsp_socket):
    s = gsp_socket("pair1", polyamorous=True, ttl=2, recv_timeout=0.1)
    url = s.listen(TCP).url
    with RawPeer(url, 0x11) as good, RawPeer(url, 0x11) as bad:
        good.send(hops(3) + b"too far", hops(2) + b"ok")
        bad.send(b"\x00")
        bad.wait_closed()
        m = s.recv_msg()
        assert m.body == b"ok" and m.pipe in s.pipes
        with pytest.raises(gsp.Timeout):
            s.recv()
        assert len(s.pipes) == 1
