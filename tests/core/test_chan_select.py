"""gsp.chan's select: cases ready at once and blocking ones, the same channel twice, timeouts,
closed channels, fairness among ready cases; then many senders, receivers and selects at once over
several channels, losing and duplicating nothing. Channel basics are in test_chan.py,
interruption in test_chan_interrupts.py."""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any, Callable

import gevent
import pytest

import gsp
from gsp.chan import CLOSED, Chan, Recv, Send, select_channels
from gsp.testing import wait_for
from tests.support import scaled
from tests.support.chan_support import Spawn, assert_clean, waiters

pytestmark = pytest.mark.core


# -- select --------------------------------------------------------------------------------------

def test_select_needs_a_case() -> None:
    with pytest.raises(ValueError):
        select_channels([])


def test_select_ready_cases_without_blocking() -> None:
    a, b = Chan(1), Chan(1)
    a.send("a")
    assert select_channels([Recv(b), Recv(a)], timeout=0) == (1, "a")
    assert select_channels([Recv(a), Send(b, "b")], timeout=0) == (1, None)
    assert b.recv(block=False) == "b"
    with pytest.raises(gsp.WouldBlock):
        select_channels([Recv(a), Recv(b)], timeout=0)
    b.send(1)
    with pytest.raises(gsp.WouldBlock):
        select_channels([Send(b, 2)], timeout=0)
    assert_clean(a, b)


def test_select_blocks_until_a_recv_case_is_ready(spawn: Spawn) -> None:
    a, b, c = Chan(), Chan(4), Chan(1)
    c.send("full")
    sel = spawn(select_channels, [Recv(a), Recv(b), Send(c, "never")])
    wait_for(lambda: waiters(a) == (1, 0))
    assert waiters(b) == (1, 0) and waiters(c) == (0, 1)
    b.send("hello")
    assert sel.get(timeout=1) == (1, "hello")
    assert_clean(a, b, c)
    # The losing cases took nothing: a has no hidden receiver, c still holds only its own item.
    with pytest.raises(gsp.WouldBlock):
        a.send(1, block=False)
    assert c.drain(5) == ["full"]


def test_select_blocks_until_a_send_case_is_ready(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    sel = spawn(select_channels, [Recv(a), Send(b, "out")])
    wait_for(lambda: waiters(b) == (0, 1))
    assert b.recv(timeout=1) == "out"
    assert sel.get(timeout=1) == (1, None)
    assert_clean(a, b)
    with pytest.raises(gsp.WouldBlock):
        b.recv(block=False)


def test_select_same_channel_twice(spawn: Spawn) -> None:
    a = Chan()
    sel = spawn(select_channels, [Recv(a), Recv(a)])
    wait_for(lambda: waiters(a) == (2, 0))
    a.send(7)
    idx, val = sel.get(timeout=1)
    assert idx in (0, 1) and val == 7
    assert_clean(a)
    with pytest.raises(gsp.WouldBlock):
        a.send(8, block=False)


def test_select_timeout() -> None:
    a, b = Chan(), Chan()
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout) as ei:
        select_channels([Recv(a), Send(b, 1)], timeout=0.05)
    assert not isinstance(ei.value, gsp.WouldBlock)
    assert 0.04 <= time.monotonic() - t0 < scaled(1.0)
    assert_clean(a, b)
    with pytest.raises(gsp.Timeout):
        select_channels([Recv(a)], timeout=-1)


def test_select_timeout_zero_polls() -> None:
    a = Chan(1)
    t0 = time.monotonic()
    with pytest.raises(gsp.WouldBlock):
        select_channels([Recv(a)], timeout=0)
    assert time.monotonic() - t0 < scaled(0.5)
    a.send(1)
    assert select_channels([Recv(a)], timeout=0) == (0, 1)
    assert_clean(a)


def test_select_closed_recv_case_yields_closed() -> None:
    a, b = Chan(2), Chan()
    a.send("last")
    a.close()
    assert select_channels([Recv(b), Recv(a)]) == (1, "last")  # buffered items first
    assert select_channels([Recv(b), Recv(a)]) == (1, CLOSED)
    assert select_channels([Recv(a)], timeout=0) == (0, CLOSED)
    assert_clean(a, b)


def test_close_wakes_blocked_select_with_closed(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    sel = spawn(select_channels, [Recv(a), Recv(b)])
    wait_for(lambda: waiters(b) == (1, 0))
    b.close()
    assert sel.get(timeout=1) == (1, CLOSED)
    assert_clean(a, b)


def test_select_send_case_on_closed_channel_raises(spawn: Spawn) -> None:
    a, b = Chan(), Chan()
    b.close()
    with pytest.raises(gsp.Closed):
        select_channels([Recv(a), Send(b, 1)])
    c = Chan()
    sel = spawn(select_channels, [Recv(a), Send(c, 1)])
    wait_for(lambda: waiters(c) == (0, 1))
    c.close()
    sel.join(timeout=1)
    assert isinstance(sel.exception, gsp.Closed)
    assert_clean(a, c)


def _shares(cases: list[Recv | Send], refill: Callable[[int], None], rounds: int) -> Counter[int]:
    counts: Counter[int] = Counter()
    for _ in range(rounds):
        idx, _val = select_channels(cases, timeout=0)
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
            dst.recv(block=False)

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
            idx, val = select_channels(cases)
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
