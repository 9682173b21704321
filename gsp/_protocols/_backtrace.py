"""Machinery shared by the two request/reply-shaped protocol pairs (req/rep, surveyor/respondent).

Both carry a *backtrace* in front of the body: 4-byte big-endian words, the last of which (the
request or survey id) has its high bit set, and every word before it a pipe id pushed by a raw
rep/respondent (a device hop). Responders (rep, respondent) pop the backtrace, remember it, and
send it back in front of the reply; raw responders prepend the receiving pipe's id so a reply can
be routed back by :meth:`XResponder.send`.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Callable

from gevent import get_hub

from .._context import Context, ContextHost
from .._errors import Closed, ProtocolStateError
from .._message import Message
from .._options import Option, integer
from ..chan import CLOSED, Chan, Recv, Send, select
from ..protocol import Deadline, PipeMap, Protocol

if TYPE_CHECKING:
    from .._pipe import Pipe
    from .._socket import Socket

HIGH_BIT = 0x80000000
#: Most words a requester-side raw socket will parse out of a reply (no ttl applies there).
MAX_HOPS = 255

TTL_OPTION = Option("ttl", 8, integer(1, 255),
                    "most backtrace words (hops) a request may carry before it is dropped")


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def split_backtrace(data: bytes, max_words: int) -> tuple[bytes, bytes] | None:
    """Split ``data`` into ``(backtrace, body)``: 4-byte words up to and including the first one
    with the high bit set. ``None`` when no such word lies within ``max_words`` words (garbage,
    or a message that went through too many hops)."""
    off = 0
    end = len(data)
    for _ in range(max_words):
        if off + 4 > end:
            return None
        hit = data[off] & 0x80
        off += 4
        if hit:
            return data[:off], data[off:]
    return None


class IdMap:
    """Request/survey ids of one socket: 31 random-start bits with the high bit set, each mapped
    to the context waiting for it. Ids of requests still outstanding are never reused."""

    def __init__(self) -> None:
        self._next = random.getrandbits(31)
        self._live: dict[int, Any] = {}

    def alloc(self, owner: Any) -> int:
        while True:
            rid = self._next | HIGH_BIT
            self._next = (self._next + 1) & 0x7FFFFFFF
            if rid not in self._live:
                self._live[rid] = owner
                return rid

    def get(self, rid: int) -> Any:
        return self._live.get(rid)

    def pop(self, rid: int) -> Any:
        return self._live.pop(rid, None)

    def owners(self) -> list[Any]:
        return list(self._live.values())


def call_later(seconds: float, fn: Callable[..., None], *args: Any) -> Any:
    """Run ``fn(*args)`` in the hub after ``seconds``; ``.close()`` the result to cancel.

    A loop timer rather than a greenlet: nothing to kill or join, and ``fn`` must not block.
    """
    t = get_hub().loop.timer(seconds)
    t.start(fn, *args)
    return t


class RecvQueue:
    """A socket's receive queue: a bounded :class:`Chan` that can be resized (``recv_buffer``)
    while greenlets wait on it, and whose ``get`` selects on extra cases (a context closing).

    Resizing swaps in a new channel and closes the old one; whoever was blocked on the old one
    wakes and retries on the new one. Shrinking drops the oldest messages that no longer fit.
    """

    def __init__(self, capacity: int) -> None:
        self._chan = Chan(capacity)
        self._closed = False

    def put(self, item: Any) -> None:
        """Queue ``item``, waiting for room (back-pressure); :class:`gsp.Closed` once closed."""
        while True:
            ch = self._chan
            try:
                ch.send(item)
                return
            except Closed:
                if self._closed:
                    raise
                # resized while we waited: retry on the new channel

    def get(self, timeout: float | None, *extra: Recv) -> tuple[int, Any]:
        """``(0, item)``, or ``(k, value)`` when ``extra[k - 1]`` fired first."""
        deadline = Deadline(timeout)
        left = timeout
        while True:
            ch = self._chan
            i, v = select([Recv(ch), *extra], left)
            if i or v is not CLOSED:
                return i, v
            if self._closed:
                raise Closed("socket closed")
            left = deadline.remaining()  # resized under us: wait on the new channel

    def resize(self, capacity: int) -> None:
        old, new = self._chan, Chan(capacity)
        items = old.drain(1 << 62)  # also completes senders blocked on the old channel
        for item in items[max(0, len(items) - capacity):]:
            new.send_nowait(item)
        self._chan = new
        old.close()

    def close(self) -> None:
        self._closed = True
        self._chan.close()


# -- responders: rep and respondent -------------------------------------------------------------
class XResponder(PipeMap):
    """Raw rep/respondent: receive puts ``<pipe id><backtrace>`` in the header; send routes by the
    header's first word (the pipe id), strips it, and sends the rest of the header back."""

    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._recvq = RecvQueue(socket.get_option("recv_buffer"))
        self._closing = Chan()  # closed with the socket: a select case that wakes blocked sends
        self._closed = False

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        split = split_backtrace(data, self.socket._options["ttl"])
        if split is None:
            # Garbage or too many hops: drop it but keep the pipe, since devices can legitimately
            # forward over-ttl messages (nng closes the pipe only for the former).
            return
        backtrace, body = split
        try:
            self._recvq.put(Message(body, u32(pipe.id) + backtrace, pipe))  # blocks: back-pressure
        except Closed:
            pass  # socket closing

    def recv(self, timeout: float | None) -> Message:
        return self._recvq.get(timeout)[1]

    def set_option(self, name: str, value: Any) -> None:
        if name == "recv_buffer":
            self._recvq.resize(value)

    def send(self, msg: Message, timeout: float | None) -> None:
        self._route(msg.header, msg.body, timeout, self._closing)

    def _route(self, header: bytes, body: bytes, timeout: float | None, closing: Chan) -> None:
        """Send ``body`` back along ``header`` (pipe id + backtrace), waiting for room on that pipe
        up to ``timeout`` (dropping at once with ``best_effort``). A missing header, an unknown pipe
        or one that dies while we wait drops the reply silently: the requester resends."""
        if len(header) < 4:
            return
        pipe = self._pipes.get(int.from_bytes(header[:4], "big"))
        if pipe is None:
            return
        out = Message(body, header[4:])
        if pipe.try_send(out) or self.best_effort:
            return
        try:
            i, _ = select([Send(pipe.sendq, out), Recv(closing)], timeout)
        except Closed:
            return  # the pipe closed while we waited
        if i == 1:
            raise Closed("closed while sending")

    def close(self) -> None:
        self._closed = True
        self._recvq.close()
        self._closing.close()


class ResponderContext(Context):
    """One rep/respondent state machine: ``recv`` a request, then ``send`` its one reply."""

    def __init__(self, proto: "Responder") -> None:
        super().__init__(proto.socket)
        self._proto = proto
        self._route: bytes | None = None  # pipe id + backtrace of the request being answered
        self._receiving = False

    def _recv(self, timeout: float | None) -> Message:
        if self._receiving:
            raise ProtocolStateError("another recv is already waiting on this context")
        self._route = None  # a new recv abandons an unanswered request, as in nng
        self._receiving = True
        try:
            i, m = self._proto._recvq.get(timeout, self.closing_case())
        finally:
            self._receiving = False
        if i or self._closed:
            raise Closed("context closed" if self._closed else "socket closed")
        self._route = m.header
        return Message(m.body, b"", m.pipe)

    def _send(self, msg: Message, timeout: float | None) -> None:
        route = self._route
        if route is None:
            raise ProtocolStateError(
                f"{self.socket.protocol} can only send a reply to a request it received")
        self._route = None  # one reply per request, even if this send times out
        self._proto._route(route, msg.body, timeout, self._closing)

    def _on_close(self) -> None:
        self._route = None
        self._proto._contexts.discard(self)


class Responder(ContextHost, XResponder):
    """Cooked rep/respondent: the raw routing plus a reply state machine per context."""

    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._host_contexts(ResponderContext(self))

    def _new_context(self) -> ResponderContext:
        return ResponderContext(self)

    def close(self) -> None:
        super().close()
        self._close_contexts()


def responder(socket: "Socket", raw: bool) -> Protocol:
    """Factory for rep and respondent: the wire behaviour is identical, only the numbers differ."""
    return XResponder(socket, raw) if raw else Responder(socket, raw)
