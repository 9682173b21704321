"""What waits behind a fair queue's front: each source's items in arrival order, taken in turns.

A receive queue that is fair across pipes keeps a short front (the deque its consumer pops) and,
behind it, one FIFO per source (a pipe) that has more to give. The front is refilled from those
FIFOs round robin, a few items per source per turn, so one pipe's backlog never sits in front of
another pipe's next message. :class:`Backlog` is that set of FIFOs: it keeps runs (the items of
one put, with their bytes), the turn order, and counts of items and bytes, and knows nothing of
capacities, policies or waiting (the :class:`gsp.queues.Inbox` decides those).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Generic, TypeVar

__all__ = ["Backlog"]

T = TypeVar("T")


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
