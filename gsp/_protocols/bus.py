"""bus: every message goes to every connected peer; nothing is forwarded (use a full mesh).

Send never blocks: a peer whose queue (``send_buffer``) is full misses the message. Receive queues
``recv_buffer`` messages and, like nng, drops new ones while full rather than push back. Both
kinds of drop count in ``stats["dropped_queue_full"]``. No header travels on the wire. Raw sockets receive
the arriving pipe's id (u32 big-endian) as the header, and a raw send whose header starts with a
pipe id skips that pipe — so a bus device never echoes a message to where it came from.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..message import Message
from ..protocol import Inbox, PipeHandle, PipeMap, ProtocolSpec, SocketHandle, broadcast


class Bus(PipeMap):
    send_never_waits = True  # a peer whose queue is full misses the message

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats["dropped_queue_full"] = 0
        self._inbox: Inbox[Message] = Inbox.for_option(handle, "drop_newest", self.stats)
        self.recv_queue = self._inbox

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        header = pipe.id.to_bytes(4, "big") if self.raw else b""
        self._inbox.put(Message(data, header, pipe), source=pipe)  # fair across pipes

    def send(self, msg: Message, timeout: float | None) -> None:
        if not self.pipes:
            self.check_no_peers()  # NoPeers with fail_no_peers; else the message goes nowhere
        skip = None
        out: Message | bytes
        if not self.raw:
            out = msg.body
        elif len(msg.header) >= 4:
            skip = self.pipes.get(int.from_bytes(msg.header[:4], "big"))
            out = Message(msg.body, msg.header[4:])  # the id is ours, not the peers' business
        else:
            out = msg
        self.stats["dropped_queue_full"] += broadcast(self.pipes.values(), out, skip)

    def recv(self, timeout: float | None) -> Message:
        return self._inbox.get(timeout)

    def close(self) -> None:
        self._inbox.close()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [ProtocolSpec("bus", 0x70, "bus", 0x70, Bus)]
