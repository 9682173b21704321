"""One object per process, made on first use: :func:`gsp.per_process`.

The trap it avoids: a socket made lazily by the first request, with ``gsp.socket(dial=...)``,
yields while it dials, so 50 requests arriving at once all find "no socket yet" and make 50.
Here the first caller makes it and every other caller waits for that one; a forked child makes
its own on first use. See docs/serving.md.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Generic, TypeVar

from .errors import Closed

__all__ = ["PerProcess", "per_process"]

T = TypeVar("T")


class _Making:
    """One attempt at making the object: what the callers that came meanwhile wait on."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        from gevent.event import Event
        self.done = Event()
        self.error: BaseException | None = None


class PerProcess(Generic[T]):
    """Holds the one object ``factory()`` made in this process (see :func:`per_process`).

    :meth:`get` returns it, making it on the first call in each process: the first caller runs
    ``factory`` and every greenlet asking meanwhile waits for that call (and gets its exception
    if it raised; the next :meth:`get` tries again). In a process forked since, the first
    :meth:`get` closes the copy inherited from the parent (in the child only: gsp already dropped
    its connections there) and makes a new one. :meth:`close` closes the object (its ``close()``
    method, if it has one); :meth:`get` then raises :class:`gsp.Closed`. For the greenlets of one
    thread (gsp's rule: each OS thread has its own sockets).
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._pid = 0  # the process the object (or the attempt under way) belongs to
        self._value: T | None = None
        self._making: _Making | None = None
        self._closed = False

    def get(self) -> T:
        """The process's object, made now if this process has none yet."""
        value = self._value
        if value is not None and self._pid == os.getpid():
            return value  # made already: no wait, no switch
        while True:
            if self._closed:
                raise Closed("this gsp.per_process holder is closed")
            pid = os.getpid()
            if self._pid != pid:  # first use in this process: what the parent made is not ours
                stale, self._value, self._making, self._pid = self._value, None, None, pid
                _close(stale)
            value = self._value
            if value is not None:
                return value
            making = self._making
            if making is None:
                return self._make(pid)
            making.done.wait()
            if making.error is not None:
                raise making.error

    def _make(self, pid: int) -> T:
        making = self._making = _Making()
        try:
            value = self._factory()
        except BaseException as exc:
            making.error = exc
            if self._making is making:
                self._making = None
            raise
        finally:
            making.done.set()
        if self._making is not making or self._pid != pid or self._closed:
            _close(value)  # closed (or forked) while it was being made
            raise Closed("this gsp.per_process holder was closed while making its object")
        self._making = None
        self._value = value
        return value

    @property
    def made(self) -> bool:
        """Whether this process holds its object now."""
        return self._value is not None and self._pid == os.getpid()

    def close(self) -> None:
        """Close this process's object (if made) and refuse to make another."""
        self._closed = True
        value, self._value, self._making = self._value, None, None
        if self._pid == os.getpid():
            _close(value)

    def __enter__(self) -> "PerProcess[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "made" if self.made else "not made"
        return f"<gsp.PerProcess {getattr(self._factory, '__name__', self._factory)!s} {state}>"


def per_process(factory: Callable[[], T]) -> PerProcess[T]:
    """A holder of one ``factory()`` per process, made on first :meth:`~PerProcess.get`::

        req = gsp.per_process(lambda: gsp.socket("req", dial="tcp://backend:5555"))

        def handler(environ, start_response):
            with req.get().open_context() as ctx: ...

    However many greenlets ask at once, one object is made (the others wait for it); a process
    forked after it was made gets its own on first use.
    """
    return PerProcess(factory)


def _close(value: Any) -> None:
    close = getattr(value, "close", None)
    if close is not None:
        close()
