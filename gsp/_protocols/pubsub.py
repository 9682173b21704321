"""pub/sub: PUB broadcasts to every subscriber and never blocks; SUB keeps what its prefixes match.

Filtering happens on the SUB side (as in nng and mangos): PUB sends every message to every pipe.
PUB gives each pipe a queue of ``send_buffer`` messages and, when a slow subscriber lets it fill,
drops that pipe's oldest queued message for the new one (nng) — counted in ``stats["dropped"]``
(a full queue first gets one yield, so peers that keep up lose nothing to a tight send loop).
A SUB queue (``recv_buffer``, resizable at any time) likewise drops its oldest message when full,
so a slow subscriber never pushes back on the publisher; those drops count in SUB's
``stats["dropped"]``. ``sub.open_context()`` gives independent subscribers on one socket, each
with its own subscriptions and queue. Raw SUB sockets deliver everything and have no
subscriptions or contexts.
"""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Any

from .._context import Context
from .._errors import BadOption, Closed, NotSupported
from .._message import Message
from .._registry import hookimpl
from ..protocol import Inbox, PipeMap, Protocol, ProtocolSpec, broadcast, integer

if TYPE_CHECKING:
    from .._pipe import Pipe
    from .._socket import Socket


def _topic(prefix: Any) -> bytes:
    if isinstance(prefix, str):
        return prefix.encode("utf-8")
    if isinstance(prefix, (bytes, bytearray, memoryview)):
        return bytes(prefix)
    raise BadOption(f"a subscription is bytes or str, not {type(prefix).__name__}")


class Pub(PipeMap):
    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self.stats["dropped"] = 0

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        pipe.close()  # a SUB never sends; nng treats anything arriving as a protocol violation

    def send(self, msg: Message, timeout: float | None) -> None:
        out = msg if self.raw or not msg.header else msg.body  # cooked: the body alone
        self.send_body(out, timeout)

    def send_body(self, body: "bytes | Message", timeout: float | None) -> None:
        # Never waits for a slow subscriber: its full queue loses its oldest message (nng).
        self.stats["dropped"] += broadcast(self._pipes.values(), body, drop_oldest=True)


class _Subscriber:
    """Subscriptions plus a receive queue: the socket's own, or one context's."""

    __slots__ = ("topics", "inbox")

    def __init__(self, capacity: int) -> None:
        self.topics: list[bytes] = []
        self.inbox = Inbox(capacity, "drop_oldest")

    def matches(self, body: bytes) -> bool:
        for t in self.topics:
            if body.startswith(t):  # b"" matches everything
                return True
        return False

    def subscribe(self, prefix: Any) -> None:
        t = _topic(prefix)
        if t not in self.topics:
            self.topics.append(t)

    def unsubscribe(self, prefix: Any) -> None:
        t = _topic(prefix)
        if t not in self.topics:
            raise BadOption(f"not subscribed to {t!r}")
        self.topics.remove(t)
        # Like nng: messages already queued that no remaining subscription matches go too.
        self.inbox.filter(lambda item: self.matches(item[0]))


class Sub(Protocol):
    def __init__(self, socket: "Socket", raw: bool) -> None:
        super().__init__(socket, raw)
        self._main = _Subscriber(socket.get_option("recv_buffer"))
        self.ready = self._main.inbox._buf  # drop-oldest: no blocked putters to let in
        self._contexts: list[SubContext] = []
        self.stats["dropped"] = 0

    # Queues hold (body, pipe) pairs: far cheaper than a Message, which only recv_msg needs.
    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        self.pipe_recv_all(pipe, [data])

    def pipe_recv_all(self, pipe: "Pipe", datas: list[bytes]) -> None:
        dropped = 0
        main = self._main
        if self.raw or b"" in main.topics:  # everything matches: no per-message test
            dropped += main.inbox.put_all(list(zip(datas, repeat(pipe))))
        elif main.topics:
            dropped += main.inbox.put_all([(d, pipe) for d in datas if main.matches(d)])
        for ctx in self._contexts:
            sub = ctx._sub
            if sub.topics:
                dropped += sub.inbox.put_all([(d, pipe) for d in datas if sub.matches(d)])
        if dropped:
            self.stats["dropped"] += dropped

    def recv_body(self, timeout: float | None) -> bytes:
        try:
            return self._main.inbox.get(timeout)[0]
        except Closed:
            raise Closed("socket closed") from None

    def recv(self, timeout: float | None) -> Message:
        try:
            data, pipe = self._main.inbox.get(timeout)
        except Closed:
            raise Closed("socket closed") from None
        return Message(data, b"", pipe)

    def _cooked(self) -> None:
        if self.raw:
            raise NotSupported("raw sub sockets do not filter; they deliver every message")

    def subscribe(self, prefix: Any) -> None:
        self._cooked()
        self._main.subscribe(prefix)

    def unsubscribe(self, prefix: Any) -> None:
        self._cooked()
        self._main.unsubscribe(prefix)

    def set_option(self, name: str, value: Any) -> None:
        if name == "recv_buffer":
            self._resize(self._main, value)

    def _resize(self, sub: _Subscriber, capacity: int) -> None:
        before = sub.inbox.dropped
        sub.inbox.resize(capacity)  # shrinking drops the oldest: count those too
        self.stats["dropped"] += sub.inbox.dropped - before

    def open_context(self) -> "SubContext":
        if self.raw:
            raise NotSupported("raw sockets have no contexts")
        ctx = SubContext(self)
        self._contexts.append(ctx)
        return ctx

    def close(self) -> None:
        self._main.inbox.close()
        for ctx in list(self._contexts):
            ctx.close()


_check_buffer = integer(1, 1 << 24)


class SubContext(Context):
    """An independent subscriber on a SUB socket: its own subscriptions and queue.

    Starts with no subscriptions (receives nothing) and the socket's ``recv_buffer`` and
    ``recv_timeout``; both can then be set per context. Closing the socket closes it.
    """

    def __init__(self, proto: Sub) -> None:
        super().__init__(proto.socket)
        self._proto = proto
        self._sub = _Subscriber(proto.socket.get_option("recv_buffer"))

    @property
    def recv_buffer(self) -> int:
        return self._sub.inbox.capacity

    @recv_buffer.setter
    def recv_buffer(self, value: int) -> None:
        self._proto._resize(self._sub, _check_buffer("recv_buffer", value))

    def subscribe(self, prefix: bytes | str) -> None:
        self._check_open()
        self._sub.subscribe(prefix)

    def unsubscribe(self, prefix: bytes | str) -> None:
        self._check_open()
        self._sub.unsubscribe(prefix)

    def _recv(self, timeout: float | None) -> Message:
        try:
            data, pipe = self._sub.inbox.get(timeout)
        except Closed:
            raise Closed("context is closed") from None
        return Message(data, b"", pipe)

    def _on_close(self) -> None:
        if self in self._proto._contexts:
            self._proto._contexts.remove(self)
        self._sub.inbox.close()  # wakes blocked receivers with Closed


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec("pub", 0x20, "sub", 0x21, Pub),
        ProtocolSpec("sub", 0x21, "pub", 0x20, Sub),
    ]
