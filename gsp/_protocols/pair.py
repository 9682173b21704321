"""pair (v0): exactly one peer at a time; no header on the wire.

A second pipe is rejected while one is attached (raw or cooked). Raw sockets pass headers
through untouched: a header given to ``send_msg`` goes on the wire before the body, and everything
received arrives as the body. The receive queue (``recv_buffer``) pushes back on the peer when
full and can be resized at any time.
"""

from __future__ import annotations

from ..chan import Recv, Send, select_channels
from ..errors import Closed
from ..hookspecs import hookimpl
from ..message import Message
from ..protocol import (
    ChangeNotice,
    Deadline,
    Inbox,
    Op,
    PipeHandle,
    Protocol,
    ProtocolSpec,
    RejectPipe,
    SocketHandle,
    send_wake_cases,
)


class Pair0(Protocol):
    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._pipe: PipeHandle | None = None
        self._recvq: Inbox[Message] = Inbox.for_option(handle, "block")  # blocks the reader
        self.recv_queue = self._recvq
        self._changed = ChangeNotice()
        self._closed = False

    def add_pipe(self, pipe: PipeHandle) -> None:
        if self._pipe is not None:
            raise RejectPipe("pair already has a peer")
        self._pipe = pipe
        self._changed.fire()

    def remove_pipe(self, pipe: PipeHandle) -> None:
        if self._pipe is pipe:
            self._pipe = None
            self._changed.fire()

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        self._recvq.put(Message(data, b"", pipe))

    def send(self, msg: Message, timeout: float | None) -> None:
        pipe = self._pipe
        if pipe is not None and pipe.try_send(msg):
            return
        best_effort = self.best_effort
        deadline = Deadline(timeout)
        while True:
            if self._closed:
                raise Closed("socket closed")
            pipe = self._pipe
            if pipe is not None and pipe.try_send(msg):
                return
            if pipe is None:
                self.check_no_peers()  # NoPeers with fail_no_peers, rather than wait for one
            if best_effort:
                return
            cases: list[Recv | Send] = [self._changed.case()]
            if pipe is not None:
                cases.append(Send(pipe.sendq, msg))
            try:
                i, _ = select_channels(cases, deadline.remaining())
            except Closed:
                continue  # the pipe died while we waited
            if i == 1:
                return

    def recv(self, timeout: float | None) -> Message:
        return self._recvq.get(timeout)

    def poll(self, op: Op) -> bool:
        if op == "recv":
            return super().poll(op)
        pipe = self._pipe
        return self._closed or self.best_effort or pipe is not None and pipe.has_room() \
            or pipe is None and self.handle.options["fail_no_peers"]  # (fails at once)

    def wake_cases(self, op: Op) -> list[Recv]:
        if op == "recv":
            return super().wake_cases(op)
        return send_wake_cases([] if self._pipe is None else [self._pipe], self._changed)

    def close(self) -> None:
        self._closed = True
        self._recvq.close()
        self._changed.close()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [ProtocolSpec("pair", 0x10, "pair", 0x10, Pair0)]
