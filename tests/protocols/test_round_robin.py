"""RoundRobin's one round robin (gsp.protocol.routing): try_next, wait_next, send_next.

Every round-robin sender uses these (push's send, req's queue, the gather example's contexts),
so their turn-taking is tested here on its own, with pipes that are bare channels.
"""

from __future__ import annotations

from typing import Any

import gevent
import pytest

import gsp
from gsp.chan import Chan, Recv
from gsp.protocol import RoundRobin

pytestmark = pytest.mark.core


class _Handle:
    protocol = "rr"

    def __init__(self) -> None:
        self.options: dict[str, Any] = {"best_effort": False, "fail_no_peers": False}

    def watch(self, name: str, fn: Any) -> None:
        pass


class _Pipe:
    """What RoundRobin needs of a pipe: a send queue of ``room`` slots."""

    def __init__(self, room: int) -> None:
        self.sendq: Chan[Any] = Chan(room)
        self.closed = False

    def try_send(self, msg: Any) -> bool:
        try:
            self.sendq.send(msg, block=False)
        except gsp.WouldBlock:
            return False
        return True


class _RR(RoundRobin):
    def pipe_recv(self, pipe: Any, data: bytes) -> None:
        pass


def _rr(*rooms: int) -> tuple[_RR, list[_Pipe]]:
    rr = _RR(_Handle(), False)
    pipes = [_Pipe(n) for n in rooms]
    for p in pipes:
        rr.add_pipe(p)
    return rr, pipes


def test_try_next_takes_turns_skips_a_full_pipe_and_wraps_the_cursor() -> None:
    rr, (a, b, c) = _rr(5, 0, 5)  # b never has room
    used = [rr.try_next(i) for i in range(4)]
    assert used == [a, c, a, c]  # b skipped each time, the cursor wraps past the end
    assert rr.cursor == 3  # past c: the next turn starts at a again (modulo 3)
    assert [a.sendq.recv(block=False), c.sendq.recv(block=False)] == [0, 1]


def test_try_next_without_room_returns_none_and_keeps_the_cursor() -> None:
    rr, _ = _rr(0, 0)
    rr.cursor = 1
    assert rr.try_next(b"x") is None and rr.cursor == 1
    assert _rr()[0].try_next(b"x") is None  # no pipe at all: never raises


def test_wait_next_queues_on_the_first_pipe_with_room_and_moves_the_cursor() -> None:
    rr, (a, b) = _rr(1, 1)
    assert rr.try_next(1) is a and rr.try_next(2) is b and rr.try_next(3) is None
    gevent.spawn_later(0.01, b.sendq.recv, None, False)  # b's writer takes its message
    assert rr.wait_next(3, 2) is b
    assert rr.cursor == 2 and b.sendq.recv(block=False) == 3


def test_wait_next_returns_none_when_pipes_change() -> None:
    rr, _ = _rr(0)
    gevent.spawn_later(0.01, rr.add_pipe, _Pipe(1))
    assert rr.wait_next(b"x", 2) is None  # look again: the new pipe has room
    assert rr.try_next(b"x") is rr.pipes[1]


def test_send_next_drops_waits_times_out_and_closes() -> None:
    rr, (a,) = _rr(0)
    assert rr.send_next(b"x", None, best_effort=True) is None  # dropped: no room now
    with pytest.raises(gsp.Timeout):
        rr.send_next(b"x", 0.01, best_effort=False)
    closing: Chan[Any] = Chan()
    gevent.spawn_later(0.01, closing.close)
    with pytest.raises(gsp.Closed):
        rr.send_next(b"x", 2, False, closing=Recv(closing))
    rr.close()
    with pytest.raises(gsp.Closed):
        rr.send_next(b"x", 2, False)


def test_send_next_asks_about_no_peers_only_without_pipes() -> None:
    rr, _ = _rr()
    asked: list[int] = []

    def no_peers() -> None:
        asked.append(1)
        raise gsp.NoPeers("none")

    with pytest.raises(gsp.NoPeers):
        rr.send_next(b"x", 2, False, no_peers)
    assert asked == [1]
    rr.add_pipe(_Pipe(1))
    assert rr.send_next(b"x", 2, False, no_peers) is rr.pipes[0] and asked == [1]
