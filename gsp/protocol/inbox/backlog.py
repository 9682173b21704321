"""What a receive queue that is fair across sources holds, and where each item waits.

A receive queue that is fair across pipes keeps a short front (the deque its consumer pops) and,
behind it, one FIFO per source (a pipe) that has more to give. The front is refilled from those
FIFOs round robin, a few items per source per turn, so one pipe's backlog never sits in front of
another pipe's next message; while one source alone has items queued, the front is the whole
queue, a plain FIFO. :class:`Backlog` is the set of per-source FIFOs (runs of items with their
bytes, the turn order, counts); :class:`FairFifo` is the front, the backlog and a
:class:`gsp.protocol.inbox.ledger.Ledger` of the front's bytes and sources together. Neither knows capacities,
policies or waiting: the :class:`gsp.protocol.inbox.queue.Inbox` decides those.
"""

from __future__ import annotations

from collections import deque
from itertools import accumulate, islice, repeat
from typing import Any, Callable, Generic, TypeVar

from .ledger import Ledger

__all__ = ["Backlog", "FairFifo", "FRONT_ITEMS", "FRONT_BYTES", "TURN_ITEMS", "TURN_BYTES"]

T = TypeVar("T")

#: While several sources have items queued, the front holds about this many items or bytes (at
#: most one turn more), refilled round robin, each turn at most TURN_ITEMS items of one source
#: and about TURN_BYTES (at least one item): fair in bytes for big messages (a 64 KiB message a
#: turn), and for small ones in turns long enough that refilling costs nothing per message.
FRONT_ITEMS = 256
FRONT_BYTES = 256 * 1024
TURN_ITEMS = 256
TURN_BYTES = 64 * 1024
MIXED: Any = object()  #: :attr:`FairFifo.owner` while the front holds several sources' items


class _Run(Generic[T]):
    # The part not yet taken of one put's items: items[start:], and their bytes.
    __slots__ = ("items", "start", "nbytes")

    def __init__(self, items: list[T], nbytes: int) -> None:
        self.items = items
        self.start = 0
        self.nbytes = nbytes

    def __len__(self) -> int:
        return len(self.items) - self.start


class Backlog(Generic[T]):
    """Per-source FIFOs of items, taken round robin (see the module docstring).

    A run taken whole or in part counts its share of the run's bytes, so the shares add up to
    what was given; a single item dropped or discarded is measured by the ``sizer`` given.
    :attr:`items` and :attr:`nbytes` are what it holds now.
    """

    __slots__ = ("_runs", "_counts", "_turns", "items", "nbytes")

    def __init__(self) -> None:
        self._runs: dict[Any, deque[_Run[T]]] = {}
        self._counts: dict[Any, int] = {}  # items held per source
        self._turns: deque[Any] = deque()  # sources holding items, the next to give first
        self.items = 0
        self.nbytes = 0

    def holds(self, source: Any) -> bool:
        """Whether ``source`` has items waiting here."""
        return source in self._runs

    def sources(self) -> int:
        """How many sources have items waiting."""
        return len(self._runs)

    def add(self, source: Any, items: list[T], nbytes: int) -> None:
        """Queue ``items`` (``nbytes`` in all) behind what ``source`` already has here; the list
        is kept, not copied."""
        if not items:
            return
        runs = self._runs.get(source)
        if runs is None:
            runs = self._runs[source] = deque()
            self._counts[source] = 0
            self._turns.append(source)
        runs.append(_Run(items, nbytes))
        self._counts[source] += len(items)
        self.items += len(items)
        self.nbytes += nbytes

    def turn(self, most: int, budget: int) -> tuple[list[T], int, Any]:
        """Take the next source's oldest items (at most ``most``, and about ``budget`` bytes but
        at least one, from one run) and pass the turn on: ``(items, their bytes, source)``. Only
        while :attr:`items` is not 0."""
        turns = self._turns
        source = turns[0]
        runs = self._runs[source]
        run = runs[0]
        n = len(run)
        if run.nbytes > budget:  # by the run's mean size
            most = min(most, max(1, budget * n // run.nbytes))
        if n <= most:
            out = run.items[run.start:] if run.start else run.items
            share = run.nbytes
            runs.popleft()
        else:
            out = run.items[run.start:run.start + most]
            share = run.nbytes * most // n
            run.start += most
            run.nbytes -= share
        self._took(source, len(out), share)
        if source in self._runs:
            turns.rotate(-1)
        return out, share, source

    def take_all(self, source: Any) -> list[tuple[list[T], int]]:
        """Take every run ``source`` has here, oldest first, as ``(items, bytes)``."""
        runs = self._runs[source]
        out = [(r.items[r.start:] if r.start else r.items, r.nbytes) for r in runs]
        self._took(source, self._counts[source], sum(r.nbytes for r in runs))
        return out

    def largest(self) -> Any:
        """The source with the most items here (only while :attr:`items` is not 0)."""
        counts = self._counts
        return max(counts, key=counts.__getitem__)

    def drop(self, source: Any, newest: bool, sizer: Callable[[T], int]) -> None:
        """Discard ``source``'s oldest (or newest) item here (``sizer`` measures it)."""
        runs = self._runs[source]
        run = runs[-1] if newest else runs[0]
        if newest:  # the list may be the producer's: not changed in place
            item = run.items[-1]
            run.items = run.items[:-1]
        else:
            item = run.items[run.start]
            run.start += 1
        size = run.nbytes if not len(run) else min(sizer(item), run.nbytes)
        run.nbytes -= size
        if not len(run):
            runs.pop() if newest else runs.popleft()
        self._took(source, 1, size)

    def keep(self, keep: Callable[[T], bool], sizer: Callable[[T], int]) -> None:
        """Discard every item for which ``keep(item)`` is false (each source's order is kept;
        ``sizer`` measures what is kept)."""
        for source in list(self._runs):
            runs = self._runs[source]
            kept = [x for r in runs for x in r.items[r.start:] if keep(x)]
            size = sum(r.nbytes for r in runs)
            n = self._counts[source]
            self._took(source, n, size)
            self.add(source, kept, sum(map(sizer, kept)) if size else 0)

    def clear(self) -> None:
        self._runs.clear()
        self._counts.clear()
        self._turns.clear()
        self.items = self.nbytes = 0

    def _took(self, source: Any, n: int, nbytes: int) -> None:
        self.items -= n
        self.nbytes -= nbytes
        left = self._counts[source] - n
        if left:
            self._counts[source] = left
        else:
            del self._counts[source], self._runs[source]
            self._turns.remove(source)


class FairFifo(Generic[T]):
    """A queue's items: :attr:`front` (popped by the consumer, possibly without a word), the
    per-source :attr:`held` behind it, and the front's :attr:`ledger` (bytes and sources by
    position). :attr:`owner` is the one source everything in the front came from, or
    :data:`MIXED`; while it is a source and nothing is held, a put of that source's goes
    straight to the front (the caller's fast path)."""

    __slots__ = ("front", "ledger", "held", "owner")

    def __init__(self) -> None:
        self.front: deque[T] = deque()
        self.ledger = Ledger()
        self.held: Backlog[T] = Backlog()
        self.owner: Any = MIXED

    def __len__(self) -> int:
        return len(self.front) + self.held.items

    def queued_bytes(self) -> int:
        return self.ledger.queued_bytes(len(self.front)) + self.held.nbytes

    def mix(self, sizer: Callable[[T], int], spare: bool = False) -> None:
        """A second source puts while the front holds one source's items: from now on the front
        is kept short, and what the first source has beyond it waits in its backlog (with
        ``spare``, at least its newest item, so that it can be dropped rather than the new
        source's)."""
        owner, self.owner = self.owner, MIXED
        buf = self.front
        if owner is MIXED or len(buf) <= 1:
            return
        before = self.ledger.queued_bytes(len(buf))
        if not spare and len(buf) <= FRONT_ITEMS and before <= FRONT_BYTES:
            return  # short already (the common case: nothing measured)
        # The front keeps its first items up to FRONT_ITEMS, and up to the one reaching
        # FRONT_BYTES.
        sizes = list(islice(map(sizer, buf), FRONT_ITEMS))
        k = next((i + 1 for i, total in enumerate(accumulate(sizes)) if total >= FRONT_BYTES),
                 len(sizes))
        del sizes[k:]
        if spare:
            k = min(k, len(buf) - 1)
            del sizes[k:]
        if k == len(buf):
            return
        moved = [buf.pop() for _ in range(len(buf) - k)]
        moved.reverse()
        self.ledger.reset(sizes, repeat(owner))
        self.held.add(owner, moved, max(0, before - sum(sizes)))

    def _to_front(self, items: list[T], nbytes: int, source: Any) -> None:
        # Items taken from the backlog go to the back of the front, and into its ledger.
        buf = self.front
        buf.extend(items)
        self.ledger.added(len(items), nbytes, source, len(buf))

    def refill(self) -> None:
        """Top the front up from the backlogs, round robin; with one source left and an empty
        front, all of it (the queue is a plain FIFO again)."""
        held, buf = self.held, self.front
        if not held.items:
            return
        if not buf and held.sources() == 1:
            source = held.largest()
            for items, nbytes in held.take_all(source):
                self._to_front(items, nbytes, source)
            self.owner = source
            return
        self.owner = MIXED
        room = FRONT_BYTES - self.ledger.queued_bytes(len(buf))
        while held.items and (len(buf) < FRONT_ITEMS and room > 0 or not buf):
            items, nbytes, source = held.turn(TURN_ITEMS, TURN_BYTES)
            self._to_front(items, nbytes, source)
            room -= nbytes

    def flatten(self) -> None:
        """Everything into the front, still round robin (before a change to the whole queue)."""
        held = self.held
        if held.items:
            self.owner = MIXED
        while held.items:
            self._to_front(*held.turn(TURN_ITEMS, TURN_BYTES))

    def holds(self, source: Any) -> bool:
        """Whether an item of ``source``'s is queued (at the front or behind it)."""
        if source is self.owner or self.held.holds(source):
            return True
        return self.ledger.holds(source, len(self.front))

    def place(self, item: T, nbytes: int, source: Any, sizer: Callable[[T], int]) -> None:
        """Queue one item: at the front while one source alone has items queued (or the front
        is short and nothing waits), else behind it (``sizer`` measures the front if a second
        source shortens it)."""
        buf, held = self.front, self.held
        if not held.items and (not buf or source is self.owner):
            self.owner = source
        elif buf and source is not self.owner:
            self.mix(sizer)
        if held.items or self.owner is MIXED and (
                len(buf) >= FRONT_ITEMS or self.ledger.queued_bytes(len(buf)) >= FRONT_BYTES):
            held.add(source, [item], nbytes)
            if len(buf) < FRONT_ITEMS:
                self.refill()
        else:
            buf.append(item)
            self.ledger.added(1, nbytes, source, len(buf))

    def add_run(self, items: list[T], nbytes: int, source: Any,
                sizer: Callable[[T], int]) -> None:
        """Queue a run of ``source``'s items (``nbytes`` in all) behind the front, then top the
        front up: a batch while several sources have items queued."""
        if self.front and source is not self.owner:
            self.mix(sizer)
        self.held.add(source, list(items), nbytes)
        if len(self.front) < FRONT_ITEMS:
            self.refill()

    def put_front(self, item: T, source: Any, sizer: Callable[[T], int]) -> None:
        """Put ``item`` (``source``'s), taken from the front, back at its head to go first;
        ``sizer`` measures the front afresh, as the ledger knows it by position."""
        sources = self.sources()
        self.front.appendleft(item)
        self.recount(sizer, [source, *sources])
        if len(self.front) == 1 and not self.held.items:
            self.owner = source
        elif source is not self.owner:
            self.owner = MIXED

    def sources(self) -> list[Any]:
        """The source of every item at the front, front first."""
        return self.ledger.sources(len(self.front))

    def recount(self, sizer: Callable[[T], int], sources: list[Any]) -> None:
        """Measure the front afresh (after a change not made at its ends); ``sources``: each
        item's, from :meth:`sources` before the change."""
        self.ledger.reset(map(sizer, self.front), sources)

    def oldest_source(self) -> Any:
        return self.ledger.oldest_source(len(self.front))

    def clear(self) -> None:
        self.front.clear()
        self.held.clear()
        self.ledger.reset((), ())
