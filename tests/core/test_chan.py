"""gsp.chan: channels for greenlets, the basics: construction, unbuffered rendezvous, buffered
channels, timeouts, close, drain, and a model test of every non-blocking operation against a deque.
select is in test_chan_select.py; interrupted operations (a gevent.Timeout or a kill landing on a
blocked call, items handed to a receiver killed at that moment) in test_chan_interrupts.py. All
three take their channel helpers (waiters, assert_clean, Spawn) from chan_support.py."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import gevent
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gsp
from gsp.chan import CLOSED, Chan, Recv, Send, select_channels
from gsp.testing import wait_for
from tests.support import scaled
from tests.support.chan_support import Spawn, assert_clean, waiters

pytestmark = pytest.mark.core


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
        ch.send(1, block=False)
    with pytest.raises(gsp.WouldBlock):
        ch.recv(block=False)
    assert len(ch) == 0
    assert_clean(ch)


def test_unbuffered_send_nowait_to_waiting_receiver(spawn: Spawn) -> None:
    ch = Chan()
    receiver = spawn(ch.recv)
    wait_for(lambda: waiters(ch) == (1, 0))
    ch.send("z", block=False)
    assert receiver.get(timeout=1) == "z"


def test_unbuffered_recv_nowait_from_waiting_sender(spawn: Spawn) -> None:
    ch = Chan()
    sender = spawn(ch.send, "w")
    wait_for(lambda: waiters(ch) == (0, 1))
    assert ch.recv(block=False) == "w"
    sender.join(timeout=1)
    assert sender.successful()


# -- buffered ------------------------------------------------------------------------------------

def test_buffered_capacity(spawn: Spawn) -> None:
    ch = Chan(3)
    for i in range(3):
        ch.send(i, block=False)  # never blocks below capacity
    assert len(ch) == 3
    with pytest.raises(gsp.WouldBlock):
        ch.send(3, block=False)
    assert len(ch) == 3
    sender = spawn(ch.send, 3)
    wait_for(lambda: waiters(ch) == (0, 1))
    gevent.sleep(0.01)
    assert not sender.ready(), "send on a full channel did not block"
    assert ch.recv(block=False) == 0
    sender.join(timeout=1)  # the freed slot admitted the blocked sender
    assert sender.successful() and len(ch) == 3
    assert ch.drain(10) == [1, 2, 3]
    with pytest.raises(gsp.WouldBlock):
        ch.recv(block=False)
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
    assert 0.04 <= elapsed < scaled(1.0)
    assert_clean(ch)
    assert ch.drain(10) == list(range(cap)), "a timed-out send delivered its item"


def test_recv_timeout() -> None:
    ch = Chan(1)
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout) as ei:
        ch.recv(timeout=0.05)
    assert not isinstance(ei.value, gsp.WouldBlock)
    assert 0.04 <= time.monotonic() - t0 < scaled(1.0)
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


def test_block_false_raises_wouldblock_which_is_not_a_timeout() -> None:
    ch = Chan(1)
    with pytest.raises(gsp.WouldBlock, match="would block"):
        ch.recv(block=False)
    ch.send(1, block=False)
    with pytest.raises(gsp.WouldBlock):
        ch.send(2, block=False)
    with pytest.raises(gsp.WouldBlock):
        ch.send(2, 0)  # a zero timeout is the same: it may not wait
    assert not issubclass(gsp.WouldBlock, gsp.Timeout)
    assert issubclass(gsp.WouldBlock, gsp.GspError)


def test_block_false_goes_with_no_other_timeout() -> None:
    ch: Chan[int] = Chan(0)
    with pytest.raises(gsp.BadOption, match="block=False"):
        ch.recv(1, block=False)
    # (the compiled build's own argument check says it first, as a TypeError)
    with pytest.raises((gsp.BadOption, TypeError),
                       match="block must be True or False|bool object expected"):
        ch.send(1, block=None)  # type: ignore[arg-type]
    assert_clean(ch)


def test_old_nonblocking_spellings_work_and_warn() -> None:
    ch: Chan[int] = Chan(1)
    with pytest.warns(DeprecationWarning, match=r"send\(item, block=False\)"):
        assert ch.try_send(1) is True
    with pytest.warns(DeprecationWarning, match=r"send\(item, block=False\)"):
        assert ch.try_send(2) is False  # full
    with pytest.warns(DeprecationWarning, match=r"recv\(block=False\)"):
        assert ch.recv_nowait() == 1
    with pytest.warns(DeprecationWarning, match=r"send\(item, block=False\)"):
        ch.send_nowait(3)
    with pytest.warns(DeprecationWarning), pytest.raises(gsp.WouldBlock):
        ch.send_nowait(4)
    assert ch.recv(block=False) == 3
    ch.close()
    with pytest.warns(DeprecationWarning):
        assert ch.try_send(5) is False  # closed: False, as it always said
    assert_clean(ch)


# -- close ---------------------------------------------------------------------------------------

def test_recv_drains_buffer_after_close_then_raises_closed() -> None:
    ch = Chan(3)
    ch.send(1)
    ch.send(2)
    ch.close()
    assert ch.recv() == 1
    assert ch.recv(block=False) == 2
    with pytest.raises(gsp.Closed):
        ch.recv()
    with pytest.raises(gsp.Closed):
        ch.recv(block=False)
    with pytest.raises(gsp.Closed):
        ch.recv(timeout=1)


def test_send_on_closed_raises() -> None:
    ch = Chan(3)
    ch.close()
    ch.close()  # idempotent
    for op in (lambda: ch.send(1), lambda: ch.send(1, block=False), lambda: ch.send(1, timeout=1)):
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
        ch.recv(block=False)
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
                got: Any = ch.send(arg, block=False) if op == "send" else select_channels([Send(ch, arg)], 0)[1]
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
                got = ch.recv(block=False) if op == "recv" else select_channels([Recv(ch)], 0)[1]
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


# -- notify_ready: a receiver with no greenlet to spare ------------------------------------------
def test_notify_ready_calls_back_once_from_the_loop_when_an_item_comes() -> None:
    ch: Chan[int] = Chan(4)
    calls: list[Any] = []
    ch.notify_ready(lambda: calls.append(gevent.getcurrent()))
    gevent.sleep(0)
    assert calls == []  # nothing buffered yet
    ch.send(1)
    assert calls == []  # not in the sender's call: from the loop
    gevent.sleep(0)
    assert calls == [gevent.get_hub()] and ch.recv() == 1
    ch.send(2)
    gevent.sleep(0)
    assert len(calls) == 1  # once: a new callback is needed for the next item


@pytest.mark.parametrize("how", ["buffered", "closed", "send_all", "put_back"])
def test_notify_ready_sees_every_way_an_item_or_the_end_comes(how: str) -> None:
    ch: Chan[int] = Chan(4)
    if how == "buffered":
        ch.send(7)
    woke: list[int] = []
    ch.notify_ready(lambda: woke.append(1))
    if how == "closed":
        ch.close()
    elif how == "send_all":
        ch.send_all([1, 2])
    elif how == "put_back":  # an interrupted receiver's item, back at the head
        ch.notify_ready(None)
        receiver = gevent.spawn(ch.recv)
        gevent.sleep(0)  # waiting on the empty channel
        ch.notify_ready(lambda: woke.append(1))

        def hand_then_interrupt() -> None:  # in the hub: the receiver cannot run between
            ch.send(3)
            receiver.throw(gevent.GreenletExit)

        gevent.get_hub().loop.run_callback(hand_then_interrupt)
        receiver.join(timeout=5)
        assert isinstance(receiver.value, gevent.GreenletExit)
    gevent.sleep(0)
    assert woke == [1]
    if how == "put_back":
        assert ch.recv(block=False) == 3


def test_notify_ready_none_withdraws_the_callback() -> None:
    ch: Chan[int] = Chan(4)
    woke: list[int] = []
    ch.notify_ready(lambda: woke.append(1))
    ch.notify_ready(None)
    ch.send(1)
    ch.close()
    gevent.sleep(0)
    assert woke == []


def test_recv_or_notify_takes_an_item_or_asks_to_be_called_back() -> None:
    ch: Chan[int] = Chan(4)
    ch.send(1)
    woke: list[int] = []
    assert ch.recv_or_notify(lambda: woke.append(1)) == 1  # there: taken, no callback
    assert ch.recv_or_notify(lambda: woke.append(2)) is None  # not there: called back later
    gevent.sleep(0)
    assert woke == []
    ch.send(5)
    gevent.sleep(0)
    assert woke == [2] and ch.recv_or_notify(lambda: woke.append(0)) == 5
    assert ch.recv_or_notify(lambda: woke.append(3)) is None
    ch.close()
    gevent.sleep(0)
    assert woke == [2, 3]  # the close calls back too, and then recv_or_notify raises
    with pytest.raises(gsp.Closed):
        ch.recv_or_notify(lambda: woke.append(4))
