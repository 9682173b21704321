"""The interface a protocol implements, and small helpers protocols share.

A protocol plugin returns :class:`ProtocolSpec` objects from its ``gsp_protocols`` hook. For every
socket, the core calls ``spec.factory(socket, raw)`` and talks to the result through
:class:`Protocol`'s methods. Protocols see pipes only through the pipe interface: ``id``,
``send``/``try_send``/``sendq`` (a :class:`gsp.chan.Chan` of outgoing messages: each a
:class:`gsp.Message`, or a ``bytes`` body that has no header), ``close()`` and ``closed``.

Two optional methods skip work on the hot path: ``send_body(body, timeout)`` lets
``Socket.send`` hand over the body without making a :class:`gsp.Message` (a protocol whose
cooked messages carry no header queues the ``bytes`` itself), and ``recv_body(timeout)`` lets
``Socket.recv`` take just the body. A protocol may also set ``ready``: a ``deque`` of
``(body, pipe)`` pairs from which ``Socket.recv`` pops directly whenever it is not empty (so
only a queue that needs no bookkeeping on removal qualifies).
"""

from __future__ import annotations

from collections import deque
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import gevent

from ._errors import Closed, GspError, NotSupported, ProtocolStateError, Timeout
from ._message import Message
from ._options import Option, boolean, duration, integer
from .chan import Chan, Recv, Send, select

if TYPE_CHECKING:
    from ._pipe import Pipe
    from ._socket import Socket

__all__ = [
    "ProtocolSpec", "Protocol", "Option", "Signal", "Deadline", "RejectPipe",
    "NotSupported", "ProtocolStateError", "Message", "send_round_robin", "Inbox", "broadcast",
    "integer", "boolean", "duration", "RoundRobin", "PipeMap",
]


class RejectPipe(Exception):
    """Raised by ``Protocol.add_pipe`` to refuse a pipe (e.g. pair already has its peer)."""


class ProtocolSpec:
    """What the registry knows about one protocol."""

    def __init__(self, name: str, number: int, peer_name: str, peer_number: int,
                 factory: Callable[["Socket", bool], "Protocol"],
                 options: Mapping[str, Option] | None = None) -> None:
        self.name = name
        self.number = number
        self.peer_name = peer_name
        self.peer_number = peer_number
        self.factory = factory
        self.options: Mapping[str, Option] = dict(options or {})

    def __repr__(self) -> str:
        return f"<ProtocolSpec {self.name} 0x{self.number:x} peer={self.peer_name}>"


class Protocol:
    """Base class for a protocol instance bound to one socket.

    Subclasses override what they support; the defaults raise :class:`gsp.NotSupported`.
    ``pipe_recv`` is called from the pipe's reader greenlet for every message and may block to
    push back on a fast peer.
    """

    def __init__(self, socket: "Socket", raw: bool) -> None:
        self.socket = socket
        self.raw = raw
        #: The socket's ``best_effort`` option, kept current by the socket (read on every send).
        self.best_effort: bool = socket.get_option("best_effort")
        #: Counters a protocol keeps (e.g. ``dropped``); users read a copy as ``socket.stats``.
        self.stats: dict[str, int] = {}

    def add_pipe(self, pipe: "Pipe") -> None:
        """A pipe finished its handshake; raise :class:`RejectPipe` to refuse it."""

    def remove_pipe(self, pipe: "Pipe") -> None:
        """A pipe is gone (its queue is already closed)."""

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        """One message (header+body) arrived on ``pipe``."""

    def send(self, msg: Message, timeout: float | None) -> None:
        raise NotSupported(f"{self.socket.protocol} sockets cannot send")

    def recv(self, timeout: float | None) -> Message:
        raise NotSupported(f"{self.socket.protocol} sockets cannot receive")

    def open_context(self) -> Any:
        raise NotSupported(f"{self.socket.protocol} sockets have no contexts")

    def set_option(self, name: str, value: Any) -> None:
        """``socket.set_option`` is about to store this validated value: raise to refuse it, or
        react (e.g. resize a queue on ``recv_buffer``). Options given to the constructor are
        already in place when the protocol is created and do not come through here."""

    def subscribe(self, prefix: Any) -> None:
        raise NotSupported(f"{self.socket.protocol} sockets have no subscriptions")

    def unsubscribe(self, prefix: Any) -> None:
        raise NotSupported(f"{self.socket.protocol} sockets have no subscriptions")

    def close(self) -> None:
        """The socket is closing: wake every blocked send/recv with :class:`gsp.Closed`."""


class Signal:
    """A broadcast "something changed" for select loops: wait on ``case()``, wake all with
    ``fire()``. (A closed channel is ready for every receiver at once; firing swaps in a new one.)
    """

    __slots__ = ("_chan", "_armed")

    def __init__(self) -> None:
        self._chan = Chan()
        self._armed = False  # a case() was handed out since the last fire: someone may wait

    def case(self) -> Recv:
        self._armed = True
        return Recv(self._chan)

    def fire(self) -> None:
        if self._armed:  # else nobody can be waiting: keep the channel (most fires are these)
            self._armed = False
            old, self._chan = self._chan, Chan()
            old.close()

    def close(self) -> None:
        """Wake everyone for good: later ``case()`` selects are ready at once."""
        self._chan.close()


class Deadline:
    """A timeout turned into an absolute deadline for loops that wait more than once."""

    __slots__ = ("_at",)

    def __init__(self, timeout: float | None) -> None:
        self._at = None if timeout is None else monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (None = forever); raises :class:`gsp.Timeout` once passed."""
        if self._at is None:
            return None
        left = self._at - monotonic()
        if left <= 0:
            raise Timeout("timed out")
        return left


def send_round_robin(pipes: "list[Pipe]", start: int, msg: Message, changed: Signal,
                     timeout: float | None, best_effort: bool,
                     is_closed: Callable[[], bool]) -> int:
    """Queue ``msg`` on the first pipe from ``start`` with room; wait if none has.

    Returns the index after the pipe used (the next round-robin start), or -1 when dropped
    because ``best_effort`` is set and no pipe could take it now. Waits for room on any pipe or
    for ``changed`` (a pipe came or went), up to ``timeout``.
    """
    deadline = Deadline(timeout)
    while True:
        if is_closed():
            raise Closed("socket closed")
        n = len(pipes)
        for k in range(n):
            i = (start + k) % n
            if pipes[i].try_send(msg):
                return i + 1
        if best_effort:
            return -1
        left = deadline.remaining()
        cases: list[Any] = [Send(p.sendq, msg) for p in pipes]
        cases.append(changed.case())
        snapshot = list(pipes)
        try:
            i, _ = select(cases, left)
        except Closed:
            continue  # a pipe died while we waited; look again
        if i < len(snapshot):
            return pipes.index(snapshot[i]) + 1 if snapshot[i] in pipes else start


class Inbox:
    """A bounded, resizable receive queue between pipe readers (``put``) and receivers (``get``).

    ``when_full`` picks what ``put`` does on a full queue: ``"block"`` waits for room (back-pressure
    to the peer, as pair does), ``"drop_oldest"`` discards the oldest queued item (sub),
    ``"drop_newest"`` discards the new one (bus). Drops are counted in ``dropped``. Unlike a
    :class:`gsp.chan.Chan`, an Inbox can be resized or filtered while greenlets wait on it.
    After ``close`` both ``put`` and ``get`` raise :class:`gsp.Closed`.
    """

    POLICIES = ("block", "drop_oldest", "drop_newest")

    __slots__ = ("_buf", "_cap", "_policy", "_items", "_space", "_getters", "_putters",
                 "_closed", "dropped")

    def __init__(self, capacity: int, when_full: str = "block") -> None:
        if when_full not in self.POLICIES:
            raise ValueError(f"when_full must be one of {self.POLICIES}, not {when_full!r}")
        self._buf: deque[Any] = deque()
        self._cap = capacity
        self._policy = when_full
        self._items = Signal()  # fired when an item arrives (only if someone waits for one)
        self._space = Signal()  # fired when room appears (only if a blocked put waits)
        self._getters = 0
        self._putters = 0
        self._closed = False
        self.dropped = 0

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._buf)

    def put(self, item: Any, timeout: float | None = None) -> bool:
        """Queue ``item``; False if the policy dropped it (the new one or an older one)."""
        if self._closed:
            raise Closed("queue closed")
        buf = self._buf
        kept = True
        if len(buf) >= self._cap:
            if self._policy != "block" and self._getters:
                # Receivers were woken but have not run yet (a reader delivers a whole batch
                # without yielding): let them drain before dropping anything.
                gevent.sleep(0)
                if self._closed:
                    raise Closed("queue closed")
        if len(buf) >= self._cap:
            if self._policy == "drop_newest":
                self.dropped += 1
                return False
            if self._policy == "drop_oldest":
                buf.popleft()
                self.dropped += 1
                kept = False
            else:
                deadline = Deadline(timeout)
                while len(buf) >= self._cap:
                    if self._closed:
                        raise Closed("queue closed")
                    self._wait(self._space, deadline, putter=True)
                if self._closed:
                    raise Closed("queue closed")
        buf.append(item)
        if self._getters:
            self._items.fire()
        return kept

    def put_all(self, items: list[Any]) -> int:
        """``put`` each of ``items`` in order, moving runs of them at once; returns how many
        items were dropped. As with ``put``, a full queue with receivers waiting yields once so
        they can drain it before the policy drops anything."""
        if self._policy == "block" or self._putters:
            return sum(not self.put(x) for x in items)
        buf = self._buf
        dropped = 0
        i, n = 0, len(items)
        while i < n:
            if self._closed:
                raise Closed("queue closed")
            room = self._cap - len(buf)
            if room <= 0 and self._getters:
                gevent.sleep(0)
                if self._closed:
                    raise Closed("queue closed")
                room = self._cap - len(buf)
            if room > 0:
                run = items[i:i + room]
                buf.extend(run)
                i += len(run)
                if self._getters:
                    self._items.fire()
                continue
            # Full, and nobody drained it: the rest goes by the policy, as put would do it.
            rest = items[i:]
            dropped = len(rest)
            if self._policy == "drop_oldest":
                keep = rest[-self._cap:]
                for _ in range(len(keep)):
                    buf.popleft()
                buf.extend(keep)
                if self._getters:
                    self._items.fire()
            break
        self.dropped += dropped
        return dropped

    def get(self, timeout: float | None = None) -> Any:
        """Take the oldest item, waiting up to ``timeout`` (:class:`gsp.Timeout`)."""
        deadline: Deadline | None = None
        while True:
            if self._closed:
                raise Closed("queue closed")
            if self._buf:
                item = self._buf.popleft()
                if self._putters:
                    self._space.fire()
                return item
            if deadline is None:
                deadline = Deadline(timeout)
            self._wait(self._items, deadline, putter=False)

    def _wait(self, signal: Signal, deadline: Deadline, putter: bool) -> None:
        case = signal.case()
        left = deadline.remaining()
        if putter:
            self._putters += 1
        else:
            self._getters += 1
        try:
            select([case], left)
        finally:
            if putter:
                self._putters -= 1
            else:
                self._getters -= 1

    def resize(self, capacity: int) -> None:
        """Change the capacity now; when shrinking, the oldest items that no longer fit go."""
        self._cap = capacity
        buf = self._buf
        while len(buf) > capacity:
            buf.popleft()
            self.dropped += 1
        if self._putters:
            self._space.fire()

    def filter(self, keep: Callable[[Any], bool]) -> None:
        """Discard every queued item for which ``keep(item)`` is false (order is kept)."""
        kept = [x for x in self._buf if keep(x)]
        self._buf.clear()
        self._buf.extend(kept)
        if self._putters:
            self._space.fire()

    def close(self) -> None:
        """Wake every waiter with :class:`gsp.Closed`; queued items are discarded."""
        self._closed = True
        self._buf.clear()
        self._items.close()
        self._space.close()


def broadcast(pipes: "Iterable[Pipe]", msg: Message, skip: "Pipe | None" = None,
              drop_oldest: bool = False) -> int:
    """Queue ``msg`` on every pipe but ``skip`` without waiting on a slow peer (pub, bus, star).

    If some queues are full, yield once so the writers of peers that keep up can drain theirs
    (a tight send loop would otherwise lose messages even to fast peers), then drop for pipes
    still full: the new message, or with ``drop_oldest`` that pipe's oldest queued one (nng PUB).
    Returns how many pipes missed a message.
    """
    full = [p for p in pipes if p is not skip and not p.try_send(msg)]
    if not full:
        return 0
    gevent.sleep(0)
    missed = 0
    for p in full:
        if p.closed or p.try_send(msg):
            continue
        missed += 1
        if drop_oldest:
            try:
                p.sendq.recv_nowait()
            except GspError:
                continue
            p.try_send(msg)
    return missed


class RoundRobin(Protocol):
    """Base for protocols that send each message to one peer in turn (push, req).

    Keeps the pipes in attach order, a round-robin cursor, and a :class:`Signal` fired when pipes
    come or go; ``send`` takes the next pipe with room and waits (up to ``timeout``) when none has.
    """

    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._pipes: list["Pipe"] = []
        self._next = 0
        self._changed = Signal()
        self._closed = False

    def add_pipe(self, pipe: "Pipe") -> None:
        self._pipes.append(pipe)
        self._changed.fire()

    def remove_pipe(self, pipe: "Pipe") -> None:
        if pipe in self._pipes:
            self._pipes.remove(pipe)
            self._changed.fire()

    def send(self, msg: Message, timeout: float | None) -> None:
        pipes = self._pipes
        n = len(pipes)
        best_effort = self.best_effort
        if n:  # fast path: the next pipe in turn has room
            i = self._next % n
            if pipes[i].try_send(msg):
                self._next = i + 1
                return
            if n == 1 and timeout != 0 and not best_effort:
                # A full queue usually has its writer woken already: one turn of the loop lets it
                # drain, far cheaper than the full wait below (a select and a Signal per batch).
                gevent.sleep(0)
                if pipes and pipes[0].try_send(msg):
                    self._next = 1
                    return
        nxt = send_round_robin(pipes, self._next, msg, self._changed, timeout, best_effort,
                               lambda: self._closed)
        if nxt >= 0:
            self._next = nxt

    def close(self) -> None:
        self._closed = True
        self._changed.close()


class PipeMap(Protocol):
    """Base for protocols that address peers by pipe id or send to all of them (pub, bus, rep)."""

    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._pipes: dict[int, "Pipe"] = {}

    def add_pipe(self, pipe: "Pipe") -> None:
        self._pipes[pipe.id] = pipe

    def remove_pipe(self, pipe: "Pipe") -> None:
        self._pipes.pop(pipe.id, None)
