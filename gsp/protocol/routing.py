"""Protocol bases and helpers for the two ways SP protocols route outgoing messages.

* :class:`RoundRobin` — each message to one peer in turn (push, req, star's raw twin...).
* :class:`PipeMap` — peers addressed by pipe id, or all of them (pub, bus, rep, respondent),
  with :func:`broadcast` to queue one message on every pipe without waiting on a slow peer.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import gevent

from ..chan import Chan, Outbox, Recv, Send, select_channels
from ..errors import Closed, GspError
from ..message import Message
from .interface import Op, PipeHandle, Protocol, SocketHandle
from .waiting import ChangeNotice, Deadline

__all__ = ["RoundRobin", "PipeMap", "broadcast", "send_wake_cases"]


def broadcast(pipes: Iterable[PipeHandle], msg: "Message | bytes", skip: PipeHandle | None = None,
              drop_oldest: bool = False) -> int:
    """Queue ``msg`` on every pipe but ``skip`` without waiting on a slow peer (pub, bus, star).

    If some queues are full, yield once so the writers of peers that keep up can drain theirs
    (a tight send loop would otherwise lose messages even to fast peers), then drop for pipes
    still full: the new message, or with ``drop_oldest`` that pipe's oldest queued one (nng PUB).
    Returns how many pipes missed a message. Raises nothing.
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
        if drop_oldest and _drop_oldest(p.sendq):
            p.try_send(msg)
    return missed


def _drop_oldest(q: "Chan[Any]") -> bool:
    """Drop the oldest message queued on ``q``: False if there is none (an :class:`Outbox`,
    a core pipe's queue, keeps its count of bytes queued right)."""
    if isinstance(q, Outbox):
        return q.drop_oldest()
    try:
        q.recv(block=False)
    except GspError:  # WouldBlock: none queued; Closed: the pipe is gone
        return False
    return True


class RoundRobin(Protocol):
    """Base for protocols that send each message to one peer in turn (push, raw req).

    Keeps the pipes in attach order, a round-robin cursor, and a :class:`gsp.protocol.inbox.queue.ChangeNotice`
    fired when pipes come or go; ``send`` takes the next pipe with room and waits (up to
    ``timeout``) when none has, or drops with ``best_effort``. Messages without a header are
    queued as bare bodies (``send_body``). A subclass that sends otherwise (a queue of its
    own, contexts) sends through :meth:`try_next` (never waits), :meth:`wait_next` (one wait)
    or :meth:`send_next` (both, until a pipe takes it): the one round robin.

    A subclass reads :attr:`pipes`, :attr:`cursor`, :attr:`changed` and :attr:`closed`, and
    keeps them up to date where it overrides the methods that change them.
    """

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        #: The attached pipes, in attach order (``add_pipe``/``remove_pipe`` keep it).
        self.pipes: list[PipeHandle] = []
        #: Where the next send starts looking: an index into :attr:`pipes` (modulo its length).
        self.cursor = 0
        #: Fired when pipes come or go, and closed by :meth:`close`: what a send waiting for a
        #: pipe selects on (:func:`send_wake_cases`).
        self.changed = ChangeNotice()
        #: Whether :meth:`close` was called (a waiting send then raises :class:`gsp.Closed`).
        self.closed = False

    def add_pipe(self, pipe: PipeHandle) -> None:
        self.pipes.append(pipe)
        self.changed.fire()

    def remove_pipe(self, pipe: PipeHandle) -> None:
        if pipe in self.pipes:
            self.pipes.remove(pipe)
            self.changed.fire()

    def send(self, msg: Message, timeout: float | None) -> None:
        self.send_body(msg if msg.header else msg.body, timeout)

    def send_body(self, msg: "Message | bytes", timeout: float | None) -> None:
        """Queue ``msg`` (a header-less body as plain ``bytes``) on the next pipe in turn."""
        if self.try_next(msg) is not None:
            return
        best_effort = self.best_effort
        if len(self.pipes) == 1 and timeout != 0 and not best_effort:
            # A full queue usually has its writer woken already: one turn of the loop lets it
            # drain, far cheaper than the full wait of send_next (a select and a ChangeNotice).
            gevent.sleep(0)
            if self.try_next(msg) is not None:
                return
        self.send_next(msg, timeout, best_effort, self.check_no_peers)

    # -- the round robin: what every sender of a RoundRobin protocol uses ---------------------
    def try_next(self, msg: "Message | bytes") -> PipeHandle | None:
        """Queue ``msg`` on the next pipe in turn that has room now (from :attr:`cursor`, wrapping
        around once) and move the cursor past it (one pipe alone takes no turn: the cursor
        stays). Returns that pipe, or None when no pipe has room (or there is none). Never
        waits, raises nothing."""
        pipes = self.pipes
        n = len(pipes)
        if n == 1:  # (the usual case: no turn to take)
            pipe = pipes[0]
            return pipe if pipe.try_send(msg) else None
        start = self.cursor
        for k in range(n):
            i = (start + k) % n
            pipe = pipes[i]
            if pipe.try_send(msg):
                self.cursor = i + 1
                return pipe
        return None

    def wait_next(self, msg: "Message | bytes", timeout: float | None,
                  closing: Recv | None = None) -> PipeHandle | None:
        """Wait up to ``timeout`` seconds for room on any pipe, or for :attr:`changed`; queue
        ``msg`` on the first pipe with room and return it (the cursor then points past it).
        None when something changed first (a pipe came or went, or died while waited on, or the
        protocol fired :attr:`changed`): look again. Raises :class:`gsp.Timeout`, and
        :class:`gsp.Closed` when ``closing`` (e.g. a context's
        :meth:`~gsp.context.Context.closing_case`) becomes ready."""
        snapshot = list(self.pipes)
        cases: list[Any] = [Send(p.sendq, msg) for p in snapshot]
        cases.append(self.changed.case())
        if closing is not None:
            cases.append(closing)
        try:
            i, _ = select_channels(cases, timeout)
        except Closed:
            return None  # a pipe died while we waited: look again
        n = len(snapshot)
        if i < n:
            pipe: PipeHandle = snapshot[i]
            if pipe in self.pipes:
                self.cursor = self.pipes.index(pipe) + 1
            return pipe
        if i > n:
            raise Closed("closed while sending")
        return None

    def send_next(self, msg: "Message | bytes", timeout: float | None, best_effort: bool,
                  no_peers: Callable[[], None] | None = None,
                  closing: Recv | None = None) -> PipeHandle | None:
        """Queue ``msg`` on the next pipe in turn with room (:meth:`try_next`), waiting for room
        on any pipe (:meth:`wait_next`) up to ``timeout`` seconds when none has. Returns the
        pipe used, or None when ``best_effort`` dropped it because no pipe had room now.

        Raises :class:`gsp.Timeout`; :class:`gsp.Closed` once :attr:`closed` (or ``closing``,
        as :meth:`wait_next`). Whenever there is no pipe at all it first calls ``no_peers``
        (:meth:`Protocol.check_no_peers`: :class:`gsp.NoPeers` with ``fail_no_peers`` set),
        before ``best_effort`` or the timeout."""
        deadline = Deadline(timeout)
        while True:
            if self.closed:
                raise Closed("socket closed")
            if not self.pipes and no_peers is not None:
                no_peers()
            pipe = self.try_next(msg)
            if pipe is not None:
                return pipe
            if best_effort:
                return None
            pipe = self.wait_next(msg, deadline.remaining(), closing)
            if pipe is not None:
                return pipe

    def poll(self, op: Op) -> bool:
        if op == "send":
            pipes = self.pipes
            return self.closed or self.best_effort or any(p.has_room() for p in pipes) \
                or not pipes and self.handle.options["fail_no_peers"]  # (fails at once)
        return super().poll(op)

    def wake_cases(self, op: Op) -> list[Recv]:
        if op == "send":
            return send_wake_cases(self.pipes, self.changed)
        return super().wake_cases(op)

    def close(self) -> None:
        self.closed = True
        self.changed.close()


def send_wake_cases(pipes: Iterable[PipeHandle], changed: ChangeNotice) -> list[Recv]:
    """What a send waiting for room on any of ``pipes`` wakes on: room on one of them, or
    ``changed`` (pipes came or went, the protocol closed). Raises nothing."""
    cases = [p.room_case() for p in pipes]
    cases.append(changed.case())
    return cases


class PipeMap(Protocol):
    """Base for protocols that address peers by pipe id or send to all of them (pub, bus, rep)."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        #: The attached pipes by id (``add_pipe``/``remove_pipe`` keep it).
        self.pipes: dict[int, PipeHandle] = {}

    def add_pipe(self, pipe: PipeHandle) -> None:
        self.pipes[pipe.id] = pipe

    def remove_pipe(self, pipe: PipeHandle) -> None:
        self.pipes.pop(pipe.id, None)
