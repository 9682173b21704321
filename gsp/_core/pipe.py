"""Pipes: one per established connection, with a reader greenlet while bytes come in (see
:mod:`gsp._core.readers`) and a writer greenlet once something had to be queued."""

from __future__ import annotations

import functools
import random
import weakref
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, cast

import gevent
from gevent.event import Event
from gevent.hub import Waiter

from .._overrides import overrides
from ..chan import FLUSH, Outbox, Recv
from ..errors import Closed, ConnectionBroken, GspError
from ..handles import LendingWait
from ..protocol.waiting import ChangeNotice
from ..transport.interface import Connection
from ..transport.peer import Peer, peer_of
from . import counters
from .readers import WOULD_WAIT, Readers, ReadPipe, WouldWait
from .sendrecv import SendRecvState
from .views import EndpointView, SocketView

if TYPE_CHECKING:
    from ..message import Message
    from .counters import Tally

_WRITE_BATCH = 1024  # messages coalesced into one write at most
_READ_TURN = 32  # messages a reader delivers before letting other pipes' readers have a turn
# A reader yields once its reads of bodies of _BIG_BODY or more (on average) brought _BIG_READ
# bytes since it last did, so that a receiver keeping up takes those bodies before more are read:
# they then live a few at a time, and the allocator reuses their memory. Read ahead by many MiB,
# the heap's top swings past glibc's trim threshold and every body is written to freshly
# faulted-in pages (1 MiB push/pull over tcp: 1.3-1.7 -> 5.3-5.4 GB/s, 150-190 -> 2-10 faults a
# message). A yield is a turn of the loop for both greenlets; 64 KiB bodies share one in four.
_BIG_READ = 256 * 1024
_BIG_BODY = 8 * 1024

#: The ids of live pipes, each held by an object only its pipe keeps (the pipe's ``_wake``): a pipe
#: dropped without its close frees its id too. Not the pipe itself, so that the compiled build,
#: where ``Pipe`` takes no weak reference (a mypyc class), can keep the same map.
_live_pipes: "weakref.WeakValueDictionary[int, Callable[[], None]]" = \
    weakref.WeakValueDictionary()
_next_id = random.randrange(1, 1 << 31)


def _alloc_id() -> int:
    """A 31-bit non-zero id no live pipe in this process has (nng starts at random, too)."""
    global _next_id
    while True:
        pid = _next_id
        _next_id = _next_id + 1 if _next_id < (1 << 31) - 1 else 1
        if pid not in _live_pipes:
            return pid


def _pipe_error(exc: Exception, doing: str) -> Exception:
    """What a transport's exception while ``doing`` makes the pipe's error: a gsp error, or an
    ``OSError`` of a transport that forgot to map one, as it is; anything else is a transport
    bug, which ends this pipe only (never the socket): a :class:`gsp.ConnectionBroken` (the
    original is its ``__cause__``, and the DETACHED log line names it)."""
    if isinstance(exc, (GspError, OSError)):
        return exc
    err = ConnectionBroken(f"the transport failed while {doing}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


class PipeHost:
    """What a socket gives each of its pipes, made once by the socket: its pipe readers, the
    protocol's delivery hooks as the socket found them, a spawn of its greenlets, its pipes (read
    only: how many share the readers), the fields its send and recv read (``hot``: whether it is
    closed, its protocol) and the call that tells it a pipe is gone."""

    __slots__ = ("hot", "readers", "pipes", "spawn", "deliver_one", "deliver_all", "gone")

    def __init__(self, hot: SendRecvState, readers: Readers, pipes: "Mapping[int, Pipe]",
                 spawn: Callable[..., gevent.Greenlet], deliver_one: Callable[[Any, bytes], None],
                 deliver_all: Callable[[Any, list[bytes]], None] | None,
                 gone: "Callable[[Pipe], None]") -> None:
        self.hot = hot
        self.readers = readers
        self.pipes = pipes
        self.spawn = spawn
        self.deliver_one = deliver_one
        self.deliver_all = deliver_all
        self.gone = gone


class Pipe:
    """One connection of a socket to one peer.

    ``error`` is ``None`` after a local close, else the exception that ended the pipe (a
    :class:`gsp.ConnectionBroken`, :class:`gsp.MessageTooLarge`, ...). ``socket`` is its
    :class:`gsp.Socket`, as a dialer's and a listener's is. Made by its socket only (no public
    constructor), as a :class:`CorePipe`: what its protocol sends through
    (:class:`gsp.protocol.PipeHandle`) is not the user's API.
    """

    #: Made by gsp only: its constructor is not the API (docs/api-guide.md, "Classes gsp makes").
    _no_public_constructor: ClassVar[bool] = True

    __slots__ = ("id", "socket", "_host", "_readers", "_tallies", "dialer", "listener", "_conn", "_q", "closed", "error",
                 "_reader", "_writer", "_done", "attached", "_in_msgs", "_in_bytes",
                 "_wrote_msgs", "_wrote_bytes", "_writing", "_room", "recv_batch_bytes", "_held",
                 "_parks", "_recv_lent", "_wake", "_deliver_one", "_deliver_all")

    def __init__(self, socket: SocketView, host: PipeHost, conn: Connection, send_buffer: int,
                 dialer: EndpointView | None = None, listener: EndpointView | None = None,
                 send_buffer_size: int = 0, tallies: "tuple[Tally, ...]" = ()) -> None:
        self.id = _alloc_id()
        self.socket = socket
        self._host = host
        self._readers = host.readers
        #: Where the pipe's traffic goes when it is gone: its socket's and its endpoint's tally.
        self._tallies = tallies
        self.dialer = dialer
        self.listener = listener
        self._conn = conn
        # Connections that can write without blocking (plain tcp/ipc, inproc) let a send skip the
        # writer greenlet while it is idle or not started: a request/reply round trip then costs
        # no extra switches, and a pipe that only ever answers directly never needs a writer.
        # (The queue counts what it hands to send_now: see _out_msgs.)
        direct = conn.send_now if overrides(conn, Connection, "send_now") else None
        #: The connection can park (see Connection.recv_or_park): only such a pipe's reads are
        #: lent to a waiting greenlet (see gsp._core.readers), under recv_or_park's promises.
        self._parks = overrides(conn, Connection, "recv_or_park")
        #: How a lent read reads: the connection's recv_nowait, or recv_or_park under the
        #: readers' one-turn guard.
        self._recv_lent = conn.recv_nowait if overrides(conn, Connection, "recv_nowait") \
            else self._recv_guarded
        #: What the connection calls (in the event loop) when bytes come to the parked pipe: a
        #: reader takes the pipe on. Made once (~170 bytes a pipe): no bound method made per
        #: read, and no Python frame between the watcher and the readers.
        self._wake = functools.partial(Readers.wake, host.readers, self)
        # The protocol's hooks, as the socket found them once: read here, not off the socket (an
        # interpreted object's attribute) on every delivery.
        self._deliver_one: Callable[[Any, bytes], None] = host.deliver_one
        self._deliver_all: Callable[[Any, list[bytes]], None] | None = host.deliver_all
        _live_pipes[self.id] = self._wake
        # Traffic, counted per batch by the reader and writer (see gsp._core.counters).
        self._in_msgs = self._in_bytes = self._wrote_msgs = self._wrote_bytes = 0
        self._writing = 0  # messages of the batch the writer is writing now
        #: Bytes of the batch the reader is handing to ``pipe_recv_all`` now (see PipeHandle).
        self.recv_batch_bytes = 0
        self._q: Outbox[Message | bytes] = Outbox(send_buffer, self._start_writer, direct,
                                                  send_buffer_size)
        self.closed = False
        self.attached = False
        self.error: BaseException | None = None
        #: The greenlet reading the pipe now (a reader's; :data:`~gsp._core.readers.LENT` during
        #: a lent read), or None while it is parked: the readers set it as they hand it on.
        self._reader: gevent.Greenlet | None = None
        self._writer: gevent.Greenlet | None = None
        self._done = Event()
        self._room: ChangeNotice | None = None  # made by room_case(); fired as the writer takes items
        #: Messages read and not delivered yet (by a lent read, or a reader between turns), for
        #: the next reader to deliver first.
        self._held: list[bytes] | None = None

    # -- what users see ----------------------------------------------------------------------------
    @property
    def local_address(self) -> str:
        return self._conn.local_address

    @property
    def remote_address(self) -> str:
        return self._conn.remote_address

    @property
    def properties(self) -> Mapping[str, Any]:
        """Transport facts, e.g. ``peer_certificate`` on TLS pipes."""
        return self._conn.properties

    @property
    def peer(self) -> Peer:
        """Who is on the other end, in one shape for every transport
        (:class:`gsp.transport.Peer`: address, pid/uid/gid, certificate, ws request)."""
        conn = self._conn
        return peer_of(conn.remote_address, conn.properties)

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of this pipe's counters (docs/stats.md): messages and bytes received and
        sent, ``send_queue`` (messages queued or being written now), ``dropped_oversize`` (1 once
        closed for a message over ``max_recv_size``)."""
        return counters.pipe_stats(self._traffic, self._send_queue, self.error)

    @property
    def _traffic(self) -> tuple[int, int, int, int]:
        """Messages and bytes received, messages and bytes sent (the order of
        :data:`gsp._core.counters.TRAFFIC`)."""
        return (self._in_msgs, self._in_bytes, self._wrote_msgs + self._q.direct_items,
                self._wrote_bytes + self._q.direct_bytes)

    @property
    def _send_queue(self) -> tuple[int, int]:
        """Messages queued or being written now, and the bytes queued."""
        return len(self._q) + self._writing, self._q.queued_bytes

    def close(self) -> None:
        """Close this pipe only; the socket (and a dialer) carry on."""
        self._shutdown(None)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until the pipe is gone; False if ``timeout`` passed first."""
        return bool(self._done.wait(timeout))

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Pipe {self.id} {state} {self.remote_address}>"

    # -- life cycle (driven by the socket) -----------------------------------------------------
    def _start_writer(self) -> None:
        # Not for a closed pipe, nor while the socket closes (it closes every queue: nothing new
        # can be queued, and whatever is queued already has its writer).
        if self._writer is None and not self.closed and not self._host.hot.closed:
            self._writer = self._host.spawn(self._write_loop)

    def _read_loop(self, idle: Waiter) -> "ReadPipe | None":
        """For a reader greenlet (see :class:`~gsp._core.readers.Readers`): read and deliver
        (first what :attr:`_held`) until the pipe ends or its connection parks (nothing to read
        now); then wait with ``idle`` among the socket's idle readers and return the next pipe to
        read, or None when this reader should end."""
        recv = self._conn.recv_or_park
        readers = self._readers
        wake = self._wake
        others = self._host.pipes
        turn = 0  # messages delivered since this reader last let other pipes' readers have a turn
        ahead = 0  # bytes read in big bodies since this reader last yielded
        try:
            while True:
                msgs = self._held
                if msgs is None:
                    msgs = recv(wake)
                    if msgs is None:  # parked: the watcher calls wake when bytes come
                        self._reader = None
                        nxt = readers.wait(idle)
                        if nxt is not self:
                            return nxt
                        continue  # this pipe woke again: everything above still holds
                else:
                    self._held = None
                if len(others) > 1 and len(msgs) > _READ_TURN - turn:
                    # A deep backlog on one pipe must not starve the others: deliver what is
                    # left of this turn, and the rest after they had theirs.
                    self._held = msgs[_READ_TURN - turn:]
                    msgs = msgs[:_READ_TURN - turn]
                nbytes = self._deliver(msgs)
                turn += len(msgs)
                if turn >= _READ_TURN:
                    turn = 0
                    if len(others) > 1:
                        gevent.sleep(0)
                if nbytes >= _BIG_BODY * len(msgs):
                    ahead += nbytes
                    if ahead >= _BIG_READ:  # big bodies: let the receiver take them first
                        ahead = 0
                        gevent.sleep(0)
        except Exception as exc:
            self._fail(exc)
        return None  # the pipe ended: a kill may be on its way to this reader, which must end

    def _read_lent(self, wait: LendingWait) -> None:
        """Read this pipe in a user greenlet parked in a lending wait (``wait``), handed the
        read by :meth:`Readers.wake <gsp._core.readers.Readers.wake>` in place of a reader
        greenlet. Nothing here may wait (delivery does not, by the lending wait's promise). A
        read that would (part of a frame came) goes on in a reader greenlet: the connection's
        ``recv_nowait`` says so at once, or a guard stops ``recv_or_park`` after one loop turn
        (:meth:`_recv_guarded`). The first message read (every one, for a wait lending with
        ``batches``) is delivered here; then the pipe parks again, or the rest and what a second
        read brought (:attr:`_held`) go to a reader greenlet."""
        readers = self._readers
        recv = self._recv_lent
        try:
            msgs = recv(self._wake)
            if msgs is None:  # parked again: its watcher wakes it when bytes come
                self._reader = None
                return
            if not msgs:
                raise WOULD_WAIT  # part of a frame: a reader greenlet waits for the rest
            if len(msgs) > 1 and not readers.lent_batches:
                self._held = msgs[1:]
                msgs = msgs[:1]
            self._deliver(msgs)
            if self._held is None:
                # One message read and delivered, and it was what the wait waited for: a
                # request or a reply, whose peer waits for the answer, so park without a read
                # that would find nothing (a failed recv a message on tcp and ipc). A batch
                # reads on (its sender may be streaming), and so does a read whose message woke
                # nobody (a late reply, say: more may be queued behind it, which a reader
                # greenlet reads on, not one a loop turn here).
                if len(msgs) == 1 and wait.woken and self._conn.park(self._wake):
                    self._reader = None
                    return
                more = recv(self._wake)
                if more is None:  # parked
                    self._reader = None
                    return
                self._held = more or None  # (empty: part of a frame, as above)
        except WouldWait:
            pass  # a reader greenlet waits for the rest
        except Exception as exc:
            self._fail(exc)
            return
        except BaseException:  # a kill, an outer timeout: the pipe still needs a reader
            readers.carry(self)
            raise
        readers.carry(self)

    def _recv_guarded(self, wake: Callable[[], None]) -> "list[bytes] | None":
        """A lent read's read of a connection without ``recv_nowait``: ``recv_or_park`` under
        the readers' guard, which throws :data:`~gsp._core.readers.WOULD_WAIT` into it should
        it wait past this turn of the loop."""
        guard = self._readers.guard
        guard.start(gevent.getcurrent().throw, WOULD_WAIT)
        try:
            return self._conn.recv_or_park(wake)
        finally:
            guard.stop()

    def _deliver(self, msgs: "list[bytes]") -> int:
        """Hand ``msgs`` (read now; at least one) to the protocol, counted in: its
        ``pipe_recv_all`` with them all (``recv_batch_bytes`` says their size), or its
        ``pipe_recv`` with each. The one way in for what the pipe reads, from a reader greenlet
        or a lent read. Returns their bytes."""
        n = len(msgs)
        if n == 1:
            self._q.allow_direct()  # the peer answered: the next send may be written directly
        else:
            # Several came in one read (contexts, or many peers' requests over one pipe): what
            # answers them this turn leaves in one write, through the writer, not the first
            # alone and then the rest.
            self._q.hold_direct()
        nbytes = len(msgs[0]) if n == 1 else counters.size(msgs)
        self._in_msgs += n
        self._in_bytes += nbytes
        deliver_all = self._deliver_all
        if deliver_all is not None:
            self.recv_batch_bytes = nbytes
            deliver_all(self, msgs)
        else:
            deliver = self._deliver_one
            for data in msgs:
                deliver(self, data)
        return nbytes

    def _fail(self, exc: Exception) -> None:
        """The one failure path of the pipe's reads: ``exc`` (as :func:`_pipe_error` maps it)
        ends the pipe; no reader reads it any more."""
        self._end_read()
        self._shutdown(_pipe_error(exc, "receiving"))

    def _end_read(self) -> None:
        """Once the pipe failed, or closed while the readers handed it on: nobody reads it,
        nothing is held for a reader."""
        self._held = None
        self._reader = None

    def _write_loop(self) -> None:
        q = self._q
        conn = self._conn
        size = counters.size
        try:
            while True:
                try:
                    first = q.recv()
                except Closed:
                    return  # queue closed and drained: linger is over for this pipe
                batch = [] if first is FLUSH else [first]
                if len(q):
                    batch += q.drain(_WRITE_BATCH)
                q.took()
                if self._room is not None:
                    self._room.fire()  # room appeared: wake selects waiting for it
                self._writing = len(batch)
                conn.send_messages(batch)
                self._writing = 0
                self._wrote_msgs += len(batch)
                self._wrote_bytes += size(batch)
        except Exception as exc:
            self._shutdown(_pipe_error(exc, "sending"))

    def _shutdown(self, error: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        if isinstance(error, Closed):
            error = None  # our own close, not a failure
        self.error = error
        if self.attached:  # (a socket's pipes are its CorePipes)
            self._host.hot.proto.remove_pipe(cast("CorePipe", self))
        self._q.close()
        if self._room is not None:
            self._room.close()
        self._conn.close()
        current = gevent.getcurrent()
        for g in (self._reader, self._writer):
            if g is not None and g is not current and not g.dead:
                g.kill(block=False)
        _live_pipes.pop(self.id, None)
        self._count_gone()
        self._host.gone(self)
        self._done.set()

    def _count_gone(self) -> None:
        """Fold the pipe's traffic into its socket's and its endpoint's tallies."""
        for t in self._tallies:
            counters.pipe_gone(t, self._traffic, self.attached, self.error)


class CorePipe(Pipe):
    """A pipe as its socket makes it: the user's :class:`gsp.Pipe`, and what its protocol sends
    through (:class:`gsp.protocol.PipeHandle`: the send queue). Protocols get these; a user's
    ``gsp.Pipe`` does not show them."""

    __slots__ = ("try_send",)

    def __init__(self, socket: SocketView, host: PipeHost, conn: Connection, send_buffer: int,
                 dialer: EndpointView | None = None, listener: EndpointView | None = None,
                 send_buffer_size: int = 0, tallies: "tuple[Tally, ...]" = ()) -> None:
        super().__init__(socket, host, conn, send_buffer, dialer, listener, send_buffer_size,
                         tallies)
        #: Queue a message if there is room now; False when full or closed (never blocks).
        self.try_send = self._q.offer

    @property
    def sendq(self) -> Outbox[Message | bytes]:
        """The outgoing queue (protocols may select on it); its writer starts on first use."""
        self._q.ensure_consumer()
        return self._q

    def send(self, msg: "Message | bytes", timeout: float | None = None) -> None:
        """Queue ``msg``, waiting for room; :class:`gsp.Closed` once the pipe is gone."""
        self.sendq.send(msg, timeout)

    def has_room(self) -> bool:
        """Whether :meth:`try_send` would queue a message now (False once closed)."""
        return self._q.has_room()

    def room_case(self) -> Recv:
        """A select case ready once the writer took messages (room may have appeared) or the
        pipe closed."""
        if self._room is None:
            self._room = ChangeNotice()
            if self.closed:
                self._room.close()
        return self._room.case()


def writer_of(pipe: "Pipe") -> gevent.Greenlet | None:
    """The greenlet writing ``pipe``'s send queue, once something had to be queued (what the
    socket joins as it closes or drains)."""
    return pipe._writer


# -- fork: what Socket._after_fork does to its pipes (see gsp._core.fork) -------------------
def forget_pipe_after_fork(pipe: "Pipe") -> None:
    """In a forked child: close the child's copy of the connection's descriptor (nothing
    sent: the parent's connection stays up there) and stop queueing."""
    pipe.closed = True
    pipe._q.close()
    if pipe._room is not None:
        pipe._room.close()
    pipe._conn.forget()


def orphan_pipe_after_fork(pipe: "Pipe") -> None:
    """In a forked child, for a socket of another OS thread: close the child's copy of the
    descriptor, and touch nothing else (its queue and waiters belong to a hub that is gone)."""
    pipe.closed = True
    pipe._conn.forget()


def dropped_pipe_after_fork(pipe: "Pipe") -> None:
    """In a forked child, once the socket dropped the pipe: its greenlets were the parent's,
    its id is free, its tallies count it, and whoever waits for it to close is woken."""
    pipe._reader = pipe._writer = None
    _live_pipes.pop(pipe.id, None)
    pipe._count_gone()
    pipe._done.set()
