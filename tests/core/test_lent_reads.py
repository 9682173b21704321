"""Lent reads (gsp._core.readers, gsp.protocol.Wakeup's ``lend``): a greenlet waiting in a req or
rep ``recv`` reads the socket's pipe itself when bytes come, in place of a reader greenlet. It
never waits there: part of a frame, or several messages in one read, go on in a reader greenlet;
the recv's timeout still holds; a stalled peer holds up nobody else."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import gevent
import pytest

import gsp
from gsp.message import Message
from gsp.protocol import ProtocolSpec
from gsp.testing import WAIT, RawPeer, connected, wait_for
from gsp.transport import (
    Connection,
    RecvLimits,
    Transport,
    TransportDialer,
    TransportListener,
    wire,
)
from tests.support import RID, counting_lent_reads, plugged_transports, scaled
from tests.support.whitebox import reader_of

pytestmark = pytest.mark.core

REQ = 0x30  # the raw peers below speak req to gsp's rep


def url(kind: str, ipc_dir: str, name: str) -> str:
    return {"tcp": "tcp://127.0.0.1:0", "ipc": f"ipc://{ipc_dir}/{name}.sock",
            "inproc": f"inproc://lent-{name}"}[kind]


# The internals this file reads, each in one place: a socket's readers (their guard timer), a
# pipe's lent read, and its connection's read watcher.
def readers(sock: gsp.Socket) -> Any:
    """The socket's readers: its reader greenlets, its lent reads and their one-turn guard."""
    return sock._readers


def armed(pipe: gsp.Pipe) -> bool:
    """Whether the pipe's connection (a :class:`gsp.transport.ParkingConnection`) has its read
    watcher armed."""
    return bool(pipe._conn.parked)


@pytest.mark.parametrize("kind", ["tcp", "ipc", "inproc"])
def test_requests_and_replies_are_read_by_the_greenlets_waiting_for_them(
        gsp_socket: Callable[..., gsp.Socket],
        kind: str, ipc_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT)
    connected(rep, rep.listen(url(kind, ipc_dir, "lent")).url, req)
    served = []

    def echo() -> None:
        while True:
            body = rep.recv()
            served.append(gevent.getcurrent())
            rep.send(body + b"!")

    g = gevent.spawn(echo)
    req.send(b"warm")  # the first pipe reads may be a reader's, before anyone waited
    assert req.recv() == b"warm!"
    lent = counting_lent_reads(monkeypatch, rep, req)
    try:
        for i in range(50):
            req.send(b"%d" % i)
            assert req.recv() == b"%d!" % i
    finally:
        g.kill()
    # Each request was read by the echo greenlet waiting in rep.recv, each reply by this one
    # waiting in req.recv: a lent read each, no reader greenlet's read.
    assert len(lent) == 100 and set(lent) == {rep.pipes[0], req.pipes[0]}
    assert set(served) == {g}
    assert req.pipes[0].stats["messages_received"] == 51
    assert rep.pipes[0].stats["messages_received"] == 51


class CountingGuard:
    """A socket's guard timer, counting the lent reads started under it."""

    def __init__(self, timer: Any) -> None:
        self.timer = timer
        self.starts = 0

    @property
    def active(self) -> bool:
        return bool(self.timer.active)

    def start(self, *args: Any) -> None:
        self.starts += 1
        self.timer.start(*args)

    def stop(self) -> None:
        self.timer.stop()


class PlainConnection(Connection):
    """A tcp connection as a third party might have written it with the required methods only:
    it cannot park, and has no read that never waits."""

    def __init__(self, inner: Connection) -> None:
        self.inner = inner
        self.local_address, self.remote_address = inner.local_address, inner.remote_address

    def handshake(self, spec: ProtocolSpec, timeout: float | None) -> None:
        self.inner.handshake(spec, timeout)

    def use_recv_limits(self, limits: RecvLimits) -> None:
        self.inner.use_recv_limits(limits)

    def send_messages(self, messages: Sequence[Message | bytes]) -> None:
        self.inner.send_messages(messages)

    def recv_messages(self) -> list[bytes]:
        return self.inner.recv_messages()

    def close(self) -> None:
        self.inner.close()


class GuardedConnection(PlainConnection):
    """A tcp connection as a third party might have written it before ``recv_nowait``: it
    parks (``recv_or_park``, ``park``) but has no read that never waits, so its lent reads run
    under the readers' one-turn guard."""

    def __init__(self, inner: Connection) -> None:
        super().__init__(inner)
        self.send_now = inner.send_now  # type: ignore[method-assign]
        self.recv_or_park = inner.recv_or_park  # type: ignore[method-assign]
        self.park = inner.park  # type: ignore[method-assign]

    # Declared, so that the core sees them overridden (the instance's are the inner's).
    def send_now(self, msg: Message | bytes) -> int:
        raise AssertionError("replaced in __init__")

    def recv_or_park(self, wake: Callable[[], None]) -> list[bytes] | None:
        raise AssertionError("replaced in __init__")

    def park(self, wake: Callable[[], None]) -> bool:
        raise AssertionError("replaced in __init__")


class GuardedTransport(Transport):
    """tcp underneath, each connection wrapped in ``wrap``."""

    schemes = ("guarded",)
    wrap: type[PlainConnection] = GuardedConnection

    @staticmethod
    def tcp() -> Transport:
        tcp: Transport = gsp.registry.transport_for("tcp://x")
        return tcp

    def listener(self, url: str, options: Mapping[str, Any]) -> TransportListener:
        scheme, wrap = self.schemes[0], self.wrap
        inner = self.tcp().listener(url.replace(scheme, "tcp", 1), options)

        class Listener(TransportListener):
            def bind(self) -> None:
                inner.bind()
                self.url = inner.url.replace("tcp", scheme, 1)

            def accept(self) -> Connection:
                return wrap(inner.accept())

            def close(self) -> None:
                inner.close()

        return Listener()

    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        wrap = self.wrap
        inner = self.tcp().dialer(url.replace(self.schemes[0], "tcp", 1), options)

        class Dialer(TransportDialer):
            def dial(self) -> Connection:
                return wrap(inner.dial())

            def close(self) -> None:
                inner.close()

        return Dialer()


class PlainTransport(GuardedTransport):
    schemes = ("plainwrap",)
    wrap = PlainConnection


@pytest.fixture
def guarded() -> Iterator[None]:
    with plugged_transports(GuardedTransport()):
        yield


@pytest.mark.parametrize("kind", ["tcp", "ipc", "inproc", "guarded"])
def test_only_connections_without_a_read_that_never_waits_are_read_under_the_guard(
        gsp_socket: Callable[..., gsp.Socket],
        kind: str, ipc_dir: str, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """tcp, ipc and inproc connections have ``recv_nowait``: their lent reads start no timer.
    A connection that parks without it is read with ``recv_or_park`` under the one-turn guard,
    a timer started (and stopped) for each lent read."""
    if kind == "guarded":
        request.getfixturevalue("guarded")
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT)
    bound = rep.listen("guarded://127.0.0.1:0" if kind == "guarded"
                       else url(kind, ipc_dir, "guard")).url
    connected(rep, bound, req)
    g = gevent.spawn(lambda: [rep.send(rep.recv() + b"!") for _ in iter(int, 1)])
    try:
        req.send(b"warm")
        assert req.recv() == b"warm!"
        lent = counting_lent_reads(monkeypatch, rep, req)
        guards = [CountingGuard(readers(s).guard) for s in (rep, req)]
        for s, guard in zip((rep, req), guards):
            readers(s).guard = guard
        for i in range(5):
            req.send(b"%d" % i)
            assert req.recv() == b"%d!" % i
    finally:
        g.kill()
    assert len(lent) == 10  # each request and each reply read by the greenlet waiting for it
    assert [guard.starts for guard in guards] == ([5, 5] if kind == "guarded" else [0, 0])


@pytest.mark.parametrize("kind", ["tcp", "ipc", "guarded"])
def test_a_peer_stalled_mid_frame_holds_up_neither_the_timeout_nor_other_peers(
        gsp_socket: Callable[..., gsp.Socket],
        kind: str, ipc_dir: str, request: pytest.FixtureRequest) -> None:
    """Part of a frame comes while rep.recv waits: the lent read hands the pipe to a reader
    greenlet at once (tcp, ipc: ``recv_nowait``) or after one loop turn (the guard)."""
    if kind == "guarded":
        request.getfixturevalue("guarded")
    rep = gsp_socket("rep", recv_timeout=WAIT)
    bound = rep.listen("guarded://127.0.0.1:0" if kind == "guarded"
                       else url(kind, ipc_dir, "stall")).url.replace("guarded", "tcp")
    with RawPeer(bound, REQ) as slow, RawPeer(bound, REQ) as fast:
        wait_for(lambda: len(rep.pipes) == 2, what="both pipes")
        frame = b"".join(wire.encode_frames(slow.framing, [(b"", RID + b"slow request")]))
        gevent.spawn_later(0.05, slow.sock.sendall, frame[:7])  # while rep.recv waits
        t0 = time.monotonic()
        with pytest.raises(gsp.Timeout):
            rep.recv(timeout=0.3)
        assert time.monotonic() - t0 < 0.3 + scaled(1.0)  # the lent read did not wait for the rest
        fast.send(RID + b"fast request")
        assert rep.recv() == b"fast request"  # the stalled pipe holds nobody up
        rep.send(b"fast reply")
        assert fast.recv() == RID + b"fast reply"
        slow.sock.sendall(frame[7:])  # the rest: a reader greenlet was waiting for it
        assert rep.recv() == b"slow request"
        rep.send(b"slow reply")
        assert slow.recv() == RID + b"slow reply"


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_several_messages_in_one_read_all_arrive_in_order(
        gsp_socket: Callable[..., gsp.Socket], kind: str, ipc_dir: str) -> None:
    n = 20
    rep = gsp_socket("rep", recv_timeout=WAIT)
    bound = rep.listen(url(kind, ipc_dir, "batch")).url
    with RawPeer(bound, REQ) as peer:
        wait_for(lambda: len(rep.pipes) == 1, what="the pipe")
        ids = [(0x80000000 | i).to_bytes(4, "big") for i in range(n)]
        gevent.spawn_later(0.05, peer.send, *[rid + b"req %d" % i for i, rid in enumerate(ids)])
        for i, rid in enumerate(ids):  # the first recv waits: its greenlet reads the batch
            assert rep.recv() == b"req %d" % i
            rep.send(b"rep %d" % i)
            assert peer.recv() == rid + b"rep %d" % i


def test_a_lent_read_of_a_closed_peer_ends_the_pipe_and_fails_the_waiting_recv(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    req = gsp_socket("req", recv_timeout=WAIT, resend_time=0)
    rep = gsp_socket("rep", recv_timeout=WAIT)
    connected(rep, rep.listen("tcp://127.0.0.1:0").url, req)
    req.send(b"never answered")
    assert rep.recv() == b"never answered"
    pipe = req.pipes[0]
    gevent.spawn_later(0.05, rep.close)
    with pytest.raises(gsp.ConnectionBroken):
        req.recv()  # waiting, it read the peer's close itself
    assert pipe.wait_closed(WAIT) and isinstance(pipe.error, gsp.ConnectionBroken)
    assert req.pipes == [] and not req.closed  # the socket carries on


def test_an_exception_thrown_into_a_lent_read_leaves_the_pipe_to_a_reader(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """An outer gevent.Timeout (or a kill) reaching the waiting greenlet while it reads: it goes
    on up through recv, and the pipe is read on by a reader greenlet, losing nothing."""
    rep = gsp_socket("rep", recv_timeout=WAIT)
    with RawPeer(rep.listen("tcp://127.0.0.1:0").url, REQ) as peer:
        wait_for(lambda: len(rep.pipes) == 1, what="the pipe")
        pipe = rep.pipes[0]
        real = pipe._recv_lent  # what a lent read reads with (the connection's recv_nowait)
        assert real is not None
        outer = gevent.Timeout(1)  # as if it fired while the read went on
        calls = []

        def interrupted(wake: object) -> object:
            calls.append(gevent.getcurrent())
            if len(calls) == 1:
                raise outer
            return real(wake)

        pipe._recv_lent = interrupted
        gevent.spawn_later(0.05, peer.send, RID + b"request")
        with pytest.raises(gevent.Timeout) as caught:
            rep.recv()
        assert caught.value is outer and calls == [gevent.getcurrent()]
        assert rep.recv() == b"request"  # read on, by a reader greenlet
        assert gevent.getcurrent() not in calls[1:]  # (an idle one may use the real method)
        rep.send(b"reply")
        assert peer.recv() == RID + b"reply"


def test_only_a_lone_waiting_greenlet_reads_for_the_socket(
        gsp_socket: Callable[..., gsp.Socket],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Among several greenlets waiting (contexts), what one would read is mostly the others':
    readers read, and each context still gets its own reply."""
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT)
    connected(rep, rep.listen("tcp://127.0.0.1:0").url, req)
    a, b = req.open_context(), req.open_context()
    a.send(b"a")
    b.send(b"b")
    got: dict[str, bytes] = {}
    waiting = [gevent.spawn(lambda c=c, k=k: got.__setitem__(k, c.recv()))
               for k, c in (("a", a), ("b", b))]
    gevent.sleep(0.01)  # both wait now
    lent = counting_lent_reads(monkeypatch, req)
    for _ in range(2):
        rep.send(rep.recv() + b"!")
    gevent.joinall(waiting, timeout=WAIT, raise_error=True)
    assert got == {"a": b"a!", "b": b"b!"}
    assert lent == []  # neither waiting greenlet read the pipe


@pytest.mark.plugins("gsp_ws")
def test_pipes_that_cannot_park_keep_their_reader_and_are_never_lent(
        gsp_socket: Callable[..., gsp.Socket], monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection without recv_or_park (a third party's, with the required methods only)
    never promised to be read by a greenlet that gives up after one loop turn: its reader
    greenlet reads it, lending or not."""
    with plugged_transports(PlainTransport()):
        rep = gsp_socket("rep", recv_timeout=WAIT)
        req = gsp_socket("req", recv_timeout=WAIT)
        bound = rep.listen("plainwrap://127.0.0.1:0").url
        got: list[bytes] = []
        g = gevent.spawn(lambda: got.append(rep.recv()))  # waiting (lending) as the pipe starts
        gevent.sleep(0.01)
        req.dial(bound, fail_fast=True)
        wait_for(lambda: len(rep.pipes) == 1, what="rep's pipe")
        lent = counting_lent_reads(monkeypatch, rep, req)
        req.send(b"hello")
        g.join(WAIT)
        assert got == [b"hello"]
        rep.send(b"hi")
        assert req.recv() == b"hi"  # this greenlet waited, lending, for it
        assert lent == []
        for s in (rep, req):
            pipe = s.pipes[0]
            assert not pipe._parks
            assert reader_of(pipe) is not None and not reader_of(pipe).dead  # a real reader


def test_what_woke_nobody_is_read_on_by_a_reader_not_a_loop_turn_each(
        gsp_socket: Callable[..., gsp.Socket],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Late replies queued ahead of the one a req waits for (big ones: one a read): the waiting
    greenlet reads the first, which wakes nobody, so the pipe is read on at once, by a reader
    greenlet, rather than parked to come back one message a loop turn (which, beside a busy
    pipe, made a req wait seconds behind a few hundred late replies)."""
    late = 10
    req = gsp_socket("req", recv_timeout=WAIT, resend_time=0)
    with RawPeer(req.listen("tcp://127.0.0.1:0").url, 0x31) as rep:
        wait_for(lambda: len(req.pipes) == 1, what="the pipe")
        body = b"x" * (wire.DIRECT_SIZE + 1024)  # big: after one, each is read on its own
        req.send(b"warm-up")
        rep.send(rep.recv()[:4] + body)
        assert req.recv() == body
        req.send(b"question")
        rid = rep.recv()[:4]
        other = (int.from_bytes(rid, "big") ^ 0x5555).to_bytes(4, "big")
        pipe = req.pipes[0]
        wait_for(lambda: reader_of(pipe) is None, what="the pipe parked")
        lent = counting_lent_reads(monkeypatch, req)
        rep.send(*[other + body] * late, rid + b"answer")  # (loopback takes it all at once)
        assert req.recv() == b"answer"
        assert lent == [pipe]  # one lent read, whose late reply woke nobody; then a reader's
        assert pipe.stats["messages_received"] == 1 + late + 1


def test_no_second_lent_read_while_one_waits_out_its_loop_turn(
        gsp_socket: Callable[..., gsp.Socket],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lent read that would wait runs under the socket's one guard timer until the end of its
    loop turn; a second lending wait (another context) is not handed a pipe meanwhile (it would
    take the guard over, and the first would wait in its read for as long as its peer stalls):
    a reader greenlet reads it."""
    rep = gsp_socket("rep", recv_timeout=WAIT)
    with RawPeer(rep.listen("tcp://127.0.0.1:0").url, REQ) as peer:
        wait_for(lambda: len(rep.pipes) == 1 and reader_of(rep.pipes[0]) is None,
                 what="the pipe, parked")
        lent = counting_lent_reads(monkeypatch, rep)
        guard = readers(rep).guard

        def turn() -> None:  # as while a lent read waits out its turn, every turn
            guard.start(turn)

        turn()
        try:
            gevent.spawn_later(0.05, peer.send, RID + b"one")
            assert rep.recv() == b"one"  # this greenlet waited, lending: not taken
            assert lent == []
        finally:
            guard.stop()
        rep.send(b"reply one")
        assert peer.recv() == RID + b"reply one"
        gevent.spawn_later(0.05, peer.send, RID + b"two")
        assert rep.recv() == b"two"
        assert lent == [rep.pipes[0]]  # the same wait, with no lent read under way, reads


def test_the_watcher_left_armed_by_a_lent_read_stops_once_a_reader_reads_on(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """A lent read leaves its pipe's watcher armed (it calls the wake in every loop turn while
    bytes wait). A reader greenlet that then reads the pipe stops it first, so a reader blocked
    in delivery (a full queue) costs the event loop nothing, and nothing read is lost."""
    rep = gsp_socket("rep", recv_timeout=WAIT, recv_buffer=2)
    with RawPeer(rep.listen("tcp://127.0.0.1:0").url, REQ) as peer:
        wait_for(lambda: len(rep.pipes) == 1 and reader_of(rep.pipes[0]) is None,
                 what="the pipe, parked")
        pipe = rep.pipes[0]
        gevent.spawn_later(0.05, peer.send, RID + b"first")
        assert rep.recv() == b"first"  # read by this greenlet, waiting
        assert armed(pipe) and reader_of(pipe) is None  # parked, its watcher armed
        rep.send(b"reply")
        assert peer.recv() == RID + b"reply"
        ids = [(0x80000100 + i).to_bytes(4, "big") for i in range(10)]
        peer.send(*[rid + b"more %d" % i for i, rid in enumerate(ids)])  # nobody waits
        wait_for(lambda: rep.stats["recv_queue"] == 2, what="the queue, full")
        # A reader blocked in delivery, and the watcher stopped.
        wait_for(lambda: reader_of(pipe) is not None and not armed(pipe),
                 what="a reader reading on, the watcher stopped")
        assert not reader_of(pipe).dead
        for i, rid in enumerate(ids):
            assert rep.recv() == b"more %d" % i
            rep.send(b"reply %d" % i)
            assert peer.recv() == rid + b"reply %d" % i
