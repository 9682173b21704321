"""gsp.chan under interruption: a caller's gevent.Timeout or a kill landing on a blocked recv,
send or select leaves no waiter behind and delivers nothing; an item handed to a receiver (or
select) killed at that moment goes back to its channel, keeping unbuffered rendezvous, FIFO order
and surviving close; a channel's own timer losing the race still succeeds; random kills of
receivers lose nothing. Channel basics are in test_chan.py, select in test_chan_select.py."""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import gevent
import pytest
from gevent import Greenlet

import gsp
from gsp.chan import Chan, Recv, Send, select_channels
from gsp.testing import wait_for
from tests.support.chan_support import Spawn, assert_clean, waiters

pytestmark = pytest.mark.core


class Boom(Exception):
    pass


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
        assert ch.recv(block=False) == "after"


def test_external_timeout_interrupts_select() -> None:
    a, b = Chan(), Chan()
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.05):
            select_channels([Recv(a), Send(b, 1)])
    assert_clean(a, b)
    with pytest.raises(gsp.WouldBlock):
        b.recv(block=False)


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
        "select": lambda: select_channels([Recv(a), Send(b, "x")]),
    }[op]
    g = spawn(fn)
    wait_for(lambda: sum(waiters(a)) == 1)
    g.kill(Boom, timeout=1)
    assert g.dead and isinstance(g.exception, Boom)
    assert_clean(a, b)
    # Both channels still work, and nothing leaked from the killed operation.
    with pytest.raises(gsp.WouldBlock):
        a.recv(block=False)
    with pytest.raises(gsp.WouldBlock):
        b.recv(block=False)
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
    assert ch.recv(block=False) == "item"
    with pytest.raises(gsp.WouldBlock):
        ch.recv(block=False)


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
        ch.recv(block=False)
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
    sel = spawn(select_channels, [Recv(a), Recv(b)])
    wait_for(lambda: waiters(b) == (1, 0))
    sel.kill(Boom, block=False)
    b.send("item")
    sel.join(timeout=1)
    assert isinstance(sel.exception, Boom)
    assert_clean(a, b)
    assert b.recv(block=False) == "item"
    with pytest.raises(gsp.WouldBlock):
        a.recv(block=False)


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
    ch.send("second", block=False)  # buffered before the killed receiver gives "first" back
    receiver.join(timeout=1)
    assert ch.drain(5) == ["first", "second"]


def test_returned_item_survives_close(spawn: Spawn) -> None:
    ch = Chan()
    receiver = killed_receiver(ch, spawn)
    ch.send("item")
    ch.close()
    receiver.join(timeout=1)
    assert ch.recv(block=False) == "item"
    with pytest.raises(gsp.Closed):
        ch.recv(block=False)


def test_sender_killed_after_handover_delivers_once(spawn: Spawn) -> None:
    ch = Chan()
    sender = spawn(ch.send, "item")
    wait_for(lambda: waiters(ch) == (0, 1))
    sender.kill(Boom, block=False)
    assert ch.recv(block=False) == "item"
    sender.join(timeout=1)
    assert isinstance(sender.exception, Boom)
    with pytest.raises(gsp.WouldBlock):
        ch.recv(block=False)
    assert_clean(ch)


def test_own_timer_losing_the_race_still_succeeds(spawn: Spawn) -> None:
    ch = Chan()
    receiver = spawn(ch.recv, timeout=0.03)
    wait_for(lambda: waiters(ch) == (1, 0))
    busy_wait(0.06)  # the receiver's timer is now due, but the hub has not run
    ch.send("item", block=False)  # completes the receive before the timer can fire
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
