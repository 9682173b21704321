"""The interface a transport implements, and the stream helpers tcp, ipc and tls+tcp share.

A transport plugin returns :class:`Transport` objects from its ``gsp_transports`` hook. The core
asks a transport for a :class:`TransportListener` or :class:`TransportDialer` per endpoint; both
produce :class:`Connection` objects, which the core turns into pipes after ``handshake``.
"""

from __future__ import annotations

import errno
import socket as _stdsocket
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Mapping, Sequence
from urllib.parse import urlsplit

import gevent
from gevent import socket as gsocket

from . import wire
from ._errors import (
    AddressInUse, Closed, ConnectionBroken, ConnectionRefused, InvalidAddress, Timeout,
)
from ._options import Option

if TYPE_CHECKING:
    from ._message import Message
    from .protocol import ProtocolSpec

__all__ = [
    "Transport", "TransportListener", "TransportDialer", "Connection", "StreamConnection",
    "Option", "split_url", "parse_host_port", "map_socket_error", "hostport", "resolve",
    "bind_stream_socket",
    "TLS_OPTIONS", "TLSHandshakeError", "tls_context", "tls_wrap", "tls_handshake", "tls_properties",
]

# TLS helpers for transports that secure a stream (tls+tcp, wss). They live with tls+tcp and load
# on first use, because that module imports this one.
_TLS_NAMES = frozenset(__all__[-6:])


def __getattr__(name: str) -> Any:
    if name in _TLS_NAMES:
        from ._transports import tls
        return getattr(tls, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    @abstractmethod
    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        """Agree on protocols with the peer; raise a :class:`gsp.HandshakeError` to refuse."""

    @abstractmethod
    def send_messages(self, messages: "Sequence[Message]") -> None:
        """Write every message (header then body) in order; block until written."""

    @abstractmethod
    def recv_messages(self) -> list[bytes]:
        """Block until at least one whole message (header+body as one bytes) has arrived."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; idempotent."""


class TransportListener(ABC):
    """A bound address accepting connections."""

    #: The URL actually bound (a real port in place of 0).
    url: str

    @abstractmethod
    def bind(self) -> None:
        """Claim the address now; raise :class:`gsp.AddressInUse` or :class:`gsp.InvalidAddress`."""

    @abstractmethod
    def accept(self) -> Connection:
        """Block for the next connection; raise :class:`gsp.Closed` once closed."""

    @abstractmethod
    def close(self) -> None:
        """Stop accepting and release the address; idempotent."""


class TransportDialer(ABC):
    @abstractmethod
    def dial(self) -> Connection:
        """Connect once; raise :class:`gsp.ConnectionRefused` (or another GspError) on failure."""

    def close(self) -> None:
        """Abort any dial in progress (optional)."""


class Transport(ABC):
    """A transport: the URL schemes it serves and how to make listeners and dialers for them."""

    #: URL schemes served, e.g. ``("tcp",)``.
    schemes: tuple[str, ...] = ()
    #: Transport-specific options, accepted by ``listen``/``dial`` and inherited from the socket.
    options: Mapping[str, Option] = {}

    @abstractmethod
    def listener(self, url: str, options: Mapping[str, Any]) -> TransportListener:
        """Make (not yet bind) a listener for ``url``; raise :class:`gsp.InvalidAddress` if bad."""

    @abstractmethod
    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        """Make a dialer for ``url``; raise :class:`gsp.InvalidAddress` if bad."""


# -- URL helpers ------------------------------------------------------------------------------

def split_url(url: str) -> tuple[str, str]:
    """Split ``scheme://rest``; raise :class:`gsp.InvalidAddress` for anything else."""
    if not isinstance(url, str):
        raise InvalidAddress(f"a URL is a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or any(c.isspace() for c in url):
        raise InvalidAddress(f"not a URL: {url!r} (expected scheme://address)")
    return scheme.lower(), rest


def parse_host_port(url: str, *, listening: bool, default_port: int | None = None) -> tuple[str, int]:
    """Host and port of ``scheme://host:port[/...]``; IPv6 literals in brackets.

    A listener may use port 0 and an empty or ``*`` host (all interfaces); a dialer may not.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError as exc:
        raise InvalidAddress(f"bad address in {url!r}: {exc}") from None
    netloc = parts.netloc
    if netloc.startswith("*"):
        host = ""
        try:
            port = int(netloc[2:]) if netloc.startswith("*:") else None
        except ValueError:
            raise InvalidAddress(f"bad port in {url!r}") from None
    if port is None:
        if default_port is None:
            raise InvalidAddress(f"{url!r} has no port")
        port = default_port
    if not listening and (not host or port == 0):
        raise InvalidAddress(f"cannot dial {url!r}: a dialer needs a host and a non-zero port")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidAddress(f"unexpected query, fragment or credentials in {url!r}")
    return host, port


def hostport(host: str, port: int) -> str:
    """``host:port``, with an IPv6 literal in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(host: str, port: int, listening: bool) -> tuple[int, Any]:
    """``(family, sockaddr)`` for a stream socket; an empty host listens on every IPv4 address."""
    if not host:
        return gsocket.AF_INET, ("0.0.0.0", port)
    try:
        infos = gsocket.getaddrinfo(host, port, 0, gsocket.SOCK_STREAM, 0,
                                    gsocket.AI_PASSIVE if listening else 0)
    except OSError as exc:
        raise InvalidAddress(f"cannot resolve {host!r}: {exc}") from None
    family, _, _, _, addr = infos[0]
    return family, addr


def bind_stream_socket(family: int, addr: Any, what: str, backlog: int = 1024) -> Any:
    """A gevent stream socket bound and listening on ``addr``, errors mapped to gsp's."""
    sock = gsocket.socket(family, gsocket.SOCK_STREAM)
    try:
        if family != getattr(gsocket, "AF_UNIX", None):
            sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise map_socket_error(exc, what) from None
    return sock


def map_socket_error(exc: OSError, what: str) -> Exception:
    """Turn an OSError from connect/bind/recv/send into the matching gsp error."""
    code = exc.errno
    if code == errno.ECONNREFUSED or code == errno.ENOENT:
        return ConnectionRefused(f"{what}: connection refused")
    if code == errno.EADDRINUSE:
        return AddressInUse(f"{what}: address in use")
    if code in (errno.EADDRNOTAVAIL, errno.EINVAL, errno.EAFNOSUPPORT) or isinstance(
            exc, _stdsocket.gaierror):
        return InvalidAddress(f"{what}: {exc.strerror or exc}")
    if isinstance(exc, (_stdsocket.timeout,)):
        return Timeout(f"{what}: timed out")
    return ConnectionBroken(f"{what}: {exc.strerror or exc}")


# -- the stream connection shared by tcp, ipc and tls+tcp -------------------------------------

_RECV_CHUNK = 256 * 1024
_JOIN_LIMIT = 64 * 1024


class StreamConnection(Connection):
    """SP over a byte stream (a gevent socket, plain or TLS) with :mod:`gsp.wire` framing.

    Reads parse every complete frame out of one large ``recv_into``; writes put a whole batch of
    messages on the wire with one ``sendall``.
    """

    def __init__(self, sock: Any, framing: wire.Framing, max_size: int,
                 local_address: str, remote_address: str,
                 properties: Mapping[str, Any] | None = None) -> None:
        self.sock = sock
        self.framing = framing
        self.decoder = wire.FrameDecoder(framing, max_size)
        self.local_address = local_address
        self.remote_address = remote_address
        self.properties = dict(properties or {})
        self._buf = bytearray(_RECV_CHUNK)
        self._view = memoryview(self._buf)
        self._closed = False

    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        with gevent.Timeout(timeout, Timeout(f"SP handshake with {self.remote_address} timed out")):
            self._sendall(wire.handshake(spec.number))
            got = bytearray()
            while len(got) < wire.HANDSHAKE_SIZE:
                chunk = self._recv(wire.HANDSHAKE_SIZE - len(got))
                got += chunk
        wire.parse_handshake(bytes(got), spec.peer_number)

    def _recv(self, n: int) -> bytes:
        try:
            data = self.sock.recv(n)
        except OSError as exc:
            raise self._io_error(exc, "recv") from None
        if not data:
            raise ConnectionBroken(f"{self.remote_address} closed the connection")
        return data

    def _sendall(self, data: Any) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise self._io_error(exc, "send") from None

    def _io_error(self, exc: OSError, what: str) -> Exception:
        if self._closed:
            return Closed("connection closed locally")
        if isinstance(exc, Timeout):  # the handshake's gevent.Timeout firing in recv/send
            return exc
        return ConnectionBroken(f"{what} on {self.remote_address}: {exc.strerror or exc}")

    def send_messages(self, messages: "Sequence[Message]") -> None:
        parts = wire.encode_frames(self.framing, [(m.header, m.body) for m in messages])
        # Small parts are coalesced into writes of about _JOIN_LIMIT bytes; a large body goes out
        # as it is, so a batch of big messages never costs a copy of the whole batch.
        pending: list[bytes] = []
        size = 0
        for part in parts:
            n = len(part)
            if n >= _JOIN_LIMIT:
                if pending:
                    self._sendall(b"".join(pending))
                    pending, size = [], 0
                self._sendall(part)
                continue
            pending.append(part)
            size += n
            if size >= _JOIN_LIMIT:
                self._sendall(b"".join(pending))
                pending, size = [], 0
        if pending:
            self._sendall(b"".join(pending) if len(pending) > 1 else pending[0])

    def recv_messages(self) -> list[bytes]:
        view = self._view
        decoder = self.decoder
        if decoder.error is not None:
            raise decoder.error.with_traceback(None)  # reported after the good messages before it
        feed = decoder.feed
        recv_into = self.sock.recv_into
        while True:
            try:
                n = recv_into(self._buf)
            except OSError as exc:
                raise self._io_error(exc, "recv") from None
            if n == 0:
                if self._closed:
                    raise Closed("connection closed locally")
                raise ConnectionBroken(f"{self.remote_address} closed the connection")
            msgs = feed(view[:n])
            if msgs:
                return msgs

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
