"""push/pull (pipeline): push load-balances over ready pullers; pull fair-queues its pushers."""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING

from .._errors import Closed
from .._message import Message
from .._registry import hookimpl
from ..chan import Chan
from ..protocol import Protocol, ProtocolSpec, RoundRobin

if TYPE_CHECKING:
    from .._pipe import Pipe
    from .._socket import Socket


class Push(RoundRobin):
    """Round-robin over pipes whose send queue has room; blocks when none has (or drops, with
    ``best_effort``)."""

    # Push messages have no header: the body itself is queued on the pipe (no Message made).
    send_body = RoundRobin.send

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        pass  # pullers never send; nng discards anything that arrives


class Pull(Protocol):
    """Each pipe's reader queues into one channel; FIFO waiting makes blocked pipes take turns.

    The channel holds ``(body, pipe)`` pairs: a tuple is far cheaper to make than a Message, and
    ``Socket.recv`` (through ``recv_body``) never needs one.
    """

    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._recvq: Chan = Chan(socket.get_option("recv_buffer"))
        # Socket.recv may pop the buffer directly: a reader blocked on a full channel is let in
        # by the next Chan.recv, which happens once the buffer is empty (nothing is lost, order
        # is kept, and with one thread the reader could not have run any sooner anyway).
        self.ready = self._recvq._buf

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        self._recvq.send((data, pipe))

    def pipe_recv_all(self, pipe: "Pipe", datas: list[bytes]) -> None:
        self._recvq.send_all(list(zip(datas, repeat(pipe))))

    def recv_body(self, timeout: float | None) -> bytes:
        try:
            return self._recvq.recv(timeout)[0]
        except Closed:
            raise Closed("socket closed") from None

    def recv(self, timeout: float | None) -> Message:
        try:
            data, pipe = self._recvq.recv(timeout)
        except Closed:
            raise Closed("socket closed") from None
        return Message(data, b"", pipe)

    def close(self) -> None:
        self._recvq.close()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec("push", 0x50, "pull", 0x51, Push),
        ProtocolSpec("pull", 0x51, "push", 0x50, Pull),
    ]
