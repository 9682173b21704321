"""The backtrace header of the two request/reply-shaped protocol pairs (req/rep,
surveyor/respondent), and the ids it carries.

A backtrace is 4-byte big-endian words in front of the body, the last of which (the request or
survey id) has its high bit set, and every word before it a pipe id pushed by a raw
rep/respondent (a device hop). :func:`split_backtrace` cuts one off, :func:`reply` puts one back
in front of a body, :class:`IdMap` hands out the ids. The protocol bases built on them are in
:mod:`gsp.protocol.replies`.
"""

from __future__ import annotations

import random
from typing import Any

from .._mypyc import mypyc_attr  # (mypyc reads it when the wheel compiles this module)
from ..message import JOIN_MAX, Message
from ..options import Option, integer

__all__ = ["HIGH_BIT", "MAX_HOPS", "TTL_OPTION", "u32", "split_backtrace", "reply", "IdMap"]

HIGH_BIT = 0x80000000
#: Most words a requester-side raw socket will parse out of a reply (no ttl applies there).
MAX_HOPS = 255

TTL_OPTION = Option("ttl", 8, integer(1, 255, unit="hops"),
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


@mypyc_attr(allow_interpreted_subclasses=True)  # a protocol may subclass it
class IdMap:
    """Request/survey ids of one socket: 31 random-start bits with the high bit set, each mapped
    to the context waiting for it. Ids of requests still outstanding are never reused."""

    def __init__(self) -> None:
        self._next = random.getrandbits(31)
        #: Every id handed out and not popped yet, to its owner. Read it; a hot path may also
        #: ``live.pop(rid, None)`` (what :meth:`pop` does, without the call).
        self.live: dict[int, Any] = {}

    def alloc(self, owner: Any) -> int:
        while True:
            rid = self._next | HIGH_BIT
            self._next = (self._next + 1) & 0x7FFFFFFF
            if rid not in self.live:
                self.live[rid] = owner
                return rid

    def get(self, rid: int) -> Any:
        return self.live.get(rid)

    def pop(self, rid: int) -> Any:
        return self.live.pop(rid, None)

    def owners(self) -> list[Any]:
        return list(self.live.values())


def reply(backtrace: bytes, body: bytes) -> "Message | bytes":
    """``body`` behind ``backtrace`` as a pipe queues it (a reply, or a request or survey behind
    its id): one bytes if the body is small (up to :data:`gsp.message.JOIN_MAX`: one write, no
    Message), else a :class:`gsp.Message` (no copy of the body). The one place of that rule."""
    return backtrace + body if len(body) <= JOIN_MAX else Message(body, backtrace)
