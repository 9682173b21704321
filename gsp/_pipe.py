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
_FLUSH: Any = object()  # handed to a parked writer: write what a direct send left unwritten

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

    __slots__ = ("id", "_socket", "dialer", "listener", "_conn", "_q", "closed", "error",
                 "_reader", "_writer", "_done", "attached", "_send_now", "_loop", "_direct_at",
                 "__weakref__")

    def __init__(self, socket: "Socket", conn: "Connection", send_buffer: int,
                 dialer: "Dialer | None" = None, listener: "Listener | None" = None) -> None:
        self.id = _alloc_id()
        _live_pipes[self.id] = self
        self._socket = socket
        self.dialer = dialer
        self.listener = listener
        self._conn = conn
        self._q: Chan = Chan(send_buffer)
        self.closed = False
        self.attached = False
        self.error: BaseException | None = None
        self._reader: gevent.Greenlet | None = None
        self._writer: gevent.Greenlet | None = None
        self._done = Event()
        # Connections that can write without blocking (plain tcp/ipc) let try_send skip the writer
        # greenlet when it is idle or not started: a request/reply round trip then costs no extra
        # switches, and a pipe that only ever answers directly never needs a writer (memory).
        self._send_now = getattr(conn, "send_now", None)
        self._loop = gevent.get_hub().loop
        self._direct_at = -1.0

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

    @property
    def sendq(self) -> Chan:
        """The outgoing queue (protocols may select on it); its writer starts on first use."""
        if self._writer is None:
            self._start_writer()
        return self._q

    def try_send(self, msg: Message) -> bool:
        """Queue ``msg`` if there is room now; False when full or closed."""
        if self.closed:
            return False
        q = self._q
        buf = q._buf
        if buf:  # the busy case, inlined: a writer exists and will take it from the buffer
            if len(buf) < q._cap and not q._recvq:
                buf.append(msg)
                return True
        elif self._send_now is not None:
            rq = q._recvq
            # No writer yet, or it is parked on an empty queue: everything before msg is written,
            # so write msg now instead of waking it. Once per loop iteration only, so that a burst
            # of sends still leaves in one batched write.
            if ((self._writer is None or rq and not rq[0].sel.fired)
                    and self._loop.now() != self._direct_at):
                self._direct_at = self._loop.now()
                done = self._send_now(msg)
                if done:
                    if done == 1:  # partly written: the writer writes the rest (or meets the error)
                        q._try_send(_FLUSH)
                        self._start_writer()
                    return True
        if q._try_send(msg):
            if self._writer is None:
                self._start_writer()
            return True
        return False

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
        self._reader = self._socket._spawn(self._read_loop)

    def _start_writer(self) -> None:
        # Not for a closed pipe, nor while the socket closes (it closes every queue: nothing new
        # can be queued, and whatever is queued already has its writer).
        if self._writer is None and not self.closed and not self._socket._closed:
            self._writer = self._socket._spawn(self._write_loop)

    def _read_loop(self) -> None:
        conn = self._conn
        proto = self._socket._proto
        deliver = proto.pipe_recv
        # Optional protocol hook taking a list of messages at once (saves a call per message).
        deliver_all = getattr(proto, "pipe_recv_all", None)
        others = self._socket._pipes
        n = 0
        try:
            while True:
                msgs = conn.recv_messages()
                if deliver_all is not None:
                    if len(others) <= 1:
                        deliver_all(self, msgs)
                        continue
                    i, end = 0, len(msgs)
                    while i < end:  # in turns of _READ_TURN, as below
                        k = min(_READ_TURN - n, end - i)
                        deliver_all(self, msgs[i:i + k])
                        i += k
                        n += k
                        if n == _READ_TURN:
                            n = 0
                            if len(others) > 1:
                                gevent.sleep(0)
                    continue
                for data in msgs:
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
        q = self._q
        conn = self._conn
        try:
            while True:
                try:
                    first = q.recv()
                except Closed:
                    return  # queue closed and drained: linger is over for this pipe
                batch = [] if first is _FLUSH else [first]
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
        self._q.close()
        self._conn.close()
        current = gevent.getcurrent()
        for g in (self._reader, self._writer):
            if g is not None and g is not current and not g.dead:
                g.kill(block=False)
        _live_pipes.pop(self.id, None)
        sock._pipe_gone(self)
        self._done.set()
