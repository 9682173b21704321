"""pub/sub: PUB broadcasts to every subscriber and never blocks; SUB keeps what its prefixes match.

Filtering happens on the SUB side (as in nng and mangos): PUB sends every message to every pipe.
PUB gives each pipe a queue of ``send_buffer`` messages and, when a slow subscriber lets it fill,
drops that pipe's oldest queued message for the new one (nng) — counted in
``stats["dropped_queue_full"]``
(a full queue first gets one yield, so peers that keep up lose nothing to a tight send loop).
A SUB queue (``recv_buffer``, resizable at any time) likewise drops its oldest message when full,
so a slow subscriber never pushes back on the publisher; those drops count in SUB's
``stats["dropped_queue_full"]``, and messages no subscription (the socket's or a context's)
matched in ``stats["dropped_no_subscriber"]``. ``sub.open_context()`` gives independent subscribers on one socket, each
with its own subscriptions and queue. Raw SUB sockets deliver everything and have no
subscriptions or contexts.
"""

from __future__ import annotations

from typing import Any

from ..chan import Recv
from ..errors import BadOption, NotSupported
from ..hookspecs import hookimpl
from ..message import Message
from ..options import integer
from ..protocol import (
    Inbox,
    Op,
    PipeHandle,
    PipeMap,
    Protocol,
    ProtocolContext,
    ProtocolSpec,
    SocketHandle,
    broadcast,
)


def _topic(prefix: Any) -> bytes:
    if isinstance(prefix, str):
        return prefix.encode("utf-8")
    if isinstance(prefix, (bytes, bytearray, memoryview)):
        return bytes(prefix)
    raise BadOption(f"a subscription is bytes or str, not {type(prefix).__name__}")


class Pub(PipeMap):
    send_never_waits = True  # a slow subscriber loses messages instead

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats["dropped_queue_full"] = 0

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        pipe.close()  # a SUB never sends; nng treats anything arriving as a protocol violation

    def send(self, msg: Message, timeout: float | None) -> None:
        self._publish(msg if self.raw and msg.header else msg.body)  # cooked: the body alone

    def send_body(self, body: bytes, timeout: float | None) -> None:
        self._publish(body)

    def _publish(self, out: "bytes | Message") -> None:
        # Never waits for a slow subscriber: its full queue loses its oldest message (nng).
        self.stats["dropped_queue_full"] += broadcast(self.pipes.values(), out, drop_oldest=True)


class _Subscriber:
    """Subscriptions plus a receive queue: the socket's own, or one context's."""

    __slots__ = ("topics", "inbox")

    def __init__(self, inbox: "Inbox[bytes]") -> None:
        self.topics: list[bytes] = []
        self.inbox = inbox

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
        self.inbox.filter(self.matches)


class _Subscribes:
    """``subscribe`` and ``unsubscribe`` of a SUB socket and of its contexts: each changes the
    subscriptions :meth:`_subscriber` gives (its own), once that checked it may."""

    __slots__ = ()

    def _subscriber(self) -> _Subscriber:
        raise NotImplementedError

    def subscribe(self, prefix: bytes | str) -> None:
        """Also receive messages whose body starts with ``prefix`` (b"" = all, str = UTF-8)."""
        self._subscriber().subscribe(prefix)

    def unsubscribe(self, prefix: bytes | str) -> None:
        """Drop a subscription (and queued messages only it matched); unknown → BadOption."""
        self._subscriber().unsubscribe(prefix)


class Sub(_Subscribes, Protocol):
    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self.stats.update(dropped_queue_full=0, dropped_no_subscriber=0)
        self._main = _Subscriber(
            Inbox.for_option(handle, "drop_oldest", self.stats, sources=True))
        self.ready_bodies = self._main.inbox.ready  # drop-oldest: no blocked putters to let in
        self.recv_queue = self._main.inbox
        self._contexts: list[SubContext] = []

    # Queues hold bare bodies and know their pipes by position (Inbox sources): no object per
    # message, and a Message only for recv_msg.
    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        self._deliver(pipe, [data], len(data))

    def pipe_recv_all(self, pipe: PipeHandle, datas: list[bytes]) -> None:
        self._deliver(pipe, datas, pipe.recv_batch_bytes)

    def _deliver(self, pipe: PipeHandle, datas: list[bytes], nbytes: int) -> None:
        main = self._main
        kept = 0  # messages the socket's own subscriptions matched
        if self.raw or b"" in main.topics:  # everything matches: no per-message test
            main.inbox.put_all(datas, nbytes, pipe)
            kept = len(datas)
        elif main.topics:
            mine = [d for d in datas if main.matches(d)]
            main.inbox.put_all(mine, None, pipe)
            kept = len(mine)
        subs = [ctx._sub for ctx in self._contexts if ctx._sub.topics]
        for sub in subs:
            sub.inbox.put_all([d for d in datas if sub.matches(d)], None, pipe)
        if kept < len(datas):  # count what no subscription took (per batch)
            if subs:
                subs.append(main)
                kept = sum(1 for d in datas if any(s.matches(d) for s in subs))
            self.stats["dropped_no_subscriber"] += len(datas) - kept

    def recv_body(self, timeout: float | None) -> bytes:
        return self._main.inbox.get(timeout)

    def recv(self, timeout: float | None) -> Message:
        data, pipe = self._main.inbox.get_from(timeout)
        return Message(data, b"", pipe)

    def recv_queue_depth(self) -> int:
        return len(self._main.inbox) + sum(len(ctx._sub.inbox) for ctx in self._contexts)

    def _subscriber(self) -> _Subscriber:
        if self.raw:
            raise NotSupported("raw sub sockets do not filter; they deliver every message")
        return self._main

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


class SubContext(_Subscribes, ProtocolContext):
    """An independent subscriber on a SUB socket: its own subscriptions and queue.

    Starts with no subscriptions (receives nothing) and the socket's ``recv_buffer`` and
    ``recv_timeout``; both can then be set per context. Closing the socket closes it.
    """

    __slots__ = ("_proto", "_sub")

    def __init__(self, proto: Sub) -> None:
        super().__init__(proto.handle)
        self._proto = proto
        self._sub = _Subscriber(
            Inbox(proto.handle.options["recv_buffer"], "drop_oldest", proto.stats, owner="context",
                  max_bytes=proto.handle.options["recv_buffer_size"], sources=True))

    @property
    def recv_buffer(self) -> int:
        return self._sub.inbox.capacity

    @recv_buffer.setter
    def recv_buffer(self, value: int) -> None:
        self._sub.inbox.resize(_check_buffer("recv_buffer", value))

    def _subscriber(self) -> _Subscriber:
        self._check_open()
        return self._sub

    def do_recv(self, timeout: float | None) -> Message:
        data, pipe = self._sub.inbox.get_from(timeout)
        return Message(data, b"", pipe)

    def do_poll(self, op: Op) -> bool:
        return self._sub.inbox.poll() if op == "recv" else super().do_poll(op)

    def do_wake_cases(self, op: Op) -> list[Recv]:
        return [self._sub.inbox.wake_case()] if op == "recv" else super().do_wake_cases(op)

    def on_close(self) -> None:
        if self in self._proto._contexts:
            self._proto._contexts.remove(self)
        self._sub.inbox.close()  # wakes blocked receivers with Closed


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return [
        ProtocolSpec("pub", 0x20, "sub", 0x21, Pub),
        ProtocolSpec("sub", 0x21, "pub", 0x20, Sub, methods=("subscribe", "unsubscribe")),
    ]
