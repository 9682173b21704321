"""bus: every message goes to every connected peer; nothing is forwarded (use a full mesh).

Send never blocks: a peer whose queue (``send_buffer``) is full misses the message. Receive queues
``recv_buffer`` messages and, like nng, drops new ones while full rather than push back. Both
kinds of drop count in ``stats["dropped"]``. No header travels on the wire. Raw sockets receive
the arriving pipe's id (u32 big-endian) as the header, and a raw send whose header starts with a
pipe id skips that pipe — so a bus device never echoes a message to where it came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import Closed
from .._message import Message
from .._registry import hookimpl
from ..protocol import Inbox, PipeMap, ProtocolSpec, broadcast

if TYPE_CHECKING:
    from .._pipe import Pipe
    from .._socket import Socket


class Bus(PipeMap):
    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._inbox = Inbox(socket.get_option("recv_buffer"), "drop_newest")
        self.stats["dropped"] = 0

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        header = pipe.id.to_bytes(4, "big") if self.raw else b""
        if not self._inbox.put(Message(data, header, pipe)):
            self.stats["dropped"] += 1

    def send(self, msg: Message, timeout: float | None) -> None:
        skip = None
        if not self.raw:
            out = msg if not msg.header else Message(msg.body)
        elif len(msg.header) >= 4:
            skip = self._pipes.get(int.from_bytes(msg.header[:4], "big"))
            out = Message(msg.body, msg.header[4:])  # the id is ours, not the peers' business
        else:
            out = msg
        self.stats["dropped"] += broadcast(self._pipes.values(), out, skip)

    def recv(self, timeout: float | None) -> Message:
        try:
            return self._inbox.get(timeout)
        except Closed:
            raise Closed("socket closed") from None

    def set_option(self, name: str, value: Any) -> None:
        if name == "recv_buffer":
            before = self._inbox.dropped
            self._inbox.resize(value)  # shrinking drops the oldest: count those too
            self.stats["dropped"] += self._inbox.dropped - before

    def close(self) -> None:
        self._inbox.close()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [ProtocolSpec("bus", 0x70, "bus", 0x70, Bus)]
