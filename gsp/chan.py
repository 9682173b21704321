"""Channels and ``select`` for greenlets, in the style of Go.

A :class:`Chan` carries Python objects between greenlets. ``Chan(0)`` is unbuffered: a send
completes only when a receiver takes the item (a rendezvous). ``Chan(n)`` buffers up to ``n``
items. :func:`select_channels` waits on any mix of receive and send cases and completes exactly one.

Every blocking operation follows the gevent pattern: a fast path that touches no hub, otherwise a
:class:`gevent.hub.Waiter` plus an optional timeout, with the cleanup in ``finally`` — so an external
``gevent.Timeout`` or ``Greenlet.kill()`` that interrupts a blocked call propagates and leaves the
channel consistent: an item handed to an interrupted receiver is put back at the head of the
channel, and a waiter never lingers in a queue.

Semantics:

* ``send`` on a closed channel raises :class:`gsp.Closed`; a sender blocked when the channel is
  closed is woken with :class:`gsp.Closed` and its item is not delivered.
* ``recv`` on a closed channel drains what is buffered, then raises :class:`gsp.Closed`.
* ``timeout`` is in seconds (int, float or :class:`datetime.timedelta`); ``None`` waits forever;
  ``timeout`` elapsed raises :class:`gsp.Timeout`; ``block=False`` (or ``timeout=0``) raises
  :class:`gsp.WouldBlock` (not a ``Timeout``: no time passed) instead of waiting.
* ``select_channels`` picks uniformly at random among the cases ready at the same moment (no case starves);
  a :class:`Recv` case on a closed, drained channel is ready and yields :data:`CLOSED`.
* A channel belongs to the OS thread that made it (its gevent hub): waiting on it, waking a
  greenlet parked on it, or closing it from another thread raises :class:`gsp.WrongThread` at
  once (the fast paths, which neither wait nor wake, do not look).
"""

from __future__ import annotations

import warnings
from collections import deque
from datetime import timedelta
from random import random, shuffle
from typing import Any, Callable, Generic, Iterator, Sequence, TypeVar, cast

from gevent import Timeout as _GTimeout
from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from .errors import BadOption, Closed, Timeout, WouldBlock, WrongThread

__all__ = ["Chan", "Outbox", "Recv", "Send", "select_channels", "CLOSED", "FLUSH", "thread_ident"]

#: The OS thread's id, even in a monkey-patched program (where ``threading.get_ident`` is the
#: greenlet's: greenlets of one thread share its hub, so they may share its channels and
#: sockets). A gsp object remembers the one that made it, for :class:`gsp.WrongThread`.
thread_ident: Callable[[], int] = get_original("_thread", "get_ident")

T = TypeVar("T")


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: What a :class:`Recv` case yields from :func:`select` when its channel is closed and drained.
CLOSED: Any = _Marker("gsp.chan.CLOSED")
_EMPTY: Any = _Marker("EMPTY")
_SEND_CLOSED: Any = _Marker("SEND_CLOSED")


def _wait_secs(timeout: float | timedelta | None, op: str, why: str) -> float | None:
    """How long ``op`` may wait, in seconds (None: forever), for an operation that cannot
    complete now; under a timeout <= 0 it may not: :class:`gsp.WouldBlock` or
    :class:`gsp.Timeout` saying ``why`` (slow paths only: the fast ones never look)."""
    t = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if t is not None and t <= 0:
        raise _zero(op, t, why)
    return t


def _nowait(timeout: float | timedelta | None, block: bool) -> float | timedelta | None:
    """The timeout of a call given ``block`` (False: 0, and then no other timeout)."""
    if block is True:
        return timeout
    if block is not False:
        raise BadOption(f"block must be True or False, not {block!r}")
    if timeout is not None and timeout != 0:
        raise BadOption(f"block=False means timeout 0; it cannot go with timeout={timeout!r}")
    return 0.0


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"Chan.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


def _zero(op: str, timeout: float, why: str) -> Timeout | WouldBlock:
    """The error of an operation that cannot complete now under a timeout <= 0."""
    if timeout == 0:
        return WouldBlock(f"{op} would block: {why} (timeout 0)", timeout=0.0)
    return Timeout(f"{op} timed out: {why} (timeout {timeout:g} s)", timeout=timeout)


class _Sel:
    """One blocked operation (or select): fired at most once, by whoever completes it."""

    __slots__ = ("waiter", "fired", "index", "value")

    def __init__(self) -> None:
        self.waiter = Waiter()
        self.fired = False
        self.index = -1
        self.value: Any = None

    def fire(self, index: int, value: Any) -> None:
        self.fired = True
        self.index = index
        self.value = value
        # Waiter.switch may only run in the hub, so wake the waiter from a loop callback.
        self.waiter.hub.loop.run_callback(self.waiter.switch, None)


class _Entry:
    __slots__ = ("sel", "index", "item")

    def __init__(self, sel: _Sel, index: int, item: Any) -> None:
        self.sel = sel
        self.index = index
        self.item = item


class Chan(Generic[T]):
    """A goroutine-style channel; ``capacity=0`` makes it unbuffered."""

    __slots__ = ("_cap", "_buf", "_recvq", "_sendq", "_closed", "_ready", "_tid", "__weakref__")

    def __init__(self, capacity: object = 0) -> None:
        # (``object``, not ``int``: compiled with mypyc, an ``int`` parameter would refuse a float
        # with a TypeError of its own before this check; both builds raise the same error.)
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, not {capacity!r}")
        self._cap = capacity
        self._buf: deque[T] = deque()
        # Waiter queues are lists: usually empty or one long, and an empty deque costs ~700 bytes
        # (a channel per pipe, times 10,000 pipes).
        self._recvq: list[_Entry] = []
        self._sendq: list[_Entry] = []
        self._closed = False
        self._ready: tuple[Callable[..., Any], Callable[[], None]] | None = None  # notify_ready
        self._tid: int = thread_ident()  # the OS thread whose hub it belongs to

    def _wrong_thread(self) -> WrongThread:
        """The error of a call from another thread than the one that made the channel, on the
        paths that wait, wake a parked greenlet or close (another hub's never would). (The
        check is inlined there: a method call would cost more than the comparison.)"""
        return WrongThread("channel", self._tid, thread_ident())

    # -- introspection -------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Items buffered now (not counting blocked senders)."""
        return len(self._buf)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Chan {state} {len(self._buf)}/{self._cap}>"

    # -- non-blocking steps shared by every operation -----------------------------------------
    def _try_send(self, item: Any) -> bool:
        rq = self._recvq
        if rq:
            if thread_ident() != self._tid:
                raise self._wrong_thread()
        while rq:
            e = rq.pop(0)
            if not e.sel.fired:
                e.sel.fire(e.index, item)
                return True
        if len(self._buf) < self._cap:
            self._buf.append(item)
            if self._ready is not None:
                self._notify()
            return True
        return False

    def _notify(self) -> None:
        assert self._ready is not None
        run, callback = self._ready
        self._ready = None
        run(callback)

    def _try_recv(self) -> Any:
        buf = self._buf
        sq = self._sendq
        if buf:
            if sq:
                if thread_ident() != self._tid:
                    raise self._wrong_thread()
            item = buf.popleft()
            # A slot opened: move the longest-waiting sender's item in. The buffer can exceed
            # capacity after _put_back, so check: an unbuffered sender must still rendezvous.
            while sq and len(buf) < self._cap:
                e = sq.pop(0)
                if not e.sel.fired:
                    buf.append(e.item)
                    e.sel.fire(e.index, None)
                    break
            return item
        if sq:
            if thread_ident() != self._tid:
                raise self._wrong_thread()
        while sq:
            e = sq.pop(0)
            if not e.sel.fired:
                e.sel.fire(e.index, None)
                return e.item
        return _EMPTY

    def _put_back(self, item: Any) -> None:
        """Return an item taken by an interrupted receiver to the head of the channel."""
        rq = self._recvq
        if rq:
            if thread_ident() != self._tid:
                raise self._wrong_thread()
        while rq:  # receivers wait only on an empty buffer, so the item goes to the next one
            e = rq.pop(0)
            if not e.sel.fired:
                e.sel.fire(e.index, item)
                return
        self._buf.appendleft(item)  # may exceed capacity for a moment rather than lose it
        if self._ready is not None:
            self._notify()

    # -- public operations ---------------------------------------------------------------------
    def try_send(self, item: T) -> bool:
        """Deprecated: ``send(item, block=False)``, which raises :class:`gsp.WouldBlock` (or
        :class:`gsp.Closed`) where this returned False."""
        _deprecated("try_send(item)", "send(item, block=False)")
        if self._closed:
            return False
        return self._try_send(item)

    def send(self, item: T, timeout: float | timedelta | None = None, block: bool = True) -> None:
        """Send ``item``, waiting while the channel is full (or, unbuffered, has no receiver):
        up to ``timeout`` seconds (default: forever; then :class:`gsp.Timeout`).
        ``block=False`` never waits (:class:`gsp.WouldBlock`)."""
        if self._closed:
            raise Closed("send on a closed channel")
        if self._try_send(item):
            return
        if block is not True:
            timeout = _nowait(timeout, block)
        t = _wait_secs(timeout, "channel send", "the channel is full")
        _block(((self, True, item),), t)

    def send_nowait(self, item: T) -> None:
        """Deprecated: ``send(item, block=False)``."""
        _deprecated("send_nowait(item)", "send(item, block=False)")
        self.send(item, 0)

    def recv(self, timeout: float | timedelta | None = None, block: bool = True) -> T:
        """Receive an item, waiting while none is available: up to ``timeout`` seconds
        (default: forever; then :class:`gsp.Timeout`). ``block=False`` never waits
        (:class:`gsp.WouldBlock`)."""
        buf = self._buf
        if buf and not self._sendq:  # fast path: no blocked sender to move in behind it
            return buf.popleft()
        item = self._try_recv()
        if item is not _EMPTY:
            return cast(T, item)
        if self._closed:
            raise Closed("recv on a closed, drained channel")
        if block is not True:
            timeout = _nowait(timeout, block)
        t = _wait_secs(timeout, "channel recv", "the channel is empty")
        _, value = _block(((self, False, None),), t)
        if value is CLOSED:
            raise Closed("recv on a closed, drained channel")
        return cast(T, value)

    def recv_nowait(self) -> T:
        """Deprecated: ``recv(block=False)``."""
        _deprecated("recv_nowait()", "recv(block=False)")
        return self.recv(0)

    def notify_ready(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` once, from the event loop, when a ``recv`` could next complete at
        once: an item buffered, or the channel closed (at once if so now). A receiver with no
        greenlet to spare waits this way. One callback at a time; a new one (or None) replaces
        it. For a buffered channel: an unbuffered one holds nothing to be ready with."""
        if callback is None:
            self._ready = None
            return
        self._ready = (get_hub().loop.run_callback, callback)
        if self._buf or self._closed:
            self._notify()

    def recv_or_notify(self, callback: Callable[[], None]) -> T | None:
        """Receive an item if one is there now; else :meth:`notify_ready` ``callback`` and
        return None (for channels whose items are never None). :class:`gsp.Closed` once closed
        and drained, as :meth:`recv`."""
        item = self._try_recv()
        if item is _EMPTY:
            if self._closed:
                raise Closed("recv on a closed, drained channel")
            self.notify_ready(callback)
            return None
        return cast(T, item)

    def drain(self, limit: int) -> list[T]:
        """Take up to ``limit`` items available now without waiting (for batching writers)."""
        buf = self._buf
        if not self._sendq and len(buf) <= limit:  # fast path: take the whole buffer at once
            out = list(buf)
            buf.clear()
            return out
        out = []
        while len(out) < limit:
            item = self._try_recv()
            if item is _EMPTY:
                break
            out.append(item)
        return out

    def send_all(self, items: Sequence[T]) -> None:
        """Send ``items`` in order, exactly as one ``send`` after another would (waiting while
        full), but moving runs of them into the buffer at once."""
        buf = self._buf
        i, n = 0, len(items)
        while i < n:
            if self._closed:
                raise Closed("send on a closed channel")
            if self._recvq and self._try_send(items[i]):  # a waiting receiver takes it
                i += 1
                continue
            room = self._cap - len(buf)
            if room > 0:
                run = items[i:i + room]
                buf.extend(run)
                i += len(run)
                if self._ready is not None:
                    self._notify()
            else:
                self.send(items[i])  # full: wait for room like a plain send
                i += 1

    def close(self) -> None:
        """Close the channel: receivers drain what is buffered, then get :class:`gsp.Closed`."""
        if self._closed:
            return
        if thread_ident() != self._tid:
            raise self._wrong_thread()
        self._closed = True
        if self._ready is not None:
            self._notify()
        rq, self._recvq = self._recvq, []
        for e in rq:
            if not e.sel.fired:
                e.sel.fire(e.index, CLOSED)
        sq, self._sendq = self._sendq, []
        for e in sq:
            if not e.sel.fired:
                e.sel.fire(e.index, _SEND_CLOSED)

    def __iter__(self) -> Iterator[T]:
        """Receive items until the channel is closed and drained."""
        while True:
            try:
                yield self.recv()
            except Closed:
                return


#: Queued by :meth:`Outbox.offer` after a partial direct write: the consumer writes the rest.
FLUSH: Any = _Marker("gsp.chan.FLUSH")


class Outbox(Chan[T]):
    """A buffered channel with one consumer greenlet, started on first need, and a bypass.

    Made for write queues (a pipe's): ``start()`` starts the consumer the first time an item is
    queued (or :meth:`ensure_consumer` is called). While the consumer is idle — not started yet,
    or parked on the empty channel and not yet woken — :meth:`offer` may hand the item to
    ``direct`` instead of queueing it, at most once per turn of the event loop, so that a burst
    still leaves as one batch through the consumer. Everything queued before is consumed by then,
    so order is kept. ``direct(item)`` returns 2 when it took the whole item, 0 when it did
    nothing (the item is queued instead), and 1 when it took part of it: :data:`FLUSH` is then
    queued so the consumer finishes the job (or meets the error) in its own greenlet.

    ``max_bytes`` (0: none) makes it full once the items queued (``len`` of each) reach that
    many bytes, as well as at ``capacity`` items; one item is always let in. The count is the
    producers': the consumer calls :meth:`took` after taking items to set it right again.

    :attr:`direct_items` and :attr:`direct_bytes` (``len`` of each) count the items ``direct``
    took, whole or in part: with what the consumer took, everything that left.
    """

    __slots__ = ("_start", "_direct", "_started", "_loop", "_direct_at", "_bytes", "_max_bytes",
                 "direct_items", "direct_bytes")

    def __init__(self, capacity: int, start: Callable[[], None],
                 direct: Callable[[T], int] | None = None, max_bytes: int = 0) -> None:
        super().__init__(capacity)
        self._start = start
        self._direct = direct
        self._started = False
        self._loop = get_hub().loop
        self._direct_at = -1.0
        self._bytes = 0  # bytes queued, as producers counted them since the consumer's took()
        self._max_bytes = max_bytes or 1 << 62
        self.direct_items = 0
        self.direct_bytes = 0

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def has_room(self) -> bool:
        """Whether :meth:`offer` would queue an item now (not closed, under both bounds)."""
        return not self._closed and len(self._buf) < self._cap and self._bytes < self._max_bytes

    def took(self) -> None:
        """For the consumer, after taking items: count what is still queued (nothing, usually)."""
        buf: Any = self._buf
        self._bytes = sum([len(x) for x in buf if x is not FLUSH]) if buf else 0

    def drop_oldest(self) -> bool:
        """Take the oldest item queued and drop it (a sender that must make room: nng's PUB);
        False if none is queued."""
        item = self._try_recv()
        if item is _EMPTY:
            return False
        if item is not FLUSH:
            self._bytes = max(self._bytes - len(item), 0)
        return True

    def recv_nowait(self) -> T:
        """Deprecated: :meth:`drop_oldest`, or ``recv(block=False)``."""
        _deprecated("recv_nowait()", "recv(block=False), or Outbox.drop_oldest()")
        item = Chan.recv(self, 0)
        if item is not FLUSH:
            self._bytes = max(self._bytes - len(item), 0)  # type: ignore[arg-type]
        return item

    def _try_send(self, item: Any) -> bool:
        if not self._buf:
            self._bytes = 0  # an empty queue holds nothing, whoever took what it held
        elif self._bytes >= self._max_bytes:
            return False
        if not Chan._try_send(self, item):
            return False
        self._bytes += len(item)
        return True

    def allow_direct(self) -> None:
        """Let the next :meth:`offer` write directly even within this turn of the loop (the
        peer answered the last one: a request/reply exchange, where nothing would batch)."""
        self._direct_at = -1.0

    def hold_direct(self) -> None:
        """Let no :meth:`offer` write directly for the rest of this turn of the loop (a batch
        came in: the sends that answer it leave together, through the consumer)."""
        self._direct_at = self._loop.now()

    def ensure_consumer(self) -> None:
        """Start the consumer now if it has not been started."""
        if not self._started:
            self._started = True
            self._start()

    def offer(self, item: T) -> bool:
        """Queue ``item`` (or hand it to ``direct``) if that can happen now; False when full or
        closed. Never blocks."""
        buf = self._buf
        if buf:  # the busy case first, inlined: the consumer exists and will take it from here
            if len(buf) < self._cap and self._bytes < self._max_bytes and not self._recvq \
                    and not self._closed:
                buf.append(item)
                self._bytes += len(item)  # type: ignore[arg-type]  # items have a length
                return True
        elif self._direct is not None and not self._closed:
            rq = self._recvq
            if (not self._started or rq and not rq[0].sel.fired) and \
                    (now := self._loop.now()) != self._direct_at:
                self._direct_at = now
                done = self._direct(item)
                if done:
                    self.direct_items += 1
                    self.direct_bytes += len(item)  # type: ignore[arg-type]  # items have a length
                    if done == 1:
                        Chan._try_send(self, FLUSH)  # not counted: it has no bytes
                        self.ensure_consumer()
                    return True
        if self._closed or not self._try_send(item):
            return False
        if not self._started:
            self.ensure_consumer()
        return True


class Recv:
    """A :func:`select_channels` case that receives from ``chan``: a :class:`Chan`, or for
    :func:`gsp.select` a socket or context too (a :class:`gsp.poller.Selectable`, which this
    module cannot name: it sits below it; hence ``Any``, which also keeps a mypyc build of
    this module from refusing those)."""

    __slots__ = ("chan",)

    def __init__(self, chan: Any) -> None:
        self.chan = chan


class Send:
    """A :func:`select_channels` case that sends ``item`` on ``chan`` (a :class:`Chan`, or a socket or
    context for :func:`gsp.select`, as :class:`Recv`)."""

    __slots__ = ("chan", "item")

    def __init__(self, chan: Any, item: Any) -> None:
        self.chan = chan
        self.item = item


def select_channels(cases: Sequence[Recv | Send],
           timeout: float | timedelta | None = None) -> tuple[int, Any]:
    """Complete exactly one of ``cases`` and return ``(index, value)``.

    ``value`` is the received item for a :class:`Recv` case (:data:`CLOSED` when that channel is
    closed and drained) and ``None`` for a :class:`Send` case. A :class:`Send` case on a closed
    channel raises :class:`gsp.Closed`. ``timeout=0`` polls: :class:`gsp.WouldBlock` if no case is
    ready; an elapsed timeout raises :class:`gsp.Timeout`.
    """
    n = len(cases)
    if n == 0:
        raise ValueError("select needs at least one case")
    # A random permutation, not a random rotation: a rotation favours a ready case that follows
    # a run of unready ones.
    if n == 1:
        order: Sequence[int] = (0,)
    elif n == 2:  # the common select (an op plus a wake-up case): no list, no shuffle
        order = (0, 1) if random() < 0.5 else (1, 0)
    else:
        order = list(range(n))
        shuffle(order)
    for i in order:
        c = cases[i]
        ch = c.chan
        if type(c) is Recv:
            item = ch._try_recv()
            if item is not _EMPTY:
                return i, item
            if ch._closed:
                return i, CLOSED
        else:
            if ch._closed:
                raise Closed("send on a closed channel")
            if ch._try_send(c.item):  # type: ignore[union-attr]  # a Send: type() checked above
                return i, None
    t = _wait_secs(timeout, "select", "no case is ready")
    ops: list[tuple[Any, bool, Any]] = []  # (none made on the fast path)
    for c in cases:
        if type(c) is Send:
            ops.append((c.chan, True, c.item))
        else:
            ops.append((c.chan, False, None))
    return _block(ops, t)


def _block(ops: Sequence[tuple["Chan[Any]", bool, Any]],
           timeout: float | None) -> tuple[int, Any]:
    """Enqueue one waiter on every op's channel, wait for the first to fire, clean up all."""
    here = thread_ident()  # a channel of another thread's hub would never wake this one
    sel = _Sel()
    entries: list[tuple[Chan[Any], bool, _Entry]] = []
    for i, (ch, is_send, item) in enumerate(ops):
        if ch._tid != here:
            _unlink(entries)
            raise WrongThread("channel", ch._tid, here)
        e = _Entry(sel, i, item)
        (ch._sendq if is_send else ch._recvq).append(e)
        entries.append((ch, is_send, e))
    # No timer at all for the common wait-forever case (not even gevent's dummy one).
    timer = None if timeout is None else _GTimeout._start_new_or_dummy(timeout)
    try:
        try:
            sel.waiter.get()
        except BaseException as exc:
            if _propagates(exc, sel, timer, timeout, entries):
                raise
            # Our own timer lost the race with completion: the operation succeeded.
    finally:
        if timer is not None:
            timer.close()
        if not sel.fired:
            sel.fired = True  # no one may fire it any more
        for ch, is_send, e in entries:
            q = ch._sendq if is_send else ch._recvq
            try:
                q.remove(e)
            except ValueError:
                pass
    index, value = sel.index, sel.value
    if value is _SEND_CLOSED:
        raise Closed("channel closed while sending")
    return index, value


def _unlink(entries: list[tuple["Chan[Any]", bool, "_Entry"]]) -> None:
    """Take back the waiters :func:`_block` has queued so far (all still queued: none fired)."""
    for c, s, e in entries:
        (c._sendq if s else c._recvq).remove(e)


def _propagates(exc: BaseException, sel: "_Sel", timer: Any, timeout: float | None,
                entries: list[tuple["Chan[Any]", bool, "_Entry"]]) -> bool:
    """Whether ``exc``, which interrupted :func:`_block`'s wait, goes on up: not when it is
    our own timer, late (the operation completed first). Our timer before completion becomes
    :class:`gsp.Timeout`; anything else after completion keeps what was handed over."""
    if not sel.fired:
        if exc is timer:
            raise Timeout(f"timed out after {timeout:g} s", timeout=timeout) from None
        return True
    if exc is timer:
        return False
    # Interrupted after completion: keep what was handed over, then propagate.
    ch, is_send, _ = entries[sel.index]
    if not is_send and sel.value is not CLOSED:
        ch._put_back(sel.value)
    return True
