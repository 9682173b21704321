"""Reader greenlets only while bytes come in (gsp._core.readers): an idle tcp/ipc pipe parks on a
read watcher and holds no greenlet; the next bytes, the peer's close and a local close are all
still seen; a reader blocked in delivery still ends with its pipe; a subclass that reads its own
way never parks."""

from __future__ import annotations

from typing import Any, Callable

import gevent
import pytest
from gevent import select as gselect

import gsp
from gsp._core.readers import IDLE_READERS
from gsp._transports.inproc import InprocConnection
from gsp.chan import Chan
from gsp.errors import Closed
from gsp.testing import WAIT, connected, wait_for
from gsp.transport import StreamConnection, wire
from tests.support import CountingRaw, handshaken
from tests.support.whitebox import reader_of

pytestmark = pytest.mark.core


def url(kind: str, ipc_dir: str, name: str = "s") -> str:
    return {"tcp": "tcp://127.0.0.1:0", "ipc": f"ipc://{ipc_dir}/{name}.sock",
            "inproc": f"inproc://readers-{name}"}[kind]


# The internals this file reads, each in one place: a socket's greenlets and its idle
# readers, a stream connection's read watcher and its raw socket.
def readers_of(sock: gsp.Socket) -> int:
    """Reader greenlets a socket has now, busy or idle (its greenlets less its accepters)."""
    return sum(1 for g in sock._group if not g.dead) - len(sock.listeners)


def idle_readers(sock: gsp.Socket) -> int:
    """Reader greenlets the socket keeps waiting for the next pipe to read."""
    return int(sock._readers.idle)


def armed(conn: StreamConnection) -> bool:
    """Whether the connection's read watcher is armed (it calls the wake once bytes come)."""
    return conn.parked


def count_reads(conn: StreamConnection) -> CountingRaw:
    """Count the reads the connection makes on its socket from now on."""
    raw = CountingRaw(conn.nowait_socket)
    conn.nowait_socket = raw
    return raw


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_idle_pipes_hold_no_reader_and_wake_on_the_next_message(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    n = 40
    rep = gsp_socket("rep", recv_timeout=WAIT)
    reqs = [gsp_socket("req", recv_timeout=WAIT) for _ in range(n)]
    bound = rep.listen(url(kind, ipc_dir)).url
    for r in reqs:
        connected(rep, bound, r)
    for rnd in range(2):  # the second round finds every pipe parked
        for i, r in enumerate(reqs):
            r.send(b"%d.%d" % (rnd, i))
            rep.send(rep.recv() + b"!")
            assert r.recv() == b"%d.%d!" % (rnd, i)
        wait_for(lambda: all(reader_of(p) is None for p in rep.pipes), what="every pipe parked")
        assert len(rep.pipes) == n
        # One reader served them all in turn and waits for the next pipe; none is per pipe.
        assert readers_of(rep) == idle_readers(rep) == 1


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_pipes_park_after_big_messages_too(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    big = b"b" * wire.DIRECT_SIZE * 4
    a = gsp_socket("pair", recv_timeout=WAIT, max_recv_size=0)
    b = gsp_socket("pair", recv_timeout=WAIT)
    connected(a, a.listen(url(kind, ipc_dir, "big")).url, b)
    pipe = a.pipes[0]
    for m in [big, b"", big, b"small", big]:
        b.send(m)
        assert a.recv() == m
        wait_for(lambda: reader_of(pipe) is None, what="the pipe parked")


def test_inproc_pipes_park_too_and_see_the_next_message_and_their_peer_leave(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    a = gsp_socket("pair", recv_timeout=WAIT)
    b = gsp_socket("pair", recv_timeout=WAIT)
    connected(a, a.listen(url("inproc", "", "park")).url, b)
    for m in [b"x", b"y"]:
        b.send(m)
        assert a.recv() == m
        pipe = a.pipes[0]
        wait_for(lambda p=pipe: reader_of(p) is None, what="the inproc pipe parked")
    b.close()
    assert pipe.wait_closed(WAIT)
    assert isinstance(pipe.error, gsp.ConnectionBroken) and a.pipes == []


def inproc_pair(limit: int = 0) -> tuple[InprocConnection, InprocConnection]:
    """Two ends of an inproc pipe, as a dial makes them (the receiver refuses above ``limit``)."""
    a2b: Chan[Any] = Chan(8)
    b2a: Chan[Any] = Chan(8)
    return (InprocConnection("t", b2a, a2b, "dialer", limit),
            InprocConnection("t", a2b, b2a, "listener", limit))


def test_an_inproc_connection_parks_without_a_read_and_wakes_for_what_comes() -> None:
    """``park`` (after a request or a reply) reads nothing; it calls back once a batch waits,
    at once if one already does, and for the peer's close."""
    a, b = inproc_pair()
    try:
        woke: list[int] = []
        assert b.park(lambda: woke.append(1))
        gevent.sleep(0)
        assert woke == []  # nothing there: no call yet
        a.send_messages([b"one"])
        wait_for(lambda: woke == [1], what="the wake")
        assert b.recv_or_park(lambda: None) == [b"one"]
        a.send_messages([b"two"])  # there before it parks: called back all the same
        assert b.park(lambda: woke.append(2))
        wait_for(lambda: woke == [1, 2], what="the wake for what was there")
        assert b.recv_or_park(lambda: None) == [b"two"]
        assert b.park(lambda: woke.append(3))
        a.close()
        wait_for(lambda: woke == [1, 2, 3], what="the wake for the close")
        with pytest.raises(gsp.ConnectionBroken):
            b.recv_or_park(lambda: None)
    finally:
        a.close()
        b.close()


def test_an_inproc_batch_over_recv_max_size_is_refused_whatever_its_length() -> None:
    a, b = inproc_pair(limit=10)
    try:
        for batch, big in [([b"x" * 11], 11), ([b"ok", b"y" * 12, b""], 12)]:
            a.send_messages(batch)
            with pytest.raises(gsp.MessageTooLarge) as info:
                b.recv_or_park(lambda: None)
            assert (info.value.size, info.value.limit) == (big, 10)
        a.send_messages([b"x" * 10])  # exactly the limit crosses
        assert b.recv_or_park(lambda: None) == [b"x" * 10]
        a.send_messages([b"a", b"b" * 10])
        assert b.recv_messages() == [b"a", b"b" * 10]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_a_parked_pipe_sees_its_peer_leave(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    a = gsp_socket("pair", recv_timeout=WAIT)
    b = gsp_socket("pair", recv_timeout=WAIT)
    connected(a, a.listen(url(kind, ipc_dir, "leave")).url, b)
    b.send(b"x")
    assert a.recv() == b"x"
    pipe = a.pipes[0]
    wait_for(lambda: reader_of(pipe) is None, what="the pipe parked")
    b.close()
    assert pipe.wait_closed(WAIT)
    assert isinstance(pipe.error, gsp.ConnectionBroken) and a.pipes == []


@pytest.mark.parametrize("kind", ["tcp", "ipc", "inproc"])
def test_closing_a_parked_pipe_ends_it_on_both_sides(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    pull = gsp_socket("pull", recv_timeout=WAIT)
    p1 = gsp_socket("push", send_timeout=WAIT)
    p2 = gsp_socket("push", send_timeout=WAIT)
    bound = pull.listen(url(kind, ipc_dir, "disarm")).url
    connected(pull, bound, p1)
    p1.send(b"one")
    assert pull.recv() == b"one"
    pipe = pull.pipes[0]
    wait_for(lambda: reader_of(pipe) is None, what="the pipe parked")
    pipe.close()
    assert pipe.wait_closed(WAIT) and pipe.error is None and reader_of(pipe) is None
    # A read watcher left armed on the descriptor would keep it open: the peer would not see it.
    wait_for(lambda: not p1.pipes, what="the peer to see the close")
    connected(pull, bound, p2)  # the socket serves the next pipe
    p2.send(b"two")
    assert pull.recv() == b"two"


def test_readers_blocked_in_delivery_end_with_their_pipes(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """Pipes whose readers wait for room in a full receive queue each hold a reader; closing
    such a pipe ends its reader, and of the others only IDLE_READERS stay once all are idle."""
    n = IDLE_READERS + 8
    pull = gsp_socket("pull", recv_timeout=WAIT, recv_buffer=1)
    pushes = [gsp_socket("push", send_timeout=WAIT, reconnect_time=60) for _ in range(n)]
    bound = pull.listen("tcp://127.0.0.1:0").url
    for p in pushes:
        connected(pull, bound, p)
    by_address = {p.pipes[0].local_address: i for i, p in enumerate(pushes)}
    for i, p in enumerate(pushes):
        p.send(b"a%d" % i)
        p.send(b"b%d" % i)
    # One message is queued on the socket; every pipe's reader waits to deliver the next.
    wait_for(lambda: readers_of(pull) == n, what="a reader per pipe")
    doomed = pull.pipes[:4]
    gone = {by_address[pp.remote_address] for pp in doomed}
    for pp in doomed:
        pp.close()
    wait_for(lambda: readers_of(pull) == n - 4, what="the closed pipes' readers to end")
    expected = {b"%s%d" % (k, i) for i in range(n) if i not in gone for k in (b"a", b"b")}
    got: set[bytes] = set()
    while not expected <= got:
        got.add(pull.recv())
    wait_for(lambda: all(reader_of(pp) is None for pp in pull.pipes), what="every pipe parked")
    assert readers_of(pull) == idle_readers(pull) <= IDLE_READERS
    for i, p in enumerate(pushes):  # every open pipe still delivers
        if i not in gone:
            p.send(b"c%d" % i)
    assert {pull.recv() for _ in range(n - 4)} == {b"c%d" % i for i in range(n) if i not in gone}


class OwnReads(StreamConnection):
    """A connection that reads its own way (as the zlib example plugin does)."""

    def recv_messages(self) -> list[bytes]:
        return [m.upper() for m in super().recv_messages()]


def test_a_subclass_reading_its_own_way_never_parks() -> None:
    with handshaken(OwnReads) as (a, b):
        got: list[Any] = []
        g = gevent.spawn(lambda: got.append(a.recv_or_park(lambda: None)))
        gevent.sleep(0.01)
        assert not got and not armed(a)  # it waits in recv_messages
        b.send_messages([b"hi"])
        g.get(timeout=WAIT)
        assert got == [[b"HI"]]
        # The plain connection parks when nothing is there, and wakes once bytes come.
        woke: list[int] = []
        assert b.recv_or_park(lambda: woke.append(1)) is None
        a.send_messages([b"back"])
        wait_for(lambda: woke, what="the wake")
        assert b.recv_or_park(lambda: None) == [b"back"] and not armed(b)


def test_park_arms_the_watcher_without_a_read_that_would_find_nothing() -> None:
    """After a request or reply, the caller parks without reading (no recv failing with
    EAGAIN); the watcher still sees the next message. Not with part of a frame held."""
    with handshaken(StreamConnection) as (a, b):
        raw = count_reads(b)
        woke: list[int] = []
        a.send_messages([b"request"])
        wait_for(lambda: b.recv_or_park(woke.append) == [b"request"], what="the request")
        before = raw.recvs
        assert b.park(lambda: woke.append(1))
        assert raw.recvs == before and armed(b)  # parked with no recv
        a.send_messages([b"next"])
        wait_for(lambda: woke, what="the wake")
        assert b.recv_or_park(lambda: None) == [b"next"]
        # Part of a frame held after a read: it cannot park (the rest is read as recv_or_park
        # reads it).
        frame = b"".join(wire.encode_frames(wire.TCP, [(b"", b"partial")]))
        a.sock.sendall(frame[:5])
        wait_for(lambda: b.recv_nowait(lambda: None) == [], what="part of a frame, read")
        assert b.decoder.buffered == 5
        assert not b.park(lambda: woke.append(2))
        a.sock.sendall(frame[5:])
        assert b.recv_or_park(lambda: None) == [b"partial"]


def test_recv_nowait_reads_what_is_there_and_never_waits() -> None:
    """A lent read's read: nothing there parks (None, the watcher armed); a whole frame is its
    message; part of a frame is an empty list at once, with nothing lost, and so is a call while
    part is held (without a read); recv_or_park then waits for the rest. The watcher, which
    calls the wake for as long as the socket is readable, stays armed through reads that never
    wait, and recv_or_park stops it before a read that may."""
    with handshaken(StreamConnection) as (a, b):
        raw = count_reads(b)
        woke: list[int] = []
        assert b.recv_nowait(lambda: woke.append(1)) is None and armed(b)
        a.send_messages([b"whole"])
        wait_for(lambda: woke, what="the wake")
        assert b.recv_nowait(lambda: None) == [b"whole"]
        assert armed(b)  # left armed: a read that never waits needs no stop and start
        # That read took less than it asked for, so the kernel held nothing more: the next call
        # parks without the read that would fail (the watcher is still armed, and level-
        # triggered: bytes come, it wakes).
        before = raw.recvs
        assert b.recv_nowait(lambda: woke.append(4)) is None and raw.recvs == before
        assert armed(b)
        frame = b"".join(wire.encode_frames(wire.TCP, [(b"", b"partial")]))
        a.sock.sendall(frame[:5])
        assert gselect.select([b.sock], [], [], WAIT)[0]
        assert b.recv_nowait(lambda: woke.append(2)) == [] and b.decoder.buffered == 5
        before = raw.recvs
        assert b.recv_nowait(lambda: woke.append(3)) == [] and raw.recvs == before  # no read
        assert set(woke) == {1}  # the watcher still calls the wake it was armed with
        gevent.spawn_later(0.05, a.sock.sendall, frame[5:])
        assert b.recv_or_park(lambda: None) == [b"partial"]  # waited for the rest
        assert b.decoder.buffered == 0
        assert not armed(b)  # stopped by the read that may wait, before it waited


def test_a_short_read_saves_only_the_next_read_and_a_park_forgets_it() -> None:
    """recv_nowait after a read that emptied the kernel's buffer parks without a read, once;
    a park (the lent read's, after the one message its greenlet waited for) forgets that, so
    the read after the wake reads; and a read that filled what it asked for reads on."""
    from gsp.transport.stream import _RECV_CHUNK

    with handshaken(StreamConnection) as (a, b):
        raw = count_reads(b)
        def readable() -> bool:
            return bool(gselect.select([b.sock], [], [], WAIT)[0])

        a.send_messages([b"one"])
        assert readable() and b.recv_nowait(lambda: None) == [b"one"]
        assert b.park(lambda: None)  # as a lent read parks after its one message
        a.send_messages([b"two"])
        assert readable()
        before = raw.recvs
        assert b.recv_nowait(lambda: None) == [b"two"] and raw.recvs == before + 1
        assert b.recv_nowait(lambda: None) is None and raw.recvs == before + 1  # drained: no read
        # More than one read takes (frames of 1 KiB: a full read ends between two): the first
        # fills what it asked for, so the next one reads on; it takes the rest, and is short.
        body = b"x" * (1024 - 8)
        count = _RECV_CHUNK // 1024 + 20
        a.send_messages([body] * count)
        wait_for(lambda: _readable_bytes(b.sock) >= count * 1024, what="all of it")
        before = raw.recvs
        assert b.recv_nowait(lambda: None) == [body] * (count - 20)  # all it asked for
        assert b.recv_nowait(lambda: None) == [body] * 20  # so it read on
        assert b.recv_nowait(lambda: None) is None and raw.recvs == before + 2  # drained


def test_a_closed_connection_is_never_armed_and_its_reads_meet_the_close() -> None:
    """Once closed (by the protocol, say, in the delivery of what a read brought), a connection
    neither parks nor arms its read watcher, even where the read before it emptied the kernel's
    buffer and the next would park without reading: a watcher armed on its descriptor would keep
    it open, so the close would never reach the peer. Its reads raise Closed."""
    with handshaken(StreamConnection) as (a, b):
        a.send_messages([b"one"])
        assert gselect.select([b.sock], [], [], WAIT)[0]
        assert b.recv_nowait(lambda: None) == [b"one"]  # short: the next would park unread
        b.close()
        assert b.park(lambda: None) is False
        with pytest.raises(Closed):
            b.recv_nowait(lambda: None)
        with pytest.raises(Closed):
            b.recv_nowait(lambda: None)  # (and again: nothing was armed in between)
        assert not armed(b)
        a.sock.settimeout(WAIT)
        assert a.sock.recv(1) == b""  # the close reached the peer


def _readable_bytes(sock: Any) -> int:
    from gsp.transport.stream import _readable
    return _readable(sock)


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_a_receiver_keeping_up_finds_big_bodies_queued_a_few_at_a_time(
        gsp_socket: Callable[..., gsp.Socket],
        kind: str, ipc_dir: str) -> None:
    """A reader of big bodies yields once it read _BIG_READ bytes of them since it last did: a
    receiver waiting in recv takes them before more are read (the allocator reuses their
    memory), however far ahead the sender is; the kernel's buffers hold the rest."""
    from gsp._core.pipe import _BIG_READ

    n, size = 64, 64 * 1024
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    connected(pull, pull.listen(url(kind, ipc_dir, "ahead")).url, push)
    queued: list[int] = []

    def take() -> None:
        for i in range(n):
            assert pull.recv() == bytes([i]) * size
            queued.append(pull.stats["recv_queue_bytes"])

    g = gevent.spawn(take)
    gevent.sleep(0.01)  # the receiver waits
    for i in range(n):  # 4 MiB, queued at once for the writer
        push.send(bytes([i]) * size)
    g.get(timeout=WAIT)
    assert len(queued) == n
    assert max(queued) <= _BIG_READ + size  # never the megabytes the kernel held
