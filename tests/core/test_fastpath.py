"""The core's fast paths keep every behaviour: direct writes (whole, partial, failed), writers
started only when needed, big bodies read in place or as the message itself, batch delivery."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import gevent
import pytest
from gevent import socket as gsocket

import gsp
from gsp._core.pipe import writer_of
from gsp.message import Message
from gsp.testing import WAIT, connected, wait_for
from gsp.transport import StreamConnection, wire
from tests.support import handshaken

pytestmark = pytest.mark.core

KINDS = ["tcp", "ipc", "inproc"]


def url(kind: str, ipc_dir: str, name: str = "s") -> str:
    return {"tcp": "tcp://127.0.0.1:0", "ipc": f"ipc://{ipc_dir}/{name}.sock",
            "inproc": f"inproc://fastpath-{name}"}[kind]


class FakeSock:
    """Takes ``room`` bytes per non-blocking send, then raises what ``then`` says."""

    def __init__(self, room: int, then: type[OSError] = BlockingIOError) -> None:
        self.room = room
        self.then = then
        self.wire = bytearray()

    def send(self, data: Any, flags: int = 0, timeout: Any = None) -> int:
        if timeout == 0.0:  # send_now's non-blocking write
            if not self.room:
                raise self.then()
            n = min(self.room, len(data))
            self.room -= n
        else:
            n = len(data)
        self.wire += bytes(data[:n])
        return n

    def close(self) -> None:
        pass


def conn(sock: FakeSock) -> StreamConnection:
    c = StreamConnection(sock, wire.TCP, 0, "here", "there")
    c._plain = True  # as the handshake sets it for a plain gevent socket
    return c


def test_send_now_whole_partial_and_would_block() -> None:
    frame = wire.encode_frames(wire.TCP, [(b"\x80\x00\x00\x01", b"hello")])
    whole = b"".join(frame)
    c = conn(FakeSock(room=1000))
    assert c.send_now(Message(b"hello", b"\x80\x00\x00\x01")) == 2
    assert bytes(c.sock.wire) == whole
    assert c.send_now(Message(b"next")) == 2  # nothing held back

    c = conn(FakeSock(room=5))  # partly written: the rest goes first in the next batch
    assert c.send_now(Message(b"hello", b"\x80\x00\x00\x01")) == 1
    assert c.send_now(Message(b"later")) == 0  # nothing may overtake the tail
    c.send_messages([Message(b"next")])
    assert bytes(c.sock.wire) == whole + b"".join(wire.encode_frames(wire.TCP, [(b"", b"next")]))

    c = conn(FakeSock(room=0))  # would block: queue it instead
    assert c.send_now(Message(b"x")) == 0 and not c.sock.wire
    c.send_messages([Message(b"x")])  # nothing held back: the batch is the message, whole
    assert bytes(c.sock.wire) == b"".join(wire.encode_frames(wire.TCP, [(b"", b"x")]))


def test_send_now_error_is_met_by_the_writer() -> None:
    c = conn(FakeSock(room=0, then=ConnectionResetError))
    assert c.send_now(Message(b"x")) == 1  # the writer must run and meet the error
    c.sock.send = lambda *a, **k: (_ for _ in ()).throw(ConnectionResetError())
    with pytest.raises(gsp.ConnectionBroken):
        c.send_messages([])


def test_send_now_leaves_big_bodies_and_tls_to_the_writer() -> None:
    c = conn(FakeSock(room=1 << 30))
    assert c.send_now(Message(b"b" * (64 * 1024))) == 0
    c._plain = False
    assert c.send_now(Message(b"small")) == 0
    assert not c.sock.wire


@pytest.mark.parametrize("kind", KINDS)
def test_request_reply_pipes_write_directly_and_need_no_writer(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT)
    connected(rep, rep.listen(url(kind, ipc_dir, "rr")).url, req)
    for i in range(50):
        req.send(b"%d" % i)
        rep.send(rep.recv() + b"!")
        assert req.recv() == b"%d!" % i
    # Every message went out from the sender's greenlet: no writer greenlet was needed.
    assert [writer_of(p) for p in rep.pipes + req.pipes] == [None, None]


@contextmanager
def warmed_up(gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str,
              name: str) -> Iterator[tuple[Any, Any]]:
    """A REP and a REQ connected over ``kind``, one round trip made (it arms the resend timer,
    which may refresh the loop's clock)."""
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT)
    connected(rep, rep.listen(url(kind, ipc_dir, name)).url, req)
    req.send(b"warm-up")
    rep.send(rep.recv())
    assert req.recv() == b"warm-up"
    yield rep, req


@pytest.mark.parametrize("kind", KINDS)
def test_requests_of_many_contexts_share_writes(gsp_socket: Callable[..., gsp.Socket], kind: str,
                                                ipc_dir: str) -> None:
    """Requests sent by 16 contexts in one turn of the loop: the first is written directly, the
    others leave together through the writer (a write each would cost a system call each)."""
    with warmed_up(gsp_socket, kind, ipc_dir, "ctx") as (rep, req):
        ctxs = [req.open_context() for _ in range(16)]
        pipe = req.pipes[0]
        for i, c in enumerate(ctxs):
            c.send(b"%d" % i)
        assert writer_of(pipe) is not None and pipe.stats["messages_sent"] == 2
        for _ in ctxs:
            rep.send(rep.recv() + b"!")
        assert sorted(c.recv() for c in ctxs) == sorted(b"%d!" % i for i in range(16))


@pytest.mark.parametrize("kind", KINDS)
def test_one_message_read_allows_a_direct_write_and_a_batch_holds_them(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    """Within one turn of the loop: a message read on its own re-allows a direct write (a reply
    came: the next request may go at once); several read together hold direct writes for the
    rest of the turn, so what answers them leaves in one write, through the writer."""
    with warmed_up(gsp_socket, kind, ipc_dir, "hold") as (rep, req):
        ctxs = [req.open_context() for _ in range(3)]
        pipe = req.pipes[0]
        late = (0x80000000 | 12345).to_bytes(4, "big") + b"late"  # a reply nobody waits for
        deliver = pipe._deliver  # (white box: as a reader delivers what one read brought)
        deliver([late])  # one message read
        sent = pipe.stats["messages_sent"]
        ctxs[0].send(b"a")
        assert pipe.stats["messages_sent"] == sent + 1 and writer_of(pipe) is None  # directly
        deliver([late])
        ctxs[1].send(b"b")  # the same turn, and yet directly: one message was read again
        assert pipe.stats["messages_sent"] == sent + 2 and writer_of(pipe) is None
        deliver([late, late])  # a batch
        ctxs[2].send(b"c")
        ctxs[0].send(b"d")  # (a context asking anew cancels "a")
        assert pipe.stats["messages_sent"] == sent + 2 and writer_of(pipe) is not None  # queued
        got = [rep.recv() for _ in range(4)]
        assert got == [b"a", b"b", b"c", b"d"]  # in order, the held ones after the direct ones
        assert pipe.stats["messages_sent"] == sent + 4


@pytest.mark.parametrize("kind", KINDS)
def test_a_burst_goes_through_the_writer_in_order(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    connected(pull, pull.listen(url(kind, ipc_dir, "burst")).url, push)
    n = 5000
    g = gevent.spawn(lambda: [push.send(b"%d" % i) for i in range(n)])
    got = [pull.recv() for _ in range(n)]
    g.get(timeout=WAIT)
    assert got == [b"%d" % i for i in range(n)]
    assert writer_of(push.pipes[0]) is not None  # the burst needed the writer


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_big_and_small_messages_interleaved(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    # Big bodies are read in place or as the message itself; small ones parsed from chunks.
    sizes = [1 << 20, 3, 1 << 20, 1 << 20, 0, 40000, 5, 200000, 1 << 20, 17]
    msgs = [bytes([i]) * n for i, n in enumerate(sizes)]
    opts = {"recv_timeout": WAIT, "max_recv_size": 0}
    a = gsp_socket("pair", **opts)
    b = gsp_socket("pair", send_timeout=WAIT)
    connected(a, a.listen(url(kind, ipc_dir, "big")).url, b)
    for _ in range(3):
        g = gevent.spawn(lambda: [b.send(m) for m in msgs])
        got = [a.recv() for _ in msgs]
        g.get(timeout=WAIT)
        assert [len(m) for m in got] == sizes and got == msgs
        assert all(type(m) is bytes for m in got)


def test_a_big_body_leaves_with_what_came_before_it_in_one_sendmsg(monkeypatch: Any) -> None:
    """A body of _JOIN_LIMIT bytes or more goes out in one sendmsg with what was joined before
    it (small frames, its own prefix): one system call, the body not copied. Where the kernel
    takes only part of it (a full send buffer, a reader that is late), the write goes on from
    where it stopped, in the joined head or in the body, and the reader gets every message
    whole and in order."""
    from gsp.transport.stream import _JOIN_LIMIT

    calls: list[list[int]] = []
    sendmsg = gsocket.socket.sendmsg

    def counting(self: Any, buffers: Any, *args: Any) -> int:
        sent: int = sendmsg(self, buffers, *args)
        calls.append([len(b) for b in buffers] + [sent])
        return sent

    monkeypatch.setattr(gsocket.socket, "sendmsg", counting)
    small = [b"s%05d" % i for i in range(4000)]  # 56 KiB of frames joined before the body
    big = bytes(range(256)) * (4 * _JOIN_LIMIT // 256)
    msgs = [*small, big, b"after", big]
    with handshaken(StreamConnection) as (a, b):
        a.sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_SNDBUF, 4096)
        writer = gevent.spawn(a.send_messages, msgs)
        gevent.sleep(0.05)  # the reader is late: the first sendmsg takes part of the head
        got: list[bytes] = []
        while len(got) < len(msgs):
            got += b.recv_messages()
        writer.get(timeout=WAIT)
    assert got == msgs
    head = sum(len(m) + 8 for m in small) + 8
    assert [c[:2] for c in calls] == [[head, len(big)], [5 + 8 + 8, len(big)]]
    assert calls[0][2] < head  # (the part the kernel took first: some of the head only)


def test_pull_recv_msg_still_carries_its_pipe_and_fair_turns_hold(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    pull = gsp_socket("pull", recv_timeout=WAIT)
    p1 = gsp_socket("push")
    p2 = gsp_socket("push")
    lst = pull.listen("tcp://127.0.0.1:0")
    connected(pull, lst.url, p1)
    connected(pull, lst.url, p2)
    wait_for(lambda: len(pull.pipes) == 2, what="two pipes")
    for i in range(200):
        p1.send(b"a%d" % i)
        p2.send(b"b%d" % i)
    msgs = [pull.recv_msg() for _ in range(400)]
    by_pipe: dict[int, list[bytes]] = {}
    for m in msgs:
        assert m.header == b"" and m.pipe in pull.pipes
        by_pipe.setdefault(m.pipe.id, []).append(m.body)
    assert sorted(len(v) for v in by_pipe.values()) == [200, 200]
    for bodies in by_pipe.values():  # each pipe's own order is kept
        assert bodies == sorted(bodies, key=lambda x: int(x[1:]))


def test_push_with_one_puller_queues_without_calling_the_protocol(
        gsp_socket: Callable[..., gsp.Socket], ipc_dir: str) -> None:
    push = gsp_socket("push", send_buffer=4)
    a = gsp_socket("pull")
    b = gsp_socket("pull")
    calls: list[int] = []
    proto = push._proto
    real = proto.send_body

    def counted(msg: Any, timeout: Any) -> None:
        calls.append(1)
        real(msg, timeout)

    push._hot.send_body = counted
    connected(a, a.listen(url("ipc", ipc_dir, "a")).url, push)
    for i in range(3):
        push.send(b"%d" % i)
    assert calls == []  # one puller with room: queued by the socket itself
    assert [a.recv(timeout=WAIT) for _ in range(3)] == [b"0", b"1", b"2"]
    # A full queue falls back to the protocol's send, which waits for room as ever.
    with pytest.raises(gsp.Timeout):
        for _ in range(100_000):
            push.send(b"x" * 65536, timeout=0.05)
    assert calls
    while True:
        try:
            a.recv(timeout=0.2)
        except gsp.Timeout:
            break
    # A second puller: round robin again, through the protocol.
    calls.clear()
    connected(b, b.listen(url("ipc", ipc_dir, "b")).url, push)
    wait_for(lambda: len(push.pipes) == 2)
    for i in range(10):
        push.send(b"%d" % i)
    assert len(calls) == 10
    got_a = [a.recv(timeout=WAIT) for _ in range(5)]
    got_b = [b.recv(timeout=WAIT) for _ in range(5)]
    assert sorted(got_a + got_b) == sorted(b"%d" % i for i in range(10))
    # Back to one puller: direct again; none: the protocol waits (and times out).
    b.close()
    wait_for(lambda: len(push.pipes) == 1)
    calls.clear()
    push.send(b"again")
    assert calls == [] and a.recv(timeout=WAIT) == b"again"
    a.close()
    wait_for(lambda: not push.pipes)
    with pytest.raises(gsp.Timeout):
        push.send(b"nobody", timeout=0.05)
    assert calls == [1]
