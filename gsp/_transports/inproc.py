"""inproc:// — pipes between sockets of one process, passing message objects, no framing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..chan import Chan
from ..errors import (
    AddressInUse,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    InvalidAddress,
    MessageTooLarge,
    WouldBlock,
)
from ..hookspecs import hookimpl
from ..message import message_bytes
from ..transport import Connection, Transport, TransportDialer, TransportListener, split_url, wire
from .queued import close_queued, next_accepted

if TYPE_CHECKING:
    from ..message import Message
    from ..protocol import ProtocolSpec

_QUEUE_BATCHES = 16
_listeners: dict[str, "InprocListener"] = {}


class InprocConnection(Connection):
    """One end of an in-process pipe: batches of message bodies travel through two channels."""

    def __init__(self, name: str, inbox: "Chan[Any]", outbox: "Chan[Any]", side: str,
                 max_size: int) -> None:
        self.local_address = self.remote_address = f"inproc://{name}"
        self.properties = {"side": side}
        self._in = inbox
        self._out = outbox
        self._max = max_size
        self._closed = False

    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        try:
            self._out.send(spec.number, timeout)
            peer = self._in.recv(timeout)
        except Closed:
            raise self._broken() from None
        if not isinstance(peer, int):
            raise ConnectionBroken("inproc peer sent data before its handshake")
        if peer != spec.peer_number:
            raise wire.wrong_protocol(peer, spec.peer_number, spec.number)

    def _broken(self) -> Exception:
        return Closed("connection closed locally") if self._closed else ConnectionBroken(
            "inproc peer closed")

    def send_messages(self, messages: "Sequence[Message | bytes]") -> None:
        # Bodies are immutable bytes, so sharing them is safe: only a header forces a join.
        if list(map(type, messages)).count(bytes) == len(messages):  # all header-less: as is
            batch = list(messages)
        else:
            batch = list(map(message_bytes, messages))
        try:
            self._out.send(batch)
        except Closed:
            raise self._broken() from None

    def send_now(self, msg: "Message | bytes") -> int:
        """Hand ``msg`` to the peer at once if its channel has room (the pipe's writer is idle):
        2 done, 0 no room (queue it); 1 when the peer is gone, so the writer meets that."""
        try:
            self._out.send([msg if type(msg) is bytes else message_bytes(msg)], None, False)
        except WouldBlock:
            return 0
        except Closed:
            return 1
        return 2

    def recv_messages(self) -> list[bytes]:
        try:
            batch: list[bytes] = self._in.recv()
        except Closed:
            raise self._broken() from None
        return self._checked(batch)

    def _checked(self, batch: list[bytes]) -> list[bytes]:
        limit = self._max
        if limit and batch:
            big = len(batch[0]) if len(batch) == 1 else max(map(len, batch))
            if big > limit:
                raise MessageTooLarge(f"inproc peer sent {big} bytes; the limit is {limit}",
                                      size=big, limit=limit)
        return batch

    def recv_or_park(self, wake: Callable[[], None]) -> list[bytes] | None:
        """:meth:`recv_messages` while a batch waits (or the channel closed); else ask the
        channel to call ``wake`` once one does, and return None: an idle inproc pipe holds no
        reader greenlet, and a greenlet waiting for the message may read it itself."""
        try:
            batch: list[bytes] | None = self._in.recv_or_notify(wake)
        except Closed:
            raise self._broken() from None
        return None if batch is None else self._checked(batch)

    #: recv_or_park never waits: it takes a whole batch or parks.
    recv_nowait = recv_or_park

    def park(self, wake: Callable[[], None]) -> bool:
        """Park without a read: the channel calls ``wake`` when a batch waits (at once if one
        does now, or the channel closed). An inproc read never holds part of a message."""
        self._in.notify_ready(wake)
        return True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._in.notify_ready(None)  # no wake after close
            self._in.close()
            self._out.close()

    def forget(self) -> None:
        """After fork both ends are this process's own copies: closing them touches nothing of
        the parent's."""
        self.close()


def _name(url: str) -> str:
    _, name = split_url(url)
    if not name:
        raise InvalidAddress(f"{url!r} names nothing")
    return name


class InprocListener(TransportListener):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.name = _name(url)
        self.url = f"inproc://{self.name}"
        self.options = options
        self._accepts: Chan[InprocConnection] = Chan(1024)
        self._bound = False

    def bind(self) -> None:
        if self.name in _listeners:
            raise AddressInUse(f"{self.url} is already bound")
        _listeners[self.name] = self
        self._bound = True

    def accept(self) -> Connection:
        return next_accepted(self._accepts)

    def close(self) -> None:
        if self._bound and _listeners.get(self.name) is self:
            del _listeners[self.name]
        close_queued(self._accepts)

    def forget(self) -> None:
        self.close()  # the name table is this process's own copy after fork


class InprocDialer(TransportDialer):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.name = _name(url)
        self.options = options

    def dial(self) -> Connection:
        lst = _listeners.get(self.name)
        if lst is None:
            raise ConnectionRefused(f"nothing listens on inproc://{self.name}")
        # Each carries the handshake (a protocol number), then lists of message bytes.
        a2b: Chan[Any] = Chan(_QUEUE_BATCHES)
        b2a: Chan[Any] = Chan(_QUEUE_BATCHES)
        ours = InprocConnection(self.name, b2a, a2b, "dialer", self.options["max_recv_size"])
        theirs = InprocConnection(self.name, a2b, b2a, "listener", lst.options["max_recv_size"])
        try:
            lst._accepts.send(theirs, block=False)
        except Exception:
            raise ConnectionRefused(f"inproc://{self.name} is not accepting") from None
        return ours


class InprocTransport(Transport):
    schemes = ("inproc",)
    listener_class = InprocListener
    dialer_class = InprocDialer


@hookimpl
def gsp_transports() -> list[Transport]:
    return [InprocTransport()]
