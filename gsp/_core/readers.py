"""A socket's reader greenlets: a pipe has one only while bytes are coming in.

A pipe's reader reads until its connection has nothing more (``Connection.recv_or_park``
returned None, its read watcher armed); the greenlet then waits idle (:meth:`Readers.wait`,
still inside that pipe's read loop, so the same pipe waking again needs no setup) for the next
pipe whose watcher fires. An idle pipe so costs no greenlet — no saved C stack, no Python frame
stack page — which is most of a pipe's memory. Connections that cannot park keep their reader
for as long as they live, as before.

Handing a pipe to an idle reader is one switch from the event loop, as waking a greenlet
blocked in a read is; a new greenlet is spawned only when every reader is busy.

A user greenlet waiting in a lending wait (:meth:`Readers.lend`, from
:class:`gsp.protocol.Wakeup`) comes before the idle readers: it is handed the pipe's read
(``Pipe._read_lent``) and delivers what it reads itself, so that a request or reply reaches the
greenlet waiting for it without a reader's switch and a wakeup in between. Only pipes whose
connections park are lent (``Pipe._parks``): only they promised to lose nothing when a read is
given up after one loop turn (see ``Connection.recv_or_park``).
"""

from __future__ import annotations

import os
from time import perf_counter
from typing import TYPE_CHECKING, Any, Callable
from typing import Protocol as _Typing

import gevent
from gevent.hub import Waiter, get_hub

if TYPE_CHECKING:
    from ..handles import LendingWait

#: Give the CPU to another runnable process, if any (not every platform has sched_yield).
_yield_cpu: Callable[[], None] = getattr(os, "sched_yield", lambda: None)

#: Seconds a spin's ``sched_yield`` may take before it counts as having let another process
#: run (a yield with nobody else to run returns in about a microsecond).
YIELDED = 30e-6
#: Seconds a socket's waits do not spin after a spin gave way (the CPU is wanted: see above).
BACK_OFF = 0.05

#: Idle readers a socket keeps; a reader finding this many already waiting ends instead.
IDLE_READERS = 16


class _Lent:
    """``Pipe._reader`` while a user greenlet reads the pipe (see :meth:`Readers.wake`): the pipe
    has a reader, and closing the pipe must not kill it (it is not the pipe's to kill)."""

    dead = True


LENT: Any = _Lent()


class WouldWait(BaseException):
    """Thrown into a lent read that waited a loop turn (see ``Readers.guard``); a
    BaseException so that nothing on the way takes it for a transport's error."""


WOULD_WAIT = WouldWait()


class ReadPipe(_Typing):
    """What the readers need of a pipe (:class:`gsp._core.pipe.Pipe` is one): the core's own
    protocol between the two modules, so its methods are private to the core (not on the
    user's :class:`gsp.Pipe` surface)."""

    #: The greenlet reading the pipe now (:data:`LENT` during a lent read), or None: the readers
    #: set it as they hand the pipe on.
    _reader: "gevent.Greenlet | None"

    @property
    def closed(self) -> bool: ...
    @property
    def _parks(self) -> bool: ...
    @property
    def _held(self) -> list[bytes] | None: ...
    def _read_loop(self, idle: Waiter) -> "ReadPipe | None": ...
    def _read_lent(self, wait: "LendingWait") -> None: ...
    def _end_read(self) -> None: ...


class Readers:
    """The reader greenlets of one socket (spawned with its ``spawn``, so closing the socket
    kills them with its other greenlets)."""

    __slots__ = ("_spawn", "_idle", "_hub", "_borrower", "_batches", "_offers", "guard",
                 "lent_batches", "end_lend")

    def __init__(self, spawn: Callable[..., gevent.Greenlet]) -> None:
        self._spawn = spawn
        self._idle: list[Waiter] = []  # idle readers, each waiting on its own Waiter
        self._hub = get_hub()
        self._borrower: Waiter | None = None  # a lending wait's waiter (see lend)
        self._batches = False  # ... which delivers whole batches
        self._offers: list[Waiter] = []  # the lending waits now, taken or not
        #: End a lending wait's offer (``SocketHandle.end_lend``; once per :meth:`lend`, taken
        #: or not): the offers' own ``remove``, so that ending one costs no Python call. (The
        #: borrower it may leave set is no longer among the offers: :meth:`wake` checks.)
        self.end_lend: Callable[[Waiter], None] = self._offers.remove
        #: Whether the lent read under way delivers a whole batch (set as it is handed out).
        self.lent_batches = False
        #: A zero timer a lent read runs under, so that it never waits: started to throw
        #: WOULD_WAIT into the reading greenlet after one loop turn, stopped once it read.
        self.guard = self._hub.loop.timer(0)

    def reset_after_fork(self) -> None:
        """In a child after fork: the idle readers are the parent's greenlets' copies, killed
        with the socket's others (see gsp._core.fork); a lent read's guard stops."""
        self._idle.clear()
        self.guard.stop()

    @property
    def idle(self) -> int:
        """Reader greenlets waiting for a pipe now."""
        return len(self._idle)

    def start(self, pipe: "ReadPipe") -> None:
        """Give ``pipe`` a reader soon (from any greenlet): in the next turn of the loop."""
        self._hub.loop.run_callback(self.wake, pipe)

    def wake(self, pipe: "ReadPipe") -> None:
        """Give ``pipe`` a reader now; called in the event loop (a watcher or callback)."""
        if pipe.closed or pipe._reader is not None:
            return
        borrower = self._borrower
        # Not while another lent read is under way (it waits out its loop turn, under the one
        # guard timer): a second would take the guard over, and the first would never be told.
        if borrower is not None and pipe._parks and not self.guard.active and \
                borrower in self._offers:
            self._borrower = None
            pipe._reader = LENT
            self.lent_batches = self._batches
            borrower.switch(pipe._read_lent)
        else:
            self._give(pipe)

    def lend(self, waiter: Waiter, batches: bool = False) -> bool:
        """Take the greenlet waiting on ``waiter`` as this socket's first reader while it waits;
        :meth:`end_lend` when it stops. Only while it is the one lending wait: among several
        (contexts), what one reads is mostly for others, and it would wake for nothing, so
        readers read (False). ``batches``: it delivers every message of a read, not only the
        first."""
        offers = self._offers
        offers.append(waiter)
        if len(offers) > 1:
            self._borrower = None  # the one before is no longer alone either
            return False
        self._borrower = waiter
        self._batches = batches
        return True

    def spinning(self, seconds: float) -> Callable[..., bool]:
        """:meth:`lend` that then spins (the ``recv_spin`` option; ``SocketHandle.lend_reads``
        is this while it is set): until the waiter has its value or ``seconds`` passed, turn the
        event loop without letting it sleep (a zero timer a turn: epoll polled with no timeout,
        callbacks and other greenlets run as usual), so that a reply read in those turns
        reaches the waiting greenlet without the hub's sleep and wakeup in between. Each turn
        also yields the CPU (``sched_yield``), and the spin ends as soon as a yield let another
        process run (it took over :data:`YIELDED`), after which the socket's waits do not spin
        for :data:`BACK_OFF`: on a busy machine the peer being waited for may need the CPU, and
        a spinner loses the scheduler's favour for sleepers (docs/performance.md has what
        spinning costs there). Then the wait blocks as usual. An exception thrown into the
        greenlet meanwhile (a kill, an outer timeout) propagates; the offer stands until
        ``end_lend`` as ever."""
        lend, hub, clock, give_way = self.lend, self._hub, perf_counter, _yield_cpu
        calm = 0.0  # no spin before this (clock()): the CPU was wanted by others lately

        def lend_spinning(waiter: Waiter, batches: bool = False) -> bool:
            nonlocal calm
            taken = lend(waiter, batches)
            # Only the one lending wait spins: with several (contexts) a spin each would
            # multiply the turns, and what one reads is mostly for the others anyway.
            if not taken or waiter.ready() or clock() < calm:
                return taken
            # A zero timer, not an idle watcher: a pipe lent meanwhile stays readable until this
            # greenlet reads it, and its watcher's every turn would keep an idle one from firing.
            turn = hub.loop.timer(0)
            until = clock() + seconds
            try:
                while True:
                    hub.wait(turn)  # back after one turn of the loop
                    t = clock()
                    give_way()  # to other processes on this CPU: the peer may be one
                    now = clock()
                    # Done once the value came, the time is up, or the CPU is wanted (the
                    # yield let another process run): spinning on a busy CPU only delays it.
                    if now - t > YIELDED:
                        calm = now + BACK_OFF
                        return taken
                    if waiter.ready() or now >= until:
                        return taken
            finally:
                turn.close()
        return lend_spinning

    def carry(self, pipe: "ReadPipe") -> None:
        """From a lent read (any greenlet), which must not deliver more nor wait: give ``pipe``
        to a reader greenlet in the next loop turn, to deliver ``pipe._held`` (read already)
        first."""
        self._hub.loop.run_callback(self._carried, pipe)

    def _carried(self, pipe: "ReadPipe") -> None:
        # As wake, but never to a lending wait, which just gave the pipe up; and with the pipe
        # still marked LENT, so that nothing else hands it out meanwhile.
        if pipe.closed:
            pipe._end_read()
        else:
            self._give(pipe)

    def _give(self, pipe: "ReadPipe") -> None:
        """To an idle reader greenlet, or a new one (in the event loop)."""
        if self._idle:
            waiter = self._idle.pop()
            pipe._reader = waiter.greenlet
            waiter.switch(pipe)
        else:
            pipe._reader = self._spawn(self._run, pipe)

    def wait(self, waiter: Waiter) -> "ReadPipe | None":
        """For a reader whose pipe just parked: wait idle on ``waiter`` (the reader's own) and
        return the next pipe woken, or None at once when enough readers wait already."""
        idle = self._idle
        if len(idle) >= IDLE_READERS:
            return None
        idle.append(waiter)
        pipe: ReadPipe = waiter.get()
        return pipe

    def _run(self, pipe: "ReadPipe | None") -> None:
        waiter = Waiter(self._hub)  # this reader's, for every wait (one at a time)
        while pipe is not None:
            pipe = pipe._read_loop(waiter)  # the next pipe, or None once this reader should end
