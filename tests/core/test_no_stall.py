"""No peer stalls the others: for each protocol, over real tcp connections, a
raw peer that never reads (its kernel buffers and gsp's queue for it fill up) and a raw peer that
floods 64 KiB messages, while a well-behaved peer is still served within a second each time.

rep and respondent have theirs in tests/core/test_backtrace.py
(``test_a_stalled_and_a_flooding_peer_do_not_stop_a_good_one``); pair (v0, and pair1 without
``polyamorous``) takes one peer only, so there is no other peer to stall.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import gevent
import pytest

import gsp
from gsp.protocol.inbox import FRONT_BYTES, FRONT_ITEMS, TURN_BYTES, TURN_ITEMS
from gsp.testing import RawPeer, wait_for
from tests.support import TCP, echo_forever, hops, scaled, u32

BIG = b"x" * 65536
#: Round trips (or deliveries) the good peer must get, each within a second.
ROUNDS = 20
#: What a send queue holds once it is full: the send_buffer_size bound (4 MiB) less a message.
FULL = (4 << 20) - len(BIG)
#: Protocol numbers the raw peers announce.
PULL, PUSH, SUB, PUB, REP, RESPONDENT, BUS, PAIR1, STAR = (
    0x51, 0x50, 0x21, 0x20, 0x31, 0x63, 0x70, 0x11, 0x640)


@pytest.fixture
def raw(spawn: Callable[..., gevent.Greenlet]) -> Iterator[Callable[..., RawPeer]]:
    """Make raw peers of a listener (closed at teardown, which ends their flooding greenlets)."""
    made: list[RawPeer] = []

    def make(url: str, protocol: int) -> RawPeer:
        made.append(RawPeer(url, protocol))
        return made[-1]

    yield make
    for p in made:
        p.close()


def flood(peer: RawPeer, frame: bytes) -> None:
    """Send ``frame`` (header and body) over and over, as fast as gsp takes it, until the
    connection ends."""
    try:
        while True:
            peer.send(frame)
    except OSError:  # closed by the test or by gsp, or gsp took nothing for 5 s
        pass


def recv_until(sock: Any, want: bytes, within: float = 1.0) -> int:
    """Receive on ``sock`` until ``want`` arrives, failing unless it does within ``within``
    seconds; returns how many other messages came before it."""
    deadline = time.monotonic() + within
    others = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{want!r} did not arrive within {within:g} s ({others} others did)")
        try:
            got = sock.recv(timeout=left)
        except gsp.Timeout:
            pytest.fail(f"{want!r} did not arrive within {within:g} s ({others} others did)")
        if got == want:
            return others
        others += 1


def attached(sock: gsp.Socket, n: int) -> None:
    wait_for(lambda: len(sock.pipes) == n, what=f"{n} pipes")


def full(pipe: gsp.Pipe) -> bool:
    """Whether ``pipe``'s send queue holds its byte bound (its peer took no more)."""
    return pipe.stats["send_queue_bytes"] >= FULL


def test_push_keeps_feeding_a_good_puller(gsp_socket, raw, spawn):
    """A puller that never reads fills its queue; push then sends everything to the good
    puller (a flooding puller's messages are discarded, as in nng)."""
    push = gsp_socket("push", send_timeout=1)
    url = push.listen(TCP).url
    raw(url, PULL)  # never reads
    attached(push, 1)
    stalled = push.pipes[0]
    spawn(flood, raw(url, PULL), BIG)  # sends what push never wants
    good = gsp_socket("pull", recv_timeout=1)
    good.dial(url, fail_fast=True)
    attached(push, 3)

    def pushing() -> None:
        while True:
            push.send(BIG)  # a Timeout (a second without room anywhere) fails the test below

    sender = spawn(pushing)
    got = 0
    while not full(stalled):  # every message within a second of the last
        assert good.recv() == BIG and not sender.dead
        got += 1
        assert got < 5000, "the stalled puller's queue never filled"
    for _ in range(ROUNDS * 10):  # then everything goes to the good one
        assert good.recv() == BIG and not sender.dead
    assert len(push.pipes) == 3


def test_pub_keeps_serving_a_good_subscriber(gsp_socket, raw):
    pub = gsp_socket("pub")
    url = pub.listen(TCP).url
    raw(url, SUB)  # never reads
    attached(pub, 1)
    stalled = pub.pipes[0]
    good = gsp_socket("sub", recv_timeout=1)
    good.subscribe(b"")
    good.dial(url, fail_fast=True)
    attached(pub, 2)

    def publish(k: int) -> None:
        for _ in range(20):
            pub.send(BIG)
        pub.send(b"good %d" % k)
        recv_until(good, b"good %d" % k)

    k = 0
    while not full(stalled):
        publish(k)
        k += 1
        assert k < 100, "the stalled subscriber's queue never filled"
    for i in range(ROUNDS):
        publish(k + i)
    assert pub.stats["dropped_queue_full"] > 0  # the stalled subscriber's oldest went


@pytest.mark.parametrize("protocol,sender,number", [("pull", "push", PUSH), ("sub", "pub", PUB)],
                         ids=["pull", "sub"])
def test_a_flood_does_not_keep_a_good_sender_out(gsp_socket, raw, spawn, protocol, sender, number):
    """A flooding peer fills the receive queue to its byte bound (recv_buffer_size, 16 MiB,
    256 of its messages) whenever the consumer pauses; a good peer's message, arriving then, is
    not queued behind that backlog: the queue is fair across pipes, so it waits behind at most
    the short front (FRONT_ITEMS items or FRONT_BYTES, and the last turn that filled it) and one
    turn of the flood, where a FIFO queue put it behind all 256."""
    s = gsp_socket(protocol)
    if protocol == "sub":
        s.subscribe(b"")
    url = s.listen(TCP).url
    raw(url, number)  # never reads (pull and sub never send: it cannot stall anything)
    spawn(flood, raw(url, number), BIG)
    attached(s, 2)
    bad = set(s.pipes)
    good = gsp_socket(sender)
    good.dial(url, fail_fast=True)
    attached(s, 3)
    (mine,) = set(s.pipes) - bad
    front = min(FRONT_ITEMS, FRONT_BYTES // len(BIG))  # items in the front, less its last turn
    turn = min(TURN_ITEMS, max(1, TURN_BYTES // len(BIG)))  # the flood's items in one turn
    for k in range(ROUNDS):
        wait_for(lambda: s.stats["recv_queue_bytes"] >= (16 << 20) - len(BIG),
                 what="the flood to fill the receive queue")
        good.send(b"good %d" % k)
        wait_for(lambda k=k: mine.stats["messages_received"] == k + 1,
                 what="the good message read")
        assert recv_until(s, b"good %d" % k) <= front + 2 * turn


def test_req_is_answered_beside_a_stalled_and_a_flooding_rep(gsp_socket, raw, spawn):
    """A REP that never reads fills its queue, one floods replies nobody asked for: requests
    go round robin to pipes with room (and are resent after resend_time), so the good REP
    answers each within a second."""
    req = gsp_socket("req", resend_time=0.2, send_timeout=1)
    url = req.listen(TCP).url
    raw(url, REP)  # never reads
    attached(req, 1)
    stalled = req.pipes[0]
    spawn(flood, raw(url, REP), u32(0x80000001) + BIG)  # replies to no request of ours
    rep = gsp_socket("rep")
    rep.dial(url, fail_fast=True)
    attached(req, 3)
    spawn(echo_forever, rep)
    load = req.open_context()

    def loading() -> None:  # 64 KiB requests, each canceling the last: they fill every pipe
        while True:
            load.send(BIG)
            gevent.sleep(0)

    sender = spawn(loading)
    wait_for(lambda: full(stalled) or sender.dead, what="the stalled REP's queue to fill")
    for k in range(ROUNDS):
        req.send(b"good %d" % k)
        assert req.recv(timeout=scaled(1)) == b"good %d" % k
        assert not sender.dead


def test_surveyor_hears_a_good_respondent_beside_stalled_and_flooding_ones(gsp_socket, raw, spawn):
    sv = gsp_socket("surveyor", survey_time=5)
    url = sv.listen(TCP).url
    raw(url, RESPONDENT)  # never reads
    spawn(flood, raw(url, RESPONDENT), u32(0x80000001) + BIG)  # answers to no survey
    good = gsp_socket("respondent")
    good.dial(url, fail_fast=True)
    attached(sv, 3)
    spawn(echo_forever, good)
    load = sv.open_context()

    def loading() -> None:  # 64 KiB surveys, each once the good respondent answered the last
        while True:
            load.send(BIG)
            load.recv(timeout=5)

    sender = spawn(loading)
    wait_for(lambda: sv.stats["dropped_queue_full"] > 0 or sender.dead,
             what="a survey to miss the stalled peer")
    for k in range(ROUNDS):
        sv.send(b"good %d" % k)
        assert sv.recv(timeout=scaled(1)) == b"good %d" % k
        assert not sender.dead


def _echo_good(hub: gsp.Socket, reply: Callable[[gsp.Message], None]) -> None:
    """Serve ``hub``: hand every message to ``reply`` until the socket closes."""
    try:
        while True:
            reply(hub.recv_msg())
    except gsp.Closed:
        pass


@pytest.mark.parametrize("protocol,number", [("bus", BUS), ("star", STAR)], ids=["bus", "star"])
def test_bus_and_star_serve_a_good_peer_beside_stalled_and_flooding_ones(
        gsp_socket, raw, spawn, protocol, number):
    """The hub sends every message it receives to every peer (star forwards them itself, bus is
    made to by the test): the stalled peer's queue fills from the flood, and misses messages
    (counted), while the good peer gets its answers within a second."""
    hub = gsp_socket(protocol)
    url = hub.listen(TCP).url
    raw(url, number)  # never reads
    spawn(flood, raw(url, number), (hops(0) if protocol == "star" else b"") + BIG)
    good = gsp_socket(protocol, recv_timeout=1)
    good.dial(url, fail_fast=True)
    attached(hub, 3)

    def reply(m: gsp.Message) -> None:
        if m.body.startswith(b"good"):
            hub.send(b"re: " + m.body)
        elif protocol == "bus":
            hub.send(m.body)  # star has forwarded it already

    spawn(_echo_good, hub, reply)
    wait_for(lambda: hub.stats["dropped_queue_full"] > 0, what="the stalled peer to miss one")
    for k in range(ROUNDS):
        ask_until_answered(good, b"good %d" % k, b"re: good %d" % k)


def ask_until_answered(sock: Any, ask: bytes, want: bytes, within: float = 1.0,
                       every: float = 0.25) -> None:
    """Send ``ask`` on a best-effort socket (bus, star) and receive until ``want`` arrives,
    failing unless it does within ``within`` seconds of the first ask. The flood also reaches
    the good peer through the hub, and a hub's send to a peer whose send queue is full at that
    moment drops the message (counted, as nng does), so the ask is repeated every ``every``
    seconds: a hub that stalls still fails, a dropped answer is asked again."""
    deadline = time.monotonic() + within
    others = 0
    while time.monotonic() < deadline:
        sock.send(ask)
        until = min(deadline, time.monotonic() + every)
        while (left := until - time.monotonic()) > 0:
            try:
                got = sock.recv(timeout=left)
            except gsp.Timeout:
                break
            if got == want:
                return
            others += 1
    pytest.fail(f"{want!r} did not arrive within {within:g} s ({others} others did)")


def test_polyamorous_pair1_serves_a_good_peer_beside_stalled_and_flooding_ones(
        gsp_socket, raw, spawn):
    hub = gsp_socket("pair1", polyamorous=True)
    url = hub.listen(TCP).url
    raw(url, PAIR1)  # never reads; the oldest peer, where a send without a pipe goes
    attached(hub, 1)
    spawn(flood, raw(url, PAIR1), hops(1) + BIG)
    good = gsp_socket("pair1", polyamorous=True, recv_timeout=1)
    good.dial(url, fail_fast=True)
    attached(hub, 3)

    def reply(m: gsp.Message) -> None:
        if m.body.startswith(b"good"):
            hub.send_msg(gsp.Message(b"re: " + m.body, pipe=m.pipe))
        else:
            hub.send(m.body)  # to the oldest peer: the stalled one

    spawn(_echo_good, hub, reply)
    wait_for(lambda: hub.stats["dropped_queue_full"] > 0, what="the stalled peer to miss one")
    for k in range(ROUNDS):
        good.send(b"good %d" % k)
        assert good.recv() == b"re: good %d" % k
