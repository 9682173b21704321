"""What a FIFO queue holds, known by position rather than counted down item by item.

A queue whose consumer takes items without telling anyone (a socket's ``ready`` fast path pops a
``deque`` directly) can still know how many bytes it holds, and where each item came from, if
its producer records, for each put, the running totals *after* it: items ever put, bytes ever
put, and the source (a pipe) of that put. Items leave from the front, so the items taken so far
are ``puts - len(queue)``; every put whose running item total is at most that is gone. That is
:class:`Ledger`: one entry per put still (partly) queued, settled lazily by whoever asks.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable

__all__ = ["Ledger"]


class Ledger:
    """The bytes and sources of a FIFO queue's items, by position (see the module docstring).

    Every method takes ``queued``, the queue's length now. A put of a batch is one entry, so the
    bytes of a batch partly taken count until all of it is (at most one batch too many), and all
    items of a batch share its source.
    """

    __slots__ = ("puts", "put_bytes", "base", "marks")

    def __init__(self) -> None:
        self.puts = 0  # items ever put
        self.put_bytes = 0  # bytes ever put
        self.base = 0  # put_bytes after the last put wholly taken
        #: One (puts, put_bytes, source) after each put still (partly) queued, oldest first.
        self.marks: deque[tuple[int, int, Any]] = deque()

    def added(self, n: int, nbytes: int, source: Any, queued: int) -> None:
        """``n`` items of ``nbytes`` from ``source`` were just appended; ``queued`` counts them."""
        marks = self.marks
        if len(marks) >= queued:  # entries of items already taken: settle first
            if queued == n:  # everything before these was taken
                marks.clear()
                self.base = self.put_bytes
            else:
                self.settle(queued - n)
        self.puts += n
        self.put_bytes += nbytes
        marks.append((self.puts, self.put_bytes, source))

    def settle(self, queued: int) -> None:
        """Forget the puts whose items were all taken."""
        taken = self.puts - queued
        marks = self.marks
        while marks and marks[0][0] <= taken:
            self.base = marks.popleft()[1]

    def queued_bytes(self, queued: int) -> int:
        self.settle(queued)
        return self.put_bytes - self.base

    @property
    def bytes_at_most(self) -> int:
        """The bytes queued as last settled: never fewer than the true count (no settling)."""
        return self.put_bytes - self.base

    def oldest_source(self, queued: int) -> Any:
        """The source of the item at the front of the queue (``queued`` > 0)."""
        self.settle(queued)
        return self.marks[0][2]

    def holds(self, source: Any, queued: int) -> bool:
        """Whether an item from ``source`` is still queued."""
        self.settle(queued)
        return any(mark[2] is source for mark in self.marks)

    def sources(self, queued: int) -> list[Any]:
        """The source of every queued item, front first."""
        self.settle(queued)
        out: list[Any] = []
        at = self.puts - queued  # position of the front item
        for end, _, source in self.marks:
            out += [source] * (end - at)
            at = end
        return out

    def reset(self, sizes: Iterable[int], sources: Iterable[Any]) -> None:
        """Start again with one entry per queued item (after items left from the middle)."""
        self.puts = self.put_bytes = self.base = 0
        marks = self.marks
        marks.clear()
        for size, source in zip(sizes, sources):
            self.puts += 1
            self.put_bytes += size
            marks.append((self.puts, self.put_bytes, source))
