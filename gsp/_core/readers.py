"""A socket's reader greenlets: a pipe has one only while bytes are coming in.

A pipe's reader reads until its connection has nothing more (``Connection.recv_or_park``
returned None, its read watcher armed); the greenlet then waits here, idle, for the next pipe
whose watcher fires. An idle pipe so costs no greenlet — no saved C stack, no Python frame
stack page — which is most of a pipe's memory. Connections that cannot park keep their reader
for as long as they live, as before.

Handing a pipe to an idle reader is one switch from the event loop, as waking a greenlet
blocked in a read is; a new greenlet is spawned only when every reader is busy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

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

    def _run(self, pipe: "Pipe") -> None:
        idle = self._idle
        waiter: Any = Waiter(self._hub)  # used again for every wait (one at a time)
        while True:
            pipe._read_loop()  # returns once the pipe is parked or closed
            if pipe.closed or len(idle) >= IDLE_READERS:
                # A pipe closed while we read may have been told to kill us: end, take nothing.
                return
            idle.append(waiter)
            pipe = waiter.get()
