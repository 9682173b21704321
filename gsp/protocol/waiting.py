"""Waiting helpers for protocols, in one place: :class:`Signal`, a broadcast "something changed"
for select loops; :class:`Deadline`, a timeout turned into an absolute deadline for loops that
wait more than once; :func:`call_later`, a hub timer; :class:`Alarm`, one hub timer serving many
deadlines."""

from __future__ import annotations

from datetime import timedelta
from time import monotonic
from typing import Any, Callable

from gevent import get_hub

from ..chan import Chan, Recv
from ..errors import Timeout, WouldBlock

__all__ = ["Signal", "Deadline", "call_later", "Alarm"]


class Signal:
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

    def _run(self) -> None:
        self.close()
        self._fire()

    def close(self) -> None:
        """Disarm (``arm`` works again afterwards)."""
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self.at = float("inf")
