"""Waiting on sockets, contexts and channels at once: :func:`select` and a pyzmq-style
:class:`Poller`.

``gsp.select([gsp.Recv(sock_a), gsp.Recv(chan), gsp.Send(sock_b, data)], timeout=1)`` completes
exactly one case and returns ``(index, value)``: the received body for a socket or context, the
item for a channel (:data:`gsp.chan.CLOSED` once it is closed and drained), ``None`` for a send.
With channels only it is :func:`gsp.chan.select_channels` itself.

How it waits, with no polling loop and no helper greenlet: every socket and context answers two
questions (see :meth:`gsp.protocol.Protocol.poll` and ``wake_cases``): *would this operation
complete now?* and *what wakes me when that may change?* ``select`` tries the ready cases in a
random order (so none starves) with ``block=False``; if none completes it waits, in one
:func:`gsp.chan.select_channels`, on the channel cases themselves and on the sockets' wake-up cases, then
looks again. An error of the operation it tries (:class:`gsp.Closed` for a closed socket, a
protocol's state error) propagates; ``timeout`` passing raises :class:`gsp.Timeout`
(:class:`gsp.WouldBlock` for 0).
"""

from __future__ import annotations

from datetime import timedelta
from random import shuffle
from typing import Any, Iterable, Protocol, Sequence

from gevent.event import Event

from .chan import Chan, Recv, Send, select_channels
from .errors import Timeout, WouldBlock
from .handles import Op
from .options import seconds
from .protocol.waiting import Deadline

__all__ = ["select", "Poller", "Selectable", "POLLIN", "POLLOUT"]

#: :class:`Poller` flags, as in pyzmq: ready to receive, ready to send.
POLLIN = 1
POLLOUT = 2


class Selectable(Protocol):
    """What :func:`select` and :class:`Poller` need of an object besides a channel
    (:class:`gsp.Socket` and :class:`gsp.Context` are such objects). ``_wake_cases`` is gsp's
    own: how a socket or a context tells this module what to wait on (from its protocol's
    :meth:`gsp.protocol.Protocol.wake_cases`)."""

    def poll(self, op: Op) -> bool:
        """Whether ``op`` with ``block=False`` would not raise :class:`gsp.WouldBlock` now."""

    def _wake_cases(self, op: Op) -> list[Recv]:
        """Select cases that become ready when :meth:`poll` may have turned true."""

    def recv(self, timeout: float | timedelta | None = ..., block: bool = True) -> Any:
        """Receive (``block=False``: :class:`gsp.WouldBlock` rather than wait)."""

    def send(self, data: Any, timeout: float | timedelta | None = ..., block: bool = True) -> None:
        """Send (``block=False``: :class:`gsp.WouldBlock` rather than wait)."""


def _timeout(timeout: float | timedelta | None) -> float | None:
    t = seconds("timeout", timeout)
    return t if t is None else float(t)


def _expired(t: float | None, what: str) -> Timeout | WouldBlock:
    if t == 0:
        return WouldBlock(f"{what} would block: no case is ready (timeout=0)", timeout=0.0)
    return Timeout(f"{what} timed out after {t:g} s (timeout={t:g})", timeout=t)


def _try(case: Recv | Send) -> tuple[bool, Any]:
    """Complete ``case`` now if it can: ``(True, value)``, else ``(False, None)``."""
    obj = case.chan
    if isinstance(obj, Chan):
        try:
            return True, select_channels((case,), 0)[1]
        except WouldBlock:
            return False, None
    if type(case) is Recv:
        if obj.poll("recv"):
            try:
                return True, obj.recv(block=False)
            except WouldBlock:
                pass
    elif isinstance(case, Send) and obj.poll("send"):
        try:
            obj.send(case.item, block=False)
            return True, None
        except WouldBlock:
            pass
    return False, None


def select(cases: Sequence[Recv | Send],
           timeout: float | timedelta | None = None) -> tuple[int, Any]:
    """Complete exactly one of ``cases`` — receives from and sends to sockets, contexts and
    channels alike — and return ``(index, value)``; fair among cases ready together. ``timeout``
    in seconds (or a timedelta); None waits for ever."""
    if all(isinstance(c.chan, Chan) for c in cases):
        return select_channels(cases, timeout)  # channels only: no wake-ups to arrange
    t = _timeout(timeout)
    deadline = Deadline(t)
    order = list(range(len(cases)))
    while True:
        shuffle(order)
        for i in order:
            done, value = _try(cases[i])
            if done:
                return i, value
        # Nothing completes now: wait for a channel case to complete or a socket to change.
        waits: list[Recv | Send] = []
        owner: list[int] = []
        for i, c in enumerate(cases):
            if isinstance(c.chan, Chan):
                waits.append(c)
                owner.append(i)
            else:
                wake = c.chan._wake_cases("recv" if type(c) is Recv else "send")
                waits += wake
                owner += [-1] * len(wake)
        k, value = _wait(waits, deadline, t, "select")
        if k >= 0 and owner[k] >= 0:
            return owner[k], value


def _wait(cases: list[Recv | Send], deadline: Deadline, t: float | None,
          what: str) -> tuple[int, Any]:
    try:
        left = deadline.remaining()
        if not cases:  # nothing could ever wake us: wait out the timeout
            Event().wait(left)
            raise Timeout(timeout=t)
        return select_channels(cases, left)
    except (Timeout, WouldBlock):
        raise _expired(t, what) from None


class Poller:
    """pyzmq's Poller over gsp sockets and contexts: ``register`` them with :data:`POLLIN`
    and/or :data:`POLLOUT`, then ``poll(timeout)`` waits until at least one is ready and returns
    ``[(obj, flags), ...]`` for every ready one (``[]`` once ``timeout`` passed).

    Unlike pyzmq the timeout is in **seconds** (or a timedelta), like everywhere in gsp. Ready
    means the operation would not wait now; another greenlet may still take the message first,
    so receive with ``block=False`` (or a timeout) after a poll. Channels are not pollable: use
    :func:`select` to mix them in.
    """

    def __init__(self) -> None:
        self._objs: dict[Selectable, int] = {}

    def register(self, obj: Selectable, flags: int = POLLIN) -> None:
        """Watch ``obj`` for ``flags`` (registering again replaces them; 0 unregisters)."""
        if not isinstance(flags, int) or isinstance(flags, bool) or flags & ~(POLLIN | POLLOUT):
            raise ValueError(f"flags must be POLLIN, POLLOUT or both, not {flags!r}")
        if not callable(getattr(obj, "poll", None)) or isinstance(obj, Chan):
            raise TypeError(f"cannot poll a {type(obj).__name__}: register sockets or "
                            "contexts (select mixes in channels)")
        if flags:
            self._objs[obj] = flags
        else:
            self._objs.pop(obj, None)

    def modify(self, obj: Selectable, flags: int) -> None:
        """Change the flags ``obj`` is watched for."""
        if obj not in self._objs:
            raise KeyError(f"{obj!r} is not registered")
        self.register(obj, flags)

    def unregister(self, obj: Selectable) -> None:
        """Stop watching ``obj``."""
        del self._objs[obj]

    @property
    def registered(self) -> dict[Selectable, int]:
        """What is watched, with its flags (a copy)."""
        return dict(self._objs)

    def poll(self, timeout: float | timedelta | None = None) -> list[tuple[Selectable, int]]:
        """Wait until something registered is ready (up to ``timeout`` seconds; None = for
        ever) and return every ready ``(obj, flags)``; ``[]`` when the timeout passed first."""
        t = _timeout(timeout)
        deadline = Deadline(t)
        while True:
            ready = [(obj, got) for obj, got in
                     ((obj, _ready(obj, flags)) for obj, flags in self._objs.items()) if got]
            if ready:
                return ready
            cases: list[Recv | Send] = []
            for obj, flags in self._objs.items():
                for op in _ops(flags):
                    cases += obj._wake_cases(op)
            try:
                _wait(cases, deadline, t, "poll")
            except (Timeout, WouldBlock):
                return []


def _ops(flags: int) -> Iterable[Op]:
    if flags & POLLIN:
        yield "recv"
    if flags & POLLOUT:
        yield "send"


def _ready(obj: Selectable, flags: int) -> int:
    got = 0
    if flags & POLLIN and obj.poll("recv"):
        got |= POLLIN
    if flags & POLLOUT and obj.poll("send"):
        got |= POLLOUT
    return got
