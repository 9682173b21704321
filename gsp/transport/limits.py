"""What a socket lets its pipes hold for messages still arriving: bytes, and time.

A peer can announce a big message and then send it slowly, or not at all. Transports buffer only
what arrived (see :class:`gsp.transport.wire.FrameDecoder`), and every socket bounds the rest with two
options:

* ``max_recv_partial`` — bytes held in incomplete messages across all the socket's pipes. At the
  bound a pipe in the middle of a message reads no further until the total drops (messages
  complete, pipes close), unless it holds the most (so pipes never wait for each other in a
  ring); a pipe between messages always reads, so small messages keep flowing. The bound is
  soft: the reads under way and the biggest message may pass it.
* ``recv_partial_timeout`` — seconds an incomplete message may go without new bytes (or held
  back by the bound) before its pipe is closed with :class:`gsp.FrameStalled`.

The socket makes one :class:`RecvLimits` and hands it to every connection through
:meth:`gsp.transport.Connection.use_recv_limits`; a connection keeps its account in a
:class:`Holding`.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from gevent.event import Event

from ..errors import FrameStalled

__all__ = ["RecvLimits", "Holding"]


class RecvLimits:
    """One socket's bound on bytes held in incomplete messages, shared by its connections.

    ``max_bytes`` is ``max_recv_partial`` (0: no bound), ``stall_timeout`` is
    ``recv_partial_timeout`` (seconds, None: never); the socket passes changes of the options on
    with :meth:`set_max_bytes` and :meth:`set_stall_timeout`, so they apply to pipes already up.
    """

    __slots__ = ("max_bytes", "stall_timeout", "held", "_holders", "_room")

    def __init__(self, max_bytes: int = 0, stall_timeout: float | None = None) -> None:
        self.max_bytes = max_bytes
        self.stall_timeout = stall_timeout
        #: Bytes held in incomplete messages by every connection using these limits.
        self.held = 0
        self._holders: set[Holding] = set()
        self._room = Event()
        self._room.set()

    def set_max_bytes(self, value: int) -> None:
        self.max_bytes = value
        self._room.set()  # the pipes waiting for room look again

    def set_stall_timeout(self, value: float | None) -> None:
        self.stall_timeout = value

    def must_wait(self, holding: "Holding") -> bool:
        """True while the socket is at the bound and another connection holds more than
        ``holding``: the biggest holder always goes on, so the bound never deadlocks pipes
        whose messages together exceed it (it is soft: a pipe's read may pass it)."""
        limit = self.max_bytes
        if not limit or self.held < limit:
            return False
        return holding.held < max(h.held for h in self._holders)

    def change(self, holding: "Holding", before: int, after: int) -> None:
        """``holding`` now holds ``after`` bytes where it held ``before``."""
        self.held += after - before
        if not after:
            self._holders.discard(holding)
        elif not before:
            self._holders.add(holding)
        if after < before and not self._room.is_set():
            self._room.set()  # the pipes waiting for room look again

    def wait_room(self, holding: "Holding", timeout: float | None) -> bool:
        """Block while :meth:`must_wait`: True once ``holding`` may read, False after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.must_wait(holding):
            self._room.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if (left is not None and left <= 0) or not self._room.wait(left):
                return False
        return True


class Holding:
    """One connection's account with a socket's :class:`RecvLimits` (none: no limits).

    The connection calls :meth:`hold` with what it holds for its incomplete message after each
    read, :meth:`before_read` before a read while it holds something (and sets :attr:`reading`
    False after it), and :meth:`release` when it closes. One timer per connection, armed by the
    first read of an incomplete message, throws :class:`gsp.FrameStalled` into the reading
    greenlet once no bytes came for ``recv_partial_timeout`` seconds. A read costs no timer of
    its own, and neither does a message: the timer stays armed when a message completes, and
    when it fires finds out what happened since (the next incomplete message may be under way).
    """

    __slots__ = ("limits", "held", "remote", "reading", "_last", "_due", "_timer", "_reader")

    def __init__(self, limits: RecvLimits | None, remote: str) -> None:
        self.limits = limits
        self.held = 0
        self.remote = remote
        #: True while the connection's greenlet is in a read the stall timer may end.
        self.reading = False
        self._last = 0.0  # when the held bytes last changed
        self._due = 0.0  # when the timer, if armed, fires
        self._timer: Any = None
        self._reader: Any = None

    def hold(self, n: int) -> None:
        """The connection now holds ``n`` bytes for its incomplete message (0: none)."""
        limits = self.limits
        if limits is None:
            return
        if n != self.held:
            limits.change(self, self.held, n)
            self.held = n
        if n:
            self._last = time.monotonic()  # progress

    def release(self) -> None:
        self.hold(0)
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    def before_read(self) -> None:
        """Before reading more of an incomplete message: wait while the socket is at
        ``max_recv_partial``, then arm the stall timer (if not yet) and set :attr:`reading`.

        Raises :class:`gsp.FrameStalled` when the wait for room outlasts the timeout."""
        limits = self.limits
        if limits is None or not self.held:
            return
        timeout = limits.stall_timeout
        if limits.must_wait(self) and not limits.wait_room(self, timeout):
            raise FrameStalled(
                f"{self.remote}: a message still arriving was held back for {timeout:g} s by "
                f"max_recv_partial={limits.max_bytes} ({limits.held} bytes held in incomplete "
                f"messages, {self.held} of them by this pipe)")
        self._reader = gevent.getcurrent()
        self.reading = True
        if timeout is not None:
            due = self._last + timeout
            if self._timer is None:
                self._arm(due)
            elif self._due > due:  # armed under a longer recv_partial_timeout than now
                self._timer.close()
                self._arm(due)

    def _arm(self, due: float) -> None:
        """Fire at ``due`` (time.monotonic), or at once if that has passed."""
        self._due = due
        self._timer = gevent.get_hub().loop.timer(max(due - time.monotonic(), 0.0), ref=False)
        self._timer.start(self._fire)

    def _fire(self) -> None:  # in the hub
        assert self.limits is not None
        self._timer.close()
        self._timer = None
        timeout = self.limits.stall_timeout
        if not self.held or timeout is None:
            return  # nothing incomplete now: the next read of part of a message arms it again
        now = time.monotonic()
        due = self._last + timeout
        if due > now or not self.reading:  # progress since, or busy with what it has
            self._arm(due if due > now else now + timeout)
            return
        self._reader.throw(FrameStalled(
            f"{self.remote} sent nothing more of a message for {timeout:g} s "
            f"(recv_partial_timeout); {self.held} bytes of it had arrived"))
