"""gsp from code that does not run on gevent: threaded WSGI workers, notebooks, a Spark driver.

A gsp socket belongs to the gevent hub of the OS thread that made it (another thread's call
raises :class:`gsp.WrongThread`). This module runs a hub in a background OS thread and ships
every call there; the calling thread blocks until the call is done, and gets its result or its
exception. Any number of threads may call at once::

    import gsp.blocking

    with gsp.blocking.socket("req", dial="tcp://127.0.0.1:5555", recv_timeout=5) as s:
        s.send(b"ping")
        reply = s.recv()

:func:`socket` takes what :func:`gsp.socket` takes and returns a :class:`BlockingSocket`, whose
methods are the socket's (``send``/``recv``, ``send_obj``/``recv_obj``, ``send_msg``/``recv_msg``,
``recv_many``, ``open_context``, ``listen``, ``dial``, options as attributes, ``stats``, ...).
Timeouts are the socket's: a call waits in the hub as long as it would in gevent code.

The sockets share one process-wide :class:`Hub` (:func:`hub`), a daemon thread started on first
use; it lives until the process exits, when it closes the sockets still open (each flushing what
it queued for up to its ``linger``) and stops. ``Hub()`` makes a hub thread of one's own, for
code of one's own to run there (:meth:`Hub.submit`, :meth:`Hub.call`); ``close()`` stops it. In a
forked child every hub of the parent is closed (its sockets' calls raise :class:`gsp.Closed`) and
the process-wide hub is started afresh on first use (threads do not survive a fork).

In a monkey-patched program (``gevent.monkey.patch_all()``) "threads" are greenlets of the one
hub: use gsp directly there. (This module still works: called from the hub's own OS thread, a
call runs at once in the caller's greenlet.)
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, Callable, ClassVar, Iterable, TypeVar

import gevent
from gevent.event import Event as _GEvent

import gsp

from .chan import thread_ident
from .errors import Closed, GspError
from .options import FROM_OPTION

__all__ = ["Hub", "hub", "socket", "BlockingProxy", "BlockingSocket", "BlockingContext"]

T = TypeVar("T")
P = TypeVar("P", bound="BlockingProxy")


class Hub:
    """A gevent hub running in a daemon OS thread of its own; safe to use from any thread.

    :meth:`submit` runs a function in a new greenlet of that hub and returns a
    :class:`concurrent.futures.Future`; :meth:`call` also waits for it and returns its result
    (or raises its exception) in the calling thread. The function runs in the hub's thread, so
    it may use gsp (and any gevent code) freely, and must not block that thread (a blocking
    call would stop every socket of the hub meanwhile). :meth:`close` closes the sockets made by
    :meth:`socket` that are still open, waits for running functions to end, and stops the
    thread."""

    def __init__(self, name: str = "gsp-hub") -> None:
        self._jobs: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...],
                                dict[str, Any]]] = deque()
        self._sockets: weakref.WeakSet[BlockingSocket] = weakref.WeakSet()
        self._closed = False
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._tid = 0
        self._wake: Any = None
        self._stop: Any = None
        self._greenlets: set[gevent.Greenlet] = set()
        self._error: BaseException | None = None
        _hubs.add(self)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    # -- the hub's thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            hub = gevent.get_hub()
            self._tid = thread_ident()
            self._wake = hub.loop.async_()  # a thread-safe wake-up; it keeps the loop alive too
            self._wake.start(self._take)
            self._stop = _GEvent()
        except BaseException as exc:
            self._error = exc
            self._closed = True
            return
        finally:
            self._started.set()
        try:
            self._stop.wait()
            gevent.joinall(list(self._greenlets), timeout=5)
            gevent.killall(list(self._greenlets), block=True, timeout=5)
        finally:
            self._wake.close()
            hub.destroy(destroy_loop=True)
            self._fail_pending()

    def _take(self) -> None:
        # A loop callback: spawn a greenlet per job queued since the last wake-up.
        jobs = self._jobs
        while jobs:
            fut, fn, args, kwargs = jobs.popleft()
            if fn is _STOP:
                self._stop.set()
            elif fut.set_running_or_notify_cancel():
                g = gevent.spawn(self._job, fut, fn, args, kwargs)
                self._greenlets.add(g)
                g.link(self._greenlets.discard)

    @staticmethod
    def _job(fut: "Future[Any]", fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> None:
        try:
            result = fn(*args, **kwargs)
        except gevent.GreenletExit:  # killed: the hub closing, or the caller gave up
            fut.set_exception(Closed("the gsp.blocking hub closed while the call ran"))
        except BaseException as exc:  # (the caller must not wait forever)
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    def _fail_pending(self) -> None:
        with self._lock:
            jobs, self._jobs = list(self._jobs), deque()
        for fut, fn, _, _ in jobs:
            if fn is not _STOP and fut.set_running_or_notify_cancel():
                fut.set_exception(Closed("the gsp.blocking hub is closed"))

    # -- any thread ----------------------------------------------------------------------------
    @property
    def thread(self) -> threading.Thread:
        """The OS thread the hub runs in."""
        return self._thread

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Future[T]":
        """Run ``fn(*args, **kwargs)`` in a new greenlet of the hub; returns at once. Raises
        :class:`gsp.Closed` once the hub is closed."""
        fut: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise Closed("the gsp.blocking hub is closed")
            self._jobs.append((fut, fn, args, kwargs))
        self._wake.send()
        return fut

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in the hub and return its result, or raise its exception,
        in the calling thread, which blocks meanwhile. From the hub's own thread it runs at
        once. If the caller is interrupted while it waits (``KeyboardInterrupt``), the greenlet
        running ``fn`` is killed."""
        if thread_ident() == self._tid:
            return fn(*args, **kwargs)
        fut = self.submit(fn, *args, **kwargs)
        try:
            return fut.result()
        except BaseException:
            if not fut.done() and not self._closed:
                self._kill(fut)
            raise

    def _kill(self, fut: "Future[Any]") -> None:
        def kill() -> None:
            for g in list(self._greenlets):
                if g.args and g.args[0] is fut:
                    g.kill(block=False)
        try:
            self.submit(kill)
        except Closed:
            pass

    def socket(self, protocol: str, *, raw: bool = False,
               listen: str | Iterable[str] | None = None, dial: str | Iterable[str] | None = None,
               **options: Any) -> "BlockingSocket":
        """:func:`gsp.socket` in this hub, as a :class:`BlockingSocket`."""
        sock = self.call(gsp.socket, protocol, raw=raw, listen=listen, dial=dial, **options)
        bs = BlockingSocket(self, sock)
        self._sockets.add(bs)
        return bs

    def close(self, timeout: float | None = 10) -> None:
        """Close the hub's :class:`BlockingSocket`\\ s still open, let running functions end
        (those still running after 5 s are killed) and stop the thread; waits up to ``timeout``
        seconds for it. Idempotent; calls afterwards raise :class:`gsp.Closed`."""
        if self._closed:
            return
        for bs in list(self._sockets):
            try:
                bs.close()
            except GspError:
                pass
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._jobs.append((Future(), _STOP, (), {}))
        self._wake.send()
        if thread_ident() != self._tid:
            self._thread.join(timeout)

    def __enter__(self) -> "Hub":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<gsp.blocking.Hub {self._thread.name} {'closed' if self._closed else 'running'}>"


def _STOP() -> None:  # the job that stops the hub
    raise AssertionError("never called")


class BlockingProxy:
    """What :class:`BlockingSocket` and :class:`BlockingContext` share: every call runs in
    the hub's thread while the caller waits. Made by gsp (:func:`socket`,
    :meth:`BlockingSocket.open_context`), never by a user (no public constructor)."""

    #: Made by gsp only: its constructor is not the API (docs/api-guide.md, "Classes gsp makes").
    _no_public_constructor: ClassVar[bool] = True

    _hub: Hub
    _obj: Any

    def __init__(self, hub: Hub, obj: Any) -> None:
        self._hub = hub
        self._obj = obj

    def __enter__(self: P) -> P:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Options (``s.recv_timeout``), properties (``s.stats``, ``s.closed``) and protocol
        # methods (``s.subscribe(b"")``) not spelled out below.
        if name.startswith("_"):
            raise AttributeError(name)
        value = self._hub.call(getattr, self._obj, name)
        if callable(value):
            hub = self._hub

            def method(*args: Any, **kwargs: Any) -> Any:
                return hub.call(value, *args, **kwargs)
            method.__name__ = name
            method.__doc__ = getattr(value, "__doc__", None)
            return method
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._hub.call(setattr, self._obj, name, value)

    def send(self, data: bytes | bytearray | memoryview, timeout: float | timedelta | None = FROM_OPTION,
             block: bool = True) -> None:
        self._hub.call(self._obj.send, bytes(data), timeout, block)

    def recv(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> bytes:
        body: bytes = self._hub.call(self._obj.recv, timeout, block)
        return body

    def send_msg(self, msg: "gsp.Message", timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> None:
        self._hub.call(self._obj.send_msg, msg, timeout, block)

    def recv_msg(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> "gsp.Message":
        msg: gsp.Message = self._hub.call(self._obj.recv_msg, timeout, block)
        return msg

    def send_obj(self, obj: Any, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> None:
        self._hub.call(self._obj.send_obj, obj, timeout, block)

    def recv_obj(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> Any:
        return self._hub.call(self._obj.recv_obj, timeout, block)

    @property
    def closed(self) -> bool:
        return bool(self._obj.closed)  # a flag: reading it from any thread is safe

    def close(self) -> None:
        if not self._hub.closed:
            self._hub.call(self._obj.close)


class BlockingContext(BlockingProxy):
    """A :class:`gsp.Context` driven from any thread (see :meth:`BlockingSocket.open_context`):
    ``send``/``recv`` and the rest as the context's; :attr:`ctx` is the context itself, for
    functions run in the hub (:meth:`Hub.call`)."""

    @property
    def ctx(self) -> "gsp.Context":
        return self._obj  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<gsp.blocking.BlockingContext {self._obj!r}>"


class BlockingSocket(BlockingProxy):
    """A :class:`gsp.Socket` driven from any thread: every call runs in its hub's thread while
    the caller waits. Made by :func:`socket` (or :meth:`Hub.socket`). :attr:`sock` is the socket
    itself, for functions run in the hub (:meth:`Hub.call`); used from another thread it raises
    :class:`gsp.WrongThread`."""

    @property
    def sock(self) -> "gsp.Socket":
        return self._obj  # type: ignore[no-any-return]

    @property
    def hub(self) -> Hub:
        return self._hub

    def recv_many(self, limit: int, timeout: float | timedelta | None = FROM_OPTION,
                  block: bool = True) -> list[bytes]:
        bodies: list[bytes] = self._hub.call(self._obj.recv_many, limit, timeout, block)
        return bodies

    def open_context(self) -> BlockingContext:
        return BlockingContext(self._hub, self._hub.call(self._obj.open_context))

    def listen(self, url: str, **options: Any) -> str:
        """Listen on ``url``; returns the URL listened on (with the port a ``:0`` was given)."""
        return str(self._hub.call(lambda: self._obj.listen(url, **options).url))

    def dial(self, url: str, *, fail_fast: bool = False, background: bool = False,
             **options: Any) -> None:
        """:meth:`gsp.Socket.dial`."""
        self._hub.call(lambda: self._obj.dial(url, fail_fast=fail_fast, background=background,
                                              **options))

    def __repr__(self) -> str:
        return f"<gsp.blocking.BlockingSocket {self._obj!r}>"


_shared: Hub | None = None
_shared_lock = threading.Lock()


def hub() -> Hub:
    """The process-wide hub thread (``gsp-blocking``), started on first use, closed at exit."""
    global _shared
    h = _shared
    if h is not None and not h.closed:
        return h
    with _shared_lock:
        if _shared is None or _shared.closed:
            _shared = Hub("gsp-blocking")
        return _shared


def socket(protocol: str, *, raw: bool = False, listen: str | Iterable[str] | None = None,
           dial: str | Iterable[str] | None = None, **options: Any) -> BlockingSocket:
    """:func:`gsp.socket`, safe to use from any thread: the socket lives in the process-wide
    hub thread (:func:`hub`) and every call is shipped there."""
    return hub().socket(protocol, raw=raw, listen=listen, dial=dial, **options)


def _close_shared() -> None:
    h = _shared
    if h is not None:
        h.close()


_hubs: weakref.WeakSet[Hub] = weakref.WeakSet()  # every hub of this process


def _forget_shared() -> None:
    # In a forked child: no hub thread came along, so every hub is closed here (its calls raise
    # gsp.Closed at once instead of waiting for a thread that is not there), and the next
    # gsp.blocking call starts a process-wide hub of the child's own.
    global _shared, _shared_lock
    for h in list(_hubs):
        h._closed = True
        h._lock = threading.Lock()
    _shared = None
    _shared_lock = threading.Lock()


atexit.register(_close_shared)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared)
