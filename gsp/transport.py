"""The interface a transport implements, and the stream helpers tcp, ipc and tls+tcp share.

A transport plugin returns :class:`Transport` objects from its ``gsp_transports`` hook. The core
asks a transport for a :class:`TransportListener` or :class:`TransportDialer` per endpoint; both
produce :class:`Connection` objects, which the core turns into pipes after ``handshake``.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import socket as _stdsocket
import struct
import termios
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit

import gevent
from gevent import socket as gsocket

from . import wire
from ._errors import (
    AddressInUse,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    GspError,
    InvalidAddress,
    Timeout,
)
from ._options import Option

if TYPE_CHECKING:
    from ._message import Message
    from .protocol import ProtocolSpec

__all__ = [
    "Transport", "TransportListener", "TransportDialer", "Connection", "StreamConnection",
    "Option", "split_url", "parse_host_port", "map_socket_error", "hostport", "resolve",
    "bind_stream_socket", "connect_socket", "message_bytes",
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
    def send_messages(self, messages: "Sequence[Message | bytes]") -> None:
        """Write every message in order; block until written. An item is a :class:`gsp.Message`
        (header then body on the wire) or, for a message without a header, just its ``bytes``
        body (:func:`message_bytes` turns either into what goes on the wire)."""

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

def message_bytes(msg: "Message | bytes") -> bytes:
    """What a queued message puts on the wire: header then body as one ``bytes`` (a header-less
    message is queued as its body, which is returned as it is, without a copy)."""
    if type(msg) is bytes:
        return msg
    return msg.header + msg.body if msg.header else msg.body


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
    try:  # a numeric address needs no lookup (getaddrinfo goes through gevent's threadpool)
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return (gsocket.AF_INET6, (host, port, 0, 0)) if ip.version == 6 else (
            gsocket.AF_INET, (host, port))
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


def connect_socket(dialer: Any, family: int, address: Any,
                   prepare: Callable[[Any], None] | None = None) -> Any:
    """Connect a new stream socket, mapping failures to gsp errors.

    ``dialer`` needs ``url`` and an ``_inflight`` attribute: the socket is parked there while it
    connects, so the dialer's ``close()`` can abort the connect by closing it.
    """
    sock = gsocket.socket(family, gsocket.SOCK_STREAM)
    dialer._inflight = sock
    try:
        if prepare is not None:
            prepare(sock)
        sock.connect(address)
    except BaseException as exc:
        # Whatever ends the connect (refusal, the dialer's time limit, GreenletExit from
        # Dialer.close) must not leak the fd.
        sock.close()
        if isinstance(exc, OSError) and not isinstance(exc, GspError):  # gsp.Timeout is an OSError
            raise map_socket_error(exc, f"dial {dialer.url}") from None
        raise
    finally:
        dialer._inflight = None
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

# Each read allocates at most this much; there is no per-connection buffer, so an idle pipe holds
# only the tail of an incomplete frame. 64 KiB stays under glibc's mmap threshold (a 256 KiB
# recv() costs an mmap/munmap pair per call) and is thousands of small messages per read; frames
# of wire.DIRECT_SIZE or more are read straight into their own buffer instead.
_RECV_CHUNK = 64 * 1024
_JOIN_LIMIT = 64 * 1024
_INT = struct.Struct("i")


def _readable(sock: Any) -> int:
    """Bytes the kernel holds for reading on ``sock`` now (FIONREAD), 0 if it cannot say."""
    try:
        return _INT.unpack(fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


class StreamConnection(Connection):
    """SP over a byte stream (a gevent socket, plain or TLS) with :mod:`gsp.wire` framing.

    Reads parse every complete frame out of each ``recv``; big bodies are read in place. Writes
    put a whole batch of messages on the wire with as few ``send`` calls as possible, and a pipe
    whose writer is idle may write a message at once with :meth:`send_now`.
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
        self._prefix = wire.prefixer(framing)
        self._cache = wire.prefix_cache(framing)
        self._tail: memoryview | None = None  # what send_now could not write yet
        self._plain = False  # a plain gevent socket (not TLS): send_now and FIONREAD work on it
        self._big = False  # the last message was big (see recv_messages)
        self._closed = False

    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        with gevent.Timeout(timeout, Timeout(f"SP handshake with {self.remote_address} timed out")):
            self._sendall(wire.handshake(spec.number))
            got = bytearray()
            while len(got) < wire.HANDSHAKE_SIZE:
                chunk = self._recv(wire.HANDSHAKE_SIZE - len(got))
                got += chunk
        wire.parse_handshake(bytes(got), spec.peer_number)
        # After the handshake, so a transport that wraps the socket (TLS) is seen as it is now.
        self._plain = type(self.sock) is gsocket.socket

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
            # send() first: gevent's sendall asks the kernel for SO_SNDBUF on every call.
            sent = self.sock.send(data)
            if sent < len(data):
                self.sock.sendall(memoryview(data)[sent:])
        except OSError as exc:
            raise self._io_error(exc, "send") from None

    def _io_error(self, exc: OSError, what: str) -> Exception:
        if self._closed:
            return Closed("connection closed locally")
        if isinstance(exc, Timeout):  # the handshake's gevent.Timeout firing in recv/send
            return exc
        return ConnectionBroken(f"{what} on {self.remote_address}: {exc.strerror or exc}")

    def send_now(self, msg: "Message | bytes") -> int:
        """Write ``msg`` without waiting, for a pipe whose writer is idle (no greenlet switch).

        Returns 2 when all of it was written, 0 when nothing was (queue it instead), and 1 when
        only part was: the rest is kept and the next :meth:`send_messages` (even with no
        messages) writes it first. Never blocks; a socket error also returns 1, so the writer
        meets the error and ends the pipe in its own greenlet.
        """
        n = len(msg)  # bytes, or a Message's header + body
        if not self._plain or self._tail is not None or n >= _JOIN_LIMIT:
            return 0  # a big body goes through the writer: joining it here would copy it
        data = self._prefix(n) + message_bytes(msg)
        try:
            sent = self.sock.send(data, 0, 0.0)  # timeout 0: EAGAIN raises instead of waiting
        except BlockingIOError:
            return 0
        except OSError:
            self._tail = memoryview(data)
            return 1
        if sent == len(data):
            return 2
        self._tail = memoryview(data)[sent:]
        return 1

    def send_messages(self, messages: "Sequence[Message | bytes]") -> None:
        tail = self._tail
        if tail is not None:
            self._tail = None
            self._sendall(tail)
        if messages:
            data = wire.join_bodies(self._cache, messages)
            if data is not None:  # header-less small messages: framed by C loops, one write
                self._sendall(data)
                return
        # Small frames are appended to one buffer written every _JOIN_LIMIT bytes (in-place
        # appends: no per-message call); a large body goes out as it is, never copied.
        prefix, cache = self._prefix, self._cache
        ncache = len(cache)
        buf = bytearray()
        for m in messages:
            if type(m) is bytes:
                h, b = b"", m
            else:
                h, b = m.header, m.body
            n = len(h) + len(b)
            if n >= _JOIN_LIMIT:
                buf += prefix(n)
                buf += h
                self._sendall(buf)
                self._sendall(b)
                buf = bytearray()
                continue
            buf += cache[n] if n < ncache else prefix(n)
            if h:
                buf += h
            buf += b
            if len(buf) >= _JOIN_LIMIT:
                self._sendall(buf)
                buf = bytearray()
        if buf:
            self._sendall(buf)

    def recv_messages(self) -> list[bytes]:
        decoder = self.decoder
        if decoder.error is not None:
            raise decoder.error.with_traceback(None)  # reported after the good messages before it
        sock = self.sock
        while True:
            direct = None
            try:
                if self._big and self._plain and not decoder.buffered:
                    # Big messages lately: read only the next prefix, so that a big body can then
                    # be received as the message itself (one recv, no buffer and no copy).
                    data = sock.recv(self.framing.prefix_size)
                    n = len(data)
                elif (want := decoder.body_wanted) >= wire.DIRECT_SIZE and self._plain and \
                        _readable(sock) >= want:
                    data = sock.recv(want)
                    n = len(data)
                elif (direct := decoder.recv_buffer()) is not None:  # read into place
                    n = sock.recv_into(direct)
                else:
                    data = sock.recv(_RECV_CHUNK)
                    n = len(data)
            except OSError as exc:
                raise self._io_error(exc, "recv") from None
            finally:
                if direct is not None:
                    direct.release()  # the decoder may hand the buffer on as a message
            if n == 0:
                if self._closed:
                    raise Closed("connection closed locally")
                raise ConnectionBroken(f"{self.remote_address} closed the connection")
            msgs = decoder.filled(n) if direct is not None else decoder.feed(data)
            if msgs:
                self._big = len(msgs[-1]) >= wire.DIRECT_SIZE
                return msgs

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
