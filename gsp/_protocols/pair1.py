"""pair (v1): pair with a hop-count header, and nng's optional polyamorous mode.

Wire header: one u32 big-endian hop count (<= 0xff). As in nng, a send puts the message's hop
count (0 for cooked sends) plus one on the wire, so a first hop arrives as 1. A received message
without a header, or with a hop count over 0xff, closes its pipe; one with more hops than the
``ttl`` option (1..255, default 8) is dropped (``stats["dropped_ttl"]``; a closed pipe's bad
header counts in ``stats["dropped_malformed"]``). Raw sockets see the hop
count as the 4-byte header and must send one (first three bytes 0, count < 0xff); cooked sockets
never see it.

Monogamous (default): a second pipe is rejected; send waits for the peer like pair v0.
Polyamorous (``polyamorous=True``, cooked only, settable only before any listen/dial): every
peer is accepted; ``send_msg(gsp.Message(body, pipe=p))`` goes to ``p`` (no pipe: the oldest
peer), never waits, and drops when that peer is gone (``stats["dropped_no_peer"]``) or its queue
is full (``stats["dropped_queue_full"]``); ``recv_msg().pipe`` tells who sent.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotSupported, ProtocolStateError
from ..hookspecs import hookimpl
from ..message import Message
from ..options import Option, boolean, integer
from ..protocol import Op, PipeHandle, ProtocolSpec, SocketHandle
from .pair import Pair0

_FIRST_HOP = (1).to_bytes(4, "big")  # a cooked send: hop count 0, plus the one the pipe adds


class Pair1(Pair0):
    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._ttl: int = handle.options["ttl"]
        self._poly: bool = handle.options["polyamorous"]
        if raw and self._poly:
            raise NotSupported("polyamorous pair1 has no raw mode (as in nng)")
        self._peers: dict[int, PipeHandle] = {}  # polyamorous mode only, oldest first
        self.stats.update(dropped_ttl=0, dropped_malformed=0, dropped_no_peer=0,
                          dropped_queue_full=0)
        handle.watch("ttl", self._ttl_changed)

    def _ttl_changed(self, value: int) -> None:
        self._ttl = value

    def set_option(self, name: str, value: Any) -> None:
        if name == "polyamorous" and value != self._poly:
            if self.raw and value:
                raise NotSupported("polyamorous pair1 has no raw mode (as in nng)")
            if self.handle.has_endpoints:
                raise ProtocolStateError("polyamorous can only change before any listen or dial")
            self._poly = value

    def add_pipe(self, pipe: PipeHandle) -> None:
        if self._poly:
            self._peers[pipe.id] = pipe
        else:
            super().add_pipe(pipe)

    def remove_pipe(self, pipe: PipeHandle) -> None:
        if self._poly:
            self._peers.pop(pipe.id, None)
        else:
            super().remove_pipe(pipe)

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        if pipe.closed:
            return  # closed below while the rest of its read batch was being delivered
        if len(data) < 4 or data[0] or data[1] or data[2]:
            self.stats["dropped_malformed"] += 1
            pipe.close()  # nng: a peer that breaks the header is not worth talking to
            return
        if data[3] > self._ttl:
            self.stats["dropped_ttl"] += 1
            return
        self._recvq.put(Message(data[4:], data[:4] if self.raw else b"", pipe), source=pipe)

    def poll(self, op: Op) -> bool:
        return op == "send" and self._poly or super().poll(op)  # poly sends never wait

    def send(self, msg: Message, timeout: float | None) -> None:
        if self.raw:
            h = msg.header
            if len(h) != 4 or h[0] or h[1] or h[2] or h[3] == 0xff:
                raise ProtocolStateError(
                    "raw pair1 sends need a 4-byte hop-count header below 0xff, "
                    f"got {bytes(h).hex() or 'none'}")
            out = Message(msg.body, bytes((0, 0, 0, h[3] + 1)), msg.pipe)
        else:
            out = Message(msg.body, _FIRST_HOP, msg.pipe)
        if not self._poly:
            super().send(out, timeout)
            return
        target = msg.pipe
        if target is None:
            target = next(iter(self._peers.values()), None)
        elif self._peers.get(target.id) is not target:
            target = None  # gone, or a pipe of another socket
        if target is None:
            if not self._peers:
                self.check_no_peers()  # NoPeers with fail_no_peers: nobody at all to send to
            self.stats["dropped_no_peer"] += 1
        elif not target.try_send(out):
            self.stats["dropped_queue_full"] += 1


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [ProtocolSpec("pair1", 0x11, "pair1", 0x11, Pair1, options={o.name: o for o in [
        Option("ttl", 8, integer(1, 255, unit="hops"), "most hops a received message may have made"),
        Option("polyamorous", False, boolean,
               "accept many peers, address each send by Message.pipe (before listen/dial only)"),
    ]})]
