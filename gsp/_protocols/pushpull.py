"""push/pull (pipeline): push load-balances over ready pullers; pull fair-queues its pushers."""

from __future__ import annotations

from ..chan import FLUSH
from ..errors import Closed
from ..hookspecs import hookimpl
from ..message import Message
from ..protocol import Inbox, PipeHandle, Protocol, ProtocolSpec, RoundRobin, SocketHandle


class Push(RoundRobin):
    """Round-robin over pipes whose send queue has room; blocks when none has (or drops, with
    ``best_effort``). Messages have no header: the body itself is queued on the pipe.

    A pipe that ends (its connection broke, ``tcp_user_timeout`` ended it, its peer hung up, or
    it was closed) hands what it still had queued, never written, back to the round robin: the
    other pipes take it (``stats["requeued"]``), at once where they have room, else as soon as
    they do. What was written into its connection goes with it (at most once, as nng). Only
    the socket's close drops a queue (after ``linger``)."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats["requeued"] = 0

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        pass  # pullers never send; nng discards anything that arrives

    # With one puller, a send is "queue it on that pipe if it has room": the socket may do that
    # itself before calling send_body (which then handles a full queue as ever).
    def add_pipe(self, pipe: PipeHandle) -> None:
        super().add_pipe(pipe)
        self._direct()

    def remove_pipe(self, pipe: PipeHandle) -> None:
        super().remove_pipe(pipe)
        self._direct()
        if not self.closed:
            self._requeue(pipe)

    def _requeue(self, pipe: PipeHandle) -> None:
        """Hand what ``pipe`` (gone) had queued and not written to the other pipes. The core
        calls remove_pipe before it closes the queue, so it is all still there (with whatever
        a send waiting for room on it put in while being drained: that send returned, so its
        message is due too)."""
        unsent = [m for m in pipe.sendq.drain(1 << 30) if m is not FLUSH]
        if not unsent:
            return
        self.stats["requeued"] += len(unsent)
        for i, msg in enumerate(unsent):
            if self.try_next(msg) is None:  # no room now: the rest waits for room, in order
                self.handle.spawn(self._requeue_later, unsent[i:])
                return

    def _requeue_later(self, msgs: "list[Message | bytes]") -> None:
        try:
            for msg in msgs:
                self.send_next(msg, None, False)
        except Closed:
            pass  # the socket closed: its queues are dropped, these with them

    def _direct(self) -> None:
        pipes = self.pipes
        self.handle.send_direct(pipes[0].try_send if len(pipes) == 1 else None)


class Pull(Protocol):
    """Every pipe's reader queues into one receive queue that pushes back when full; blocked
    readers are let in first come, first served, so pipes take turns.

    The queue holds bare bodies and knows each one's pipe by position (``sources=True``): no
    object per message beyond the body. It is the protocol's ``ready_bodies`` deque, popped by
    ``Socket.recv`` directly; only ``recv_msg`` asks which pipe a body came from.
    """

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._recvq: Inbox[bytes] = Inbox.for_option(handle, "block", sources=True)
        self.ready_bodies = self._recvq.ready
        self.recv_queue = self._recvq

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        self._recvq.put(data, None, len(data), pipe)

    def pipe_recv_all(self, pipe: PipeHandle, datas: list[bytes]) -> None:
        self._recvq.put_all(datas, pipe.recv_batch_bytes, pipe)

    def recv_body(self, timeout: float | None) -> bytes:
        return self._recvq.get(timeout)

    def recv(self, timeout: float | None) -> Message:
        data, pipe = self._recvq.get_from(timeout)
        return Message(data, b"", pipe)

    def close(self) -> None:
        self._recvq.close()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec("push", 0x50, "pull", 0x51, Push),
        ProtocolSpec("pull", 0x51, "push", 0x50, Pull),
    ]
