"""mangos' experimental STAR protocol for gsp (see README.md); public gsp API only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gsp
from gsp.protocol import Inbox, Message, Option, Protocol, ProtocolSpec, broadcast, integer

if TYPE_CHECKING:
    from gsp import Pipe, Socket

__all__ = ["Star", "gsp_protocols", "STAR"]

STAR = 0x640  #: mangos' protocol number (major 100, minor 0)
_NO_HOPS = bytes(4)


class Star(Protocol):
    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._pipes: dict[int, "Pipe"] = {}
        # mangos blocks the pipe's reader while the receive queue is full: back-pressure.
        self._inbox = Inbox(socket.get_option("recv_buffer"))
        self._ttl: int = socket.get_option("ttl")
        self.stats.update(dropped=0, ttl_dropped=0, malformed=0)

    def set_option(self, name: str, value: Any) -> None:
        if name == "ttl":
            self._ttl = value
        elif name == "recv_buffer":
            self._inbox.resize(value)

    def add_pipe(self, pipe: "Pipe") -> None:
        self._pipes[pipe.id] = pipe

    def remove_pipe(self, pipe: "Pipe") -> None:
        self._pipes.pop(pipe.id, None)

    def _broadcast(self, msg: Message, skip: "Pipe | None") -> None:
        # Star never waits for a peer: one whose queue stays full misses the message.
        self.stats["dropped"] += broadcast(self._pipes.values(), msg, skip)

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        if len(data) < 4 or data[0] or data[1] or data[2]:
            self.stats["malformed"] += 1
            return
        if data[3] >= self._ttl:
            self.stats["ttl_dropped"] += 1
            return
        header = bytes((0, 0, 0, data[3] + 1))
        body = data[4:]
        self._broadcast(Message(body, header), pipe)
        self._inbox.put(Message(body, header if self.raw else b"", pipe))

    def send(self, msg: Message, timeout: float | None) -> None:
        if not self.raw:
            msg = Message(msg.body, _NO_HOPS)
        elif len(msg.header) != 4:
            self.stats["malformed"] += 1
            return  # mangos drops a raw send without its hop-count header
        self._broadcast(msg, None)

    def recv(self, timeout: float | None) -> Message:
        try:
            return self._inbox.get(timeout)
        except gsp.Closed:
            raise gsp.Closed("socket closed") from None

    def close(self) -> None:
        self._inbox.close()


@gsp.hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    ttl = Option("ttl", 8, integer(1, 255), "messages that made this many hops are dropped")
    return [ProtocolSpec("star", STAR, "star", STAR, Star, options={"ttl": ttl})]
