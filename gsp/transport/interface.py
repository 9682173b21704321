"""The interfaces a transport plugin implements (interfaces only; helpers live elsewhere).

A transport plugin returns :class:`Transport` objects from its ``gsp_transports`` hook. The core
asks a transport for a :class:`TransportListener` or :class:`TransportDialer` per endpoint; both
produce :class:`Connection` objects, which the core turns into pipes after ``handshake``.

Helpers for writing one: :mod:`gsp.transport.urls` (parsing URLs), :mod:`gsp.transport.stream` (SP over any byte
stream socket: the connection, listener and dialer tcp and ipc are made of), :mod:`gsp.transport.tls` (TLS
contexts and handshakes), :mod:`gsp.options` (option specs), :mod:`gsp.transport.wire` (the codec).

Greenlet rules: ``handshake`` runs in a greenlet of its own under ``handshake_timeout``; after it,
one greenlet at a time calls ``recv_or_park`` (by default ``recv_messages``) in a loop — after a
park, maybe another one — and one other ``send_messages``; ``close`` may come from any greenlet
at any time and must make both return. Nothing is called from another thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from ..errors import NotSupported

if TYPE_CHECKING:
    from ..message import Message
    from ..options import Option
    from ..protocol.interface import ProtocolSpec
    from .limits import RecvLimits

__all__ = ["Transport", "TransportListener", "TransportDialer", "Connection"]


class Connection(ABC):
    """One established connection, before and after the SP handshake.

    The core calls ``handshake`` once, then ``recv_messages`` from one greenlet and
    ``send_messages`` from another; ``close`` may come from any greenlet at any time and must
    make both return (with :class:`gsp.Closed` or :class:`gsp.ConnectionBroken`).
    """

    local_address: str = ""
    remote_address: str = ""
    #: Transport facts a user may read on the pipe (e.g. ``peer_certificate`` for TLS).
    properties: Mapping[str, Any] = {}

    #: The optional hooks whose override gsp looks for (:func:`gsp.protocol.overrides`): a
    #: pipe uses them only where a connection overrides them.
    OPTIONAL_HOOKS: ClassVar[frozenset[str]] = frozenset({"send_now", "recv_or_park", "recv_nowait",
                                                          "handshake_nowait"})

    @abstractmethod
    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        """Agree on protocols with the peer within ``timeout`` seconds. Raises
        :class:`gsp.HandshakeError` (e.g. :class:`gsp.WrongProtocol`) to refuse the peer,
        :class:`gsp.Timeout` when it took too long, :class:`gsp.ConnectionBroken` when the peer
        left, :class:`gsp.Closed` after ``close``."""

    def handshake_nowait(self, spec: "ProtocolSpec") -> bool:
        """Optional: the start of :meth:`handshake` without waiting, called by a listener on a
        connection it just accepted, before it gives the connection a greenlet: a read of what
        the peer has sent already. Return True when the handshake is complete (the peer's
        header had all come, and this side's is sent): the core then makes a pipe of it without
        calling :meth:`handshake`; False when it is not (nothing had come, or part of the
        header): :meth:`handshake` then goes on from where this stopped. Raises as
        :meth:`handshake` for a peer that left or sent bytes that are not an SP header, so a
        closed or garbage connection costs one accept, one read and one close. Must not
        block. The default does nothing and returns False."""
        return False

    def handshake_progress(self) -> int:
        """Optional: how far :meth:`handshake` has come, in bytes received from the peer (a
        transport with a handshake of its own first, as TLS, counts what it can: a finished TLS
        handshake as many bytes). A listener at ``max_handshakes`` closes the connection with the
        least progress (the oldest among equals) to make room for a newcomer
        (:mod:`gsp.transport.admission`). Called from another greenlet while :meth:`handshake`
        waits; must not block or raise. The default, 0, makes the oldest go first."""
        return 0

    def send_now(self, msg: "Message | bytes") -> int:
        """Optional fast path: write ``msg`` at once without blocking, for a pipe whose writer
        greenlet is idle. Return 2 when all of it was written, 0 when nothing was (the core then
        queues it for ``send_messages``), 1 when only part was or an error occurred: the next
        ``send_messages`` call (possibly with no messages) must write the rest first, or raise
        the error. Must never block or raise. The default writes nothing."""
        return 0

    def use_recv_limits(self, limits: "RecvLimits") -> None:  # noqa: B027 (optional hook)
        """Optional: the socket's :class:`gsp.transport.limits.RecvLimits`, given before the first
        ``recv_messages``. A transport that buffers messages still arriving keeps its account
        there with a :class:`gsp.transport.limits.Holding`: it reports what it holds, waits while the
        socket is at ``max_recv_partial``, and ends a message that makes no progress for
        ``recv_partial_timeout`` with :class:`gsp.FrameStalled`. The default ignores them. Must
        not block or raise."""

    @abstractmethod
    def send_messages(self, messages: "Sequence[Message | bytes]") -> None:
        """Write every message in order; block until written. An item is a :class:`gsp.Message`
        (header then body on the wire) or, for a message without a header, just its ``bytes``
        body (:func:`gsp.message.message_bytes` turns either into what goes on the wire).
        Raises :class:`gsp.ConnectionBroken` when the peer or network failed,
        :class:`gsp.Closed` after ``close``."""

    @abstractmethod
    def recv_messages(self) -> list[bytes]:
        """Block until at least one whole message (header+body as one bytes) has arrived; return
        every complete one, oldest first. Raises :class:`gsp.ConnectionBroken` when the peer
        closed or the network failed, a :class:`gsp.WireError` (e.g.
        :class:`gsp.MessageTooLarge`) for bytes that break the framing — after returning the
        good messages that came before them — and :class:`gsp.Closed` after ``close``."""

    def recv_or_park(self, wake: Callable[[], None]) -> list[bytes] | None:
        """Optional: :meth:`recv_messages`, except that when nothing has arrived and nothing of
        a message is held (the stream is between messages), return ``None`` at once and call
        ``wake()`` from the event loop when bytes (or the peer's close) arrive: once, or in more
        loop turns until the next read (as an io watcher left armed does; the core's ``wake``
        does nothing for a pipe it has handed to a reader already). The core's reader greenlet
        then ends its turn, so an idle pipe holds no greenlet. ``wake`` is not called after
        :meth:`close`. Raises as :meth:`recv_messages`. The default never parks.

        The core may call it (on a connection that overrides it, but not :meth:`recv_nowait`)
        from a greenlet that gives up waiting after one turn of the event loop, by an exception
        thrown into the wait: a call interrupted so must lose nothing, and the next call goes on
        from where it stopped (as with gevent's own socket waits, and reading into a decoder that
        keeps partial frames)."""
        return self.recv_messages()

    def recv_nowait(self, wake: Callable[[], None]) -> list[bytes] | None:
        """Optional, with :meth:`recv_or_park`: the same, except that it never waits. Where
        ``recv_or_park`` would wait (part of a message came, the rest has not; or anything else
        it waits for), return an empty list at once, losing nothing: the core then calls
        ``recv_or_park`` from a greenlet that may wait. Raises as :meth:`recv_messages`.

        The core reads a connection in a user's wait (a lent read) with it. Without it, it calls
        ``recv_or_park`` there under a guard that interrupts it after one loop turn (a timer
        started and stopped for every such read). The default returns an empty list (read
        nothing now); the core uses the guard instead unless a connection overrides it."""
        return []

    def park(self, wake: Callable[[], None]) -> bool:
        """Optional, with :meth:`recv_or_park`: park as it does when nothing has arrived, but
        without reading first, for a caller with reason to think nothing has (it just read a
        request or a reply, whose peer now waits for an answer): a read would all but surely
        find nothing. True if parked (``wake`` as for :meth:`recv_or_park`, called at once if
        bytes did come); False if it cannot now (part of a message is held) or never parks
        (the default). Never blocks, never raises."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Release the connection; idempotent. May come from any greenlet at any time: a
        blocked ``handshake``, ``recv_messages`` or ``send_messages`` then raises
        :class:`gsp.Closed`. Must not raise, and not block for long (a transport whose close
        talks to the peer, as ws does, keeps it short)."""

    def refuse(self, reason: str) -> None:
        """Optional: the listener has no room for this connection (the socket is at
        ``max_pipes``), before its handshake. Tell the peer so where the transport has a way to
        (ws answers the upgrade request with ``503 Service Unavailable`` and ``Retry-After``),
        then release it as :meth:`close` does. Must not block or raise. The default just closes
        (an SP peer sees its connection end, and redials after a backoff)."""
        self.close()

    def deny(self, reason: str) -> None:
        """Optional: the listener's ``admit`` rule refused this peer (:mod:`gsp.admit`), right
        after accept or after its handshake. Tell the peer it is not admitted where the
        transport has a way to (ws answers a pending upgrade request with ``403 Forbidden``),
        without saying which rule (``reason`` is for a log of the transport's own, if any), then
        release it as :meth:`close` does. Must not block or raise. The default just closes."""
        self.close()

    def forget(self) -> None:  # noqa: B027 (optional hook: a do-nothing default)
        """Optional, for fork safety: called in a child process right after ``fork`` in place of
        :meth:`close`, for a connection the parent still uses. Release only this process's copy:
        stop its watchers and close its copies of the file descriptors, synchronously, without
        sending anything (no close frame, no TLS close_notify), without ``shutdown()`` and
        without waiting, so that no code left in this process can read or write the parent's
        connection. Must not raise. The default does nothing: the child then keeps the copies
        open until it exits (see docs/serving.md)."""


class TransportListener(ABC):
    """A bound address accepting connections."""

    #: The URL actually bound (a real port in place of 0).
    url: str

    @abstractmethod
    def bind(self) -> None:
        """Claim the address now; raise :class:`gsp.AddressInUse` or :class:`gsp.InvalidAddress`."""

    @abstractmethod
    def accept(self) -> Connection:
        """Block for the next connection (no SP handshake yet); raise :class:`gsp.Closed` once
        closed. Any other :class:`gsp.GspError` (e.g. out of file descriptors) makes the core
        back off briefly and call again. Must not block on the peer: handshakes run later."""

    @abstractmethod
    def close(self) -> None:
        """Stop accepting and release the address; idempotent. A blocked :meth:`accept` then
        raises :class:`gsp.Closed`. Must not block or raise."""

    def forget(self) -> None:  # noqa: B027 (optional hook: a do-nothing default)
        """Optional, for fork safety: as :meth:`Connection.forget`, for a listener inherited
        by a child process: close this process's copy of the listening descriptor and stop
        accepting here, but leave the address to the parent (unlink no ipc path). Must not
        raise. The default does nothing."""

    def handshakes_shed(self) -> Mapping[str, int]:
        """Optional: connections this listener closed before :meth:`accept` returned them to
        make room for newcomers, by reason (``"full"``, ``"address"``; see
        :mod:`gsp.transport.admission`), for a listener that reads something of a connection
        first (gsp-ws's HTTP server reads the upgrade request). Added to the listener's stats
        (``handshakes_shed_<reason>``). Must not block or raise. The default: none."""
        return {}

    def keep_after_fork(self) -> bool:
        """Optional, for fork safety: asked first, in a child process right after ``fork``.
        True keeps the listener accepting in the child, for one with no descriptor of its own
        (a route in an in-process server, such as gsp_ws's WSGI mount: the child's copy of the
        server routes to it); it must first drop, with ``forget``, any connection of the
        parent's it holds. False (the default) leaves the listener to the parent: ``forget``
        is called. Must not raise."""
        return False

    def adopt(self, fd: int) -> None:
        """Optional: make a connection of the already-connected stream socket ``fd`` and hand
        it to :meth:`accept` (its SP handshake then runs as any accepted connection's), as
        ``Listener.adopt(fd)`` asks; the ``socket://`` transport's way in. On success the
        descriptor is the listener's (closing the connection closes it); on an error it is
        left open and the caller's. Raise :class:`gsp.BadOption` for a descriptor that is not
        a connected stream socket, :class:`gsp.Closed` after :meth:`close`. Must not block for
        long. The default raises :class:`gsp.NotSupported`: the listener adopts nothing."""
        raise NotSupported(f"a {type(self).__name__} adopts no connected descriptors: listen on "
                           f"socket:// and adopt there")

    def reload(self) -> None:  # noqa: B027 (optional hook: a do-nothing default)
        """Optional: read again now the files the listener's options name (TLS certificates,
        keys, CAs, CRLs) for the connections accepted from now on, as ``Listener.reload()``
        asks; raise :class:`gsp.BadOption` if they do not load, keeping the previous ones in
        use. The default does nothing (nothing to reload)."""


class TransportDialer(ABC):
    """Makes connections to one address; the core calls ``dial`` again after each loss."""

    @abstractmethod
    def dial(self) -> Connection:
        """Connect once (no SP handshake yet). Raises :class:`gsp.ConnectionRefused` when nothing
        listens, :class:`gsp.InvalidAddress` for an address that cannot be reached at all, or
        another :class:`gsp.GspError`. The core bounds it with ``handshake_timeout`` and may kill
        the greenlet: release what you opened in ``finally``."""

    def close(self) -> None:  # noqa: B027 (optional: a do-nothing default is right)
        """Abort a dial in progress, if any (optional; idempotent). Must not block or raise."""

    def forget(self) -> None:  # noqa: B027 (optional hook: a do-nothing default)
        """Optional, for fork safety: in a child process right after ``fork``, drop this
        process's copy of a connection being made (as :meth:`Connection.forget`); the dialer
        is used again for the child's own dials. Must not raise. The default does nothing."""

    def reload(self) -> None:  # noqa: B027 (optional hook: a do-nothing default)
        """Optional: as :meth:`TransportListener.reload`, for the dialer's next connections;
        raise :class:`gsp.BadOption` if the files do not load. The default does nothing."""


class Transport:
    """A transport: the URL schemes it serves and how to make listeners and dialers for them.

    A plugin hands instances to gsp from its ``gsp_transports`` hook. Most transports need
    only :attr:`schemes`, :attr:`options` and the two classes::

        class ZlibTransport(Transport):
            schemes = ("tcp+zlib",)
            options = {"zlib_level": Option(...)}
            listener_class = ZlibListener      # ZlibListener(url, options) -> a TransportListener
            dialer_class = ZlibDialer          # ZlibDialer(url, options) -> a TransportDialer

    Override :meth:`listener` / :meth:`dialer` instead where making one takes more than a
    constructor call (choosing a class by scheme, sharing a server between listeners), and
    :meth:`free_url` so that :mod:`gsp.testing` can make URLs of your scheme.
    """

    #: URL schemes served, e.g. ``("tcp",)``.
    schemes: tuple[str, ...] = ()
    #: Transport-specific options, accepted by ``listen``/``dial`` and inherited from the socket.
    options: Mapping[str, Option] = {}
    #: The most bytes a message may weigh on this transport, 0 for no limit (the default). A
    #: transport that sends each message as one datagram sets it (udp://: 65,000): once a
    #: socket listens or dials on it, ``Socket.send`` raises :class:`gsp.MessageTooLarge` for a
    #: body over it (``send_msg``: header and body), naming the limit.
    message_max: int = 0
    #: The listener type: the default :meth:`listener` returns ``listener_class(url, options)``
    #: for each ``Socket.listen`` of a URL of :attr:`schemes` (a class, or any callable of that
    #: signature). Its constructor validates ``url`` (raising :class:`gsp.InvalidAddress`) and
    #: reads the endpoint's ``options``; it must not bind yet. None (the default): the
    #: transport makes no listeners, unless it overrides :meth:`listener`.
    listener_class: Callable[[str, Mapping[str, Any]], TransportListener] | None = None
    #: The dialer type, as :attr:`listener_class`: the default :meth:`dialer` returns
    #: ``dialer_class(url, options)`` for each ``Socket.dial``; the constructor validates and
    #: must not connect yet (the core calls ``dial()``, and again after each loss).
    dialer_class: Callable[[str, Mapping[str, Any]], TransportDialer] | None = None

    def listener(self, url: str, options: Mapping[str, Any]) -> TransportListener:
        """Make (not yet bind) a listener for ``url``; raise :class:`gsp.InvalidAddress` if bad.
        ``options`` holds every option of the endpoint (the transport's own included)."""
        if self.listener_class is None:
            raise NotImplementedError(f"{type(self).__name__} makes no listeners")
        return self.listener_class(url, options)

    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        """Make a dialer for ``url``; raise :class:`gsp.InvalidAddress` if bad."""
        if self.dialer_class is None:
            raise NotImplementedError(f"{type(self).__name__} makes no dialers")
        return self.dialer_class(url, options)

    def free_url(self, scheme: str, directory: str | None = None) -> str | None:
        """Optional, for :mod:`gsp.testing`: a URL of ``scheme`` that nothing listens on yet,
        fixed in advance, so that a test can dial it before anything listens there.

        ``gsp.testing.free_url(scheme, directory)`` and the ``gsp_free_url`` fixture ask it for
        any scheme other than tcp, tls+tcp, ipc and inproc (which they answer themselves);
        :class:`gsp.testing.TransportSuite` uses it for every URL it listens on unless the suite
        overrides ``listen_url``. ``scheme`` is one of :attr:`schemes`. Files, if any, go in
        ``directory`` (a temporary directory the caller removes afterwards; None where the
        caller has none); the URL must start with ``scheme://``. gsp never calls it outside testing. Must not raise; return None (the
        default) where the transport cannot tell: ``gsp_free_url`` then fails with
        ``LookupError``, and the suite needs ``listen_url`` overridden."""
        return None
