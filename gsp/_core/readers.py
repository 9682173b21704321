"""A socket's reader greenlets: a pipe has one only while bytes are coming in.

A pipe's reader reads until its connection has nothing more (``Connection.recv_or_park``
returned None, its read watcher armed); the greenlet then waits idle (:meth:`Readers.wait`,
still inside that pipe's read loop, so the same pipe waking again needs no setup) for the next
pipe whose watcher fires. An idle pipe so costs no greenlet — no saved C stack, no Python frame
stack page — which is most of a pipe's memory. Connections that cannot park keep their reader
for as long as they live, as before.

Handing a pipe to an idle reader is one switch from the event loop, as waking a greenlet
blocked in a read is; a new greenlet is spawned only when every reader is busy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import gevent
from gevent.hub import Waiter, get_hub

if TYPE_CHECKING:
    from .pipe import Pipe

#: Idle readers a socket keeps; a reader finding this many already waiting ends instead.
IDLE_READERS = 16


class Readers:
    """The reader greenlets of one socket (spawned with its ``spawn``, so closing the socket
    kills them with its other greenlets)."""

    __slots__ = ("_spawn", "_idle", "_hub")

    def __init__(self, spawn: Callable[..., gevent.Greenlet]) -> None:
        self._spawn = spawn
        self._idle: list[Waiter] = []  # idle readers, each waiting on its own Waiter
        self._hub = get_hub()

    @property
    def idle(self) -> int:
        """Reader greenlets waiting for a pipe now."""
        return len(self._idle)

    def start(self, pipe: "Pipe") -> None:
        """Give ``pipe`` a reader soon (from any greenlet): in the next turn of the loop."""
        self._hub.loop.run_callback(self.wake, pipe)

    def wake(self, pipe: "Pipe") -> None:
        """Give ``pipe`` a reader now; called in the event loop (a watcher or callback)."""
        if pipe.closed or pipe._reader is not None:
            return
        if self._idle:
            waiter = self._idle.pop()
            pipe._reader = waiter.greenlet
            waiter.switch(pipe)
        else:
            pipe._reader = self._spawn(self._run, pipe)

    def wait(self, waiter: Waiter) -> "Pipe | None":
        """For a reader whose pipe just parked: wait idle on ``waiter`` (the reader's own) and
        return the next pipe woken, or None at once when enough readers wait already."""
        idle = self._idle
        if len(idle) >= IDLE_READERS:
            return None
        idle.append(waiter)
        pipe: Pipe = waiter.get()
        return pipe

    def _run(self, pipe: "Pipe | None") -> None:
        waiter = Waiter(self._hub)  # this reader's, for every wait (one at a time)
        while pipe is not None:
            pipe = pipe._read_loop(waiter)  # the next pipe, or None once this reader should end
