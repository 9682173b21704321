"""The receive queue of protocols (a helper; no protocol knowledge here).

:class:`Inbox` is the one receive queue every built-in protocol uses: bounded in messages and
bytes, resizable while greenlets wait on it, with a policy for a full queue (push back, drop the
oldest, drop the new). Its waits use :mod:`gsp.protocol.waiting`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, TypeVar

import gevent

from ...chan import Recv, select
from ...errors import Closed
from ..waiting import Deadline, Signal
from .backlog import FairFifo

if TYPE_CHECKING:
    from ..interface import SocketHandle

__all__ = ["Inbox", "Policy"]

T = TypeVar("T")
Policy = Literal["block", "drop_oldest", "drop_newest"]


def _nothing(item: object) -> int:
    return 0


class Inbox(Generic[T]):
    """A bounded, resizable receive queue between pipe readers (``put``) and receivers (``get``).

    ``policy`` picks what ``put`` does on a full queue: ``"block"`` waits for room (back-pressure
    to the peer), ``"drop_oldest"`` discards the oldest queued item (sub), ``"drop_newest"``
    discards the new one (bus). Drops are counted in ``dropped`` and, when ``stats`` is given, in
    ``stats[stat]`` too (a protocol's ``stats``: ``dropped_queue_full`` by default). Unlike a :class:`gsp.chan.Chan`, an Inbox can be resized or filtered
    while greenlets wait on it. After ``close`` both ``put`` and ``get`` raise
    :class:`gsp.Closed` ("<owner> closed": the socket's or a context's queue says so); queued
    items are discarded.

    ``max_bytes`` (0: none) bounds the queue in bytes too (``sizer(item)``, by default ``len``:
    a body's, or a Message's header and body): the queue is full at ``capacity`` items or once it
    holds ``max_bytes``, whichever comes first, with the same policy; one item is always let in, however big. A
    producer that knows the bytes of what it puts passes them (``nbytes``) and nothing is
    measured. With ``sources=True`` the queue also remembers where each item came from (the
    ``source`` of its put, e.g. the pipe), so items can be bare bodies: :meth:`get_from` returns
    an item with its source.

    **Fair across sources.** The ``source`` of a put (the pipe) is also what fairness is kept
    by: while one source alone has items queued, the queue is a plain FIFO. Once a second source
    puts, the queue keeps a short front (:data:`FRONT_ITEMS` items, :data:`FRONT_BYTES` bytes) and
    each source's further items wait behind it in their own FIFO (a
    :class:`gsp.protocol.inbox.backlog.FairFifo`); the front is refilled from them round robin, so a pipe's
    message waits behind at most the front and a turn of each other source, never behind
    another pipe's whole backlog. Each source's own order is kept. On a full queue, ``"block"``
    still lets in one item from a source that has none waiting behind the front (its reader
    holds that message anyway), ``"drop_oldest"`` drops the oldest waiting item of the source
    with the most waiting, and ``"drop_newest"`` drops that source's newest rather than another
    source's message.

    :attr:`ready` is the front, for a protocol's ``ready`` fast path: a consumer may
    ``popleft()`` it directly while it is not empty, then calls :meth:`get` (or :meth:`poll`),
    which refills it. A producer blocked on a full queue is let in by the next :meth:`get`.
    Bytes and sources keep up without the consumer's help: a :class:`gsp.protocol.inbox.ledger.Ledger` knows
    them by position.
    """

    POLICIES = ("block", "drop_oldest", "drop_newest")

    __slots__ = ("_buf", "_cap", "_policy", "_items", "_space", "_getters", "_putters",
                 "_closed", "dropped", "_stats", "_stat", "_owner", "_max_bytes", "_sizer", "_size_of",
                 "_sources", "_fifo")

    def __init__(self, capacity: int, policy: Policy = "block",
                 stats: dict[str, int] | None = None, stat: str = "dropped_queue_full",
                 owner: str = "queue", max_bytes: int = 0,
                 sizer: Callable[[T], int] | None = None, sources: bool = False) -> None:
        if policy not in self.POLICIES:
            raise ValueError(f"policy must be one of {self.POLICIES}, not {policy!r}")
        self._cap = capacity
        self._max_bytes = max_bytes
        self._size_of: Callable[[T], int] = sizer or len  # type: ignore[assignment]
        self._sizer = self._size_of if max_bytes else _nothing  # unbounded: nothing measured
        self._sources = sources
        # The front, what waits behind it per source, and the front's bytes and sources by
        # position (sources are kept for fairness, whether or not asked).
        self._fifo: FairFifo[T] = FairFifo()
        self._buf: deque[T] = self._fifo.front
        self._policy = policy
        self._items = Signal()  # fired when an item arrives (only if someone waits for one)
        self._space = Signal()  # fired when room appears (only if a blocked put waits)
        self._getters = 0
        self._putters = 0
        self._closed = False
        self.dropped = 0
        self._stats = stats
        self._stat = stat
        self._owner = owner
        if stats is not None:
            stats.setdefault(stat, 0)

    @classmethod
    def for_option(cls, handle: "SocketHandle", policy: Policy = "block",
                   stats: dict[str, int] | None = None,
                   option: str = "recv_buffer", sources: bool = False,
                   sizer: Callable[[Any], int] | None = None) -> "Inbox[Any]":
        """The socket's receive queue: its capacity is the socket's ``option`` and its byte bound
        ``<option>_bytes``; both follow the options when they change (shrinking drops the oldest
        items, counted as drops)."""
        inbox: Inbox[Any] = cls(handle.options[option], policy, stats, owner="socket",
                                max_bytes=handle.options[option + "_bytes"], sizer=sizer,
                                sources=sources)
        handle.watch(option, inbox.resize)
        handle.watch(option + "_bytes", inbox.set_max_bytes)
        return inbox

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def ready(self) -> "deque[T]":
        return self._buf

    def __len__(self) -> int:
        fifo = self._fifo  # (its length inline: one call less to ask whether the inbox is empty)
        return len(fifo.front) + fifo.held.items

    def _count(self, n: int) -> None:
        self.dropped += n
        if self._stats is not None:
            self._stats[self._stat] += n

    def _check(self) -> None:
        if self._closed:
            raise Closed(f"{self._owner} closed")

    def _yield_to_getters(self) -> None:
        # Receivers were woken but have not run yet (a reader delivers a whole batch without
        # yielding): let them drain before dropping anything.
        gevent.sleep(0)
        self._check()

    def _full(self) -> bool:
        n = len(self._fifo)
        if n >= self._cap:
            return True
        return bool(self._max_bytes and n and self.queued_bytes >= self._max_bytes)

    @property
    def queued_bytes(self) -> int:
        """Bytes queued now (0 while neither bytes nor sources are kept). Items taken from the
        middle of a ``put_all`` batch count until the batch is all taken: at most one batch too
        many."""
        return self._fifo.queued_bytes()

    def _place(self, item: T, nbytes: int, source: Any) -> None:
        # Queue one item with room for it (fairly: FairFifo.place), and wake a waiting getter.
        self._fifo.place(item, nbytes, source, self._sizer)
        if self._items.armed:  # a get or a select (wake_case) may be waiting
            self._items.fire()

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def set_max_bytes(self, max_bytes: int) -> None:
        """Change the byte bound (0: none); when lowering it, the oldest items that no longer fit
        go (counted as drops)."""
        self._max_bytes = max_bytes
        self._sizer = self._size_of if max_bytes else _nothing
        self._fifo.flatten()
        self._recount(self._sources_now())
        n = 0
        while self._full() and len(self._buf) > 1:
            self._buf.popleft()
            n += 1
        if n:
            self._count(n)
        if self._putters:
            self._space.fire()

    def _sources_now(self) -> list[Any]:
        return self._fifo.sources()

    def _recount(self, sources: list[Any]) -> None:
        # Measure the front afresh (after a change not made at its ends); sources: each item's,
        # from _sources_now() before the change.
        self._fifo.recount(self._sizer, sources)

    def _source_of_oldest(self) -> Any:
        return self._fifo.oldest_source() if self._sources else None

    def _bytes_room(self, items: list[T], i: int, room: int) -> int:
        # How many of items[i:] (at most room) go in before the byte bound is reached: while
        # under it, items are let in, and the one that reaches it too (as put does).
        left = self._max_bytes - self.queued_bytes
        if left <= 0:
            return 0 if self._buf else 1
        size = self._sizer
        k = 0
        for item in items[i:i + room]:
            k += 1
            left -= size(item)
            if left <= 0:
                break
        return k

    def put(self, item: T, timeout: float | None = None, nbytes: int | None = None,  # noqa: C901 -- issue 26: split with the hot-path helpers
            source: Any = None) -> bool:
        """Queue ``item`` (of ``nbytes`` bytes, measured when not given; from ``source``); False
        if the policy dropped it (the new one or an older one). With ``"block"``, waits up to
        ``timeout`` for room (:class:`gsp.Timeout`)."""
        buf = self._buf
        limit = self._max_bytes
        fifo = self._fifo
        ledger = fifo.ledger
        if (not buf or source is fifo.owner) and not fifo.held.items and \
                len(buf) < self._cap and not self._closed and (
                not limit or not buf or ledger.bytes_at_most < limit):
            # One source, and room (the byte test uses the last settled count, never below the
            # true one): the common case, without a call.
            fifo.owner = source
            buf.append(item)
            ledger.added(1, self._sizer(item) if nbytes is None else nbytes, source, len(buf))
            if self._items.armed:  # a get or a select (wake_case) may be waiting
                self._items.fire()
            return True
        self._check()
        if nbytes is None:
            nbytes = self._sizer(item)
        full = self._full()
        if buf and source is not fifo.owner:
            fifo.mix(self._sizer, spare=full and self._policy == "drop_newest")
        kept = True
        if full and self._policy != "block" and self._getters:
            self._yield_to_getters()
            full = self._full()
        held = fifo.held
        if full:
            if self._policy == "drop_newest":
                victim = held.largest() if held.items else source
                if victim is source:
                    self._count(1)
                    return False
                held.drop(victim, True, self._sizer)  # the busiest source's newest, not this one
                self._count(1)
                kept = False
            elif self._policy == "drop_oldest":
                n = 0
                while (buf or held.items) and self._full():
                    if held.items:  # the busiest source's oldest waiting
                        held.drop(held.largest(), False, self._sizer)
                    else:
                        buf.popleft()
                    n += 1
                self._count(n)
                kept = False
            else:
                deadline = Deadline(timeout)
                # A source with nothing queued gets one item in (its reader holds it anyway).
                while self._full() and fifo.holds(source):
                    self._check()
                    self._wait(self._space, deadline, putter=True)
                self._check()
        self._place(item, nbytes, source)
        return kept

    def put_all(self, items: list[T], nbytes: int | None = None, source: Any = None) -> int:
        """``put`` each of ``items`` (``nbytes`` in all, measured when not given) in order
        (waiting for room with ``"block"``), moving runs of them at once; returns how many
        items the policy dropped.

        Items are measured one by one only near the byte bound; otherwise a run that is part of
        the batch is counted as its share of ``nbytes`` (the shares add up to ``nbytes``)."""
        buf = self._buf
        block = self._policy == "block"
        fifo = self._fifo
        ledger = fifo.ledger
        limit = self._max_bytes
        left = sum(map(self._sizer, items)) if nbytes is None else nbytes  # of items[i:]
        i, n = 0, len(items)
        while i < n:
            self._check()
            if fifo.held.items or buf and source is not fifo.owner:  # several sources
                return self._put_all_fair(items[i:] if i else items, left, source)
            fifo.owner = source
            room = self._cap - len(buf)
            exact = False
            if limit and room > 0 and buf and left > limit - self.queued_bytes:
                room = self._bytes_room(items, i, room)  # near the bound: by their sizes
                exact = True
            if room > 0 and not (block and self._putters):  # blocked putters go first (FIFO)
                run = items[i:i + room]
                buf.extend(run)
                k = len(run)
                if i + k == n:
                    share = left
                elif exact:
                    share = min(sum(map(self._sizer, run)), left)
                else:
                    share = left * k // (n - i)
                left -= share
                ledger.added(k, share, source, len(buf))
                i += k
                if self._items.armed:
                    self._items.fire()
                continue
            if block:
                item = items[i]
                size = self._sizer(item)
                self.put(item, None, min(size, left), source)  # full: wait for room as put does
                left -= min(size, left)
                i += 1
                continue
            if self._getters:
                self._yield_to_getters()
                if not self._full():
                    continue
            # Full, and nobody drained it: the rest goes by the policy, item by item as put
            # would do it (how many fit depends on their sizes).
            before = self.dropped
            for item in items[i:]:
                self.put(item, None, None, source)
            return self.dropped - before
        return 0

    def _put_all_fair(self, items: list[T], nbytes: int, source: Any) -> int:
        # put_all while several sources have items queued: a batch that fits waits behind the
        # front as one run; else item by item, as put does it.
        limit = self._max_bytes
        if len(self._fifo) + len(items) <= self._cap and not self._closed and (
                not limit or self.queued_bytes + nbytes <= limit) and not (
                self._policy == "block" and self._putters):
            self._fifo.add_run(items, nbytes, source, self._sizer)
            if self._items.armed:
                self._items.fire()
            return 0
        before = self.dropped
        for item in items:
            self.put(item, None, None, source)
        return self.dropped - before

    def get(self, timeout: float | None = None) -> T:
        """Take the oldest item, waiting up to ``timeout`` (:class:`gsp.Timeout`)."""
        buf = self._buf
        if buf and not self._closed:  # fast path: no wait, no (index, item) pair
            item = buf.popleft()
            if self._putters:
                self._space.fire()
            return item
        got: T = self.get_or(timeout)[1]
        return got

    def get_from(self, timeout: float | None = None) -> tuple[T, Any]:
        """Take the oldest item with the ``source`` it was put with (``sources=True``), waiting
        up to ``timeout`` (:class:`gsp.Timeout`)."""
        self._await(timeout, ())
        source = self._source_of_oldest()
        return self._take(), source

    def poll(self) -> bool:
        """Whether :meth:`get` would not wait: an item is queued, or the inbox is closed."""
        if not self._buf and self._fifo.held.items:
            self._fifo.refill()
        return bool(self._buf) or self._closed

    def wake_case(self) -> Recv:
        """A select case that becomes ready when an item may have arrived or the inbox closed
        (for a protocol's ``wake_cases``)."""
        if self._putters:  # items were taken through `ready`: let blocked producers in
            self._space.fire()
        return self._items.case()

    def get_or(self, timeout: float | None, *extra: Recv) -> tuple[int, Any]:
        """``(0, item)`` like :meth:`get`, or ``(k, value)`` when the :class:`gsp.chan.Recv`
        case ``extra[k - 1]`` became ready first (e.g. a context closing)."""
        i, v = self._await(timeout, extra)
        return (i, v) if i else (0, self._take())

    def _await(self, timeout: float | None, extra: tuple[Recv, ...]) -> tuple[int, Any]:
        # Until an item is queued: (0, None); or (k, value) once extra[k - 1] was ready first.
        deadline: Deadline | None = None
        while True:
            self._check()
            if not self._buf and self._fifo.held.items:
                self._fifo.refill()
            if self._buf:
                return 0, None
            if self._putters:  # items were taken through `ready`: let blocked producers in
                self._space.fire()
            if deadline is None:
                deadline = Deadline(timeout)
            i, v = self._wait(self._items, deadline, putter=False, extra=extra)
            if i:
                return i, v

    def _take(self) -> T:
        item = self._buf.popleft()
        if self._putters:
            self._space.fire()
        return item

    def _wait(self, signal: Signal, deadline: Deadline, putter: bool,
              extra: tuple[Recv, ...] = ()) -> tuple[int, Any]:
        case = signal.case()
        left = deadline.remaining()
        if putter:
            self._putters += 1
        else:
            self._getters += 1
        try:
            return select([case, *extra], left)
        finally:
            if putter:
                self._putters -= 1
            else:
                self._getters -= 1

    def resize(self, capacity: int) -> None:
        """Change the capacity now; when shrinking, the oldest items that no longer fit go
        (counted as drops)."""
        self._cap = capacity
        self._fifo.flatten()
        buf = self._buf
        n = 0
        while len(buf) > capacity:
            buf.popleft()  # from the front: the byte count by position still holds
            n += 1
        if n:
            self._count(n)
        if self._putters:
            self._space.fire()

    def put_back(self, item: T, source: Any = None) -> None:
        """Return ``item`` (``source``'s), taken from this queue or handed on in its place, to
        the head of the queue, to be taken next: for a receiver that was given it and left
        before it could return it. It was accepted once, so it never waits and is never dropped,
        whatever the bounds; after :meth:`close` it is discarded. Counted in the queue's bytes
        and sources as any queued item."""
        if self._closed:
            return
        self._fifo.put_front(item, source, self._sizer)
        if self._items.armed:  # a get or a select (wake_case) may be waiting
            self._items.fire()

    def filter(self, keep: Callable[[T], bool]) -> None:
        """Discard every queued item for which ``keep(item)`` is false (order is kept)."""
        pairs = [(x, src) for x, src in zip(self._buf, self._sources_now()) if keep(x)]
        self._buf.clear()
        self._buf.extend(x for x, _ in pairs)
        self._recount([src for _, src in pairs])
        self._fifo.held.keep(keep, self._sizer)
        if self._putters:
            self._space.fire()

    def close(self) -> None:
        """Wake every waiter with :class:`gsp.Closed`; queued items are discarded."""
        self._closed = True
        self._fifo.clear()
        self._items.close()
        self._space.close()
