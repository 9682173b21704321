"""The handles through which a protocol sees the core (:mod:`gsp.protocol` re-exports them): its
socket (:class:`SocketHandle`), the lending waits of its receives (:class:`LendingWait`), its
receive queue (:class:`RecvQueue`), and the two operations (:data:`Op`). A pipe is a
:class:`gsp.message.PipeHandle` (beside the :class:`~gsp.message.Message` it carries). This
module imports no other module of gsp at run time: gsp's modules all may use it.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

if TYPE_CHECKING:
    import gevent
    from gevent.hub import Waiter

    from .chan import Recv

__all__ = ["Op", "check_op", "SocketHandle", "RecvQueue", "LendingWait"]

#: The two operations :meth:`Protocol.poll` and :meth:`Protocol.wake_cases` speak of.
Op = Literal["recv", "send"]



def check_op(op: object) -> None:
    """Raise ValueError unless ``op`` is "recv" or "send"."""
    if op != "recv" and op != "send":
        raise ValueError(f"op must be 'recv' or 'send', not {op!r}")


class RecvQueue(typing.Protocol):
    """What :attr:`Protocol.recv_queue` needs of a receive queue (:class:`gsp.protocol.inbox.queue.Inbox`)."""

    def poll(self) -> bool:
        """Whether taking an item would not wait (one is queued, or the queue is closed). Never
        blocks, never raises."""

    def wake_case(self) -> "Recv":
        """A select case that becomes ready when an item may have arrived or the queue closed.
        Raises nothing."""

    def __len__(self) -> int:
        """Items queued now."""

    @property
    def queued_bytes(self) -> int:
        """Bytes queued now, shown as ``recv_queue_bytes`` in ``socket.stats`` (0 when the queue
        is not bounded in bytes)."""


class LendingWait(typing.Protocol):
    """What the callable a lent read hands a waiting greenlet (see
    :meth:`SocketHandle.lend_reads`) is called with."""

    #: Set False before the call; True once what it delivered woke the wait (the message it
    #: waited for came). Until then the pipe is read on, by a reader greenlet: what came was
    #: not the answer, and more may be behind it.
    woken: bool


class SocketHandle(typing.Protocol):
    """A protocol's view of its socket: the narrow handle passed to ``spec.factory``."""

    @property
    def protocol(self) -> str:
        """The protocol's name as the user asked for it (e.g. ``"rep"``)."""

    @property
    def raw(self) -> bool:
        """Whether the socket was opened with ``raw=True``."""

    @property
    def options(self) -> Mapping[str, Any]:
        """Current option values (socket-wide, including the protocol's own); read-only."""

    @property
    def closed(self) -> bool:
        """True once the user closed the socket."""

    @property
    def pipe_count(self) -> int:
        """Pipes set up on the socket now (attaching or attached)."""

    @property
    def has_endpoints(self) -> bool:
        """Whether the socket has ever listened or dialed, or has a pipe now."""

    def spawn(self, fn: Callable[..., Any], *args: Any) -> "gevent.Greenlet":
        """Run ``fn(*args)`` in a greenlet the socket owns: killed and joined when it closes.
        Raises nothing itself (what ``fn`` raises ends that greenlet)."""

    def watch(self, name: str, callback: Callable[[Any], None]) -> None:
        """Call ``callback(value)`` after option ``name`` changed (set_option on the socket),
        with the validated value. Not called for the value the protocol was created with.
        Raises :class:`gsp.BadOption` for a name that is not an option of the socket."""

    def lend_reads(self, waiter: "Waiter", batches: bool = False) -> bool:
        """Offer the greenlet waiting on ``waiter`` to read the socket's pipes while it waits:
        the next pipe with bytes is then read in it, not in a reader greenlet, by switching
        ``waiter`` with a callable to call at once with a :class:`LendingWait` (it reads
        without blocking, delivers the first message read, or all of them with ``batches``, and
        leaves the rest to a reader greenlet). False when it is not taken (another wait offers
        too: then readers read). End every offer, taken or not, with :meth:`end_lend`.
        :class:`gsp.protocol.Wakeup` does all this (its ``lend``); the protocol's ``pipe_recv``
        of one message (of any, with ``batches``) must not block meanwhile. With the socket's
        ``recv_spin`` set, it first turns the event loop for up to that long (other greenlets
        run), so call it where the wait is already set up: an exception thrown into the greenlet
        meanwhile (a kill, a timeout) comes out of it, and the offer still needs its
        :meth:`end_lend`. Raises nothing else."""

    def end_lend(self, waiter: "Waiter") -> None:
        """End :meth:`lend_reads`'s offer for ``waiter`` (once per offer, taken or not).
        Raises nothing."""

    def send_direct(self, offer: "Callable[[bytes], bool] | None") -> None:
        """Let ``Socket.send(body)`` try ``offer(body)`` before calling the protocol: it queues
        the body now and returns True, or returns False and the protocol's send runs as usual.
        For a protocol whose send of a header-less body is just that (push with one puller:
        the pipe's ``try_send``), it saves a call per message. ``None`` turns it off; the
        protocol must do so when it no longer holds (a second pipe came, the pipe went). Raises
        nothing; ``offer`` itself must never block or raise."""
