"""pair (v0): exactly one peer at a time; no header on the wire.

A second pipe is rejected while one is attached (raw or cooked). Raw sockets pass headers
through untouched: a header given to ``send_msg`` goes on the wire before the body, and everything
received arrives as the body. The receive queue (``recv_buffer``) pushes back on the peer when
full and can be resized at any time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import Closed
from .._message import Message
from .._registry import hookimpl
from ..chan import Send, select
from ..protocol import Deadline, Inbox, Protocol, ProtocolSpec, RejectPipe, Signal

if TYPE_CHECKING:
    from .._pipe import Pipe
    from .._socket import Socket


class Pair0(Protocol):
    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._pipe: "Pipe | None" = None
        self._recvq = Inbox(socket.get_option("recv_buffer"))  # blocks the reader when full
        self._changed = Signal()
        self._closed = False

    def add_pipe(self, pipe: "Pipe") -> None:
        if self._pipe is not None:
            raise RejectPipe("pair already has a peer")
        self._pipe = pipe
        self._changed.fire()

    def remove_pipe(self, pipe: "Pipe") -> None:
        if self._pipe is pipe:
            self._pipe = None
            self._changed.fire()

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
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
            if best_effort:
                return
            cases = [self._changed.case()]
            if pipe is not None:
                cases.append(Send(pipe.sendq, msg))
            try:
                i, _ = select(cases, deadline.remaining())
            except Closed:
                continue  # the pipe died while we waited
            if i == 1:
                return

    def recv(self, timeout: float | None) -> Message:
        try:
            return self._recvq.get(timeout)
        except Closed:
            raise Closed("socket closed") from None

    def set_option(self, name: str, value: Any) -> None:
        if name == "recv_buffer":
            self._recvq.resize(value)

    def close(self) -> None:
        self._closed = True
        self._recvq.close()
        self._changed.close()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [ProtocolSpec("pair", 0x10, "pair", 0x10, Pair0)]
