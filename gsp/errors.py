"""The one error tree of gsp.

Everything gsp raises on purpose derives from :class:`GspError`. Two families matter most when
handling failures: :class:`Closed` means *you* (this process) closed the object you used;
:class:`ConnectionBroken` means the *peer* or the network ended a connection.
"""

from __future__ import annotations

__all__ = [
    "GspError", "Timeout", "WouldBlock", "Closed", "ConnectionBroken", "FrameStalled",
    "ProtocolStateError", "Canceled",
    "NotSupported",
    "BadOption", "InvalidAddress", "AddressInUse", "ConnectionRefused", "WireError",
    "MessageTooLarge", "HandshakeError", "BadMagic", "BadVersion", "BadReserved",
    "WrongProtocol", "BadFrame", "UnknownPlugin", "BadMessage", "timed_out",
    "NoPeers",
    "WrongThread", "TLSHandshakeError",
]


class GspError(Exception):
    """Root of every error gsp raises on purpose."""


class Timeout(GspError, TimeoutError):
    """A send, receive or select did not complete within its timeout (or a ``drain()`` did not
    finish in time: the socket is closed anyway). The message states the timeout asked for and
    where it came from.

    ``timeout`` is the timeout that expired, in seconds, as the caller asked for it (``None``
    when the error is not a wait running out, e.g. a survey that expired)."""

    def __init__(self, message: str = "timed out", *, timeout: float | None = None) -> None:
        super().__init__(message)
        self.timeout = timeout


class WouldBlock(GspError):
    """A call that may not wait (``block=False``, or ``timeout=0``) could not complete at once.

    Not a :class:`Timeout`: no time passed (``except gsp.Timeout`` does not catch it; catch
    both where a call may be either). ``timeout`` is ``0.0``, as for the zero timeout it
    stands for."""

    def __init__(self, message: str = "would block", *, timeout: float = 0.0) -> None:
        super().__init__(message)
        self.timeout = timeout


_WHY = {"recv": "no message queued", "send": "no peer can take the message now"}


def timed_out(op: str, timeout: float, source: str) -> Timeout | WouldBlock:
    """The error of a ``send``/``recv`` whose wait ran out, in the caller's terms: the timeout
    asked for and where it came from (``source``, e.g. ``"recv_timeout=2"``):
    ``recv timed out after 2 s (recv_timeout=2)``; for a zero timeout a :class:`WouldBlock`,
    ``recv would block: no message queued (block=False)``."""
    if timeout == 0:
        return WouldBlock(f"{op} would block: {_WHY.get(op, 'not ready')} ({source})",
                          timeout=0.0)
    return Timeout(f"{op} timed out after {timeout:g} s ({source})", timeout=timeout)


class Closed(GspError):
    """The socket, context, dialer, listener or channel was closed by this process; ``close()``
    wakes the calls blocked on it with this error. Also what a draining socket refuses
    (``drain()``: new sends, REP's ``recv``, new contexts and endpoints)."""


class ConnectionBroken(GspError):
    """The peer closed the connection or the network broke it (not a local close). A pipe's
    ``error`` says so; of the calls on a socket only REQ's ``recv`` raises it, when the pipe
    carrying its request broke and resending is off (docs/errors.md)."""


class FrameStalled(ConnectionBroken):
    """A pipe was closed because a message it had begun to receive made no progress for
    ``recv_partial_timeout`` seconds: the peer stopped sending mid-message, or the socket's
    ``max_recv_partial`` held the pipe back that long. A :class:`ConnectionBroken`."""


class ProtocolStateError(GspError):
    """The operation is not valid in the protocol's current state (e.g. REP send before recv)."""


class Canceled(ProtocolStateError):
    """A waiting call was canceled by a newer one (REQ: a newer request; surveyor: a newer
    survey). A :class:`ProtocolStateError`, so existing handlers still catch it."""


class NotSupported(GspError):
    """The protocol or transport does not offer this operation: ``recv`` on PUSH or PUB,
    contexts on raw sockets, ``dial("socket://")``, ``Listener.adopt`` on a listener other than
    ``socket://``'s, ``tcp_reuseport`` where the platform has no ``SO_REUSEPORT``."""


class BadOption(GspError, ValueError):
    """An unknown option name, a value of the wrong type or out of range (a negative timeout),
    or an option given to a ``listen``/``dial`` it does
    nothing on (``tls_verify`` on a listener); a descriptor given to ``listen_fd`` or
    ``Listener.adopt`` that is not an open stream socket, listening or connected as needed."""


class InvalidAddress(GspError, ValueError):
    """A URL gsp cannot parse, or whose scheme no installed transport serves (the message lists
    those installed); a ``listen_fd`` socket of an address family the scheme does not speak, or
    on another port than the URL names."""


class AddressInUse(GspError):
    """Another socket already listens on that address."""


class ConnectionRefused(GspError):
    """Nothing accepted a ``dial(..., fail_fast=True)`` at that address, or the listening socket
    is at its ``max_pipes``."""


class UnknownPlugin(GspError, LookupError):
    """No installed plugin provides the protocol or transport asked for."""


class BadMessage(GspError, ValueError):
    """A received message body is not what the call expects (``recv_obj``: not exactly one
    msgpack object). The message is consumed; the socket serves on."""


class WireError(GspError):
    """A peer sent bytes that break the SP wire format; the pipe carrying them is closed."""


class MessageTooLarge(WireError):
    """A frame announced more bytes than the receive limit (``max_recv_size``).

    ``size`` is the size the peer announced (or the most that was seen) and ``limit`` the limit
    in force, each ``None`` when the transport could not say.
    """

    def __init__(self, message: str, *, size: int | None = None,
                 limit: int | None = None) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class BadFrame(WireError):
    """A frame is malformed (e.g. an ipc frame whose type byte is not 0x01)."""


class HandshakeError(WireError):
    """The 8-byte SP connection header was not acceptable (its subclasses say how); the pipe is
    closed and the socket serves on."""


class BadMagic(HandshakeError):
    """The header did not start with ``00 'S' 'P'``."""


class BadVersion(HandshakeError):
    """The header's version byte was not 0."""


class BadReserved(HandshakeError):
    """The header's two reserved bytes were not zero."""


class TLSHandshakeError(HandshakeError):
    """The TLS handshake failed: untrusted or mismatched certificate, missing client cert, ..."""


class WrongProtocol(HandshakeError):
    """The peer speaks a protocol that is not this socket's peer protocol. The message names
    both (``peer speaks rep (0x31), this push socket needs pull (0x51)``); ``expected`` and
    ``got`` are their numbers."""

    def __init__(self, message: str, *, expected: int | None = None, got: int | None = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class InheritedListener(Closed):
    """The socket was made before this process forked and its only endpoints were listeners,
    which stay the parent's: the socket is closed in the child (docs/serving.md). Make the
    socket after fork (gunicorn ``post_fork``, :func:`gsp.per_process`), and listen in each
    process on an address of its own, or on one tcp address with ``tcp_reuseport=True`` in
    every process."""


class NoPeers(GspError):
    """No peer is connected, and the socket's ``fail_no_peers`` option is set: an operation that
    would have waited for a peer to exist failed at once instead (mangos' ``ErrNoPeers``): a send
    on push, req, surveyor, pair, pair1, bus or star with no pipe at all, a req recv whose
    request has no pipe to go on, a req recv whose request's pipe died and no other is left.

    Neither :class:`Closed` (nothing was closed) nor :class:`ConnectionBroken` nor a
    :class:`Timeout`: no wait ran out, so ``except WouldBlock`` around ``block=False`` calls does
    not catch it. A peer that connects later makes the same call succeed."""


class UpgradeRefused(HandshakeError):
    """A server refused the HTTP upgrade a dialer asked for (ws/wss: the WebSocket upgrade).

    ``status`` is the HTTP status it answered with (400: not this endpoint's protocol,
    403: origin refused, 404: no SP endpoint at that path, 426: not a WebSocket upgrade,
    500/503: the server cannot serve it now; or the status of a refusal by the listener's
    ``ws_authorize`` check, such as 401 or 403) and ``reason`` the text of its answer (``""`` if
    it gave none).
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class WorkerFailed(GspError):
    """A worker process of :func:`gsp.prefork` could not start (it exited before it listened,
    or did not listen within ``start_timeout``) or kept dying right after each start: every
    worker was stopped. ``index`` is the worker's slot and ``exitcode`` how its last process
    ended (negative: killed by that signal; ``None``: it did not exit). Its traceback, if it
    raised, is on the worker's stderr (docs/serving.md, "Every core")."""

    def __init__(self, message: str, *, index: int, exitcode: int | None) -> None:
        super().__init__(message)
        self.index = index
        self.exitcode = exitcode


class WrongThread(GspError):
    """A socket, context or channel was used from an OS thread other than the one whose gevent
    hub made it. Every such object belongs to the hub of the thread that created it; another
    thread either opens its own sockets or goes through :mod:`gsp.blocking`, which is safe to
    call from any thread (docs/concurrency.md). Raised at once, before the object is touched:
    it still works in its own thread."""

    def __init__(self, what: str, owner: int, here: int) -> None:
        super().__init__(
            f"this {what} belongs to the gevent hub of OS thread {_thread_name(owner)} and was "
            f"used from OS thread {_thread_name(here)}: a gsp socket, context or channel may be "
            f"used only from the thread that created it. From other threads use gsp.blocking "
            f"(e.g. gsp.blocking.socket(...), safe from any thread), or give each thread its own "
            f"sockets (docs/concurrency.md)")
        self.owner = owner
        self.thread = here


def _thread_name(ident: int) -> str:
    import threading  # (only when the error is raised: gsp.errors imports nothing else)

    for t in threading.enumerate():
        if t.ident == ident:
            return f"{t.name!r} ({ident})"
    return str(ident)
