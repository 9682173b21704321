"""The few fields a socket's send and recv read on every call, kept where loads are fast, and
``recv_many``, which reads them the same way."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ..errors import BadOption, GspError
from ..protocol.interface import Protocol


class SendRecvState:
    """What send/recv read, kept in slots: one load of the socket's ``_hot``, then slot loads
    (the socket's own attributes live in its ``__dict__``, a protocol's in its objects)."""

    __slots__ = ("closed", "send_timeout", "recv_timeout", "proto", "recv_body", "send_body",
                 "ready", "bare", "send_direct", "tid", "send_max")

    closed: bool
    send_timeout: float | None
    recv_timeout: float | None
    proto: Protocol
    recv_body: Callable[[float | None], bytes] | None
    send_body: Callable[[bytes, float | None], None] | None
    ready: "deque[Any] | None"  # Protocol.ready, or Protocol.ready_bodies when bare
    bare: bool
    send_direct: Callable[[bytes], bool] | None  # see CoreSocketHandle.send_direct
    tid: int  # the OS thread whose hub made the socket (read where a call cannot complete at once)
    #: The largest message a send takes (0: any): the smallest ``message_max`` of the
    #: transports the socket listened or dialed on (udp://: one datagram a message).
    send_max: int


def hot_field(name: str) -> Any:
    """A property of the socket kept in its :class:`SendRecvState` slots."""
    return property(lambda self: getattr(self._hot, name),
                    lambda self, value: setattr(self._hot, name, value))


def recv_many(hot: SendRecvState, recv: Callable[..., bytes], limit: int, timeout: Any,
              block: bool) -> list[bytes]:
    """``Socket.recv_many``: the first body through ``recv`` (the socket's), then what is queued:
    the ``ready`` deque in whole runs, and through ``recv`` without waiting whenever it is empty
    (a queue that keeps only a front in ``ready`` refills it there), until ``limit`` or nothing
    is left."""
    if type(limit) is not int or limit < 1:
        raise BadOption(f"recv_many: limit must be an int >= 1, not {limit!r}")
    out = [recv(timeout, block)]
    ready = hot.ready
    while len(out) < limit:
        n = limit - len(out)
        if ready:
            if n >= len(ready):  # a consumer that keeps up takes all of it
                out.extend(ready if hot.bare else [item[0] for item in ready])
                ready.clear()
            else:
                pop = ready.popleft
                out.extend([pop() for _ in range(n)] if hot.bare else
                           [pop()[0] for _ in range(n)])
            continue
        try:
            out.append(recv(block=False))
        except GspError:  # WouldBlock, or a lasting state (closed) that the next call reports
            break
    return out
