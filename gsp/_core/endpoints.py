"""Listeners and dialers: the endpoints that turn addresses into pipes of a socket."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event

from ..errors import Closed, ConnectionRefused, GspError, Timeout
from ..options import Options

if TYPE_CHECKING:
    from ..transport import Connection, TransportDialer, TransportListener
    from .pipe import Pipe
    from .socket import Socket


class Listener:
    """An address a socket accepts connections on. ``url`` is the bound URL."""

    def __init__(self, socket: Socket, tl: TransportListener, options: Options) -> None:
        self.socket = socket
        self._tl = tl
        self.url: str = tl.url
        self.options = options
        self._closed = False
        self._accepter: gevent.Greenlet | None = None
        self._pending: set[Connection] = set()

    def _start(self) -> None:
        self._accepter = self.socket._spawn(self._accept_loop)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self._tl.accept()
            except Closed:
                return
            except GspError:
                gevent.sleep(0.01)  # e.g. out of fds: back off briefly, keep serving
                continue
            self._pending.add(conn)
            self.socket._spawn(self._handshake, conn)

    def _handshake(self, conn: Connection) -> None:
        # Runs in its own greenlet so a stalled peer delays nobody else.
        try:
            conn.handshake(self.socket.spec, self.options["handshake_timeout"])
        except GspError:
            conn.close()
            return
        finally:
            self._pending.discard(conn)
        if self._closed:
            conn.close()
            return
        self.socket._attach(conn, listener=self)

    def close(self) -> None:
        """Stop accepting; connections already made stay up until the socket closes."""
        if self._closed:
            return
        self._closed = True
        self._tl.close()
        for conn in list(self._pending):
            conn.close()
        g = self._accepter
        if g is not None and g is not gevent.getcurrent():
            g.kill(block=True)
        if self in self.socket._listeners and not self.socket._closed:
            self.socket._listeners.remove(self)

    def __repr__(self) -> str:
        return f"<gsp.Listener {self.url}>"


class Dialer:
    """Keeps one connection to ``url`` up, redialing with exponential backoff and jitter."""

    def __init__(self, socket: Socket, url: str, td: TransportDialer, options: Options) -> None:
        self.socket = socket
        self.url = url
        self._td = td
        self.options = options
        self._closed = False
        self._loop_g: gevent.Greenlet | None = None
        self._wake = Event()
        self.pipe: Pipe | None = None
        #: The error of the most recent failed attempt, if any.
        self.last_error: GspError | None = None

    def _connect_once(self) -> Pipe | None:
        limit = self.options["handshake_timeout"]
        # The connect shares the handshake's limit: a black-holed address must not hang a dialer
        # for the OS connect timeout (minutes).
        with gevent.Timeout(limit, Timeout(f"dial {self.url}: no connection within {limit} s")):
            conn = self._td.dial()
        try:
            conn.handshake(self.socket.spec, limit)
        except BaseException:
            conn.close()
            raise
        if self._closed:
            conn.close()
            return None
        pipe = self.socket._attach(conn, dialer=self)
        self.pipe = pipe
        return pipe

    def _start(self, block: bool | None) -> None:
        first_delay = 0.0
        if block is not False:
            try:
                if self._connect_once() is None:
                    if block and not self._closed:
                        raise ConnectionRefused(
                            f"dial {self.url}: the pipe was rejected (by the protocol or a hook)")
                    first_delay = -1  # rejected at attach: wait a backoff step, too
            except GspError as exc:
                if block:
                    raise
                self.last_error = exc
                first_delay = -1  # failed: wait a backoff step before the next try
        self._loop_g = self.socket._spawn(self._redial_loop, first_delay)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)

    def _redial_loop(self, first_delay: float) -> None:
        base = self.options["reconnect_time"]
        backoff = base
        failed = first_delay < 0
        while not self._closed:
            pipe = self.pipe
            if pipe is not None:
                pipe.wait_closed()
                self.pipe = None
                if self._closed:
                    return
                failed = True  # lost a connection: wait before redialing
                backoff = base
            if failed:
                # Jitter keeps a crowd of dialers from redialing in lockstep.
                self._sleep(backoff * random.uniform(0.5, 1.0))
                cap = self.options["reconnect_time_max"]
                backoff = min(backoff * 2, cap) if cap > 0 else base
                if self._closed:
                    return
            try:
                # A pipe rejected at attach (hook or protocol) backs off like a failed dial.
                failed = self._connect_once() is None
                if not failed:
                    backoff = base
                    self.last_error = None
            except GspError as exc:
                self.last_error = exc
                failed = True

    def close(self, close_pipe: bool = True) -> None:
        """Stop redialing and close the dialer's pipe."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._td.close()
        g = self._loop_g
        if g is not None and g is not gevent.getcurrent():
            g.kill(block=True)
        if close_pipe and self.pipe is not None:
            self.pipe.close()
        if self in self.socket._dialers and not self.socket._closed:
            self.socket._dialers.remove(self)

    def __repr__(self) -> str:
        return f"<gsp.Dialer {self.url}>"
