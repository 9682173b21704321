"""The receive queue of protocols (a helper; no protocol knowledge here).

:class:`Inbox` is the one receive queue every built-in protocol uses: bounded in messages and
bytes, resizable while greenlets wait on it, with a policy for a full queue (push back, drop the
oldest, drop the new). Its waits use :mod:`gsp.protocol.waiting`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, TypeVar

import gevent

from ...chan import Recv, select_channels
from ...errors import Closed
from ..waiting import ChangeNotice, Deadline
from .backlog import FairFifo

if TYPE_CHECKING:
    from ...handles import SocketHandle

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

    __slots__ = ("_buf", "_cap", "_on_full", "_items", "_space", "_getters", "_putters",
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
        self._on_full = _ON_FULL[policy]  # what a put into a full queue does: chosen once
        self._items = ChangeNotice()  # fired when an item arrives (only if someone waits for one)
        self._space = ChangeNotice()  # fired when room appears (only if a blocked put waits)
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
        ``<option>_size``; both follow the options when they change (shrinking drops the oldest
        items, counted as drops)."""
        inbox: Inbox[Any] = cls(handle.options[option], policy, stats, owner="socket",
                                max_bytes=handle.options[option + "_size"], sizer=sizer,
                                sources=sources)
        handle.watch(option, inbox.resize)
        handle.watch(option + "_size", inbox.set_max_bytes)
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

    def _getters_made_room(self) -> bool:
        # Whether receivers that were woken but have not run yet (a reader delivers a whole
        # batch without yielding) made room, once given their turn: before dropping anything.
        # (Only while some wait: `if inbox._getters and inbox._getters_made_room()`.)
        gevent.sleep(0)
        self._check()
        return not self._full()

    def _wake_getters(self) -> None:
        # The one wake-up of receivers: a get or a select (wake_case) may be waiting. (Inline
        # in put's and put_all's fast paths, which pay no call when nobody waits.)
        if self._items.armed:
            self._items.fire()

    def _wake_putters(self) -> None:
        # The one wake-up of producers: a put blocked on a full queue may find room now.
        # (Inline in get's fast path and _take, which pay no call when none is blocked.)
        if self._putters:
            self._space.fire()

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
        self._wake_getters()

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
        self._count(n)
        self._wake_putters()

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

    def put(self, item: T, timeout: float | None = None, nbytes: int | None = None,
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
            if self._items.armed:  # _wake_getters, inline
                self._items.fire()
            return True
        self._check()
        if nbytes is None:
            nbytes = self._sizer(item)
        on_full = self._on_full
        full = self._full()
        if buf and source is not fifo.owner:
            fifo.mix(self._sizer, spare=full and on_full.spare)
        if full:
            return on_full.put(self, item, nbytes, source, timeout)
        self._place(item, nbytes, source)
        return True

    def put_all(self, items: list[T], nbytes: int | None = None, source: Any = None) -> int:
        """``put`` each of ``items`` (``nbytes`` in all, measured when not given) in order
        (waiting for room with ``"block"``), moving runs of them at once; returns how many
        items the policy dropped.

        Items are measured one by one only near the byte bound; otherwise a run that is part of
        the batch is counted as its share of ``nbytes`` (the shares add up to ``nbytes``)."""
        buf = self._buf
        on_full = self._on_full
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
            if room > 0 and not (on_full.queues and self._putters):  # blocked puts go first
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
                if self._items.armed:  # _wake_getters, inline
                    self._items.fire()
                continue
            # Full: the policy goes on with the batch (waits for room, or drops).
            before = self.dropped
            i, left = on_full.put_batch(self, items, i, left, source)
            if i == n:
                return self.dropped - before
        return 0

    def _put_all_fair(self, items: list[T], nbytes: int, source: Any) -> int:
        # put_all while several sources have items queued: a batch that fits waits behind the
        # front as one run; else item by item, as put does it.
        limit = self._max_bytes
        if len(self._fifo) + len(items) <= self._cap and not self._closed and (
                not limit or self.queued_bytes + nbytes <= limit) and not (
                self._on_full.queues and self._putters):
            self._fifo.add_run(items, nbytes, source, self._sizer)
            self._wake_getters()
            return 0
        return self._put_each(items, source)

    def _put_each(self, items: list[T], source: Any) -> int:
        # put each of items (measured one by one), as put does it; how many were dropped.
        before = self.dropped
        for item in items:
            self.put(item, None, None, source)
        return self.dropped - before

    def get(self, timeout: float | None = None) -> T:
        """Take the oldest item, waiting up to ``timeout`` (:class:`gsp.Timeout`)."""
        buf = self._buf
        if buf and not self._closed:  # fast path: no wait, no (index, item) pair
            item = buf.popleft()
            if self._putters:  # _wake_putters, inline
                self._space.fire()
            return item
        self._await(timeout, ())
        return self._take()

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
        self._wake_putters()  # items may have been taken through `ready`
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
            self._wake_putters()  # items may have been taken through `ready`
            if deadline is None:
                deadline = Deadline(timeout)
            i, v = self._wait(self._items, deadline, putter=False, extra=extra)
            if i:
                return i, v

    def _take(self) -> T:
        item = self._buf.popleft()
        if self._putters:  # _wake_putters, inline
            self._space.fire()
        return item

    def _wait(self, signal: ChangeNotice, deadline: Deadline, putter: bool,
              extra: tuple[Recv, ...] = ()) -> tuple[int, Any]:
        case = signal.case()
        left = deadline.remaining()
        if putter:
            self._putters += 1
        else:
            self._getters += 1
        try:
            return select_channels([case, *extra], left)
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
        self._count(n)
        self._wake_putters()

    def put_back(self, item: T, source: Any = None) -> None:
        """Return ``item`` (``source``'s), taken from this queue or handed on in its place, to
        the head of the queue, to be taken next: for a receiver that was given it and left
        before it could return it. It was accepted once, so it never waits and is never dropped,
        whatever the bounds; after :meth:`close` it is discarded. Counted in the queue's bytes
        and sources as any queued item."""
        if self._closed:
            return
        self._fifo.put_front(item, source, self._sizer)
        self._wake_getters()

    def filter(self, keep: Callable[[T], bool]) -> None:
        """Discard every queued item for which ``keep(item)`` is false (order is kept)."""
        pairs = [(x, src) for x, src in zip(self._buf, self._sources_now()) if keep(x)]
        self._buf.clear()
        self._buf.extend(x for x, _ in pairs)
        self._recount([src for _, src in pairs])
        self._fifo.held.keep(keep, self._sizer)
        self._wake_putters()

    def close(self) -> None:
        """Wake every waiter with :class:`gsp.Closed`; queued items are discarded."""
        self._closed = True
        self._fifo.clear()
        self._items.close()
        self._space.close()


class _OnFull:
    """What an :class:`Inbox` does with what is put into it while it is full: one subclass a
    policy, chosen once (``Inbox(policy=...)``)."""

    __slots__ = ()

    #: A batch (``put_all``) waits behind blocked puts rather than passing them (FIFO).
    queues = False
    #: ``FairFifo.mix`` keeps the front a place short for the newcomer's item (it may drop).
    spare = False

    def put(self, inbox: Inbox[Any], item: Any, nbytes: int, source: Any,
            timeout: float | None) -> bool:
        """``inbox.put(item)`` on a full ``inbox``: True if it went in and nothing was dropped."""
        raise NotImplementedError

    def put_batch(self, inbox: Inbox[Any], items: list[Any], i: int, left: int,
                  source: Any) -> tuple[int, int]:
        """``inbox.put_all(items)`` found the inbox full at ``items[i]`` (``left``: the bytes
        of ``items[i:]``): put some, and say where the batch goes on (``len(items)``: done)
        and with how many bytes left."""
        raise NotImplementedError


class _Block(_OnFull):
    """``"block"``: wait for room (back-pressure to the peer)."""

    __slots__ = ()
    queues = True

    def put(self, inbox: Inbox[Any], item: Any, nbytes: int, source: Any,
            timeout: float | None) -> bool:
        deadline = Deadline(timeout)
        # A source with nothing queued gets one item in (its reader holds it anyway).
        while inbox._full() and inbox._fifo.holds(source):
            inbox._check()
            inbox._wait(inbox._space, deadline, putter=True)
        inbox._check()
        inbox._place(item, nbytes, source)
        return True

    def put_batch(self, inbox: Inbox[Any], items: list[Any], i: int, left: int,
                  source: Any) -> tuple[int, int]:
        # One item, waiting for room as put does; the batch goes on in runs.
        item = items[i]
        share = min(inbox._sizer(item), left)
        inbox.put(item, None, share, source)
        return i + 1, left - share


class _Drop(_OnFull):
    """The policies that never wait: they drop, once receivers woken but not yet run had their
    turn."""

    __slots__ = ()

    def put(self, inbox: Inbox[Any], item: Any, nbytes: int, source: Any,
            timeout: float | None) -> bool:
        if inbox._getters and inbox._getters_made_room():
            inbox._place(item, nbytes, source)
            return True
        return self.drop(inbox, item, nbytes, source)

    def drop(self, inbox: Inbox[Any], item: Any, nbytes: int, source: Any) -> bool:
        """Make room for ``item`` and place it, or drop it: False (something was dropped)."""
        raise NotImplementedError

    def put_batch(self, inbox: Inbox[Any], items: list[Any], i: int, left: int,
                  source: Any) -> tuple[int, int]:
        if inbox._getters and inbox._getters_made_room():
            return i, left
        # Nobody drained it: the rest goes by the policy, item by item as put would do it (how
        # many fit depends on their sizes).
        inbox._put_each(items[i:], source)
        return len(items), 0


class _DropOldest(_Drop):
    """``"drop_oldest"`` (sub): the oldest waiting item of the source with the most waiting,
    else the oldest of the front, until there is room."""

    __slots__ = ()

    def drop(self, inbox: Inbox[Any], item: Any, nbytes: int, source: Any) -> bool:
        buf, held = inbox._buf, inbox._fifo.held
        n = 0
        while (buf or held.items) and inbox._full():
            if held.items:  # the busiest source's oldest waiting
                held.drop(held.largest(), False, inbox._sizer)
            else:
                buf.popleft()
            n += 1
        inbox._count(n)
        inbox._place(item, nbytes, source)
        return False


class _DropNewest(_Drop):
    """``"drop_newest"`` (bus): the new item, or the newest of a busier source rather than
    this source's message."""

    __slots__ = ()
    spare = True

    def drop(self, inbox: Inbox[Any], item: Any, nbytes: int, source: Any) -> bool:
        held = inbox._fifo.held
        victim = held.largest() if held.items else source
        inbox._count(1)
        if victim is source:
            return False
        held.drop(victim, True, inbox._sizer)  # the busiest source's newest, not this one
        inbox._place(item, nbytes, source)
        return False


_ON_FULL: dict[str, _OnFull] = {
    "block": _Block(), "drop_oldest": _DropOldest(), "drop_newest": _DropNewest()}
