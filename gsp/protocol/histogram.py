"""Histograms a protocol keeps (a request's round-trip time), read as snapshots like the stats.

A :class:`Histogram` counts observations into fixed buckets (upper bounds, seconds for a time)
and keeps their sum, as a Prometheus histogram does; nothing is allocated per observation. A
protocol exposes its histograms through :meth:`gsp.protocol.Protocol.histograms` (and a context
through ``Context.histograms``): each a :meth:`Histogram.snapshot`, which ``Socket.histograms``,
:func:`gsp.stats` and :mod:`gsp.prometheus` show. docs/stats.md lists the built-ins' histograms.

On a hot path, :meth:`Histogram.observe` costs a Python call; a protocol that counts every
request may do its two steps inline instead (``h.counts[bisect_left(h.bounds, x)] += 1`` and
``h.sum += x``), as req does for its round trips.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Iterable

__all__ = ["Histogram", "LATENCY_BOUNDS"]

#: Bucket bounds (seconds) for a network round trip: 25 µs to 10 s, about three per decade.
LATENCY_BOUNDS: tuple[float, ...] = (
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0,
)


class Histogram:
    """Counts of observations per bucket: ``counts[i]`` holds those at most ``bounds[i]`` and
    above ``bounds[i - 1]``; the last count, those above every bound (+Inf). Raises
    ``ValueError`` for bounds that are empty or not strictly increasing."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float] = LATENCY_BOUNDS) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        if not self.bounds or any(a >= b for a, b in zip(self.bounds, self.bounds[1:])):
            raise ValueError(f"histogram bounds must increase strictly: {self.bounds}")
        #: One count per bound, and one more for what is above them all.
        self.counts = [0] * (len(self.bounds) + 1)
        #: The sum of every observation.
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add(self, other: "Histogram") -> None:
        """Add ``other``'s counts and sum to this one (both with the same bounds: else
        ``ValueError``), as a socket folds in a closed context's."""
        if other.bounds != self.bounds:
            raise ValueError("histograms with different bounds do not add up")
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.sum += other.sum

    @property
    def count(self) -> int:
        return sum(self.counts)

    def snapshot(self) -> dict[str, Any]:
        """``{"bounds": (...), "counts": [...], "count": n, "sum": s}``: a copy, per bucket (not
        cumulative; Prometheus' ``le`` buckets are the running sums of ``counts``)."""
        return {"bounds": self.bounds, "counts": list(self.counts), "count": self.count,
                "sum": self.sum}

    @classmethod
    def total(cls, parts: Iterable["Histogram"], bounds: Iterable[float] = LATENCY_BOUNDS,
              ) -> "Histogram":
        """A new histogram adding up ``parts`` (a socket's, over its contexts)."""
        out = cls(bounds)
        for h in parts:
            out.add(h)
        return out
