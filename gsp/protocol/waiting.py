"""Waiting helpers for protocols, in one place: :class:`ChangeNotice`, a broadcast "something changed"
for select loops; :class:`Deadline`, a timeout turned into an absolute deadline for loops that
wait more than once; :func:`call_later`, a hub timer; :class:`Alarm`, one hub timer serving many
deadlines; :class:`Wakeup`, where the one greenlet blocked in a context's call parks (and
lends itself to read the socket's pipes)."""

from __future__ import annotations

from datetime import timedelta
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable

from gevent import get_hub
from gevent.hub import Waiter

from ..chan import Chan, Recv, thread_ident
from ..errors import Timeout, WouldBlock, WrongThread

if TYPE_CHECKING:
    from ..handles import SocketHandle

__all__ = ["ChangeNotice", "Deadline", "call_later", "Alarm", "Wakeup"]


class ChangeNotice:
    """A broadcast "something changed": wait on ``case()`` in a :func:`gsp.select`, wake every
    waiter with ``fire()``. (A closed channel is ready for every receiver at once; firing swaps in
    a new one.) Firing when nobody took a case since the last fire costs nothing."""

    __slots__ = ("_chan", "armed")

    def __init__(self) -> None:
        self._chan: Chan[Any] = Chan()
        #: A case() was handed out since the last fire: someone may wait (read it, don't set it;
        #: a producer checks it to skip fire() on its hot path).
        self.armed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._chan.closed

    def case(self) -> Recv:
        self.armed = True
        return Recv(self._chan)

    def fire(self) -> None:
        if self.armed:  # else nobody can be waiting: keep the channel (most fires are these)
            self.armed = False
            old = self._chan
            if not old.closed:  # once closed, it stays ready for good
                self._chan = Chan()
                old.close()

    def close(self) -> None:
        """Wake everyone for good: later ``case()`` selects are ready at once."""
        self._chan.close()


class Deadline:
    """A timeout (seconds, or a timedelta) turned into an absolute deadline for loops that wait
    more than once."""

    __slots__ = ("_at", "timeout")

    def __init__(self, timeout: float | timedelta | None) -> None:
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        self.timeout = timeout
        self._at = None if timeout is None else monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (None = forever); raises :class:`gsp.Timeout` once passed, naming the
        timeout that was asked for (:class:`gsp.WouldBlock` for a zero timeout)."""
        if self._at is None:
            return None
        left = self._at - monotonic()
        if left <= 0:
            if self.timeout == 0:
                raise WouldBlock("would block (timeout 0)", timeout=0.0)
            raise Timeout(f"timed out after {self.timeout:g} s", timeout=self.timeout)
        return left


def call_later(seconds: float, fn: Callable[..., None], *args: Any) -> Any:
    """Run ``fn(*args)`` in the hub after ``seconds``; ``.close()`` the result to cancel.

    A loop timer rather than a greenlet: nothing to kill or join, and ``fn`` must not block.
    """
    t = get_hub().loop.timer(seconds)
    t.start(fn, *args)
    return t


class Alarm:
    """One hub timer serving many deadlines (a socket's request resends): :meth:`arm` makes sure
    ``fire()`` runs at or after loop time ``at`` (see :attr:`now`). Arming for a time no earlier
    than :attr:`at`, the one already armed, does nothing — no timer per request (a caller may
    compare first and skip the call). ``fire`` runs in the hub (no blocking), finds what is due
    itself and re-arms for what is still ahead."""

    __slots__ = ("_fire", "_loop", "_timer", "at", "now")

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._loop = get_hub().loop
        self._timer: Any = None
        #: The loop time armed for (infinity while disarmed); read it, never set it.
        self.at = float("inf")
        #: ``now()``: the event loop's clock, the one ``at`` is measured on: its cached value (the
        #: loop's timers count from it too), so reading it costs no system call and leaves the
        #: clock that ``gsp.chan.Outbox`` batches direct writes by alone. (The loop's own method:
        #: no Python call.)
        self.now: Callable[[], float] = self._loop.now

    def arm(self, at: float) -> None:
        if at < self.at:
            if self._timer is not None:
                self._timer.close()
            self.at = at
            self._timer = self._loop.timer(max(0.0, at - self._loop.now()))
            self._timer.start(self._run)

    def arm_in(self, seconds: float) -> float:
        """:meth:`arm` for ``seconds`` from :attr:`now`; returns the loop time armed for, which
        the caller keeps as its deadline (one call where a hot path would otherwise read ``now``
        and ``at`` and call ``arm``)."""
        at = self.now() + seconds
        if at < self.at:
            self.arm(at)
        return at

    def _run(self) -> None:
        self.close()
        self._fire()

    def close(self) -> None:
        """Disarm (``arm`` works again afterwards)."""
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self.at = float("inf")


class Wakeup:
    """Where the one greenlet blocked in a context's call parks until something changed: one
    gevent ``Waiter`` per wait (no channel, no select). The waiter looks at the context's state
    again after every :meth:`wait`, which returns when woken, when ``timeout`` passed, or
    spuriously; :meth:`wake` with nobody parked does nothing (but set :attr:`woken`).

    Given ``lend`` (the protocol's socket handle), a wait offers its greenlet to read the socket's
    pipes (:meth:`gsp.protocol.SocketHandle.lend_reads`): when bytes come while it waits, it reads
    and delivers them itself, one switch from the event loop in place of three (a reader greenlet,
    then a wakeup), and returns. Pass it only if the protocol's ``pipe_recv`` of one message never
    blocks while such a wait is parked (a reply looked up by id; a request handed to a parked
    receiver). With ``batches`` (for a ``pipe_recv`` that never blocks at all, as req's), it
    delivers every message of a read, not only the first. A read whose delivery did not
    :meth:`wake` it (:attr:`woken`: it is the read's :class:`gsp.protocol.LendingWait`) leaves
    the pipe to a reader greenlet, which reads on at once."""

    __slots__ = ("_waiter", "_loop", "_lend", "_batches", "woken", "_tid")

    def __init__(self, lend: "SocketHandle | None" = None, batches: bool = False) -> None:
        self._waiter: Waiter | None = None
        self._loop = get_hub().loop
        self._tid = thread_ident()  # the thread of that loop: another one's wait would never wake
        self._lend = lend
        self._batches = batches
        #: Whether :meth:`wake` was called during a lent read (see
        #: :class:`gsp.protocol.LendingWait`): the read delivered what this wait waited for.
        self.woken = False

    def wait(self, timeout: float | None) -> None:
        """Park the calling greenlet until :meth:`wake` or ``timeout`` seconds (None: no limit).
        An exception thrown into it (a kill, an outer ``gevent.Timeout``) propagates; a wait
        from an OS thread other than the one that made it raises :class:`gsp.WrongThread`."""
        here = thread_ident()
        if here != self._tid:
            raise WrongThread("context", self._tid, here)
        w = Waiter()
        self._waiter = w
        timer = None
        if timeout is not None:
            timer = self._loop.timer(max(timeout, 0.0))
            timer.start(w.switch, None)
        lend = self._lend
        try:
            if lend is not None:  # (in the try: with recv_spin, a kill may come through it)
                lend.lend_reads(w, self._batches)
            chore: Callable[[Wakeup], None] | None = w.get()
        finally:
            if lend is not None:
                lend.end_lend(w)
            if self._waiter is w:
                self._waiter = None
            if timer is not None:
                timer.close()
        if chore is not None:  # handed a pipe's read: do it (a wake meanwhile sets woken)
            self.woken = False
            chore(self)

    def wake(self) -> None:
        """Wake the parked greenlet, if any (from any greenlet; it runs on the next loop turn).
        Never blocks, raises nothing."""
        w = self._waiter
        if w is not None:
            self._waiter = None
            self._loop.run_callback(w.switch, None)
        else:
            self.woken = True
