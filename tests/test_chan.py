"""gsp.chan: channels and select for greenlets."""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from typing import Any, Callable

import gevent
import pytest
from gevent import Greenlet
from hypothesis import given, settings
from hypothesis import strategies as st

import gsp
from gsp.chan import CLOSED, Chan, Recv, Send, select
from gsp.testing import wait_for

pytestmark = pytest.mark.core

Spawn = Callable[..., Greenlet]


class Boom(Exception):
    pass


def waiters(ch: Chan) -> tuple[int, int]:
    """(blocked receivers, blocked senders) still queued on ``ch``."""
    return len(ch._recvq), len(ch._sendq)


def assert_clean(*chans: Chan) -> None:
    for ch in chans:
        assert waiters(ch) == (0, 0), f"waiter left behind on {ch!r}"


def killed_receiver(ch: Chan, spawn: Spawn) -> Greenlet:
    """A receiver that blocked on ``ch`` and was then killed, not yet woken: an item sent now
    is handed to it and must come back to the channel."""
    receiver = spawn(ch.recv)
    wait_for(lambda: waiters(ch) == (1, 0))
    receiver.kill(block=False)
    return receiver


def busy_wait(seconds: float) -> None:
    """Let time pass without giving the hub a turn (time.sleep may be monkey-patched)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# -- construction ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None])
def test_capacity_must_be_non_negative_int(bad: Any) -> None:
    with pytest.raises(ValueError):
        Chan(bad)


def test_introspection() -> None:
    ch = Chan(2)
    assert ch.capacity == 2 and not ch.closed and len(ch) == 0
    ch.send(1)
    assert len(ch) == 1 and "1/2" in repr(ch)
    ch.close()
    assert ch.closed and "closed" in repr(ch)


# -- unbuffered rendezvous --------------------------------------------------------------------

def test_unbuffered_send_blocks_until_a_receiver_takes_it(spawn: Spawn) -> None:
    ch = Chan()
    sender = spawn(ch.send, "x")
    wait_for(lambda: waiters(ch) == (0, 1))
    gevent.sleep(0.02)
    assert not sender.ready(), "unbuffered send completed with no receiver"
    assert len(ch) == 0
    assert ch.recv(timeout=1) == "x"
    sender.join(timeout=1)
    assert sender.successful()
    assert_clean(ch)


def test_unbuffered_recv_blocks_until_a_sender_comes(spawn: Spawn) -> None:
    ch = Chan()
    receiver = spawn(ch.recv)
    wait_for(lambda: waiters(ch) == (1, 0))
    gevent.sleep(0.02)
    assert not receiver.ready()
    ch.send("y", timeout=1)  # completes at once: a receiver is waiting
    assert receiver.get(timeout=1) == "y"
    assert_clean(ch)


def test_unbuffered_nowait() -> None:
    ch = Chan()
    with pytest.raises(gsp.WouldBlock):
        ch.send_nowait(1)
    with pytest.raises(gsp.WouldBlock):
        ch.recv_nowait()
    assert len(ch) == 0
    assert_clean(ch)


def test_unbuffered_send_nowait_to_waiting_receiver(spawn: Spawn) -> None:
    ch = Chan()
    receiver = spawn(ch.recv)
    wait_for(lambda: waiters(ch) == (1, 0))
    ch.send_nowait("z")
    assert receiver.get(timeout=1) == "z"


def test_unbuffered_recv_nowait_from_waiting_sender(spawn: Spawn) -> None:
    ch = Chan()
    sender = spawn(ch.send, "w")
    wait_for(lambda: waiters(ch) == (0, 1))
    assert ch.recv_nowait() == "w"
    sender.join(timeout=1)
    assert sender.successful()


# -- buffered ------------------------------------------------------------------------------------

def test_buffered_capacity(spawn: Spawn) -> None:
    ch = Chan(3)
    for i in range(3):
        ch.send_nowait(i)  # never blocks below capacity
    assert len(ch) == 3
    with pytest.raises(gsp.WouldBlock):
        ch.send_nowait(3)
    assert len(ch) == 3
    sender = spawn(ch.send, 3)
    wait_for(lambda: waiters(ch) == (0, 1))
    gevent.sleep(0.01)
    assert not sender.ready(), "send on a full channel did not block"
    assert ch.recv_nowait() == 0
    sender.join(timeout=1)  # the freed slot admitted the blocked sender
    assert sender.successful() and len(ch) == 3
    assert ch.drain(10) == [1, 2, 3]
    with pytest.raises(gsp.WouldBlock):
        ch.recv_nowait()
    assert_clean(ch)


@pytest.mark.parametrize("cap", [0, 1, 2, 5])
def test_fifo_order_with_buffer_and_blocked_senders(spawn: Spawn, cap: int) -> None:
    ch = Chan(cap)
    for i in range(cap):
        ch.send(i)
    senders = []
    for i in range(cap, cap + 5):
        senders.append(spawn(ch.send, i))
        wait_for(lambda i=i: waiters(ch)[1] == i - cap + 1)  # queue them in a known order
    assert [ch.recv(timeout=1) for _ in range(cap + 5)] == list(range(cap + 5))
    gevent.joinall(senders, timeout=1)
    assert all(s.successful() for s in senders)
    assert_clean(ch)


def test_fifo_order_of_blocked_receivers(spawn: Spawn) -> None:
    ch = Chan()
    got: list[tuple[int, Any]] = []
    receivers = []
    for r in range(4):
        receivers.append(spawn(lambda r=r: got.append((r, ch.recv()))))
        wait_for(lambda r=r: waiters(ch)[0] == r + 1)
    for i in range(4):
        ch.send(i)
    gevent.joinall(receivers, timeout=1)
    assert sorted(got) == [(0, 0), (1, 1), (2, 2), (3, 3)]


# -- timeouts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cap", [0, 1])
def test_send_timeout(cap: int) -> None:
    ch = Chan(cap)
    for i in range(cap):
        ch.send(i)
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout) as ei:
        ch.send("late", timeout=0.05)
    elapsed = time.monotonic() - t0
    assert not isinstance(ei.value, gsp.WouldBlock)
    assert isinstance(ei.value, TimeoutError) and isinstance(ei.value, gsp.GspError)
    assert 0.04 <= elapsed < 1.0
    assert_clean(ch)
    assert ch.drain(10) == list(range(cap)), "a timed-out send delivered its item"


def test_recv_timeout() -> None:
    ch = Chan(1)
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout) as ei:
        ch.recv(timeout=0.05)
    assert not isinstance(ei.value, gsp.WouldBlock)
    assert 0.04 <= time.monotonic() - t0 < 1.0
    assert_clean(ch)
    ch.send(1)
    assert ch.recv(timeout=0.05) == 1  # a timeout leaves the channel usable


def test_negative_timeout_is_immediate_timeout_not_wouldblock() -> None:
    ch = Chan()
    with pytest.raises(gsp.Timeout) as ei:
        ch.recv(timeout=-1)
    assert type(ei.value) is gsp.Timeout
    with pytest.raises(gsp.Timeout) as ei:
        ch.send(1, timeout=-1)
    assert type(ei.value) is gsp.Timeout
    assert_clean(ch)


def test_nowait_raises_wouldblock_which_is_a_timeout() -> None:
    ch = Chan(1)
    with pytest.raises(gsp.WouldBlock):
        ch.recv_nowait()
    ch.send_nowait(1)
    with pytest.raises(gsp.WouldBlock):
        ch.send_nowait(2)
    assert issubclass(gsp.WouldBlock, gsp.Timeout)


# -- close ---------------------------------------------------------------------------------------

def test_recv_drains_buffer_after_close_then_raises_closed() -> None:
    ch = Chan(3)
    ch.send(1)
    ch.send(2)
    ch.close()
    assert ch.recv() == 1
    assert ch.recv_nowait() == 2
    with pytest.raises(gsp.Closed):
        ch.recv()
    with pytest.raises(gsp.Closed):
        ch.recv_nowait()
    with pytest.raises(gsp.Closed):
        ch.recv(timeout=1)


def test_send_on_closed_raises() -> None:
    ch = Chan(3)
    ch.close()
    ch.close()  # idempotent
    for op in (lambda: ch.send(1), lambda: ch.send_nowait(1), lambda: ch.send(1, timeout=1)):
        with pytest.raises(gsp.Closed):
            op()
    assert len(ch) == 0


def test_close_wakes_blocked_receivers(spawn: Spawn) -> None:
    ch = Chan()
    receivers = [spawn(ch.recv) for _ in range(3)]
    wait_for(lambda: waiters(ch) == (3, 0))
    ch.close()
    gevent.joinall(receivers, timeout=1)
    for r in receivers:
        assert isinstance(r.exception, gsp.Closed)
    assert_clean(ch)


@pytest.mark.parametrize("cap", [0, 2])
def test_close_wakes_blocked_senders_without_delivering(spawn: Spawn, cap: int) -> None:
    ch = Chan(cap)
    for i in range(cap):
        ch.send(i)
    senders = [spawn(ch.send, f"s{i}") for i in range(3)]
    wait_for(lambda: waiters(ch) == (0, 3))
    ch.close()
    gevent.joinall(senders, timeout=1)
    for s in senders:
        assert isinstance(s.exception, gsp.Closed)
    assert ch.drain(10) == list(range(cap)), "a sender woken by close delivered its item"
    with pytest.raises(gsp.Closed):
        ch.recv_nowait()
    assert_clean(ch)


def test_iteration_stops_at_close(spawn: Spawn) -> None:
    ch = Chan(2)

    def produce() -> None:
        for i in range(20):
            ch.send(i)
        ch.close()

    producer = spawn(produce)
    with gevent.Timeout(5):
        assert list(ch) == list(range(20))
    producer.join(timeout=1)
    assert producer.successful()


# -- drain --------------------------------------------------------------------------------------

def test_drain(spawn: Spawn) -> None:
    ch = Chan(2)
    assert ch.drain(5) == []
    ch.send(0)
    ch.send(1)
    senders = [spawn(ch.send, i) for i in (2, 3)]
    wait_for(lambda: waiters(ch) == (0, 2))
    assert ch.drain(0) == []
    assert ch.drain(1) == [0]
    assert ch.drain(10) == [1, 2, 3]  # takes what blocked senders offer too, without waiting
    gevent.joinall(senders, timeout=1)
    assert all(s.successful() for s in senders)
    assert ch.drain(10) == []
    assert_clean(ch)


def test_drain_unbuffered_takes_from_blocked_senders(spawn: Spawn) -> None:
    ch = Chan()
    senders = [spawn(ch.send, i) for i in range(3)]
    wait_for(lambda: waiters(ch) == (0, 3))
    assert ch.drain(2) == [0, 1]
    assert ch.drain(2) == [2]
    gevent.joinall(senders, timeout=1)
    assert all(s.successful() for s in senders)


def test_drain_after_close() -> None:
    ch = Chan(3)
    ch.send(1)
    ch.close()
    assert ch.drain(5) == [1]
    assert ch.drain(5) == []


# -- select --------------------------------------------------------------------------------------

def test_select_needs_a_case() -> None:
    with pytest.raises(ValueError):
        select([])


def test_select_ready_cases_without_blocking() -> None:
    a, b = Chan(1), Chan(1)
    a.send("a")
    assert select([Recv(b), Recv(a)], timeout=0) == (1, "a")
    assert select([Recv(a), Send(b, "b")], timeout=0) == (1, None)
    assert b.recv_nowait() == "b"
    with pytest.raises(gsp.WouldBlock):
        select([Recv(a), Recv(b)], timeout=0)
    b.send(1)
    with pytest.raises(gsp.WouldBlock):
        select([Send(b, 2)], timeout=0)
    assert_clean(a, b)


def test_select_blocks_until_a_recv_case_is_ready(spawn: Spawn) -> None:
    a, b, c = Chan(), Chan(4), Chan(1)
    c.send("full")
    sel = spawn(select, [Recv(a), Recv(b), Send(c, "never")])
    wait_for(lambda: waiters(a) == (1, 0))
    assert waiters(b) == (1, 0) and waiters(c) == (0, 1)
    b.send("hello")
    assert sel.get(timeout=1) == (1, "hello")
    assert_clean(a, b, c)
    # The losing cases took nothing: a has no hidden receiver, c still holds only its own item.
    with pytest.raises(gsp.WouldBlock):
        a.send_nowait(1)
    assert c.drain(5) == ["full"]


def test_select_blocks_until_a_send_case_is_ready(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    sel = spawn(select, [Recv(a), Send(b, "out")])
    wait_for(lambda: waiters(b) == (0, 1))
    assert b.recv(timeout=1) == "out"
    assert sel.get(timeout=1) == (1, None)
    assert_clean(a, b)
    with pytest.raises(gsp.WouldBlock):
        b.recv_nowait()


def test_select_same_channel_twice(spawn: Spawn) -> None:
    a = Chan()
    sel = spawn(select, [Recv(a), Recv(a)])
    wait_for(lambda: waiters(a) == (2, 0))
    a.send(7)
    idx, val = sel.get(timeout=1)
    assert idx in (0, 1) and val == 7
    assert_clean(a)
    with pytest.raises(gsp.WouldBlock):
        a.send_nowait(8)


def test_select_timeout() -> None:
    a, b = Chan(), Chan()
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout) as ei:
        select([Recv(a), Send(b, 1)], timeout=0.05)
    assert not isinstance(ei.value, gsp.WouldBlock)
    assert 0.04 <= time.monotonic() - t0 < 1.0
    assert_clean(a, b)
    with pytest.raises(gsp.Timeout):
        select([Recv(a)], timeout=-1)


def test_select_timeout_zero_polls() -> None:
    a = Chan(1)
    t0 = time.monotonic()
    with pytest.raises(gsp.WouldBlock):
        select([Recv(a)], timeout=0)
    assert time.monotonic() - t0 < 0.5
    a.send(1)
    assert select([Recv(a)], timeout=0) == (0, 1)
    assert_clean(a)


def test_select_closed_recv_case_yields_closed() -> None:
    a, b = Chan(2), Chan()
    a.send("last")
    a.close()
    assert select([Recv(b), Recv(a)]) == (1, "last")  # buffered items first
    assert select([Recv(b), Recv(a)]) == (1, CLOSED)
    assert select([Recv(a)], timeout=0) == (0, CLOSED)
    assert_clean(a, b)


def test_close_wakes_blocked_select_with_closed(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    sel = spawn(select, [Recv(a), Recv(b)])
    wait_for(lambda: waiters(b) == (1, 0))
    b.close()
    assert sel.get(timeout=1) == (1, CLOSED)
    assert_clean(a, b)


def test_select_send_case_on_closed_channel_raises(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    b.close()
    with pytest.raises(gsp.Closed):
        select([Recv(a), Send(b, 1)])
    c = Chan()
    sel = spawn(select, [Recv(a), Send(c, 1)])
    wait_for(lambda: waiters(c) == (0, 1))
    c.close()
    sel.join(timeout=1)
    assert isinstance(sel.exception, gsp.Closed)
    assert_clean(a, c)


def _shares(cases: list[Recv | Send], refill: Callable[[int], None], rounds: int) -> Counter[int]:
    counts: Counter[int] = Counter()
    for _ in range(rounds):
        idx, _val = select(cases, timeout=0)
        counts[idx] += 1
        refill(idx)
    return counts


def test_select_fairness_all_ready() -> None:
    chans = [Chan(1) for _ in range(3)]
    for ch in chans:
        ch.send(0)
    counts = _shares([Recv(ch) for ch in chans], lambda i: chans[i].send(0), 3000)
    # Expected 1000 each, sd ~26: a starved or favoured case falls far outside.
    assert all(850 <= counts[i] <= 1150 for i in range(3)), counts


def test_select_fairness_ready_cases_not_adjacent() -> None:
    # Only cases 0 and 2 are ever ready: each must get about half, whatever their positions.
    a, never, c = Chan(1), Chan(1), Chan(1)
    a.send(0)
    c.send(0)
    chans = {0: a, 2: c}
    counts = _shares([Recv(a), Recv(never), Recv(c)], lambda i: chans[i].send(0), 3000)
    assert counts[1] == 0
    assert all(1350 <= counts[i] <= 1650 for i in (0, 2)), counts


def test_select_fairness_mixed_send_and_recv() -> None:
    src, dst, blocked = Chan(1), Chan(1), Chan(0)
    src.send(0)

    def refill(i: int) -> None:
        if i == 0:
            src.send(0)
        else:
            dst.recv_nowait()

    counts = _shares([Recv(src), Send(blocked, 0), Send(dst, 1)], refill, 3000)
    assert counts[1] == 0
    assert all(1350 <= counts[i] <= 1650 for i in (0, 2)), counts


# -- concurrency ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cap", [0, 1, 16])
def test_many_senders_and_receivers_lose_and_duplicate_nothing(spawn: Spawn, cap: int) -> None:
    ch = Chan(cap)
    n_senders, per_sender, n_receivers = 8, 300, 6
    got: list[Any] = []

    def produce(s: int) -> None:
        for i in range(per_sender):
            ch.send((s, i))
            if random.random() < 0.1:
                gevent.sleep(0)

    def consume() -> None:
        for item in ch:
            got.append(item)
            if random.random() < 0.1:
                gevent.sleep(0)

    receivers = [spawn(consume) for _ in range(n_receivers)]
    senders = [spawn(produce, s) for s in range(n_senders)]
    with gevent.Timeout(20):
        gevent.joinall(senders, raise_error=True)
        ch.close()
        gevent.joinall(receivers, raise_error=True)
    expected = Counter((s, i) for s in range(n_senders) for i in range(per_sender))
    assert Counter(got) == expected
    assert_clean(ch)


def test_many_selects_over_many_channels_lose_and_duplicate_nothing(spawn: Spawn) -> None:
    ins = [Chan(0), Chan(2), Chan(0)]
    out = Chan(0)
    got: list[Any] = []
    per_chan = 300

    def produce(k: int) -> None:
        for i in range(per_chan):
            ins[k].send((k, i))
        ins[k].close()

    def forward() -> None:
        # Move items from any input to out; also offer a Send case that competes with receiving.
        open_ = set(range(len(ins)))
        pending: Any = None
        while open_ or pending is not None:
            cases: list[Recv | Send] = [Recv(ins[k]) for k in sorted(open_)]
            if pending is not None:
                cases.append(Send(out, pending))
            idx, val = select(cases)
            if isinstance(cases[idx], Send):
                pending = None
            elif val is CLOSED:
                open_.discard(ins.index(cases[idx].chan))
            elif pending is None:
                pending = val
            else:
                out.send(pending)
                pending = val

    def consume() -> None:
        for item in out:
            got.append(item)

    consumers = [spawn(consume) for _ in range(3)]
    forwarders = [spawn(forward) for _ in range(2)]
    producers = [spawn(produce, k) for k in range(len(ins))]
    with gevent.Timeout(20):
        gevent.joinall(producers + forwarders, raise_error=True)
        out.close()
        gevent.joinall(consumers, raise_error=True)
    assert Counter(got) == Counter((k, i) for k in range(len(ins)) for i in range(per_chan))
    assert_clean(out, *ins)


# -- interruption --------------------------------------------------------------------------------

@pytest.mark.parametrize("cap", [0, 1])
def test_external_timeout_interrupts_recv(spawn: Spawn, cap: int) -> None:
    ch = Chan(cap)
    t = gevent.Timeout(0.05)
    with pytest.raises(gevent.Timeout) as ei:
        with t:
            ch.recv()
    assert ei.value is t, "the caller's gevent.Timeout must propagate unchanged"
    assert_clean(ch)
    sender = spawn(ch.send, 1)
    assert ch.recv(timeout=1) == 1  # the channel still works
    sender.join(timeout=1)
    assert sender.successful()
    assert_clean(ch)


@pytest.mark.parametrize("cap", [0, 1])
def test_external_timeout_interrupts_send(cap: int) -> None:
    ch = Chan(cap)
    for i in range(cap):
        ch.send(i)
    t = gevent.Timeout(0.05)
    with pytest.raises(gevent.Timeout) as ei:
        with t:
            ch.send("interrupted")
    assert ei.value is t
    assert_clean(ch)
    assert ch.drain(5) == list(range(cap)), "an interrupted send delivered its item"
    if cap:
        ch.send("after")
        assert ch.recv_nowait() == "after"


def test_external_timeout_interrupts_select() -> None:
    a, b = Chan(), Chan()
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.05):
            select([Recv(a), Send(b, 1)])
    assert_clean(a, b)
    with pytest.raises(gsp.WouldBlock):
        b.recv_nowait()


def test_external_timeout_shorter_than_own_timeout() -> None:
    ch = Chan()
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.02):
            ch.recv(timeout=5)
    assert_clean(ch)


@pytest.mark.parametrize("op", ["recv", "send", "select"])
def test_kill_interrupts_blocked_operation(spawn: Spawn, op: str) -> None:
    a, b = Chan(), Chan()
    fn: Callable[[], Any] = {
        "recv": a.recv,
        "send": lambda: a.send("x"),
        "select": lambda: select([Recv(a), Send(b, "x")]),
    }[op]
    g = spawn(fn)
    wait_for(lambda: sum(waiters(a)) == 1)
    g.kill(Boom, timeout=1)
    assert g.dead and isinstance(g.exception, Boom)
    assert_clean(a, b)
    # Both channels still work, and nothing leaked from the killed operation.
    with pytest.raises(gsp.WouldBlock):
        a.recv_nowait()
    with pytest.raises(gsp.WouldBlock):
        b.recv_nowait()
    r = spawn(a.recv)
    wait_for(lambda: waiters(a) == (1, 0))
    a.send("ok")
    assert r.get(timeout=1) == "ok"


@pytest.mark.parametrize("cap", [0, 1, 3])
def test_item_handed_to_receiver_killed_at_that_moment_is_not_lost(spawn: Spawn, cap: int) -> None:
    ch = Chan(cap)
    got: list[Any] = []
    receiver = spawn(lambda: got.append(ch.recv()))
    wait_for(lambda: waiters(ch) == (1, 0))
    # The kill is queued first, then send hands the item over and queues the wake-up: the
    # receiver resumes with the kill even though its operation had completed.
    receiver.kill(block=False)
    ch.send("item")
    receiver.join(timeout=1)
    assert receiver.dead and got == []
    assert_clean(ch)
    assert ch.recv_nowait() == "item"
    with pytest.raises(gsp.WouldBlock):
        ch.recv_nowait()


def test_kill_queued_after_the_wakeup_lets_the_receiver_finish(spawn: Spawn) -> None:
    ch = Chan()
    got: list[Any] = []
    receiver = spawn(lambda: got.append(ch.recv()))
    wait_for(lambda: waiters(ch) == (1, 0))
    ch.send("item")  # wake-up queued first: the receiver returns the item before the kill lands
    receiver.kill(block=False)
    receiver.join(timeout=1)
    assert receiver.dead
    assert got == ["item"]
    with pytest.raises(gsp.WouldBlock):
        ch.recv_nowait()
    assert_clean(ch)


def test_item_of_killed_receiver_goes_to_the_next_waiting_receiver(spawn: Spawn) -> None:
    ch = Chan()
    first = spawn(ch.recv)
    wait_for(lambda: waiters(ch) == (1, 0))
    second = spawn(ch.recv)
    wait_for(lambda: waiters(ch) == (2, 0))
    first.kill(block=False)
    ch.send("item")
    first.join(timeout=1)
    assert second.get(timeout=1) == "item", "the returned item stayed put while a receiver waited"
    assert len(ch) == 0
    assert_clean(ch)


def test_item_of_killed_select_goes_back_to_its_channel(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    sel = spawn(select, [Recv(a), Recv(b)])
    wait_for(lambda: waiters(b) == (1, 0))
    sel.kill(Boom, block=False)
    b.send("item")
    sel.join(timeout=1)
    assert isinstance(sel.exception, Boom)
    assert_clean(a, b)
    assert b.recv_nowait() == "item"
    with pytest.raises(gsp.WouldBlock):
        a.recv_nowait()


def test_returned_item_keeps_unbuffered_rendezvous(spawn: Spawn) -> None:
    ch = Chan()
    receiver = killed_receiver(ch, spawn)
    ch.send("first")
    receiver.join(timeout=1)
    sender = spawn(ch.send, "second")
    wait_for(lambda: waiters(ch) == (0, 1))
    assert ch.recv(timeout=1) == "first"
    gevent.sleep(0.02)
    assert not sender.ready(), "an unbuffered send completed before anyone received its item"
    assert ch.recv(timeout=1) == "second"
    sender.join(timeout=1)
    assert sender.successful()
    assert_clean(ch)


def test_returned_item_keeps_fifo_order_in_a_buffered_channel(spawn: Spawn) -> None:
    ch = Chan(1)
    receiver = killed_receiver(ch, spawn)
    ch.send("first")
    ch.send_nowait("second")  # buffered before the killed receiver gives "first" back
    receiver.join(timeout=1)
    assert ch.drain(5) == ["first", "second"]


def test_returned_item_survives_close(spawn: Spawn) -> None:
    ch = Chan()
    receiver = killed_receiver(ch, spawn)
    ch.send("item")
    ch.close()
    receiver.join(timeout=1)
    assert ch.recv_nowait() == "item"
    with pytest.raises(gsp.Closed):
        ch.recv_nowait()


def test_sender_killed_after_handover_delivers_once(spawn: Spawn) -> None:
    ch = Chan()
    sender = spawn(ch.send, "item")
    wait_for(lambda: waiters(ch) == (0, 1))
    sender.kill(Boom, block=False)
    assert ch.recv_nowait() == "item"
    sender.join(timeout=1)
    assert isinstance(sender.exception, Boom)
    with pytest.raises(gsp.WouldBlock):
        ch.recv_nowait()
    assert_clean(ch)


def test_own_timer_losing_the_race_still_succeeds(spawn: Spawn) -> None:
    ch = Chan()
    receiver = spawn(ch.recv, timeout=0.03)
    wait_for(lambda: waiters(ch) == (1, 0))
    busy_wait(0.06)  # the receiver's timer is now due, but the hub has not run
    ch.send_nowait("item")  # completes the receive before the timer can fire
    assert receiver.get(timeout=1) == "item"
    assert_clean(ch)


def test_random_kills_of_receivers_lose_nothing(spawn: Spawn) -> None:
    rng = random.Random(1234)
    ch = Chan(rng.choice([0, 0, 2]))
    got: list[Any] = []
    total = 1500

    def consume() -> None:
        while True:
            got.append(ch.recv())

    def produce() -> None:
        for i in range(total):
            ch.send(i)
            if rng.random() < 0.3:
                gevent.sleep(0)

    consumers = [spawn(consume) for _ in range(4)]
    producer = spawn(produce)
    with gevent.Timeout(20):
        while not producer.ready():
            victim = rng.randrange(len(consumers))
            consumers[victim].kill(block=rng.random() < 0.5)
            consumers[victim] = spawn(consume)
            gevent.sleep(0)
        producer.get()
        gevent.killall(consumers)
    got.extend(ch.drain(total))  # items given back by receivers killed just as they got them
    assert sorted(got) == list(range(total)), "items lost or duplicated"
    assert_clean(ch)


# -- model test ----------------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 99)),
        st.tuples(st.just("recv"), st.none()),
        st.tuples(st.just("drain"), st.integers(0, 4)),
        st.tuples(st.just("select_recv"), st.none()),
        st.tuples(st.just("select_send"), st.integers(0, 99)),
        st.tuples(st.just("close"), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(0, 4), ops=_ops)
def test_nowait_operations_match_a_deque_model(cap: int, ops: list[tuple[str, Any]]) -> None:
    ch = Chan(cap)
    model: deque[int] = deque()
    closed = False
    for op, arg in ops:
        if op in ("send", "select_send"):
            if closed:
                expect: Any = gsp.Closed
            elif len(model) < cap:
                expect = None
                model.append(arg)
            else:
                expect = gsp.WouldBlock
            try:
                got: Any = ch.send_nowait(arg) if op == "send" else select([Send(ch, arg)], 0)[1]
            except (gsp.Closed, gsp.WouldBlock) as exc:
                got = type(exc)
            assert got is expect
        elif op in ("recv", "select_recv"):
            if model:
                expect = model.popleft()
            elif closed:
                expect = gsp.Closed if op == "recv" else CLOSED
            else:
                expect = gsp.WouldBlock
            try:
                got = ch.recv_nowait() if op == "recv" else select([Recv(ch)], 0)[1]
            except (gsp.Closed, gsp.WouldBlock) as exc:
                got = type(exc)
            assert got == expect
        elif op == "drain":
            expect = [model.popleft() for _ in range(min(arg, len(model)))]
            assert ch.drain(arg) == expect
        else:
            ch.close()
            closed = True
        assert len(ch) == len(model) and ch.closed == closed
    assert_clean(ch)
