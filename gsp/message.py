from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol.interface import PipeHandle

__all__ = ["JOIN_MAX", "Message", "as_bytes", "message_bytes"]

#: A protocol queues a message whose body is at most this big as one ``bytes``, header and body
#: joined (a copy this small costs less than the Message, and the write then joins nothing);
#: a bigger one as a :class:`Message`, so that its body is never copied.
JOIN_MAX = 4096


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
