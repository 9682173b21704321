"""The kit cannot hang: every check runs under a time bound, and a watchdog on a native thread
notices an event loop that stopped turning (a blocking call on a socket that is not gevent's
stalls the whole process, and no gevent timeout can fire then) and ends the call with a message
that names the likely cause and where the process was blocked; checks of what a plugin's hooks
return (:func:`check_socket`, :func:`check_connection`)."""

from __future__ import annotations

import os
import signal
import socket as stdsocket
import sys
import threading
import time
import traceback
from typing import Any

import gevent
from gevent import monkey
from gevent import socket as gsocket

__all__ = ["KitStall", "KitTimeout", "Watchdog", "check_socket", "check_connection"]

NOT_GEVENT = ("not a gevent socket: blocking calls stall the hub (every greenlet, every timer and "
              "the kit's own time bounds stop with it)")


class KitStall(AssertionError):
    """The event loop stopped turning: something blocked the whole process."""


class KitTimeout(AssertionError):
    """A kit check took longer than its time bound."""


def check_socket(sock: Any, where: str) -> None:
    """Fail, naming ``where`` it came from, unless ``sock`` is a gevent (cooperative) socket: a
    stdlib ``socket.socket`` (or ``ssl.SSLSocket``) blocks the hub on every call."""
    if isinstance(sock, stdsocket.socket) and not isinstance(sock, gsocket.socket):
        raise AssertionError(
            f"{where} returned a {type(sock).__module__}.{type(sock).__qualname__}: {NOT_GEVENT}. "
            f"Make it with gevent.socket (gevent.socket.create_connection, or "
            f"gsp.transport.connect_socket / bind_stream_socket; gevent.ssl for TLS)")


def check_connection(conn: Any, where: str) -> None:
    """Fail, naming ``where``, unless ``conn`` is a :class:`gsp.transport.Connection` whose socket
    (if it shows one as ``sock``) is a gevent socket."""
    from gsp.transport import Connection

    if not isinstance(conn, Connection):
        raise AssertionError(f"{where} returned {conn!r}, not a gsp.transport.Connection")
    sock = getattr(conn, "sock", None)
    if sock is not None:
        check_socket(sock, f"{where} (its .sock)")


def _where_blocked(ident: int) -> str:
    frame = sys._current_frames().get(ident)
    if frame is None:
        return "  (no stack)"
    lines = traceback.format_stack(frame)[-6:]
    return "".join(lines).rstrip()


class Watchdog:
    """Bounds one kit check. ``limit`` seconds in all: then :class:`KitTimeout` is raised in the
    check's greenlet (cooperatively, as any gevent timeout). And ``stall`` seconds without a turn
    of the event loop: a native thread interrupts the blocked call in the main thread with a
    signal, which raises :class:`KitStall` there, naming the likely cause and where it blocked;
    if that does not end it within ``stall`` more seconds, it prints the same and ends the
    process (exit status 3) rather than let the run hang."""

    SIGNAL = signal.SIGUSR2

    def __init__(self, what: str, limit: float, stall: float) -> None:
        self.what = what
        self.limit = limit
        self.stall = stall
        self.stalled: str | None = None  # the message, once the loop stalled
        self._beat = time.monotonic()
        self._stop = False
        self._main = threading.main_thread().ident or 0
        self._old_handler: Any = None
        self._timeout: gevent.Timeout | None = None
        self._heart: Any = None  # the loop's timer that beats every 50 ms while it turns

    def _heartbeat(self) -> None:  # in the hub
        self._beat = time.monotonic()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stalled is not None:
            raise KitStall(self.stalled)

    def _watch(self) -> None:
        sleep = monkey.get_original("time", "sleep")
        fired = 0.0
        while not self._stop:
            sleep(0.1)
            now = time.monotonic()
            if self._stop or now - self._beat < self.stall:
                fired = 0.0
                continue
            if not fired:
                self.stalled = (
                    f"{self.what}: the event loop (gevent's hub) did not run for "
                    f"{now - self._beat:.1f} s, so the whole process was blocked. The likely "
                    f"cause: a socket that is {NOT_GEVENT}; or another call that blocks the "
                    f"thread (time.sleep, a lock, a subprocess wait). It was blocked at:\n"
                    f"{_where_blocked(self._main)}")
                fired = now
                signal.pthread_kill(self._main, self.SIGNAL)
            elif now - fired > self.stall:
                sys.stderr.write(f"\ngsp.testing: {self.stalled}\ngsp.testing: the blocked call "
                                 f"did not end when interrupted; ending the process\n")
                sys.stderr.flush()
                os._exit(3)

    def __enter__(self) -> Watchdog:
        if threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(self.SIGNAL, self._on_signal)
        self._heart = gevent.get_hub().loop.timer(0.05, 0.05, ref=False)
        self._heart.start(self._heartbeat)
        start = monkey.get_original("_thread", "start_new_thread")
        start(self._watch, ())
        self._timeout = gevent.Timeout(self.limit, KitTimeout(
            f"{self.what} did not finish within {self.limit:g} s (the kit's time bound for a "
            f"check; the class's kit_time_limit). Something waits for what never comes: a "
            f"connection that never completes, a message never delivered, a close that does "
            f"not end a blocked call"))
        self._timeout.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop = True
        if self._timeout is not None:
            self._timeout.close()
        if self._heart is not None:
            self._heart.close()
        if self._old_handler is not None:
            signal.signal(self.SIGNAL, self._old_handler)
