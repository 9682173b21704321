"""The few fields a socket's send and recv read on every call, kept where loads are fast."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ..protocol import Protocol


class Hot:
    """What send/recv read, kept in slots: Socket's ``__getattr__`` (options as attributes) turns
    off CPython's specialised attribute loads on the socket itself (~50 ns more per load)."""

    __slots__ = ("closed", "send_timeout", "recv_timeout", "proto", "recv_body", "send_body",
                 "ready", "bare", "send_direct")

    closed: bool
    send_timeout: float | None
    recv_timeout: float | None
    proto: Protocol
    recv_body: Callable[[float | None], bytes] | None
    send_body: Callable[[bytes, float | None], None] | None
    ready: "deque[Any] | None"  # Protocol.ready, or Protocol.ready_bodies when bare
    bare: bool
    send_direct: Callable[[bytes], bool] | None  # see SocketHandle.send_direct


def hot_field(name: str) -> Any:
    """A property of the socket kept in its :class:`Hot` slots."""
    return property(lambda self: getattr(self._hot, name),
                    lambda self, value: setattr(self._hot, name, value))
