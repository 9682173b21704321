"""The narrow handle a protocol gets for its socket (implements
:class:`gsp.protocol.SocketHandle`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import gevent
from gevent.hub import Waiter

if TYPE_CHECKING:
    from .socket import Socket


class CoreSocketHandle:
    """What a protocol sees of its socket (implements :class:`gsp.protocol.SocketHandle`)."""

    __slots__ = ("_sock", "lend_reads", "end_lend", "closed")

    def __init__(self, sock: "Socket") -> None:
        self._sock = sock
        #: The socket's ``closed``, kept in step by the socket (``Socket._closed``): a slot, read
        #: by every context's send and recv without a property's call.
        self.closed: bool = sock._hot.closed
        # The readers' own methods: a lending wait calls both on every wait.
        self.lend_reads: Callable[..., bool] = sock._readers.lend
        self.end_lend: Callable[[Waiter], None] = sock._readers.end_lend

    @property
    def protocol(self) -> str:
        return self._sock.protocol

    @property
    def raw(self) -> bool:
        return self._sock.raw

    @property
    def options(self) -> Mapping[str, Any]:
        return self._sock._options

    @property
    def pipe_count(self) -> int:
        return len(self._sock._pipes)

    @property
    def has_endpoints(self) -> bool:
        s = self._sock
        return bool(s._listeners or s._dialers or s._pipes)

    def spawn(self, fn: Callable[..., Any], *args: Any) -> gevent.Greenlet:
        return self._sock._spawn(fn, *args)

    def watch(self, name: str, callback: Callable[[Any], None]) -> None:
        self._sock._watch(name, callback)

    def send_direct(self, offer: Callable[[bytes], bool] | None) -> None:
        if not self._sock._draining:  # (draining: every send goes through the protocol)
            self._sock._hot.send_direct = offer
