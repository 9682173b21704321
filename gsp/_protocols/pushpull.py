"""push/pull (pipeline): push load-balances over ready pullers; pull fair-queues its pushers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gevent

from .._errors import Closed
from .._message import Message
from .._registry import hookimpl
from ..chan import Chan
from ..protocol import Protocol, ProtocolSpec, Signal, send_round_robin

if TYPE_CHECKING:
    from .._pipe import Pipe
    from .._socket import Socket


class Push(Protocol):
    """Round-robin over pipes whose send queue has room; blocks when none has (or drops, with
    ``best_effort``)."""

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

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        pass  # pullers never send; nng discards anything that arrives

    def send(self, msg: Message, timeout: float | None) -> None:
        pipes = self._pipes
        n = len(pipes)
        if n:  # fast path: the next pipe in turn has room
            i = self._next % n
            if pipes[i].try_send(msg):
                self._next = i + 1
                return
            if n == 1 and timeout != 0 and not self.socket._options["best_effort"]:
                # A full queue usually has its writer woken already: one turn of the loop lets it
                # drain, far cheaper than the full wait below (a select and a Signal per batch).
                gevent.sleep(0)
                if pipes and pipes[0].try_send(msg):
                    self._next = 1
                    return
        nxt = send_round_robin(pipes, self._next, msg, self._changed, timeout,
                               self.socket._options["best_effort"], lambda: self._closed)
        if nxt >= 0:
            self._next = nxt

    def close(self) -> None:
        self._closed = True
        self._changed.close()


class Pull(Protocol):
    """Each pipe's reader queues into one channel; FIFO waiting makes blocked pipes take turns.

    The channel holds ``(body, pipe)`` pairs: a tuple is far cheaper to make than a Message, and
    ``Socket.recv`` (through ``recv_body``) never needs one.
    """

    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._recvq: Chan = Chan(socket.get_option("recv_buffer"))

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        self._recvq.send((data, pipe))

    def pipe_recv_all(self, pipe: "Pipe", datas: list[bytes]) -> None:
        self._recvq.send_all([(d, pipe) for d in datas])

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
