"""Receive queues are fair across pipes: gsp.protocol.inbox.queue.Inbox keeps a short front
and each source's further items behind it, refilled round robin (gsp.protocol.inbox.backlog.Backlog). The
socket-level proof is tests/core/test_no_stall.py::test_a_flood_does_not_keep_a_good_sender_out."""

from __future__ import annotations

from typing import Any

import gevent
import pytest

import gsp
from gsp.protocol.inbox import FRONT_BYTES, FRONT_ITEMS, TURN_ITEMS, Backlog, Inbox

A, B, C = "pipe a", "pipe b", "pipe c"
#: Many more small items than the front and a turn hold, and a capacity that takes them all.
MANY = 2 * (FRONT_ITEMS + TURN_ITEMS) + 100
ROOMY = 1 << 16


def drain(q: Inbox[Any]) -> list[tuple[Any, Any]]:
    """Everything queued, in the order a consumer gets it, with each item's source."""
    out = []
    while len(q):
        out.append(q.get_from(0))
    return out


def flood(q: Inbox[Any], source: str, n: int) -> None:
    for i in range(n):
        q.put(b"%s %d" % (source[-1:].encode(), i), source=source)


def test_one_source_is_a_plain_fifo_held_at_the_front():
    q: Inbox[bytes] = Inbox(1024, sources=True, max_bytes=1 << 20)
    flood(q, A, 300)
    assert len(q.ready) == 300 and len(q) == 300  # nothing waits behind the front
    assert [x for x, _ in drain(q)] == [b"a %d" % i for i in range(300)]


def test_a_second_source_waits_behind_the_front_not_behind_the_backlog():
    q: Inbox[bytes] = Inbox(ROOMY, sources=True, max_bytes=1 << 30)
    flood(q, A, MANY)
    q.put(b"b 0", nbytes=10, source=B)
    assert len(q.ready) <= FRONT_ITEMS and len(q) == MANY + 1
    got = drain(q)
    assert got.index((b"b 0", B)) <= FRONT_ITEMS + TURN_ITEMS  # FIFO: MANY
    assert [x for x, s in got if s == A] == [b"a %d" % i for i in range(MANY)]  # order kept
    assert q.queued_bytes == 0


def test_the_front_stays_short_in_bytes_while_sources_take_turns():
    """Once the front holds several sources' items, a source's big items go behind it as soon
    as it holds FRONT_BYTES, not only once it holds FRONT_ITEMS."""
    q: Inbox[bytes] = Inbox(ROOMY, max_bytes=1 << 30)
    big = b"x" * 65536
    q.put(b"b first", source=B)
    q.put(b"a first", source=A)  # the front is mixed from here on
    for _ in range(100):
        q.put(big, source=A)
    q.put(b"b last", source=B)
    got = [q.get(0) for _ in range(len(q))]
    assert got.index(b"b last") <= 2 + FRONT_BYTES // len(big) + 1  # FIFO: 102


def test_backlogs_are_taken_round_robin_in_turns():
    q: Inbox[bytes] = Inbox(ROOMY)
    n = 3 * TURN_ITEMS + FRONT_ITEMS  # each source's: several turns beyond the front
    q.put(b"a first", source=A)  # the front is A's
    q.put_all([b"b %d" % i for i in range(n)], source=B)
    q.put_all([b"c %d" % i for i in range(n)], source=C)
    q.put_all([b"a %d" % i for i in range(n)], source=A)
    order = [x[:1] for x in (q.get(0) for _ in range(3 * n + 1))]
    # Once several sources wait (after the front and the turn that filled it), no source gives
    # more than a turn before each other source had one.
    tail = order[FRONT_ITEMS + TURN_ITEMS:]
    runs = [len(list(g)) for _, g in __import__("itertools").groupby(tail)]
    assert max(runs) <= TURN_ITEMS and len(runs) >= 6
    assert sorted(order) == sorted([b"a"] * (n + 1) + [b"b"] * n + [b"c"] * n)


def test_bytes_and_sources_stay_exact_through_the_backlog():
    q: Inbox[bytes] = Inbox(1024, sources=True, max_bytes=1 << 30)
    q.put_all([b"x" * 100] * 50, nbytes=5000, source=A)
    q.put_all([b"y" * 7] * 30, source=B)
    q.put(b"z" * 3, source=C)
    assert q.queued_bytes == 5000 + 210 + 3
    left = 5213
    while len(q):
        body, src = q.get_from(0)
        assert src == {b"x": A, b"y": B, b"z": C}[body[:1]]
        left -= len(body)
        assert q.queued_bytes >= left  # at most one partly taken batch too many
    assert q.queued_bytes == 0


def test_block_lets_a_quiet_source_in_once_while_the_busy_one_waits():
    q: Inbox[bytes] = Inbox(8)
    flood(q, A, 8)
    with pytest.raises(gsp.Timeout):
        q.put(b"a more", timeout=0.05, source=A)  # A fills the queue: back-pressure
    assert q.put(b"b 0", timeout=0.05, source=B)  # B had nothing queued: let in
    with pytest.raises(gsp.Timeout):
        q.put(b"b 1", timeout=0.05, source=B)  # but only once
    assert b"b 0" in [q.get(0) for _ in range(9)]


def test_a_blocked_putter_gets_in_when_the_consumer_takes():
    q: Inbox[bytes] = Inbox(4)
    flood(q, A, 4)
    g = gevent.spawn(q.put, b"a late", None, None, A)
    gevent.sleep(0.01)
    assert not g.dead
    assert q.get(0) == b"a 0"
    g.join(1)
    assert g.successful() and g.value is True
    assert [q.get(0) for _ in range(4)] == [b"a 1", b"a 2", b"a 3", b"a late"]


@pytest.mark.parametrize("cap", [64, MANY])  # within the front, and beyond it
def test_drop_oldest_drops_the_busiest_sources_oldest(cap):
    q: Inbox[bytes] = Inbox(cap, "drop_oldest")
    flood(q, A, cap)
    assert not q.put(b"b 0", source=B)  # an older item went: one of A's
    assert not q.put(b"b 1", source=B)
    assert q.dropped == 2 and len(q) == cap
    got = [q.get(0) for _ in range(cap)]
    assert b"b 0" in got and b"b 1" in got
    assert sum(x.startswith(b"a") for x in got) == cap - 2


@pytest.mark.parametrize("cap", [64, MANY])
def test_drop_newest_drops_the_busiest_sources_newest_not_a_quiet_ones(cap):
    q: Inbox[bytes] = Inbox(cap, "drop_newest")
    flood(q, A, cap)
    assert not q.put(b"a more", source=A)  # A's own new one goes
    assert not q.put(b"b 0", source=B)  # B is kept; A's newest goes instead
    assert q.dropped == 2
    got = [q.get(0) for _ in range(cap)]
    assert b"b 0" in got and b"a %d" % (cap - 1) not in got and b"a more" not in got


def test_resize_filter_and_close_see_the_backlog():
    q: Inbox[bytes] = Inbox(1024, sources=True, max_bytes=1 << 20)
    flood(q, A, 100)
    flood(q, B, 100)
    q.filter(lambda x: not x.endswith(b"7"))
    assert len(q) == 180 and q.queued_bytes == sum(
        len(b"%s %d" % (s, i)) for s in (b"a", b"b") for i in range(100) if i % 10 != 7)
    q.resize(50)
    assert len(q) == 50 and q.dropped == 130
    assert {s for _, s in drain(q)} <= {A, B}
    flood(q, A, 20)
    flood(q, B, 20)
    assert len(q) == 40
    q.close()
    assert len(q) == 0
    with pytest.raises(gsp.Closed):
        q.get(0)


def test_poll_and_a_waiting_getter_refill_the_front():
    q: Inbox[bytes] = Inbox(ROOMY)
    flood(q, A, MANY)
    flood(q, B, 5)
    while q.ready:  # a consumer taking through the ready fast path
        q.ready.popleft()
    assert len(q) > 0 and q.poll() and q.ready
    while q.ready:
        q.ready.popleft()
    assert q.get(0)  # get refills too
    got = gevent.spawn(lambda: [q.get(1) for _ in range(len(q))])
    gevent.sleep(0)
    assert got.get(timeout=1)


def test_backlog_turns_sizes_and_drops():
    bl: Backlog[bytes] = Backlog()
    bl.add(A, [b"aa"] * 10, 20)
    bl.add(B, [b"b"] * 3, 3)
    assert (bl.items, bl.nbytes, bl.sources()) == (13, 23, 2)
    items, nbytes, src = bl.turn(4, 1 << 20)
    assert (items, nbytes, src) == ([b"aa"] * 4, 8, A)
    assert bl.turn(4, 1 << 20)[2] == B  # the turn passed on
    assert bl.sources() == 1 and not bl.holds(B)
    assert len(bl.turn(100, 5)[0]) == 2  # about 5 bytes of 2-byte items: 2
    assert bl.largest() == A
    bl.drop(A, True, len)
    bl.drop(A, False, len)
    assert (bl.items, bl.nbytes) == (2, 4)
    bl.keep(lambda x: False, len)
    assert (bl.items, bl.nbytes, bl.sources()) == (0, 0, 0)
