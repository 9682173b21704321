"""The interface a protocol implements, and small helpers protocols share.

A protocol plugin returns :class:`ProtocolSpec` objects from its ``gsp_protocols`` hook. For every
socket, the core calls ``spec.factory(socket, raw)`` and talks to the result through
:class:`Protocol`'s methods. Protocols see pipes only through the pipe interface: ``id``,
``send``/``try_send``/``sendq`` (a :class:`gsp.chan.Chan` of outgoing :class:`gsp.Message`),
``close()`` and ``closed``.
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ._errors import Closed, NotSupported, ProtocolStateError, Timeout
from ._message import Message
from ._options import Option
from .chan import Chan, Recv, Send, select

if TYPE_CHECKING:
    from ._pipe import Pipe
    from ._socket import Socket

__all__ = [
    "ProtocolSpec", "Protocol", "Option", "Signal", "Deadline", "RejectPipe",
    "NotSupported", "ProtocolStateError", "Message", "send_round_robin",
]


class RejectPipe(Exception):
    """Raised by ``Protocol.add_pipe`` to refuse a pipe (e.g. pair already has its peer)."""


class ProtocolSpec:
    """What the registry knows about one protocol."""

    def __init__(self, name: str, number: int, peer_name: str, peer_number: int,
                 factory: Callable[["Socket", bool], "Protocol"],
                 options: Mapping[str, Option] | None = None) -> None:
        self.name = name
        self.number = number
        self.peer_name = peer_name
        self.peer_number = peer_number
        self.factory = factory
        self.options: Mapping[str, Option] = dict(options or {})

    def __repr__(self) -> str:
        return f"<ProtocolSpec {self.name} 0x{self.number:x} peer={self.peer_name}>"


class Protocol:
    """Base class for a protocol instance bound to one socket.

    Subclasses override what they support; the defaults raise :class:`gsp.NotSupported`.
    ``pipe_recv`` is called from the pipe's reader greenlet for every message and may block to
    push back on a fast peer.
    """

    def __init__(self, socket: "Socket", raw: bool) -> None:
        self.socket = socket
        self.raw = raw

    def add_pipe(self, pipe: "Pipe") -> None:
        """A pipe finished its handshake; raise :class:`RejectPipe` to refuse it."""

    def remove_pipe(self, pipe: "Pipe") -> None:
        """A pipe is gone (its queue is already closed)."""

    def pipe_recv(self, pipe: "Pipe", data: bytes) -> None:
        """One message (header+body) arrived on ``pipe``."""

    def send(self, msg: Message, timeout: float | None) -> None:
        raise NotSupported(f"{self.socket.protocol} sockets cannot send")

    def recv(self, timeout: float | None) -> Message:
        raise NotSupported(f"{self.socket.protocol} sockets cannot receive")

    def open_context(self) -> Any:
        raise NotSupported(f"{self.socket.protocol} sockets have no contexts")

    def close(self) -> None:
        """The socket is closing: wake every blocked send/recv with :class:`gsp.Closed`."""


class Signal:
    """A broadcast "something changed" for select loops: wait on ``case()``, wake all with
    ``fire()``. (A closed channel is ready for every receiver at once; firing swaps in a new one.)
    """

    __slots__ = ("_chan",)

    def __init__(self) -> None:
        self._chan = Chan()

    def case(self) -> Recv:
        return Recv(self._chan)

    def fire(self) -> None:
        old, self._chan = self._chan, Chan()
        old.close()

    def close(self) -> None:
        """Wake everyone for good: later ``case()`` selects are ready at once."""
        self._chan.close()


class Deadline:
    """A timeout turned into an absolute deadline for loops that wait more than once."""

    __slots__ = ("_at",)

    def __init__(self, timeout: float | None) -> None:
        self._at = None if timeout is None else monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (None = forever); raises :class:`gsp.Timeout` once passed."""
        if self._at is None:
            return None
        left = self._at - monotonic()
        if left <= 0:
            raise Timeout("timed out")
        return left


def send_round_robin(pipes: "list[Pipe]", start: int, msg: Message, changed: Signal,
                     timeout: float | None, best_effort: bool,
                     is_closed: Callable[[], bool]) -> int:
    """Queue ``msg`` on the first pipe from ``start`` with room; wait if none has.

    Returns the index after the pipe used (the next round-robin start), or -1 when dropped
    because ``best_effort`` is set and no pipe could take it now. Waits for room on any pipe or
    for ``changed`` (a pipe came or went), up to ``timeout``.
    """
    deadline = Deadline(timeout)
    while True:
        if is_closed():
            raise Closed("socket closed")
        n = len(pipes)
        for k in range(n):
            i = (start + k) % n
            if pipes[i].try_send(msg):
                return i + 1
        if best_effort:
            return -1
        left = deadline.remaining()
        cases: list[Any] = [Send(p.sendq, msg) for p in pipes]
        cases.append(changed.case())
        snapshot = list(pipes)
        try:
            i, _ = select(cases, left)
        except Closed:
            continue  # a pipe died while we waited; look again
        if i < len(snapshot):
            return pipes.index(snapshot[i]) + 1 if snapshot[i] in pipes else start
