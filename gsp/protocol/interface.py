"""What a protocol plugin implements, and the two narrow handles through which it sees the core.

A protocol plugin returns :class:`ProtocolSpec` objects from its ``gsp_protocols`` hook. For every
socket, the core calls ``spec.factory(handle, raw)`` and talks to the result only through
:class:`Protocol`'s methods. The protocol, in turn, sees the socket only through a
:class:`SocketHandle` (options, spawning, pipe count) and each connection only through a
:class:`PipeHandle` (id, queueing a message, closing). Nothing else of the core is reachable.

The helpers a protocol builds on are the rest of this package (:mod:`gsp.protocol`), which
re-exports them all: :mod:`.routing`, :mod:`.backtrace` and :mod:`.replies`, :mod:`.inbox`,
:mod:`.waiting`; with :mod:`gsp.context` (contexts) and :mod:`gsp.options` (option specs).

Threading: everything here runs in greenlets of the one thread that owns the socket; no method
is called from another OS thread. Methods called from a pipe's reader greenlet (``pipe_recv``,
``pipe_recv_all``) may block to push back on a fast peer; ``add_pipe``/``remove_pipe`` and
``set_option`` must not block.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from .._overrides import overrides
from ..errors import Closed, GspError, NoPeers, NotSupported
from ..handles import LendingWait, Op, RecvQueue, SocketHandle, check_op
from ..message import Message, PipeHandle

if TYPE_CHECKING:

    from ..chan import Recv
    from ..context import ProtocolContext
    from ..options import Option

__all__ = ["overrides", "ProtocolSpec", "Protocol", "SocketHandle", "PipeHandle", "RejectPipe", "RecvQueue",
           "LendingWait", "Op", "check_op", "raw_or_cooked"]

class RejectPipe(GspError):
    """Raised by :meth:`Protocol.add_pipe` to refuse a pipe (e.g. pair already has its peer).

    The core closes the pipe quietly; a dialer whose pipe was rejected backs off and redials.
    """


class ProtocolSpec:
    """What the registry knows about one protocol: its name and number, its peer's, how to make
    an instance for a socket, the options it adds to sockets of it (name → Option), and the
    names of protocol methods sockets of it offer as their own (``methods``, e.g. SUB's
    ``("subscribe", "unsubscribe")``; on sockets of other protocols those names raise
    :class:`gsp.NotSupported`)."""

    def __init__(self, name: str, number: int, peer_name: str, peer_number: int,
                 factory: Callable[[SocketHandle, bool], "Protocol"],
                 options: "Mapping[str, Option] | None" = None,
                 methods: tuple[str, ...] = ()) -> None:
        self.name = name
        self.number = number
        self.peer_name = peer_name
        self.peer_number = peer_number
        self.factory = factory
        self.options: Mapping[str, Option] = dict(options or {})
        self.methods = tuple(methods)

    def __repr__(self) -> str:
        return f"<ProtocolSpec {self.name} 0x{self.number:x} peer={self.peer_name}>"


def raw_or_cooked(raw: Callable[[SocketHandle, bool], "Protocol"],
                  cooked: Callable[[SocketHandle, bool], "Protocol"],
                  ) -> Callable[[SocketHandle, bool], "Protocol"]:
    """The :attr:`ProtocolSpec.factory` of a protocol with a raw class and a cooked one (req,
    rep, surveyor...): it makes ``raw`` for a raw socket, else ``cooked``."""
    def factory(handle: SocketHandle, is_raw: bool) -> "Protocol":
        return (raw if is_raw else cooked)(handle, is_raw)
    return factory


class Protocol:
    """Base class for a protocol instance bound to one socket.

    Subclasses override what they support; ``send``/``recv``/``open_context`` default to raising
    :class:`gsp.NotSupported`. Blocking methods (``send``, ``recv``) take a ``timeout`` in seconds
    (``None`` = forever) and raise :class:`gsp.Timeout` when it passes (:class:`gsp.WouldBlock`
    for ``0``), :class:`gsp.Closed` once :meth:`close` ran, and what the protocol documents for
    its own states (:class:`gsp.ProtocolStateError`, :class:`gsp.ConnectionBroken`).

    Optional fast paths (declared here, each with a default that is always correct):

    * :attr:`ready` — a ``deque`` of ``(body, pipe)`` pairs from which ``Socket.recv`` pops the
      left end directly whenever it is not empty, without calling the protocol. Only for a queue
      whose items need no bookkeeping when removed (anything owed to a blocked producer is
      settled by the next :meth:`recv_body` call, which the socket makes once it is empty).
      :attr:`ready_bodies` is the same for a deque of bare bodies (a queue that knows each
      body's pipe by position, like ``Inbox(sources=True)``); a protocol sets one or the other.
    * :meth:`send_body` / :meth:`recv_body` — body-only forms of ``send``/``recv`` that a
      protocol overrides to skip making a :class:`gsp.Message`; the socket calls them only when
      overridden.
    * :meth:`pipe_recv_all` — a whole batch of messages from one pipe at once.

    Optional, for :func:`gsp.select` and :class:`gsp.Poller` over sockets: :meth:`poll` and
    :meth:`wake_cases`. Without them a protocol's sockets work everywhere but there (the
    defaults raise :class:`gsp.NotSupported`).

    Extra user-facing methods (SUB's ``subscribe``) are named in ``ProtocolSpec.methods``; the
    socket exposes them as its own and checks that it is open before calling them.
    """

    #: The optional hooks whose override gsp looks for (:func:`overrides`): the socket calls
    #: them only where a protocol overrides them.
    OPTIONAL_HOOKS = frozenset({"send_body", "recv_body", "pipe_recv_all"})

    #: See the class docstring; ``None`` = no direct receive queue.
    ready: "deque[tuple[bytes, Any]] | None" = None
    #: Like :attr:`ready`, but the deque holds bare bodies.
    ready_bodies: "deque[bytes] | None" = None
    #: The one queue ``recv`` takes from (a :class:`gsp.protocol.inbox.queue.Inbox`), if the protocol has
    #: one: then :meth:`poll`, :meth:`wake_cases` (for "recv") and :meth:`recv_queue_depth`
    #: follow it with no code of the protocol's own.
    recv_queue: "RecvQueue | None" = None
    #: True for a protocol whose ``send`` never waits (a peer that cannot take a message misses
    #: it: pub, bus, surveyor): :meth:`poll` ("send") is then always true.
    send_never_waits: bool = False

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        self.handle = handle
        self.raw = raw
        #: The socket's ``best_effort`` option, kept current (protocols read it on every send).
        self.best_effort: bool = handle.options["best_effort"]
        handle.watch("best_effort", self._best_effort_changed)
        #: The protocol's counters, merged into ``socket.stats`` (a snapshot). Drops are counted
        #: as ``dropped_<reason>`` (``queue_full``, ``no_subscriber``, ``ttl``, ``malformed``,
        #: ``no_peer``, or a reason of the protocol's own); the socket adds their total as
        #: ``dropped``. Other keys are the protocol's own events (docs/stats.md).
        self.stats: dict[str, int] = {}

    def _best_effort_changed(self, value: bool) -> None:
        self.best_effort = value

    # -- pipes (called by the core) ------------------------------------------------------------
    def add_pipe(self, pipe: PipeHandle) -> None:
        """A pipe finished its handshake (and the ``ATTACHING`` hooks let it in): start using it.
        Called from the greenlet that set the pipe up; must not block. Raise
        :class:`RejectPipe` to refuse it (the core closes it quietly; a dialer backs off); raise
        nothing else."""

    def remove_pipe(self, pipe: PipeHandle) -> None:
        """A pipe is gone (its queue is already closed): forget it, rescue what it carried.
        Called once per added pipe, by whoever ended it; must not block, raises nothing."""

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        """One message (header+body as received) arrived on ``pipe``. May block (back-pressure);
        raises nothing: a malformed message is dropped or closes ``pipe``."""

    def pipe_recv_all(self, pipe: PipeHandle, datas: list[bytes]) -> None:
        """Optional: several messages from ``pipe`` in arrival order, for a protocol that queues
        a batch in one go (``Inbox.put_all``). Same contract as :meth:`pipe_recv`: may block,
        raises nothing."""
        for data in datas:
            self.pipe_recv(pipe, data)

    def recv_queue_depth(self) -> int | None:
        """Messages waiting in the protocol's receive queue(s) now (contexts' included), shown as
        ``recv_queue`` in ``socket.stats``; ``None`` when it has no such queue or does not say
        (the default: the length of :attr:`recv_queue`, if set). Must not block or raise;
        called only when a user reads the stats."""
        q = self.recv_queue
        return None if q is None else len(q)

    def histograms(self) -> dict[str, dict[str, Any]]:
        """The protocol's histograms now, by name (each a
        :meth:`gsp.protocol.Histogram.snapshot`; e.g. req's ``request_rtt_seconds``), shown as
        ``Socket.histograms`` and exported by :mod:`gsp.prometheus`; ``{}`` by default. Must not
        block or raise; called only when a user reads them."""
        return {}

    # -- the user's calls (through the socket) -------------------------------------------------
    def send(self, msg: Message, timeout: float | None) -> None:
        """Send ``msg`` (raw: its ``header`` is the user's) from the user's greenlet, waiting up
        to ``timeout`` seconds (None: no limit; 0: do not wait). Raises :class:`gsp.Timeout`
        (:class:`gsp.WouldBlock` for 0), :class:`gsp.Closed` (the socket closed meanwhile),
        :class:`gsp.NoPeers` (:meth:`check_no_peers`) and the protocol's state errors
        (:class:`gsp.ProtocolStateError`). The default raises :class:`gsp.NotSupported`: a
        protocol that cannot send leaves it alone (:meth:`can` sees that)."""
        raise NotSupported(f"{self.handle.protocol} sockets cannot send")

    def send_body(self, body: bytes, timeout: float | None) -> None:
        """Optional: ``send(Message(body), timeout)``; override to avoid making the Message.
        Must behave exactly as that, and raises as :meth:`send`."""
        self.send(Message(body), timeout)

    def recv(self, timeout: float | None) -> Message:
        """Receive one :class:`gsp.Message` in the user's greenlet (cooked: ``header`` empty; its
        ``pipe`` set), waiting up to ``timeout`` seconds. Raises as :meth:`send`; the default
        raises :class:`gsp.NotSupported` (a protocol that cannot receive)."""
        raise NotSupported(f"{self.handle.protocol} sockets cannot receive")

    def recv_body(self, timeout: float | None) -> bytes:
        """Optional: ``recv(timeout).body``; override to avoid making the Message. Must behave
        exactly as that, and raises as :meth:`recv`."""
        return self.recv(timeout).body

    def open_context(self) -> "ProtocolContext":
        """A new :class:`gsp.protocol.ProtocolContext` of this socket (the user's ``open_context``). Must
        not block. Raises :class:`gsp.Closed` once closed; the default raises
        :class:`gsp.NotSupported` (no contexts; :class:`gsp.protocol.ContextHost` implements it)."""
        raise NotSupported(f"{self.handle.protocol} sockets have no contexts")

    # -- readiness (optional: gsp.select and gsp.Poller over sockets) ---------------------------
    def poll(self, op: Op) -> bool:
        """Whether ``op`` called now with timeout 0 would not raise :class:`gsp.WouldBlock`: it
        would complete, or fail at once (closed socket, wrong state). Never blocks. A true
        answer may turn out wrong (select then waits on :meth:`wake_cases`); a false one must
        not be wrong while every wake case is idle. An operation the protocol does not offer
        answers True (it fails at once with :class:`gsp.NotSupported`). The default answers
        from :attr:`recv_queue` and :attr:`send_never_waits` when they are set."""
        if not self.can(op) or op == "send" and self.send_never_waits:
            return True
        if op == "recv" and self.recv_queue is not None:
            return self.recv_queue.poll()
        raise NotSupported(f"{self.handle.protocol} sockets cannot be polled or selected on "
                           f"for {op} (the protocol does not implement Protocol.poll)")

    def wake_cases(self, op: Op) -> "list[Recv]":
        """Select cases that become ready when :meth:`poll` may turn true: a message arrived, a
        queue got room, a pipe came or went, the socket or a state changed. Called right after
        :meth:`poll` said False; a case that is ready for good must go with a true poll. Never
        blocks. The default answers from :attr:`recv_queue` and :attr:`send_never_waits`, else
        raises :class:`gsp.NotSupported` (as :meth:`poll`)."""
        if not self.can(op) or op == "send" and self.send_never_waits:
            return []
        if op == "recv" and self.recv_queue is not None:
            return [self.recv_queue.wake_case()]
        raise NotSupported(f"{self.handle.protocol} sockets cannot be polled or selected on "
                           f"for {op} (the protocol does not implement Protocol.wake_cases)")

    def check_no_peers(self, op: str = "send") -> None:
        """Call where ``op`` found no pipe at all and would wait for one (or drop for want of
        one): raises :class:`gsp.NoPeers` when the socket's ``fail_no_peers`` option is set,
        else returns and the caller waits (or drops) as before. It reads the option: call it on
        the waiting path only, never per message."""
        if self.handle.options["fail_no_peers"]:
            raise NoPeers(f"{op}: no peer is connected to this {self.handle.protocol} socket "
                          "(fail_no_peers=True; unset it to wait for one)")

    def set_option(self, name: str, value: Any) -> None:
        """``socket.set_option`` is about to store this validated value: raise
        :class:`gsp.BadOption` or :class:`gsp.ProtocolStateError` to refuse it. To react to a
        change after it is stored, use ``handle.watch``."""

    def drain(self, timeout: float | None) -> None:
        """:meth:`gsp.Socket.drain` began: take no new work from now on, and return once the work
        already taken is finished, or raise :class:`gsp.Timeout` after ``timeout`` seconds
        (``None``: as long as it takes). Called once, in the draining greenlet, after the socket
        stopped its listeners and dialers and turned its send fast paths off (every send now
        calls this instance's ``send``); the socket then waits for the pipes' send queues to
        empty and closes, also when this raises. Blocked calls may be woken with
        :class:`gsp.Closed`; a concurrent ``close()`` ends it (the protocol's :meth:`close`
        runs).

        The default refuses every send from now on with :class:`gsp.Closed` (it gives this
        instance a subclass of its class whose ``send`` and ``send_body`` refuse: nothing else
        changes, :meth:`can` included), leaves receiving alone and waits for nothing:
        right for a protocol that owes no peer an answer (push, pub, pair, bus...). REQ also
        refuses new requests but lets those out get their replies, and waits until they are
        received; REP and respondent take no new request and wait until every context answered
        the one it holds (docs/architecture.md, "Draining")."""
        self.__class__ = _refusing_sends(type(self))

    def close(self) -> None:
        """The socket is closing (called once, before its pipes close): wake every blocked
        send/recv, the contexts' too, with :class:`gsp.Closed`. Must not block; raises
        nothing."""

    @classmethod
    def can(cls, op: str) -> bool:
        """Whether this protocol implements ``op`` ("send" or "recv") at all: whether it
        overrides :meth:`send`/:meth:`recv` (``gsp.device`` asks). Raises nothing."""
        return getattr(cls, op) is not getattr(Protocol, op)


class _RefusingSends(Protocol):
    """What :meth:`Protocol.drain` puts in front of a protocol's class: every send refused."""

    __slots__ = ()
    #: The class it refuses the sends of (its :meth:`can` is the answer).
    refused: "type[Protocol]" = Protocol

    def send(self, msg: Message, timeout: float | None) -> None:
        raise Closed(f"{self.handle.protocol} socket is draining: it sends nothing new")

    def send_body(self, body: bytes, timeout: float | None) -> None:
        self.send(Message(body), timeout)

    @classmethod
    def can(cls, op: str) -> bool:
        return cls.refused.can(op)


_REFUSING: "dict[type[Protocol], type[Protocol]]" = {}


def _refusing_sends(cls: "type[Protocol]") -> "type[Protocol]":
    """``cls`` with every send refused (:class:`gsp.Closed`): the class :meth:`Protocol.drain`
    gives a protocol from then on (one per class, made on first use)."""
    if issubclass(cls, _RefusingSends):
        return cls  # (drained already)
    sub = _REFUSING.get(cls)
    if sub is None:
        sub = _REFUSING[cls] = cast("type[Protocol]", type(
            f"Draining{cls.__name__}", (_RefusingSends, cls),
            {"__slots__": (), "__module__": cls.__module__, "refused": cls}))
    return sub
