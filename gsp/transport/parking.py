"""The parking reader: a connection over a socket that an idle pipe reads without a greenlet.

:class:`ParkingConnection` is :meth:`~gsp.transport.Connection.recv_or_park`,
:meth:`~gsp.transport.Connection.recv_nowait` and :meth:`~gsp.transport.Connection.park` written
once, for any transport that reads a gevent socket (tcp, ipc and ws are made of it). A transport
gives it the non-blocking socket to read and one hook, :meth:`ParkingConnection.read_ready`: a
read of what is there, fed to its framing.
"""

from __future__ import annotations

from time import monotonic
from typing import Any, Callable

import gevent
from gevent import socket as gsocket

from .._mypyc import mypyc_attr  # (mypyc reads it when the wheel compiles this module)
from ..errors import Closed
from .interface import Connection

__all__ = ["ParkingConnection", "nonblocking_socket"]


def nonblocking_socket(sock: Any) -> Any:
    """The non-blocking socket under a plain gevent socket ``sock`` (what
    :attr:`ParkingConnection.nowait_socket` reads), or None for any other (a TLS socket, whose
    records a read without waiting cannot take apart). Raises nothing."""
    return getattr(sock, "_sock", None) if type(sock) is gsocket.socket else None


@mypyc_attr(allow_interpreted_subclasses=True)  # transports subclass it
class ParkingConnection(Connection):
    """A :class:`~gsp.transport.Connection` whose idle reads park: when nothing has arrived, it
    arms a read watcher on its socket and returns, so that an idle pipe holds no greenlet, and a
    user greenlet waiting on the socket may read it (a lent read) when bytes come.

    A subclass calls ``super().__init__()``, implements :meth:`recv_messages` (the read that
    waits) and :meth:`read_ready` (the read that does not), and sets :attr:`nowait_socket` once
    reads may start (after the handshake) to :func:`nonblocking_socket` of its gevent socket:
    the non-blocking socket underneath, which says ``EAGAIN`` where gevent's would wait. Left
    None (a TLS socket; a subclass that reads its own way), the connection never parks:
    :meth:`recv_or_park` is :meth:`recv_messages`.
    Its ``close()`` and ``forget()`` call :meth:`stop_parking` before the descriptor goes.

    The promises (the core relies on each):

    - **Level-triggered.** The read watcher is an io watcher, which calls ``wake`` in every turn
      of the event loop while the socket is readable, until a reader stops it. So a read that
      does not wait (:meth:`recv_nowait`, a lent read that takes what is there) leaves it armed,
      and bytes that came after that read still wake the pipe; only :meth:`recv_or_park`, whose
      read may wait, stops it first (a reader greenlet takes the pipe on). ``wake`` may so be
      called more than once before the next read; the core's does nothing for a pipe it has
      given a reader already. An armed watcher keeps the ``wake`` it was armed with (the core
      passes the same one, the pipe's, every time).
    - **Never armed when closed.** After :meth:`stop_parking` (a close, a fork's forget) nothing
      is armed again: an armed watcher would hold the descriptor open past the close (gevent
      closes a socket with an active watcher late), the close would not reach the peer, and
      ``wake`` would come after the close. :meth:`park` then returns False and a read meets the
      close (:class:`gsp.Closed`).
    - **Parks only between messages.** Only a read that ended between messages (nothing of a
      message held, no error still to report: :attr:`between`) lets :meth:`park` arm without
      reading; part of a message is waited for in :meth:`recv_messages`, under the socket's
      stall timer, never parked on.
    - **Wakes on the peer's close** as on bytes: an end of stream makes the socket readable,
      and the read after the wake raises :class:`gsp.ConnectionBroken`.
    - **Wakes on silence** where the transport asks (:attr:`idle_wake`): a parked pipe is woken
      once the peer has been silent that long, so its reader can check the peer (ws pings).
    """

    __slots__ = ("nowait_socket", "between", "drained", "idle_wake", "heard_at", "_park",
                 "_idle", "_parking_stopped")

    def __init__(self) -> None:
        #: The non-blocking socket to read without waiting, or None: never park (see above).
        self.nowait_socket: Any = None
        #: Set by :meth:`read_ready`: its read ended between messages (nothing of a message
        #: held, no error to report), so :meth:`park` may arm without reading. False until the
        #: first such read.
        self.between = False
        #: Set by :meth:`read_ready`: its read ended between messages and took less than it
        #: asked for, so the kernel held nothing more; the next :meth:`recv_nowait` parks without
        #: a read that would most likely fail (the level-triggered watcher still sees bytes that
        #: came since).
        self.drained = False
        #: Seconds of the peer's silence after which a parked pipe is woken anyway (None: never),
        #: counted from :attr:`heard_at`, which :meth:`read_ready` and :meth:`recv_messages` then
        #: keep (``time.monotonic()`` when bytes last came).
        self.idle_wake: float | None = None
        #: ``time.monotonic()`` when bytes last came, where :attr:`idle_wake` is set.
        self.heard_at = monotonic()
        self._park: Any = None  # the io watcher, made on first need and left armed by reads
        self._idle: Any = None  # the timer of idle_wake, while parked
        self._parking_stopped = False

    def read_ready(self, raw: Any) -> list[bytes] | None:
        """Required: one read of :attr:`nowait_socket` (``raw``), without waiting, fed to the
        framing; the whole messages it completed (an empty list if none: part of a message came,
        whose rest :meth:`recv_messages` waits for). ``None`` when nothing had arrived (the read
        raised ``BlockingIOError``): the connection then parks. An empty list without reading
        where a read must wait in :meth:`recv_messages` instead (part of a message held, an
        error still to report, the peer silent for :attr:`idle_wake`). Sets :attr:`between` and
        :attr:`drained` for what the read left. Raises as :meth:`recv_messages` (an end of
        stream: :class:`gsp.ConnectionBroken`; an ``OSError`` mapped to gsp's errors), after
        returning the good messages before an error."""
        raise NotImplementedError

    def recv_or_park(self, wake: Callable[[], None]) -> list[bytes] | None:
        """:meth:`recv_messages`; but between messages, when nothing has arrived, arm the read
        watcher, which calls ``wake()``, and return None (no greenlet waits)."""
        park = self._park
        if park is not None and park.active:
            park.stop()  # a reader greenlet reads from here on
        idle = self._idle
        if idle is not None:
            idle.close()
            self._idle = None
        msgs = self.recv_nowait(wake)
        if msgs is not None and not msgs:
            return self.recv_messages()  # part of a message, or silence to check: wait as a read
        return msgs

    def recv_nowait(self, wake: Callable[[], None]) -> list[bytes] | None:
        """:meth:`recv_or_park` without a wait: one read of what is there (:meth:`read_ready`),
        or park when nothing is, or was at the read before (:attr:`drained`); an empty list
        where a read would wait, and where the connection never parks."""
        raw = self.nowait_socket
        if raw is None:
            return []
        if self.drained:
            self.drained = False
            self._park_on(raw, wake)
            return None
        msgs = self.read_ready(raw)
        if msgs is None:
            self._park_on(raw, wake)
        return msgs

    def park(self, wake: Callable[[], None]) -> bool:
        """Arm the read watcher without reading first, after a read that ended between messages
        (:attr:`between`) and while open; False otherwise (the next read meets what is held, or
        the close)."""
        raw = self.nowait_socket
        if raw is None or not self.between or self._parking_stopped:
            return False
        self.drained = False  # (the next read follows a wake: it reads)
        park = self._park
        if park is None or not park.active:  # (armed still, after a read that did not wait)
            self._park_on(raw, wake)
        return True

    @property
    def parked(self) -> bool:
        """Whether the read watcher is armed now."""
        park = self._park
        return park is not None and bool(park.active)

    def _park_on(self, raw: Any, wake: Callable[[], None]) -> None:
        """Arm the read watcher, which calls ``wake`` itself (no Python frame in between), and
        the :attr:`idle_wake` timer; never after :meth:`stop_parking`."""
        if self._parking_stopped:
            raise Closed("connection closed locally")
        park = self._park
        if park is None:
            park = self._park = gevent.get_hub().loop.io(raw.fileno(), 1)
        if not park.active:
            park.start(wake)
        every = self.idle_wake
        if every is not None and (self._idle is None or not self._idle.active):
            idle = self._idle = gevent.get_hub().loop.timer(
                max(0.0, every - (monotonic() - self.heard_at)))
            idle.start(wake)

    def stop_parking(self) -> None:
        """Close the read watcher and the :attr:`idle_wake` timer for good: nothing is armed
        again, and ``wake`` is not called after this. A subclass's ``close()`` and ``forget()``
        call it before the descriptor closes. Never raises."""
        self._parking_stopped = True
        park, idle = self._park, self._idle
        self._park = self._idle = None
        if park is not None:
            park.close()
        if idle is not None:
            idle.close()
