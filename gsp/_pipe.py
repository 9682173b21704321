"""Pipes: one per established connection, each with a reader and a writer greenlet."""

from __future__ import annotations

import enum
import random
import weakref
from typing import TYPE_CHECKING, Any, Mapping

import gevent
from gevent.event import Event

from ._errors import Closed, GspError
from ._message import Message
from .chan import Chan

if TYPE_CHECKING:
    from ._socket import Dialer, Listener, Socket
    from .transport import Connection

_WRITE_BATCH = 1024  # messages coalesced into one write at most
_READ_TURN = 32  # messages a reader delivers before letting other pipes' readers have a turn

_live_pipes: "weakref.WeakValueDictionary[int, Pipe]" = weakref.WeakValueDictionary()
_next_id = random.randrange(1, 1 << 31)


def _alloc_id() -> int:
    """A 31-bit non-zero id no live pipe in this process has (nng starts at random, too)."""
    global _next_id
    while True:
        pid = _next_id
        _next_id = _next_id + 1 if _next_id < (1 << 31) - 1 else 1
        if pid not in _live_pipes:
            return pid


class PipeEvent(enum.Enum):
    ATTACHING = "attaching"  #: handshake done; a callback may reject by ``pipe.close()``
    ATTACHED = "attached"  #: the protocol has the pipe; messages flow
    DETACHED = "detached"  #: the pipe is gone; ``pipe.error`` says why


class Pipe:
    """One connection of a socket to one peer.

    ``error`` is ``None`` after a local close, else the exception that ended the pipe (a
    :class:`gsp.ConnectionBroken`, :class:`gsp.MessageTooLarge`, ...).
    """

    __slots__ = ("id", "_socket", "dialer", "listener", "_conn", "sendq", "closed", "error",
                 "_reader", "_writer", "_done", "attached", "__weakref__")

    def __init__(self, socket: "Socket", conn: "Connection", send_buffer: int,
                 dialer: "Dialer | None" = None, listener: "Listener | None" = None) -> None:
        self.id = _alloc_id()
        _live_pipes[self.id] = self
        self._socket = socket
        self.dialer = dialer
        self.listener = listener
        self._conn = conn
        self.sendq: Chan = Chan(send_buffer)
        self.closed = False
        self.attached = False
        self.error: BaseException | None = None
        self._reader: gevent.Greenlet | None = None
        self._writer: gevent.Greenlet | None = None
        self._done = Event()

    # -- what users and protocols see ----------------------------------------------------------
    @property
    def socket(self) -> "Socket":
        return self._socket

    @property
    def local_address(self) -> str:
        return self._conn.local_address

    @property
    def remote_address(self) -> str:
        return self._conn.remote_address

    @property
    def properties(self) -> Mapping[str, Any]:
        """Transport facts, e.g. ``peer_certificate`` on TLS pipes."""
        return self._conn.properties

    def try_send(self, msg: Message) -> bool:
        """Queue ``msg`` if there is room now; False when full or closed."""
        return not self.closed and self.sendq._try_send(msg)

    def send(self, msg: Message, timeout: float | None = None) -> None:
        """Queue ``msg``, waiting for room; :class:`gsp.Closed` once the pipe is gone."""
        self.sendq.send(msg, timeout)

    def close(self) -> None:
        """Close this pipe only; the socket (and a dialer) carry on."""
        self._shutdown(None)

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Pipe {self.id} {state} {self.remote_address}>"

    # -- life cycle (driven by the socket) -----------------------------------------------------
    def _start(self) -> None:
        spawn = self._socket._spawn
        self._reader = spawn(self._read_loop)
        self._writer = spawn(self._write_loop)

    def _read_loop(self) -> None:
        conn = self._conn
        deliver = self._socket._proto.pipe_recv
        others = self._socket._pipes
        n = 0
        try:
            while True:
                for data in conn.recv_messages():
                    deliver(self, data)
                    n += 1
                    if n == _READ_TURN:
                        n = 0
                        if len(others) > 1:  # a deep backlog on one pipe must not starve others
                            gevent.sleep(0)
        except GspError as exc:
            self._shutdown(exc)
        except OSError as exc:  # a transport that forgot to map an error still closes cleanly
            self._shutdown(exc)

    def _write_loop(self) -> None:
        q = self.sendq
        conn = self._conn
        try:
            while True:
                try:
                    first = q.recv()
                except Closed:
                    return  # queue closed and drained: linger is over for this pipe
                batch = [first]
                if q._buf:
                    batch += q.drain(_WRITE_BATCH)
                conn.send_messages(batch)
        except GspError as exc:
            self._shutdown(exc)
        except OSError as exc:
            self._shutdown(exc)

    def _shutdown(self, error: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        if isinstance(error, Closed):
            error = None  # our own close, not a failure
        self.error = error
        sock = self._socket
        if self.attached:
            sock._proto.remove_pipe(self)
        self.sendq.close()
        self._conn.close()
        current = gevent.getcurrent()
        for g in (self._reader, self._writer):
            if g is not None and g is not current and not g.dead:
                g.kill(block=False)
        _live_pipes.pop(self.id, None)
        sock._pipe_gone(self)
        self._done.set()
