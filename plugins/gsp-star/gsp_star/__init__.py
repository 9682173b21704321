"""mangos' experimental STAR protocol for gsp (see README.md); public gsp SDK only."""

from __future__ import annotations

from typing import Any

import gsp
from gsp.message import Message
from gsp.options import Option, integer
from gsp.protocol import Inbox, PipeHandle, PipeMap, ProtocolSpec, SocketHandle, broadcast

__all__ = ["Star", "gsp_protocols", "STAR"]

STAR = 0x640  #: mangos' protocol number (major 100, minor 0)
_NO_HOPS = bytes(4)


class Star(PipeMap):
    """Every message goes to every peer; a received message is also forwarded to every other
    peer (hop count + 1, dropped at ``ttl``). Raw sockets see and give the 4-byte hop count."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats.update(dropped_queue_full=0, dropped_ttl=0, dropped_malformed=0)
        # mangos blocks the pipe's reader while the receive queue is full: back-pressure.
        self._inbox: Inbox[Message] = Inbox.for_option(handle, "block")
        self.recv_queue = self._inbox
        self._ttl: int = handle.options["ttl"]
        handle.watch("ttl", self._ttl_changed)

    def _ttl_changed(self, value: Any) -> None:
        self._ttl = value

    def _broadcast(self, msg: Message, skip: PipeHandle | None) -> None:
        # Star never waits for a peer: one whose queue stays full misses the message.
        self.stats["dropped_queue_full"] += broadcast(self.pipes.values(), msg, skip)

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        if len(data) < 4 or data[0] or data[1] or data[2]:
            self.stats["dropped_malformed"] += 1
            return
        if data[3] >= self._ttl:
            self.stats["dropped_ttl"] += 1
            return
        header = bytes((0, 0, 0, data[3] + 1))
        body = data[4:]
        self._broadcast(Message(body, header), pipe)
        self._inbox.put(Message(body, header if self.raw else b"", pipe), source=pipe)

    def send(self, msg: Message, timeout: float | None) -> None:
        if not self.pipes:
            self.check_no_peers()  # gsp.NoPeers with fail_no_peers; else it goes nowhere
        if not self.raw:
            msg = Message(msg.body, _NO_HOPS)
        elif len(msg.header) != 4:
            self.stats["dropped_malformed"] += 1
            return  # mangos drops a raw send without its hop-count header
        self._broadcast(msg, None)

    def recv(self, timeout: float | None) -> Message:
        return self._inbox.get(timeout)

    def close(self) -> None:
        self._inbox.close()


@gsp.hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    ttl = Option("ttl", 8, integer(1, 255, unit="hops"), "messages that made this many hops are dropped")
    return [ProtocolSpec("star", STAR, "star", STAR, Star, options={"ttl": ttl})]
