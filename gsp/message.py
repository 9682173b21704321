"""Messages: :class:`Message` (a header and a body) and the :class:`PipeHandle` a protocol sends
them through.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chan import Chan, Recv

__all__ = ["JOIN_MAX", "Message", "PipeHandle", "as_bytes", "message_bytes"]

#: A protocol queues a message whose body is at most this big as one ``bytes``, header and body
#: joined (a copy this small costs less than the Message, and the write then joins nothing);
#: a bigger one as a :class:`Message`, so that its body is never copied.
JOIN_MAX = 4096


class PipeHandle(typing.Protocol):
    """A protocol's view of one connection (the core's ``gsp.Pipe`` implements it).

    Invariant: once ``closed`` is true it stays true, ``try_send`` returns False and ``send``
    raises :class:`gsp.Closed`; the protocol's ``remove_pipe`` has been or is being called.
    """

    @property
    def id(self) -> int:
        """A non-zero 31-bit id, unique among the live pipes of this process."""

    @property
    def closed(self) -> bool:
        """True once the pipe is gone (closed by either side or by the core)."""

    def try_send(self, msg: "Message | bytes") -> bool:
        """Queue ``msg`` if there is room now; False when the queue is full or the pipe closed.
        Never blocks, never raises."""

    @property
    def recv_batch_bytes(self) -> int:
        """The bytes (headers and bodies) of the messages the pipe is handing to
        :meth:`Protocol.pipe_recv_all` now: a receive queue bounded in bytes takes them from
        here (``Inbox.put_all(items, pipe.recv_batch_bytes)``) instead of measuring each one."""

    @property
    def sendq(self) -> "Chan[Any]":
        """The outgoing queue, for :class:`gsp.chan.Send` cases in a :func:`gsp.select` (waiting
        for room on several pipes at once). A ``Send`` on it raises :class:`gsp.Closed` once the
        pipe is gone. Items are a :class:`gsp.Message` (header then body go on the wire) or,
        for a message without a header, just its ``bytes`` body."""

    def send(self, msg: "Message | bytes", timeout: float | None = None) -> None:
        """Queue ``msg``, waiting up to ``timeout`` seconds for room. Raises
        :class:`gsp.Timeout` when the time runs out (:class:`gsp.WouldBlock` for 0) and
        :class:`gsp.Closed` once the pipe is gone."""

    def has_room(self) -> bool:
        """Whether :meth:`try_send` would queue a message now (False once closed). Never blocks,
        never raises."""

    def room_case(self) -> "Recv":
        """A :func:`gsp.select` case that becomes ready when this pipe's queue may have got room
        (its writer took messages) or the pipe closed. For :meth:`Protocol.wake_cases`. Raises
        nothing."""

    def close(self) -> None:
        """Close this pipe only (idempotent); the socket and its other pipes carry on. Never
        blocks, never raises."""


class Message:
    """An SP message: protocol ``header`` bytes, ``body`` bytes, and the ``pipe`` it came on.

    Cooked sockets manage headers themselves; raw sockets show and take them as-is. ``pipe`` is set
    on received messages; protocols that route by pipe (nng's polyamorous pair1) read it on send.
    """

    __slots__ = ("header", "body", "pipe")

    def __init__(self, body: bytes = b"", header: bytes = b"", pipe: "PipeHandle | None" = None) -> None:
        self.body = body
        self.header = header
        self.pipe = pipe

    def __repr__(self) -> str:
        b = self.body
        shown = bytes(b[:32]) + (b"..." if len(b) > 32 else b"")
        pid = self.pipe.id if self.pipe is not None else None
        return f"<Message header={bytes(self.header).hex() or '-'} body={shown!r} pipe={pid}>"

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self.header == other.header and self.body == other.body

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.header) + len(self.body)


def as_bytes(data: Any) -> bytes:
    """Take ownership of user data: bytes as-is, any other buffer copied once (isolation)."""
    if type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, bytes):
        return bytes(data)
    raise TypeError(f"messages are bytes, bytearray or memoryview, not {type(data).__name__}")


def message_bytes(msg: "Message | bytes") -> bytes:
    """What a queued message puts on the wire: header then body as one ``bytes`` (a header-less
    message is queued as its body, which is returned as it is, without a copy)."""
    if isinstance(msg, bytes):
        return msg
    return msg.header + msg.body if msg.header else msg.body
