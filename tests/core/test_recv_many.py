"""Socket.recv_many: up to ``limit`` bodies per call, the same bodies in the same order as recv
one by one would return, on every kind of receive queue (a protocol's bare-body ``ready`` deque,
its ``(body, pipe)`` ``ready`` deque, or none)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable

import gevent
import pytest

import gsp
from gsp.message import Message
from gsp.protocol import Inbox, PipeHandle, Protocol, ProtocolSpec, SocketHandle
from gsp.testing import WAIT, wait_for
from tests.support import connect, inproc_url, plugged_protocols

pytestmark = pytest.mark.core


def pushed(stack: ExitStack, n: int, **pull_opts: Any) -> gsp.Socket:
    """A pull socket with ``n`` messages b'0', b'1', ... sent to it."""
    pull = stack.enter_context(gsp.socket("pull", recv_timeout=WAIT, **pull_opts))
    push = stack.enter_context(gsp.socket("push", send_timeout=WAIT))
    connect(pull, push, inproc_url())
    for i in range(n):
        push.send(b"%d" % i)
    return pull


def test_takes_what_is_queued_up_to_limit_in_order():
    with ExitStack() as st:
        pull = pushed(st, 5)
        wait_for(lambda: pull.stats["recv_queue"] == 5, what="5 queued")
        assert pull.recv_many(3) == [b"0", b"1", b"2"]
        assert pull.recv_many(10) == [b"3", b"4"]  # fewer than the limit: no wait for more
        with pytest.raises(gsp.WouldBlock):
            pull.recv_many(10, block=False)
        with pytest.raises(gsp.Timeout):
            pull.recv_many(10, timeout=0.05)


def test_waits_for_the_first_then_takes_the_rest(gsp_socket):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    connect(pull, push, inproc_url())
    def later() -> None:
        gevent.sleep(0.05)
        push.send(b"a")
    g = gevent.spawn(later)
    assert pull.recv_many(4) == [b"a"]
    g.join()


def test_drains_past_a_full_buffer_without_losing_or_reordering(gsp_socket):
    # recv_buffer 4: the pusher blocks again and again; every drain must let it go on.
    pull = gsp_socket("pull", recv_timeout=WAIT, recv_buffer=4)
    push = gsp_socket("push", send_timeout=WAIT)
    connect(pull, push, inproc_url())
    g = gevent.spawn(lambda: [push.send(b"%d" % i) for i in range(200)])
    got: list[bytes] = []
    sizes = set()
    while len(got) < 200:
        batch = pull.recv_many(64)
        sizes.add(len(batch))
        got += batch
    g.get(timeout=WAIT)
    assert got == [b"%d" % i for i in range(200)]
    assert max(sizes) <= 64


def test_sub_queue_too(gsp_socket):
    sub = gsp_socket("sub", recv_timeout=WAIT)
    sub.subscribe(b"")
    pub = gsp_socket("pub")
    connect(sub, pub, inproc_url())
    for i in range(3):
        pub.send(b"%d" % i)
    wait_for(lambda: sub.stats["recv_queue"] == 3, what="3 queued")
    assert sub.recv_many(8) == [b"0", b"1", b"2"]


def test_protocol_without_a_ready_deque(gsp_socket):
    # pair has no ready deque: the rest is taken through the protocol without waiting.
    a = gsp_socket("pair", recv_timeout=WAIT)
    b = gsp_socket("pair")
    connect(a, b)
    for i in range(3):
        b.send(b"%d" % i)
    wait_for(lambda: a.stats["recv_queue"] == 3, what="3 queued")
    assert a.recv_many(2) == [b"0", b"1"]
    assert a.recv_many(2) == [b"2"]


class PairsPull(Protocol):
    """A pull that queues ``(body, pipe)`` pairs and offers them as ``ready`` (not bodies)."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.q: Inbox[tuple[bytes, Any]] = Inbox(16)
        self.ready = self.q.ready
        self.recv_queue = self.q

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        self.q.put((data, pipe))

    def recv(self, timeout: float | None) -> Message:
        data, pipe = self.q.get(timeout)
        return Message(data, b"", pipe)

    def close(self) -> None:
        self.q.close()


def test_protocol_with_a_ready_deque_of_pairs(gsp_socket):
    with plugged_protocols(ProtocolSpec("test-pairs-pull", 0x51, "push", 0x50, PairsPull)):
        pull = gsp_socket("test-pairs-pull", recv_timeout=WAIT)
        push = gsp_socket("push", send_timeout=WAIT)
        connect(pull, push, inproc_url())
        for i in range(3):
            push.send(b"%d" % i)
        wait_for(lambda: pull.stats["recv_queue"] == 3, what="3 queued")
        assert pull.recv_many(2) == [b"0", b"1"]  # bodies, not (body, pipe) pairs
        assert pull.recv_many(5) == [b"2"]


@pytest.mark.parametrize("limit", [0, -1, 2.0, True, None])
def test_a_bad_limit_is_refused(gsp_socket: Callable[..., gsp.Socket], limit: Any):
    pull = gsp_socket("pull")
    with pytest.raises(gsp.BadOption, match=r"recv_many: limit must be an int >= 1, not "):
        pull.recv_many(limit)


def test_closed_socket():
    pull = gsp.socket("pull")
    pull.close()
    with pytest.raises(gsp.Closed):
        pull.recv_many(4)


def test_takes_every_pipes_queued_messages(gsp_socket):
    # Two pushers' messages queued: recv_many takes all of them in one call, whatever part of
    # the queue its ready deque holds (a fair queue keeps only a front there, the rest per pipe).
    pull = gsp_socket("pull", recv_timeout=WAIT, recv_buffer=2000)
    url = pull.listen(inproc_url()).url
    pushers = [gsp_socket("push", send_timeout=WAIT) for _ in range(2)]
    for push in pushers:
        push.dial(url, fail_fast=True)
    wait_for(lambda: len(pull.pipes) == 2, what="two pipes")
    for k, push in enumerate(pushers):
        for i in range(600):
            push.send(b"%d-%d" % (k, i))
    wait_for(lambda: pull.stats["recv_queue"] == 1200, what="1200 queued")
    got = pull.recv_many(5000)
    assert len(got) == 1200
    for k in range(2):  # each pipe's messages in order
        assert [b for b in got if b.startswith(b"%d-" % k)] == [b"%d-%d" % (k, i)
                                                                 for i in range(600)]
