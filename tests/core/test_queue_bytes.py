"""Receive queues bounded in bytes as well as messages (``recv_buffer_size``), and big bodies
received whole once the kernel has them (SO_RCVLOWAT on tcp)."""

from __future__ import annotations

import struct
import time
from typing import Callable

import gevent
import pytest

import gsp
from gsp.protocol import Inbox
from gsp.testing import RawPeer, free_url, wait_for
from gsp.transport import wire
from tests.support import scaled

pytestmark = pytest.mark.core

KiB = 1024
MiB = 1 << 20


# -- the Inbox ------------------------------------------------------------------------------------

def test_a_byte_bound_fills_the_queue_before_its_message_bound() -> None:
    box: Inbox[bytes] = Inbox(100, "drop_newest", max_bytes=10 * KiB)
    kept = [box.put(b"x" * (4 * KiB)) for _ in range(4)]
    # 4 KiB, 8 KiB: under the bound; 12 KiB: full, so the fourth is dropped
    assert kept == [True, True, True, False]
    assert len(box) == 3 and box.queued_bytes == 12 * KiB and box.dropped == 1


def test_one_item_bigger_than_the_bound_is_still_let_in() -> None:
    box: Inbox[bytes] = Inbox(10, "block", max_bytes=KiB)
    box.put(b"x" * (5 * KiB), timeout=0.1)
    assert box.queued_bytes == 5 * KiB
    with pytest.raises(gsp.Timeout):
        box.put(b"y", timeout=0.05)  # full by bytes: a blocking put waits
    assert box.get() == b"x" * (5 * KiB)
    box.put(b"y", timeout=0.1)
    assert box.queued_bytes == 1


def test_drop_oldest_drops_as_many_as_the_new_item_needs() -> None:
    box: Inbox[bytes] = Inbox(100, "drop_oldest", max_bytes=10 * KiB)
    for i in range(5):
        box.put(bytes([i]) * (2 * KiB))  # 10 KiB: full
    assert box.put(b"z" * (6 * KiB)) is False  # older ones went to make room
    # Dropped from the front until under the bound (8 KiB), then let in, as a blocking put
    # would be: the bound is passed by one item at most
    assert [m[0] for m in box.ready] == [1, 2, 3, 4, ord("z")]
    assert box.dropped == 1 and box.queued_bytes == 14 * KiB


def test_items_taken_through_ready_are_no_longer_counted() -> None:
    box: Inbox[bytes] = Inbox(100, "block", max_bytes=10 * KiB)
    box.put_all([b"a" * KiB] * 3, nbytes=3 * KiB)  # a batch of three
    box.put(b"b" * (2 * KiB))
    assert box.queued_bytes == 5 * KiB
    ready = box.ready
    ready.popleft()  # the fast path: no call into the inbox
    # Counted until the whole batch is taken (at most one batch too many) ...
    assert box.queued_bytes == 5 * KiB
    ready.popleft()
    ready.popleft()
    assert box.queued_bytes == 2 * KiB  # ... then not at all
    ready.popleft()
    assert box.queued_bytes == 0


def test_the_count_by_position_stays_small_while_the_consumer_keeps_up() -> None:
    box: Inbox[bytes] = Inbox(8, "block", max_bytes=1 << 30)
    for i in range(5000):  # taken through ready, as sockets do: the inbox is never told
        if i % 3:
            box.put(b"x" * 10)
        else:
            box.put_all([b"y" * 10] * 3, nbytes=30)
        while len(box.ready) > i % 5:
            box.ready.popleft()
        assert len(box._fifo.ledger.marks) <= 9  # one per put still queued, at most
    assert 10 * len(box.ready) <= box.queued_bytes <= 10 * len(box.ready) + 20  # one batch


def test_a_producer_blocked_by_bytes_is_let_in_when_the_consumer_drains_through_ready() -> None:
    box: Inbox[bytes] = Inbox(100, "block", max_bytes=4 * KiB)
    box.put(b"a" * (4 * KiB))
    done: list[bool] = []
    g = gevent.spawn(lambda: done.append(box.put(b"b", timeout=2)))
    gevent.sleep(0.05)
    assert not done  # full by bytes
    box.ready.popleft()
    assert box.get(timeout=2) == b"b"  # found ready empty: lets the producer in
    g.join(2)
    assert done == [True]


def test_put_all_respects_the_byte_bound_like_put_one_by_one() -> None:
    for policy in ("drop_oldest", "drop_newest"):
        a: Inbox[bytes] = Inbox(50, policy, max_bytes=20)  # type: ignore[arg-type]
        b: Inbox[bytes] = Inbox(50, policy, max_bytes=20)  # type: ignore[arg-type]
        items = [bytes([i]) * (i % 7 + 1) for i in range(30)]
        for x in items:
            a.put(x)
        b.put_all(items[:2])  # under the bound: one run
        dropped_b = b.put_all(items[2:])
        assert list(b.ready) == list(a.ready), policy
        assert a.dropped == b.dropped == dropped_b
        assert b.queued_bytes == sum(map(len, b.ready))


def test_lowering_the_byte_bound_drops_the_oldest_and_filter_recounts() -> None:
    box: Inbox[bytes] = Inbox(100, "drop_oldest", max_bytes=0)
    for i in range(6):
        box.put(bytes([i]) * 100)
    assert box.queued_bytes == 0  # no byte bound: nothing is measured
    box.set_max_bytes(250)
    assert [m[0] for m in box.ready] == [4, 5] and box.dropped == 4
    assert box.queued_bytes == 200
    box.filter(lambda m: m[0] != 4)
    assert box.queued_bytes == 100
    box.set_max_bytes(0)
    assert box.queued_bytes == 0 and len(box) == 1


def test_sources_are_known_by_position_through_ready_pops_filter_and_rebounds() -> None:
    box: Inbox[bytes] = Inbox(100, "drop_oldest", sources=True)
    box.put_all([b"a1", b"a2", b"a3"], None, "A")
    box.put(b"b1", source="B")
    box.put_all([b"a4", b"c1"], 4, "A")  # the source is per put: a batch has one
    box.ready.popleft()  # taken without telling the inbox
    assert box.get_from() == (b"a2", "A")
    box.filter(lambda m: m != b"a3")
    assert box.get_from() == (b"b1", "B")
    box.set_max_bytes(1 << 20)  # counting bytes from now on keeps the sources
    box.put(b"d1", source="D")
    assert [box.get_from() for _ in range(3)] == [(b"a4", "A"), (b"c1", "A"), (b"d1", "D")]
    assert box.queued_bytes == 0
    box.put(b"e1", source="E")
    box.set_max_bytes(0)
    assert box.get_from(timeout=0.1) == (b"e1", "E")
    with pytest.raises(gsp.Timeout):
        box.get_from(timeout=0.05)


def test_an_item_put_back_goes_first_and_is_counted_whatever_the_bounds() -> None:
    """put_back: an item handed to a receiver that left before it could return it. It goes to
    the head, counted in bytes and sources as any queued item, and a full queue neither waits
    nor drops for it (it was accepted once)."""
    box: Inbox[bytes] = Inbox(2, "block", max_bytes=1 << 20, sources=True)
    box.put(b"aa", source="A")
    box.put(b"bbb", source="B")
    taken = box.get_from()
    assert taken == (b"aa", "A") and box.queued_bytes == 3
    box.put(b"cccc", source="C")  # full again
    box.put_back(b"aa", "A")  # never waits, never drops
    assert len(box) == 3 and box.dropped == 0 and box.queued_bytes == 9
    assert [box.get_from() for _ in range(3)] == [(b"aa", "A"), (b"bbb", "B"), (b"cccc", "C")]
    assert box.queued_bytes == 0
    waiting = gevent.spawn(box.get_from, 1)
    gevent.sleep(0)  # a get waits on the empty queue
    box.put_back(b"x", "X")  # and is woken for what is put back
    assert waiting.get(timeout=1) == (b"x", "X")
    box.close()
    box.put_back(b"late", "L")  # after close: discarded
    assert len(box) == 0


@pytest.mark.parametrize("kind,peer", [("pull", "push"), ("sub", "pub")])
def test_a_pull_and_a_sub_know_each_bodys_pipe(gsp_socket: Callable[..., gsp.Socket], kind: str,
                                               peer: str) -> None:
    url_a, url_b = free_url("tcp"), free_url("tcp")
    rx = gsp_socket(kind, listen=[url_a, url_b])
    if kind == "sub":
        rx.subscribe(b"a")
        rx.subscribe(b"b")
    a, b = gsp_socket(peer, dial=url_a), gsp_socket(peer, dial=url_b)
    wait_for(lambda: len(rx.pipes) == 2 and a.pipes and b.pipes)
    for i in range(50):
        a.send(b"a%d" % i)
        b.send(b"b%d" % i)
    wait_for(lambda: rx.stats["messages_received"] == 100)
    if kind == "sub":
        rx.unsubscribe(b"b")  # queued b-messages go: the a-ones keep their pipe
    pipe_of = {a.pipes[0].local_address: "a", b.pipes[0].local_address: "b"}
    got = []
    while True:
        try:
            m = rx.recv_msg(timeout=0.1)
        except gsp.Timeout:
            break
        got.append((m.body[:1].decode(), pipe_of[m.pipe.remote_address]))
    assert got and all(x == y for x, y in got), kind
    assert len(got) == (100 if kind == "pull" else 50)


# -- sockets ----------------------------------------------------------------------------------------

def test_recv_buffer_size_is_a_validated_option(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("pull")
    assert s.get_option("recv_buffer_size") == 16 * MiB
    with pytest.raises(gsp.BadOption, match="recv_buffer_size"):
        s.set_option("recv_buffer_size", -1)
    s.set_option("recv_buffer_size", 0)
    assert s.stats["recv_queue_bytes"] == 0


@pytest.mark.parametrize("scheme", ["tcp", "inproc"])
def test_a_slow_puller_holds_its_byte_bound_not_its_message_bound(
        gsp_socket: Callable[..., gsp.Socket], scheme: str) -> None:
    url = free_url(scheme)
    pull = gsp_socket("pull", listen=url, recv_buffer_size=MiB, max_recv_size=0)
    push = gsp_socket("push", dial=url)
    wait_for(lambda: push.pipes)
    body = b"m" * (256 * KiB)
    sent = [0]

    def pusher() -> None:
        for _ in range(40):  # 10 MiB, far more than the bound and than the sockets' buffers
            push.send(body)
            sent[0] += 1

    g = gevent.spawn(pusher)
    try:
        wait_for(lambda: pull.stats["recv_queue"] >= 4)
        wait_for(lambda: g.ready() or not push.poll("send"),
                 what="the pusher as far as it can go: its queue full")
        st = pull.stats
        # The message bound (1024) is far away; the byte bound holds: four 256 KiB messages
        # fill it (one batch may pass it: a reader's batch is one message here).
        assert st["recv_queue"] <= 5 and st["recv_queue_bytes"] <= MiB + 256 * KiB, st
        got = [pull.recv(timeout=5) for _ in range(40)]
        assert got == [body] * 40
        g.join(5)
        assert sent[0] == 40 and pull.stats["recv_queue_bytes"] == 0
    finally:
        g.kill()


def test_sub_drops_its_oldest_by_bytes(gsp_socket: Callable[..., gsp.Socket]) -> None:
    url = free_url("inproc")
    sub = gsp_socket("sub", listen=url, recv_buffer_size=100 * KiB, max_recv_size=0)
    sub.subscribe(b"")
    pub = gsp_socket("pub", dial=url)
    wait_for(lambda: sub.pipes)
    for i in range(20):
        pub.send(bytes([i]) * (30 * KiB))
    wait_for(lambda: sub.stats["messages_received"] == 20)
    got = []
    while True:
        try:
            got.append(sub.recv(timeout=0.1)[0])
        except gsp.Timeout:
            break
    # The newest ones survive, as few as the byte bound lets stay (a batch may pass it)
    assert got == list(range(20 - len(got), 20)) and 3 <= len(got) <= 5
    assert sub.stats["dropped_queue_full"] == 20 - len(got)


def test_outbox_bytes_bound_room_and_recount() -> None:
    from gsp.chan import FLUSH, Outbox

    q: Outbox[bytes] = Outbox(100, lambda: None, None, max_bytes=10)
    q.ensure_consumer()  # started (there is none in this test): every offer queues
    assert q.offer(b"a" * 6) and q.offer(b"b" * 6)  # 6 < 10: let in; 12: full
    assert not q.has_room() and not q.offer(b"c")
    with pytest.raises(gsp.WouldBlock):
        q.send(b"c", block=False)
    assert q.queued_bytes == 12
    q.recv()
    q.took()  # the consumer sets the count right
    assert q.queued_bytes == 6 and q.has_room()
    # A direct write that took part of an item queues FLUSH for the consumer: it has no bytes.
    p: Outbox[bytes] = Outbox(100, lambda: None, lambda item: 1, max_bytes=10)
    assert p.offer(b"a" * 6)
    assert p.offer(b"b" * 4)  # queued behind the marker
    p.took()
    assert p.queued_bytes == 4
    assert p.recv() is FLUSH


def test_outbox_drop_oldest_makes_room_and_keeps_the_byte_count() -> None:
    from gsp.chan import Outbox

    q: Outbox[bytes] = Outbox(100, lambda: None, None, max_bytes=10)
    q.ensure_consumer()
    assert not q.drop_oldest()  # nothing queued
    assert q.offer(b"a" * 6) and q.offer(b"b" * 6) and not q.has_room()
    assert q.drop_oldest() and q.queued_bytes == 6 and q.has_room()
    with pytest.warns(DeprecationWarning, match=r"drop_oldest"):
        assert q.recv_nowait() == b"b" * 6  # the old spelling: works, warns, counts
    assert q.queued_bytes == 0


@pytest.mark.parametrize("scheme", ["tcp", "inproc"])
def test_a_pusher_to_a_slow_puller_holds_both_byte_bounds(
        gsp_socket: Callable[..., gsp.Socket], scheme: str) -> None:
    """Distinct 1 MiB messages: what both sides queue stays near their byte
    bounds, the sender is pushed back, and nothing is lost."""
    url = free_url(scheme)
    pull = gsp_socket("pull", listen=url, recv_buffer_size=2 * MiB, max_recv_size=0)
    push = gsp_socket("push", dial=url, send_buffer_size=2 * MiB)
    wait_for(lambda: push.pipes)
    sent = [0]

    def pusher() -> None:
        for i in range(60):
            push.send(bytes([i]) * MiB)  # a new message each time, as users send them
            sent[0] += 1

    g = gevent.spawn(pusher)
    try:
        peak = [0, 0]
        for _ in range(20):  # while the puller does not read
            gevent.sleep(0.02)
            peak[0] = max(peak[0], push.stats["send_queue_bytes"])
            peak[1] = max(peak[1], pull.stats["recv_queue_bytes"])
        assert 0 < sent[0] < 60  # pushed back (tcp: the kernels' buffers hold some too)
        assert peak[0] <= 3 * MiB and peak[1] <= 3 * MiB, peak  # bound + one message
        got = [pull.recv(timeout=5)[0] for _ in range(60)]
        assert got == list(range(60))
        g.join(5)
        assert sent[0] == 60
    finally:
        g.kill()


def test_pub_to_a_stalled_subscriber_drops_by_bytes(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    url = free_url("tcp")
    pub = gsp_socket("pub", listen=url, send_buffer_size=MiB)
    with RawPeer(url, 0x21):  # a SUB that never reads
        wait_for(lambda: pub.pipes)
        for i in range(200):  # 50 MiB: far past the kernel's buffers and the pipe's bound
            pub.send(bytes([i]) * (256 * KiB))
        st = pub.stats
        assert st["send_queue_bytes"] <= MiB + 256 * KiB, st
        assert st["dropped_queue_full"] > 0


# -- big bodies, received whole -------------------------------------------------------------------

def _frame(body: bytes) -> bytes:
    return struct.pack(">Q", len(body)) + body


def test_a_big_body_sent_slowly_is_received_and_its_progress_counts(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    url = free_url("tcp")
    # Slower than the stall timeout in all, but never silent for that long.
    pull = gsp_socket("pull", listen=url, max_recv_size=0, recv_partial_timeout=0.6)
    with RawPeer(url, 0x50) as peer:
        peer.sock.sendall(_frame(b"s" * 100))  # a small one first
        assert pull.recv(timeout=5) == b"s" * 100
        body = bytes(range(256)) * (4 * KiB)  # 1 MiB
        data = _frame(body)
        peer.sock.sendall(data[:8 + 1000])
        for i in range(8):  # the rest over ~1.6 s, one piece every 0.2 s
            gevent.sleep(0.2)
            lo = 8 + 1000 + i * (len(body) - 1000) // 8
            hi = 8 + 1000 + (i + 1) * (len(body) - 1000) // 8
            peer.sock.sendall(data[lo:hi])
        assert pull.recv(timeout=5) == body
        # ... and the next big one, whose body waits whole in the kernel before gsp reads it
        peer.sock.sendall(data[:8])
        decoder = pull.pipes[0]._conn.decoder
        wait_for(lambda: decoder.buffered == 8, what="its prefix read alone")
        peer.sock.sendall(data[8:])
        assert pull.recv(timeout=5) == body
    assert pull.stats["pipes_stalled"] == 0


def test_closing_while_a_big_body_is_awaited_is_prompt(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    url = free_url("tcp")
    pull = gsp_socket("pull", listen=url, max_recv_size=0)
    with RawPeer(url, 0x50) as peer:
        peer.sock.sendall(_frame(b"b" * (64 * KiB)))  # big: the next prefix is read alone
        assert len(pull.recv(timeout=5)) == 64 * KiB
        peer.sock.sendall(struct.pack(">Q", 4 * MiB) + b"x" * 1000)  # most of it never comes
        wait_for(lambda: pull.stats["bytes_received"] >= 64 * KiB)
        gevent.sleep(0.05)  # the reader now waits for the body
        t0 = time.monotonic()
        pull.close()
        assert time.monotonic() - t0 < scaled(0.2)
        peer.wait_closed(timeout=2)


def test_lowat_is_set_back_so_small_messages_flow_after_a_big_one(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    url = free_url("tcp")
    pull = gsp_socket("pull", listen=url, max_recv_size=0)
    with RawPeer(url, 0x50) as peer:
        big = b"B" * (wire.DIRECT_SIZE * 4)
        peer.sock.sendall(_frame(big))
        assert pull.recv(timeout=5) == big
        peer.sock.sendall(_frame(b"x" * (wire.DIRECT_SIZE * 2))[:8])  # a big prefix, body later
        gevent.sleep(0.05)
        peer.sock.sendall(b"x" * (wire.DIRECT_SIZE * 2))
        assert pull.recv(timeout=5) == b"x" * (wire.DIRECT_SIZE * 2)
        for i in range(3):  # one byte each: a socket left at a high SO_RCVLOWAT would sit on them
            peer.sock.sendall(_frame(bytes([i])))
            assert pull.recv(timeout=2) == bytes([i])


@pytest.mark.parametrize("scheme", ["tcp", "ipc"])
def test_a_receiver_keeping_up_takes_each_big_body_before_the_next_is_read(
        gsp_socket: Callable[..., gsp.Socket], gsp_free_url: Callable[[str], str],
        scheme: str) -> None:
    """Big bodies are not read ahead by many MiB while the receiver keeps up: its reader lets
    it take each one first, so bodies live one or two at a time and their memory is reused (a
    deep read-ahead swings the heap and faults every body's pages in afresh)."""
    url = gsp_free_url(scheme)
    pull = gsp_socket("pull", listen=url, max_recv_size=0)  # 16 MiB of room by default
    push = gsp_socket("push", dial=url)
    wait_for(lambda: push.pipes)
    body = b"b" * (256 * KiB)
    n = 60  # 15 MiB: the kernel's buffers hold several of them at any time

    def pusher() -> None:
        for _ in range(n):
            push.send(body)

    g = gevent.spawn(pusher)
    try:
        queued = []
        for _ in range(n):
            assert pull.recv(timeout=5) == body
            queued.append(pull.stats["recv_queue_bytes"])
        g.join(5)
        # (a reader that took all the kernel delivered would queue megabytes)
        assert max(queued) <= 2 * len(body), queued
    finally:
        g.kill()
