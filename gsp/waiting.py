"""Waiting helpers for protocols: :class:`Signal`, a broadcast "something changed" for select
loops, and :class:`Deadline`, a timeout turned into an absolute deadline for loops that wait more
than once. (Also importable from :mod:`gsp.queues`.)"""

from __future__ import annotations

from datetime import timedelta
from time import monotonic
from typing import Any

from .chan import Chan, Recv
from .errors import Timeout, WouldBlock

__all__ = ["Signal", "Deadline"]


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
