"""The narrow handle a protocol gets for its socket (implements
:class:`gsp.protocol.SocketHandle`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sized

import gevent
from gevent.hub import Waiter

if TYPE_CHECKING:
    from .readers import Readers
    from .sendrecv import SendRecvState


class CoreSocketHandle:
    """What a protocol sees of its socket (implements :class:`gsp.protocol.SocketHandle`): made
    by the socket with the parts of it a protocol may use."""

    __slots__ = ("_protocol", "_raw", "_options", "_hot", "_pipes", "_listeners", "_dialers",
                 "_spawn", "_watch", "_direct", "lend_reads", "end_lend", "closed")

    def __init__(self, protocol: str, raw: bool, hot: "SendRecvState", readers: "Readers",
                 options: Mapping[str, Any], pipes: Sized, listeners: Sized, dialers: Sized,
                 spawn: Callable[..., gevent.Greenlet],
                 watch: Callable[[str, Callable[[Any], None]], None]) -> None:
        self._protocol = protocol
        self._raw = raw
        self._options = options
        self._hot = hot
        self._pipes = pipes
        self._listeners = listeners
        self._dialers = dialers
        self._spawn = spawn
        self._watch = watch
        self._direct = True  # False once the socket drains (every send through the protocol)
        #: The socket's ``closed``, kept in step by the socket (``Socket._closed``): a slot, read
        #: by every context's send and recv without a property's call.
        self.closed: bool = hot.closed
        # The readers' own methods: a lending wait calls both on every wait.
        self.lend_reads: Callable[..., bool] = readers.lend
        self.end_lend: Callable[[Waiter], None] = readers.end_lend

    @property
    def protocol(self) -> str:
        return self._protocol

    @property
    def raw(self) -> bool:
        return self._raw

    @property
    def options(self) -> Mapping[str, Any]:
        return self._options

    @property
    def pipe_count(self) -> int:
        return len(self._pipes)

    @property
    def has_endpoints(self) -> bool:
        return bool(self._listeners or self._dialers or self._pipes)

    def spawn(self, fn: Callable[..., Any], *args: Any) -> gevent.Greenlet:
        return self._spawn(fn, *args)

    def watch(self, name: str, callback: Callable[[Any], None]) -> None:
        self._watch(name, callback)

    def send_direct(self, offer: Callable[[bytes], bool] | None) -> None:
        if self._direct:  # (draining: every send goes through the protocol)
            self._hot.send_direct = offer

    def stop_direct(self) -> None:
        """No direct sends from now on (see :meth:`send_direct`): the socket began to drain, or
        a datagram endpoint bounds every send."""
        self._direct = False
