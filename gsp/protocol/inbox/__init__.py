"""The receive queue, in one place: :class:`Inbox` (bounded, resizable, with a policy for a full
queue) and what it is made of — :mod:`.backlog` (the per-source FIFOs that keep a queue fair
across pipes) and :mod:`.ledger` (what a FIFO holds, known by position)."""

from __future__ import annotations

from .backlog import FRONT_BYTES, FRONT_ITEMS, TURN_BYTES, TURN_ITEMS, Backlog, FairFifo
from .ledger import Ledger
from .queue import Inbox, Policy

__all__ = [
    "Inbox", "Policy", "Backlog", "FairFifo", "Ledger",
    "FRONT_ITEMS", "FRONT_BYTES", "TURN_ITEMS", "TURN_BYTES",
]
