"""scatter/gather — a task farm as a pair of gsp protocols (a gsp plugin; see README.md).

``scatter`` (0x7A0) hands each task it sends to one ``gather`` peer in turn and collects their
results with ``recv``, in the order they finish; many tasks may be out at once. It keeps every
task until its result is back, and when a gather peer leaves (crashed, killed, network gone)
before answering, it sends that peer's tasks again to the others (option ``redeliver``).
``gather`` (0x7A1) is a worker: ``recv`` a task, ``send`` its result.

Wire format: the same backtrace as req/rep (:mod:`gsp.protocol.backtrace`). Scatter puts a 4-byte task id
(big-endian, high bit set) in front of the task; gather sends the result back behind the same
4 bytes. Raw sockets see and give those header bytes (raw gather adds the pipe id in front, as
raw rep does), so :func:`gsp.device` can forward between a raw gather and a raw scatter.

This package uses only gsp's public plugin SDK (no ``gsp._*`` import).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gevent

import gsp
from gsp.chan import select_channels
from gsp.message import Message
from gsp.options import Option, boolean
from gsp.protocol import (
    MAX_HOPS,
    ChangeNotice,
    ContextHost,
    Deadline,
    IdMap,
    Inbox,
    PipeHandle,
    ProtocolContext,
    ProtocolSpec,
    RoundRobin,
    SocketHandle,
    reply,
    request_reply,
    split_backtrace,
    u32,
)

__all__ = [
    "SCATTER", "GATHER", "REDELIVER", "XScatter", "Scatter", "ScatterContext", "gsp_protocols",
]

SCATTER = 0x7A0  #: protocol numbers outside nng's (0x10..0x72) and mangos' star (0x640)
GATHER = 0x7A1

REDELIVER = Option("redeliver", True, boolean,
                   "send a task again to another gather peer when its peer leaves unanswered")


class XScatter(RoundRobin):
    """Raw scatter: ``send_msg`` puts header and body as given on one gather peer in turn
    (RoundRobin: waiting for room, or dropping with ``best_effort``); ``recv_msg`` returns each
    result with its backtrace (up to the first word with the high bit set) as the header. It
    keeps no task. Cooked scatter overrides :meth:`_deliver` to route results by task id."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats["discarded"] = 0
        # Results wait here for recv; a full queue blocks the pipe readers (back-pressure).
        self._results: Inbox[Message] = Inbox.for_option(handle, "block")

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        split = split_backtrace(data, MAX_HOPS)
        if split is None:  # no task id in it: garbage, dropped (the pipe stays)
            self.stats["discarded"] += 1
            return
        backtrace, body = split
        self._deliver(Message(body, backtrace, pipe))

    def _deliver(self, msg: Message) -> None:
        try:
            self._results.put(msg)
        except gsp.Closed:
            pass  # the socket is closing

    def recv(self, timeout: float | None) -> Message:
        try:
            return self._results.get(timeout)
        except gsp.Closed:
            raise gsp.Closed("socket closed") from None

    def outstanding(self) -> int:
        raise gsp.NotSupported("a raw scatter socket keeps no tasks")

    def close(self) -> None:
        super().close()
        self._results.close()


class _Task:
    """One task sent and not answered yet: registered in the socket's IdMap under ``id``."""

    __slots__ = ("id", "ctx", "msg", "pipe")

    def __init__(self, ctx: ScatterContext) -> None:
        self.ctx = ctx
        self.id = 0
        # The task as it goes on the wire (id, body), for resends: see gsp.protocol.reply.
        self.msg: Message | bytes = b""
        self.pipe: PipeHandle | None = None  # the pipe holding it; None while waiting for one


class ScatterContext(ProtocolContext):
    """One stream of tasks and their results. ``send`` a task (any number of them), ``recv``
    results of this context's tasks only, in the order they finish."""

    def __init__(self, proto: Scatter) -> None:
        super().__init__(proto.handle)
        self._proto = proto
        self._tasks: set[int] = set()  # ids of tasks out, not answered yet
        #: Results not received yet, ``(body, pipe)``; the socket's ``ready`` fast path for the
        #: default context: Socket.recv may pop it directly (see outstanding()).
        self.results: deque[tuple[bytes, Any]] = deque()
        self._arrived = ChangeNotice()

    def outstanding(self) -> int:
        """Tasks sent on this context whose results ``recv`` has not returned yet."""
        return len(self._tasks) + len(self.results)

    def do_send(self, msg: Message, timeout: float | None) -> None:
        proto = self._proto
        task = _Task(self)
        task.id = proto._ids.alloc(task)
        task.msg = reply(u32(task.id), msg.body)  # (the id in front: one bytes if small)
        self._tasks.add(task.id)
        try:
            pipe = proto.send_next(task.msg, timeout, proto.best_effort,
                                   closing=self.closing_case())
        except BaseException:  # Timeout, Closed, or the greenlet killed: the task never left
            self._forget(task.id)
            raise
        if pipe is None:  # best_effort and no peer had room: dropped
            self._forget(task.id)
            proto.stats["dropped_queue_full"] += 1
            return
        proto._placed(task, pipe)

    def _take(self, timeout: float | None) -> tuple[bytes, Any]:
        deadline: Deadline | None = None
        while True:
            if self.results:
                return self.results.popleft()
            if self.closed:
                raise gsp.Closed(f"{self.noun} closed")
            if deadline is None:
                deadline = Deadline(timeout)
            # remaining() raises gsp.Timeout (gsp.WouldBlock for timeout 0) once it has passed
            select_channels([self._arrived.case(), self.closing_case()], deadline.remaining())

    def do_recv(self, timeout: float | None) -> Message:
        body, pipe = self._take(timeout)
        return Message(body, b"", pipe)

    def _got(self, task_id: int, body: bytes, pipe: Any) -> None:
        self._tasks.discard(task_id)
        self.results.append((body, pipe))
        self._arrived.fire()

    def _forget(self, task_id: int) -> None:
        self._tasks.discard(task_id)
        self._proto._ids.pop(task_id)

    def on_close(self) -> None:
        for task_id in self._tasks:
            self._proto._ids.pop(task_id)  # a late result for one of them is discarded
        self._tasks.clear()
        self.results.clear()
        self._arrived.close()
        self._proto.forget(self)


class Scatter(ContextHost, XScatter):
    """Cooked scatter: tasks tracked by id until answered; contexts; redelivery."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats.update(dropped_queue_full=0, redelivered=0, lost=0)
        self._ids = IdMap()  # task id -> _Task, for every task out
        self._retry: deque[_Task] = deque()  # tasks whose peer left, waiting to go out again
        self._flusher: gevent.Greenlet | None = None
        self._redeliver: bool = handle.options["redeliver"]
        handle.watch("redeliver", self._redeliver_changed)
        self._main = ScatterContext(self)
        self.host_contexts(self._main)
        self.ready = self._main.results

    def _redeliver_changed(self, value: bool) -> None:
        self._redeliver = value

    def new_context(self) -> ScatterContext:
        return ScatterContext(self)

    def outstanding(self) -> int:
        """``sock.outstanding()``: tasks sent on the socket whose results are not received yet."""
        return self._main.outstanding()

    def recv_body(self, timeout: float | None) -> bytes:
        return self._main._take(timeout)[0]

    # -- results (called by XScatter.pipe_recv with the backtrace split off) --------------------
    def _deliver(self, msg: Message) -> None:
        h = msg.header
        task = self._ids.pop(int.from_bytes(h, "big")) if len(h) == 4 else None
        if task is None:  # not ours, or a task given up (its context closed): drop it
            self.stats["discarded"] += 1
            return
        task.ctx._got(task.id, msg.body, msg.pipe)

    # -- sending tasks: RoundRobin.send_next (the next gather peer in turn with room, waiting
    # for room on any of them, or for a peer to come) ---------------------------------------
    def _placed(self, task: _Task, pipe: PipeHandle) -> None:
        task.pipe = pipe
        if pipe.closed and self._ids.get(task.id) is task:
            self._lost(task)  # it died before remove_pipe could find the task on it

    def remove_pipe(self, pipe: PipeHandle) -> None:
        super().remove_pipe(pipe)
        for task in self._ids.owners():
            if task.pipe is pipe:
                self._lost(task)

    def _lost(self, task: _Task) -> None:
        """The peer holding ``task`` left before answering (must not block: see remove_pipe)."""
        task.pipe = None
        if self._redeliver and not self.closed:
            self.stats["redelivered"] += 1
            self._retry.append(task)
            if self._flusher is None:
                self._flusher = self.handle.spawn(self._flush)
        else:
            self.stats["lost"] += 1
            task.ctx._forget(task.id)

    def _flush(self) -> None:
        """Send the tasks of lost peers again, oldest first, as peers have room."""
        try:
            while self._retry and not self.closed:
                task = self._retry.popleft()
                if self._ids.get(task.id) is task:  # still wanted (its context is open)
                    pipe = self.send_next(task.msg, None, False)
                    if pipe is not None:
                        self._placed(task, pipe)
        except gsp.Closed:
            pass  # the socket is closing
        finally:
            self._flusher = None

    def close(self) -> None:
        self.closed = True
        self.close_contexts()  # wakes every blocked send and recv with gsp.Closed
        self._retry.clear()
        super().close()


@gsp.hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    # gather is rep's state machine (recv a task, send its one result; contexts; raw mode
    # for devices; ttl) under its own numbers: gsp.protocol.backtrace provides all of it.
    return request_reply("scatter", SCATTER, "gather", GATHER, XScatter, Scatter,
                         {"redeliver": REDELIVER}, methods=("outstanding",))
