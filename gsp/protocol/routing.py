"""Protocol bases and helpers for the two ways SP protocols route outgoing messages.

* :class:`RoundRobin` — each message to one peer in turn (push, req, star's raw twin...).
* :class:`PipeMap` — peers addressed by pipe id, or all of them (pub, bus, rep, respondent),
  with :func:`broadcast` to queue one message on every pipe without waiting on a slow peer.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import gevent

from ..chan import Recv, Send, select
from ..errors import Closed, GspError
from ..message import Message
from .interface import Op, PipeHandle, Protocol, SocketHandle
from .waiting import Deadline, Signal

__all__ = ["RoundRobin", "PipeMap", "broadcast", "send_round_robin", "send_wake_cases"]


def send_round_robin(pipes: list[PipeHandle], start: int, msg: "Message | bytes",
                     changed: Signal, timeout: float | None, best_effort: bool,
                     no_peers: Callable[[], None] | None = None) -> int:
    """Queue ``msg`` on the first pipe from ``start`` with room; wait if none has.

    Returns the index after the pipe used (the next round-robin start), or -1 when dropped
    because ``best_effort`` is set and no pipe could take it now. Waits for room on any pipe or
    for ``changed`` (a pipe came or went), up to ``timeout`` (:class:`gsp.Timeout`);
    :class:`gsp.Closed` once ``changed`` is closed (the protocol is closing). Whenever there is
    no pipe at all it first calls ``no_peers`` (:meth:`Protocol.check_no_peers`: it raises
    :class:`gsp.NoPeers` with ``fail_no_peers`` set), before ``best_effort`` or the timeout.
    """
    deadline = Deadline(timeout)
    while True:
        if changed.closed:
            raise Closed("socket closed")
        n = len(pipes)
        if not n and no_peers is not None:
            no_peers()
        for k in range(n):
            i = (start + k) % n
            if pipes[i].try_send(msg):
                return i + 1
        if best_effort:
            return -1
        left = deadline.remaining()
        snapshot = list(pipes)
        cases: list[Any] = [Send(p.sendq, msg) for p in snapshot]
        cases.append(changed.case())
        try:
            i, _ = select(cases, left)
        except Closed:
            continue  # a pipe died while we waited; look again
        if i < len(snapshot):
            return pipes.index(snapshot[i]) + 1 if snapshot[i] in pipes else start


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
        if drop_oldest:
            try:
                p.sendq.recv_nowait()
            except GspError:
                continue
            p.try_send(msg)
    return missed


class RoundRobin(Protocol):
    """Base for protocols that send each message to one peer in turn (push, raw req).

    Keeps the pipes in attach order, a round-robin cursor, and a :class:`gsp.protocol.inbox.queue.Signal`
    fired when pipes come or go; ``send`` takes the next pipe with room and waits (up to
    ``timeout``) when none has, or drops with ``best_effort``. Messages without a header are
    queued as bare bodies (``send_body``).

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
        self.changed = Signal()
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
        pipes = self.pipes
        n = len(pipes)
        best_effort = self.best_effort
        if n:  # fast path: the next pipe in turn has room
            i = self.cursor % n
            if pipes[i].try_send(msg):
                self.cursor = i + 1
                return
            if n == 1 and timeout != 0 and not best_effort:
                # A full queue usually has its writer woken already: one turn of the loop lets it
                # drain, far cheaper than the full wait below (a select and a Signal per batch).
                gevent.sleep(0)
                if pipes and pipes[0].try_send(msg):
                    self.cursor = 1
                    return
        if self.closed:
            raise Closed("socket closed")
        nxt = send_round_robin(pipes, self.cursor, msg, self.changed, timeout, best_effort,
                               self.check_no_peers)
        if nxt >= 0:
            self.cursor = nxt

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


def send_wake_cases(pipes: Iterable[PipeHandle], changed: Signal) -> list[Recv]:
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
