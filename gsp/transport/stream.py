"""SP over a byte-stream socket: the helpers tcp, ipc and tls+tcp (and ws) are made of.

* :class:`StreamConnection` — a :class:`gsp.transport.Connection` over a connected gevent socket
  (plain or TLS) with :mod:`gsp.transport.wire` framing: batched reads and writes, buffers of what arrived.
* :class:`SocketListener` / :class:`SocketDialer` — listener and dialer bases that produce them;
  a transport fills in how to bind and connect.
* :func:`resolve`, :func:`bind_stream_socket`, :func:`connect_socket` and
  :func:`map_socket_error` — the socket calls with their errors mapped to gsp's (the one place
  where an ``OSError`` becomes a :class:`gsp.GspError`).
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket as _stdsocket
import struct
import termios
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

import gevent
from gevent import socket as gsocket

from .._mypyc import mypyc_attr  # (mypyc reads it when the wheel compiles this module)
from .._overrides import overrides
from ..errors import (
    AddressInUse,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    GspError,
    InvalidAddress,
    NotSupported,
    Timeout,
)
from ..message import message_bytes
from . import wire
from .fds import adopt_listening_socket
from .interface import Connection, TransportDialer, TransportListener
from .limits import Holding, RecvLimits

if TYPE_CHECKING:
    from ..message import Message
    from ..protocol.interface import ProtocolSpec

__all__ = [
    "StreamConnection", "SocketListener", "SocketDialer", "resolve", "bind_stream_socket",
    "connect_socket", "map_socket_error", "forget_socket",
]


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


def bind_stream_socket(family: int, addr: Any, what: str, backlog: int = 4096, *,
                       reuseport: bool = False) -> Any:
    """A gevent stream socket bound and listening on ``addr``, errors mapped to gsp's.

    The listen ``backlog`` (the kernel caps it at ``net.core.somaxconn``, 4,096 by default since
    Linux 5.4) holds connections made before they are accepted. Deep, because a client whose
    SYN finds it full is dropped and retries after a second, then three: under a flood of
    stalled connections, which listeners shed at ``max_handshakes`` while accepting on, a good
    peer must find room in the queue (docs/reliability.md, admission control).

    ``reuseport`` sets ``SO_REUSEPORT`` before the bind, so that several sockets (of this
    process or others of the same user) that all set it listen on one address, the kernel
    spreading new connections among them (Linux; :class:`gsp.NotSupported` where the platform
    has no such option)."""
    if reuseport and not hasattr(gsocket, "SO_REUSEPORT"):
        raise NotSupported(f"{what}: this platform has no SO_REUSEPORT")
    sock = gsocket.socket(family, gsocket.SOCK_STREAM)
    try:
        if family != getattr(gsocket, "AF_UNIX", None):
            sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_REUSEPORT, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise map_socket_error(exc, what) from None
    return sock


def connect_socket(url: str, family: int, address: Any,
                   prepare: Callable[[Any], None] | None = None,
                   park: Callable[[Any], None] | None = None) -> Any:
    """Connect a new stream socket to ``address`` (dialing ``url``), mapping failures to gsp
    errors (:class:`gsp.ConnectionRefused`, :class:`gsp.InvalidAddress`, ...).

    ``prepare(sock)`` runs before the connect (socket options). ``park(sock)`` is called with the
    socket while it connects and ``park(None)`` after, so a dialer's ``close()`` can abort the
    connect by closing what was parked. The fd never leaks, whatever ends the connect.
    """
    sock = gsocket.socket(family, gsocket.SOCK_STREAM)
    if park is not None:
        park(sock)
    try:
        if prepare is not None:
            prepare(sock)
        sock.connect(address)
    except BaseException as exc:
        # Whatever ends the connect (refusal, the dialer's time limit, GreenletExit from
        # Dialer.close) must not leak the fd.
        sock.close()
        if isinstance(exc, OSError) and not isinstance(exc, GspError):  # gsp.Timeout is an OSError
            raise map_socket_error(exc, f"dial {url}") from None
        raise
    finally:
        if park is not None:
            park(None)
    return sock


def _caused(err: Exception, cause: OSError) -> Exception:
    """``err`` with ``cause`` as its ``__cause__``, which a listener reads (a peer that left, or
    a shortage of fds). Set by hand: in this module compiled by mypyc, ``raise err from cause``
    alone leaves ``__cause__`` unset (mypy 2.4, CPython 3.11 and 3.12)."""
    err.__cause__ = cause
    return err


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

# Each read allocates at most this much, and only once bytes are there; there is no
# per-connection buffer, so an idle pipe holds only the tail of an incomplete frame. 64 KiB stays
# under glibc's mmap threshold (a 256 KiB recv() costs an mmap/munmap pair per call) and is
# thousands of small messages per read; a big body is read as FIONREAD says it arrived.
_RECV_CHUNK = 64 * 1024
_JOIN_LIMIT = 64 * 1024
_INT = struct.Struct("i")
_BODY_WAIT = 0.25  # seconds a reader waits for a whole big body before it reads what came


def _readable(sock: Any) -> int:
    """Bytes the kernel holds for reading on ``sock`` now (FIONREAD), 0 if it cannot say."""
    try:
        n: int = _INT.unpack(fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        return n
    except OSError:
        return 0


def forget_socket(sock: Any) -> None:
    """Close this process's copy of ``sock``'s file descriptor at once, with no ``shutdown()``,
    nothing sent (a TLS socket's ``close_notify`` neither) and no wait: what a transport's
    ``forget`` does in a child process after fork, where the parent still uses the connection
    (see :meth:`gsp.transport.Connection.forget`). The socket object holds no descriptor
    afterwards, so nothing left in this process can read or write the parent's connection.
    A gevent socket drops its watchers (greenlets waiting on it get an error later). Never
    raises."""
    if sock is None:
        return
    try:
        fd = sock.detach()
    except (OSError, AttributeError, ValueError):
        return
    if isinstance(fd, int) and fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


@mypyc_attr(allow_interpreted_subclasses=True)  # transports subclass it
class StreamConnection(Connection):
    """SP over a byte stream (a gevent socket, plain or TLS) with :mod:`gsp.transport.wire` framing.

    Reads parse every complete frame out of each ``recv``; a big body is read as it arrives. Writes
    put a whole batch of messages on the wire with as few ``send`` calls as possible, and a pipe
    whose writer is idle may write a message at once with :meth:`send_now`.
    """

    #: :attr:`gsp.transport.Connection.OPTIONAL_HOOKS`, and ``recv_messages``: a subclass that
    #: reads its own way overrides it (its reads then never park); ``handshake``: a subclass
    #: with a handshake of its own (TLS) overrides it (then ``handshake_nowait`` does nothing).
    OPTIONAL_HOOKS: ClassVar[frozenset[str]] = Connection.OPTIONAL_HOOKS | {"recv_messages",
                                                                            "handshake"}

    # Slots for what every read and write reads (a subclass's own attributes go in its dict).
    __slots__ = ("sock", "framing", "decoder", "local_address", "remote_address", "properties",
                 "_prefix", "_cache", "_tail", "_plain", "_raw", "_park", "_lowat", "_body_wait",
                 "_big", "_known", "_body_buf", "_body_got", "_holding", "_closed", "_drained",
                 "_hs_got", "_hs_head")

    def __init__(self, sock: Any, framing: wire.Framing, max_size: int,
                 local_address: str, remote_address: str,
                 properties: Mapping[str, Any] | None = None) -> None:
        self.sock = sock
        self.framing = framing
        self.decoder = wire.FrameDecoder(framing, max_size)
        self.local_address = local_address
        self.remote_address = remote_address
        self.properties: dict[str, Any] = dict(properties or {})
        self._prefix = wire.prefixer(framing)
        self._cache = wire.prefix_cache(framing)
        self._tail: memoryview | None = None  # what send_now could not write yet
        self._plain = False  # a plain gevent socket (not TLS): send_now and FIONREAD work on it
        self._raw: Any = None  # a plain socket's non-blocking socket underneath (recv_or_park)
        self._park: Any = None  # the io watcher recv_or_park leaves armed (made on first need)
        self._lowat = False  # a plain TCP socket: readiness honours SO_RCVLOWAT (see _await_body)
        self._body_wait: Any = None  # the io watcher _await_body waits on (close() cancels it)
        self._big = False  # the last message was big (see recv_messages)
        #: The last read of recv_nowait took less than it asked for, ending between messages:
        #: the kernel held nothing more then, so the next recv_nowait parks without a read.
        self._drained = False
        #: Bytes the kernel holds for this socket at least: the last FIONREAD count less what was
        #: read since (below 0: unknown). A big body known to be there needs no count of its own.
        self._known = 0
        self._body_buf: bytearray | None = None  # see _gather_body
        self._body_got = 0  # bytes of the body in progress in _body_buf
        self._holding = Holding(None, remote_address)  # see use_recv_limits
        self._closed = False
        self._hs_got = 0  # bytes of the peer's SP header received (handshake_progress)
        self._hs_head = b""  # what handshake_nowait read of the peer's header

    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        with gevent.Timeout(timeout, Timeout(f"SP handshake with {self.remote_address} timed out")):
            self._sendall(wire.handshake(spec.number))
            got = bytearray(self._hs_head)
            while len(got) < wire.HANDSHAKE_SIZE:
                chunk = self._recv(wire.HANDSHAKE_SIZE - len(got))
                got += chunk
                self._hs_got = len(got)
                wire.check_handshake_start(got)  # garbage is refused at once, not at 8 bytes
        self._handshaken(got, spec)

    def handshake_nowait(self, spec: "ProtocolSpec") -> bool:
        """What has come of the peer's header, read without waiting on a plain socket (see
        :meth:`gsp.transport.Connection.handshake_nowait`): one read, a second one after part of
        a header (its end may be there). A subclass with a handshake of its own (TLS) does
        nothing here."""
        sock = self.sock
        raw = getattr(sock, "_sock", None) if type(sock) is gsocket.socket else None
        if raw is None or self._hs_got or overrides(self, StreamConnection, "handshake"):
            return False
        got = b""
        try:
            while len(got) < wire.HANDSHAKE_SIZE:  # (again after part of a header: its end?)
                try:  # gevent's socket wraps a non-blocking one: EAGAIN instead of a wait
                    chunk: bytes = raw.recv(wire.HANDSHAKE_SIZE - len(got))
                except BlockingIOError:
                    return False
                except OSError as exc:
                    raise self._io_error(exc, "recv") from None
                if not chunk:
                    raise ConnectionBroken(f"{self.remote_address} closed the connection")
                got += chunk
                wire.check_handshake_start(got)
        finally:
            self._hs_head = got  # handshake() goes on from here
            self._hs_got = len(got)
        self._sendall(wire.handshake(spec.number))  # (8 bytes into a new socket's empty buffer)
        self._handshaken(got, spec)
        return True

    def _handshaken(self, got: "bytes | bytearray", spec: "ProtocolSpec") -> None:
        """The peer's whole header ``got``: check it, and set the connection up for pipes."""
        wire.parse_handshake(bytes(got), spec.peer_number, own=spec.number)
        # After the handshake, so a transport that wraps the socket (TLS) is seen as it is now.
        self._plain = type(self.sock) is gsocket.socket
        # gevent's socket wraps a non-blocking one: a read there says EAGAIN instead of waiting.
        # Not for a subclass that reads its own way (its recv_messages): it never parks.
        own = not overrides(self, StreamConnection, "recv_messages")
        self._raw = getattr(self.sock, "_sock", None) if self._plain and own else None
        self._lowat = self._plain and self.sock.family in (gsocket.AF_INET, gsocket.AF_INET6)

    def handshake_progress(self) -> int:
        """Bytes of the peer's SP header received so far (see
        :meth:`gsp.transport.Connection.handshake_progress`)."""
        return self._hs_got

    def _recv(self, n: int) -> bytes:
        try:
            data: bytes = self.sock.recv(n)
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
        cache = self._cache  # (inline: a request or a reply is small, its prefix made already)
        data = (cache[n] if n < len(cache) else self._prefix(n)) + \
            (msg if type(msg) is bytes else message_bytes(msg))
        raw = self._raw  # the non-blocking socket under gevent's, when it is there: one call less
        try:  # timeout 0: EAGAIN raises instead of waiting
            sent = self.sock.send(data, 0, 0.0) if raw is None else raw.send(data)
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
            if isinstance(m, bytes):
                h, b = b"", m
            else:
                h, b = m.header, m.body
            n = len(h) + len(b)
            if n >= _JOIN_LIMIT:
                buf += prefix(n)
                buf += h
                self._send_pair(buf, b)
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

    def _send_pair(self, head: bytearray, body: Any) -> None:
        """Write ``head`` (what was joined before a big body, its prefix last) then ``body``:
        on a plain socket in one ``sendmsg`` (one system call, the body never copied), the rest
        of a partial write as :meth:`_sendall` does; else two writes."""
        if not self._plain:
            self._sendall(head)
            self._sendall(body)
            return
        try:
            sent = self.sock.sendmsg((head, body))  # (gevent's: waits while the buffer is full)
        except OSError as exc:
            raise self._io_error(exc, "send") from None
        left = len(head) - sent
        if left > 0:
            self._sendall(memoryview(head)[sent:])
            self._sendall(body)
        elif sent - len(head) < len(body):
            self._sendall(memoryview(body)[sent - len(head):])

    def use_recv_limits(self, limits: RecvLimits) -> None:
        self._holding = Holding(limits, self.remote_address)

    def recv_messages(self) -> list[bytes]:
        decoder = self.decoder
        if decoder.error is not None:
            raise decoder.error.with_traceback(None)  # reported after the good messages before it
        holding = self._holding
        while True:
            if holding.held:  # mid-message: wait while at max_recv_partial; bound the read
                holding.before_read()
            try:
                data = self._read_next(decoder)
            except OSError as exc:
                raise self._io_error(exc, "recv") from None
            finally:
                holding.reading = False
            if data is None:  # a big body being gathered, not all of it in yet
                holding.hold(decoder.buffered + self._body_got)
                continue
            if not data:
                raise self._eof()
            self._known -= len(data)  # (a gathered body was counted as it came: below 0 now)
            msgs = decoder.feed(data)
            holding.hold(decoder.buffered)
            if msgs:
                self._big = len(msgs[-1]) >= wire.DIRECT_SIZE
                if not self._big:
                    self._body_buf = None  # small messages again: give the gathering buffer back
                return msgs

    def _read_next(self, decoder: wire.FrameDecoder) -> bytes | None:
        """One read for :meth:`recv_messages`, waiting as a read does: as much as the frame in
        progress and the last messages' size call for (b"" at the end of the stream), or None
        while a gathered body is not all in (see :meth:`_read_body`)."""
        recv: Callable[[int], bytes] = self.sock.recv
        if self._big and self._plain and not decoder.buffered:
            # Big messages lately: read only the next prefix, so that a big body can then be
            # received as the message itself (one recv, no buffer and no copy).
            return recv(self.framing.prefix_size)
        left = decoder.body_left
        if left >= wire.DIRECT_SIZE:
            return self._read_body(left, decoder.body_wanted)
        if self._big and left and self._plain:
            # The end of a big message that came in a read of several frames: read only that,
            # so that the next read starts at a prefix (as above), and big bodies are read
            # whole again, not joined from the pieces of every read.
            return recv(left)
        return recv(_RECV_CHUNK)

    def _read_body(self, left: int, want: int) -> bytes | None:
        """A read of a big body, ``left`` bytes of it still to come (``want``: the whole body,
        while none of it is read): what is there (all of it: the message itself), never more
        than what is left, and never a buffer for bytes not yet arrived; or a gathered body
        (None until it is all in: see :meth:`_gather_body`)."""
        sock = self.sock
        recv: Callable[[int], bytes] = sock.recv
        waiting = self._known
        if waiting < left:
            waiting = self._known = _readable(sock) if self._plain else 0
        if waiting < left and self._lowat and want:
            waiting = self._known = self._await_body(left)
        elif want and self._plain and self._gathers(want, waiting):
            return self._gather_body(want)
        return recv(min(left, waiting) if waiting else min(left, _RECV_CHUNK))

    def _gathers(self, size: int, waiting: int) -> bool:
        """Whether the next read of a ``size``-byte body goes through :meth:`_gather_body`: one
        under way; else one not all in the kernel (all of it is one ``recv``, the message
        itself) of which the kernel holds half, or the buffer kept from the last is as big."""
        if self._body_got:
            return True
        if waiting >= size:
            return False
        buf = self._body_buf
        return waiting * 2 >= size or (buf is not None and len(buf) >= size)

    def _gather_body(self, size: int) -> bytes | None:
        """Read on into the buffer that gathers a ``size``-byte body (made when the kernel held
        half of it, kept while messages stay big), waiting as any read does; the body once all
        of it is in, else None (what came is kept: a read interrupted loses nothing).

        For sockets whose readiness ignores SO_RCVLOWAT (Unix domain): a big body comes in
        pieces, which read one by one and joined would cost an allocation each (fresh pages, for
        pieces this big) and the join's. Gathered, the body costs one copy out of a buffer that
        stays mapped, and memory stays within twice what the peer sent."""
        buf = self._body_buf
        if buf is None or len(buf) < size:
            buf = self._body_buf = bytearray(size)
        got = self._body_got
        self._known = 0  # (what it knew counted the bytes read here: it knows nothing now)
        n = self.sock.recv_into(memoryview(buf)[got:size])
        if not n:
            raise self._eof()
        got += n
        if got < size:
            self._body_got = got
            return None
        self._body_got = 0
        return bytes(memoryview(buf)[:size])

    def recv_or_park(self, wake: Callable[[], None]) -> list[bytes] | None:
        """:meth:`recv_messages`; but on a plain socket between messages, when nothing has
        arrived, arm a read watcher that calls ``wake()`` and return None (no greenlet waits).
        A subclass overriding :meth:`recv_messages` never parks unless it overrides this too."""
        park = self._park
        if park is not None and park.active:
            park.stop()  # a reader greenlet reads from here on (see _park_on)
        msgs = self.recv_nowait(wake)
        if msgs is not None and not msgs:
            return self.recv_messages()  # part of a frame: wait for the rest as any read does
        return msgs

    def recv_nowait(self, wake: Callable[[], None]) -> list[bytes] | None:
        """:meth:`recv_or_park` without a wait: on a plain socket between messages, one read of
        what is there (the whole messages it completes), or park when nothing is, or was at the
        read before (one that took less than it asked for emptied the kernel's buffer: parking
        saves a read that would fail, and the level-triggered watcher still sees bytes that came
        since); an empty list when a read would wait (part of a frame is held, before or after
        this read: its rest is waited for in :meth:`recv_messages`, under the stall timer), on a
        TLS socket, and before an error still to report."""
        decoder = self.decoder
        raw = self._raw
        if raw is None or decoder.buffered or decoder.error is not None:
            return []
        if self._drained:
            # The read before this one found less than it asked for: a read now would most
            # likely fail (EAGAIN), a system call for nothing. The watcher is level-triggered,
            # so bytes that came since wake the pipe in the next turn of the loop.
            self._drained = False
            self._park_on(raw, wake)
            return None
        # after a big message only its successor's prefix, as recv_messages reads it
        want = self.framing.prefix_size if self._big else _RECV_CHUNK
        try:
            data = raw.recv(want)
        except BlockingIOError:
            self._park_on(raw, wake)
            return None
        except OSError as exc:
            raise self._io_error(exc, "recv") from None
        n = len(data)
        if not n:
            raise self._eof()
        self._known -= n
        msgs = decoder.feed(data)
        holding = self._holding
        if decoder.buffered or holding.held:  # (holding nothing before or after: nothing to do)
            holding.hold(decoder.buffered)
        elif n < want:
            self._drained = True
        if msgs:
            self._big = len(msgs[-1]) >= wire.DIRECT_SIZE
        return msgs

    def park(self, wake: Callable[[], None]) -> bool:
        """Arm the read watcher without reading first, on a plain socket between messages and
        open (False when closed: the next read meets the close)."""
        raw = self._raw
        if raw is None or self._closed or self.decoder.buffered or self.decoder.error is not None:
            return False
        self._drained = False  # (the next read follows a wake: it reads)
        park = self._park
        if park is None or not park.active:  # (armed still, after a read that did not wait)
            self._park_on(raw, wake)
        return True

    def _park_on(self, raw: Any, wake: Callable[[], None]) -> None:
        """Arm the read watcher, which calls ``wake`` itself: no Python frame in between. An io
        watcher fires in every turn of the loop while the socket is readable, so it is left
        armed by reads that do not wait (:meth:`recv_nowait`: a lent read takes what is there),
        and a read that may wait stops it first (:meth:`recv_or_park`: a reader greenlet takes
        the pipe on). Until then ``wake`` may be called more than once, and the core's wake
        does nothing for a pipe it has given a reader already. An armed watcher keeps the wake
        it was armed with: the core passes the same one (the pipe's) every time. A closed
        connection is never armed (its watcher would hold the descriptor open, and the close
        would not reach the peer): the read meets the close instead, raising
        :class:`~gsp.errors.Closed`."""
        if self._closed:
            raise Closed("connection closed locally")
        park = self._park
        if park is None:
            park = self._park = gevent.get_hub().loop.io(raw.fileno(), 1)
        if not park.active:
            park.start(wake)

    def _eof(self) -> Exception:
        if self._closed:
            return Closed("connection closed locally")
        return ConnectionBroken(f"{self.remote_address} closed the connection")

    def _await_body(self, size: int) -> int:
        """Wait until the kernel holds the whole ``size``-byte body of the frame in progress (or
        :data:`_BODY_WAIT` passed, so slow progress is still seen and counted), and return what it
        holds. SO_RCVLOWAT makes the socket readable only then (Linux also grows the receive
        buffer to fit, up to half of tcp_rmem's maximum), so the body arrives in one ``recv``:
        one allocation of its exact size and no join, while the bytes wait in the kernel, not in
        gsp."""
        sock = self.sock
        sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_RCVLOWAT, size)
        hub = gevent.get_hub()
        watcher = self._body_wait = hub.loop.io(sock.fileno(), 1)
        try:
            with gevent.Timeout(_BODY_WAIT, False):
                hub.wait(watcher)
        finally:
            self._body_wait = None
            watcher.close()
            if self._closed:
                self._close_socket()  # close() left that to us: see there
            else:
                sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_RCVLOWAT, 1)
        return _readable(sock)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._holding.release()
        self._body_buf = None
        if self._park is not None:
            self._park.close()  # before the fd goes: no wake after close
        if self._body_wait is not None:
            # The reader waits on its own watcher of this fd: a socket closed under an active
            # watcher is closed late by gevent (after the next event on the fd), so wake the
            # reader and let it close the socket once its watcher is gone.
            gevent.get_hub().cancel_wait(self._body_wait, Closed("connection closed locally"))
            return
        self._close_socket()

    def before_socket_close(self) -> None:
        """Optional, for a subclass: what to send the peer just before this end closes the socket
        (tls+tcp sends TLS's close_notify, :func:`gsp.transport.tls_close_notify`). It must
        neither block nor raise. Not called by :meth:`forget` (a child after fork sends nothing).
        Default: nothing."""

    def _close_socket(self) -> None:
        self.before_socket_close()
        try:
            self.sock.close()
        except OSError:
            pass

    def forget(self) -> None:
        """In a child after fork: stop this process's watchers and close its copy of the
        descriptor; nothing is sent, nothing shut down (see :func:`forget_socket`)."""
        self._closed = True
        for watcher in (self._park, self._body_wait):
            if watcher is not None:
                watcher.close()
        self._park = self._body_wait = None
        self._raw = None
        forget_socket(self.sock)


@mypyc_attr(allow_interpreted_subclasses=True)  # transports subclass it
class SocketListener(TransportListener):
    """Accepts on a bound gevent socket. A subclass implements :meth:`bind_socket` (required) and
    may override :meth:`configure`, :meth:`address_name` and :meth:`wrap`."""

    framing: ClassVar[wire.Framing] = wire.TCP
    #: The address families of the inherited listening sockets this listener accepts on in place
    #: of binding, when its ``listen_fd`` option is set (the transport lists
    #: :data:`gsp.transport.LISTEN_FD` in its options): tcp's ``(AF_INET, AF_INET6)``, ipc's
    #: ``(AF_UNIX,)``. Empty (the default): the listener always binds.
    listen_families: ClassVar[tuple[int, ...]] = ()

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = options
        self._sock: Any = None
        self._closed = False

    def bind_socket(self) -> Any:
        """Required: return a bound, listening gevent socket (see :func:`bind_stream_socket`),
        setting ``self.url`` to the bound URL (the real port of ``:0``). May raise
        :class:`gsp.AddressInUse`, :class:`gsp.InvalidAddress` or another :class:`gsp.GspError`
        (:func:`map_socket_error` maps an ``OSError``)."""
        raise NotImplementedError

    def configure(self, sock: Any) -> None:
        """Optional: per-connection socket options (TCP_NODELAY, ...) of an accepted socket. An
        ``OSError`` it raises is taken as the peer gone (the accept reports
        :class:`gsp.ConnectionBroken`)."""

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        """Optional: the :class:`gsp.transport.Connection` of an accepted socket (default: a
        :class:`StreamConnection` with :attr:`framing` and the endpoint's ``max_recv_size``).
        May raise ``OSError`` (as :meth:`configure`)."""
        return StreamConnection(sock, self.framing, self.options["max_recv_size"], local, remote)

    def bind(self) -> None:
        fd = self.options["listen_fd"] if self.listen_families else None
        self._sock = self.bind_socket() if fd is None else self.adopt_socket(fd)

    def adopt_socket(self, fd: int) -> Any:
        """Optional: return a gevent socket accepting on the inherited listening descriptor
        ``fd`` (the ``listen_fd`` option), called by :meth:`bind` in place of
        :meth:`bind_socket` for a listener with :attr:`listen_families`. The default accepts on
        a duplicate (:func:`gsp.transport.adopt_listening_socket`) and sets ``self.url`` to
        the address it listens on, as :meth:`address_name` names it. Raises
        :class:`gsp.BadOption` for a descriptor that is not a listening stream socket,
        :class:`gsp.InvalidAddress` for one of another family."""
        sock = adopt_listening_socket(fd, self.listen_families, f"listen {self.url} with listen_fd={fd}")
        self.url = self.address_name(sock.getsockname())
        return sock

    def accept(self) -> Connection:
        if self._closed or self._sock is None:
            raise Closed("listener closed")
        try:
            sock, _ = self._sock.accept()
        except OSError as exc:
            if self._closed:
                raise Closed("listener closed") from None
            raise _caused(map_socket_error(exc, "accept"), exc) from exc  # (out of fds?)
        try:
            self.configure(sock)
            return self.wrap(sock, self.address_name(sock.getsockname()), self.address_name(sock.getpeername()))
        except OSError as exc:  # the peer left before we looked at it (reset in the backlog)
            sock.close()
            raise _caused(ConnectionBroken(f"accept: {exc}"), exc) from exc

    def address_name(self, addr: Any) -> str:
        """Optional: a socket address as users see it (a pipe's local and remote address;
        default ``str(addr)``). Raises nothing."""
        return str(addr)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sock is not None:
            self._sock.close()

    def forget(self) -> None:
        """In a child after fork: close this process's copy of the listening descriptor only
        (the parent keeps accepting; an ipc path is not unlinked)."""
        self._closed = True
        forget_socket(self._sock)


@mypyc_attr(allow_interpreted_subclasses=True)  # transports subclass it
class SocketDialer(TransportDialer):
    """Connects a gevent socket. A subclass implements :meth:`connect` (required) and may
    override :meth:`configure`, :meth:`address_name` and :meth:`wrap`, as on
    :class:`SocketListener`."""

    framing: ClassVar[wire.Framing] = wire.TCP

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = options
        self._inflight: Any = None  # the socket being connected (see connect_socket's park)

    def park_connecting(self, sock: Any) -> None:
        """The ``park`` callback :meth:`connect` passes to :func:`connect_socket`: remembers the
        socket being connected so that :meth:`close` (or a fork) can abort it. Raises nothing."""
        self._inflight = sock

    def connect(self) -> Any:
        """Required: return a connected gevent socket, as
        ``connect_socket(self.url, ..., park=self.park_connecting)``. May raise
        :class:`gsp.ConnectionRefused`, :class:`gsp.InvalidAddress`, :class:`gsp.Timeout` or
        another :class:`gsp.GspError` (:func:`map_socket_error` maps an ``OSError``), and
        :class:`gsp.Closed` when :meth:`close` aborted it."""
        raise NotImplementedError

    def configure(self, sock: Any) -> None:
        """Optional: socket options of the connected socket (an ``OSError`` it raises fails the
        dial)."""

    def address_name(self, addr: Any) -> str:
        """Optional: a socket address as users see it (default ``str(addr)``). Raises nothing."""
        return str(addr)

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        """Optional: the :class:`gsp.transport.Connection` of the connected socket (as
        :meth:`SocketListener.wrap`); may raise ``OSError``, which fails the dial."""
        return StreamConnection(sock, self.framing, self.options["max_recv_size"], local, remote)

    def dial(self) -> Connection:
        sock = self.connect()
        try:
            self.configure(sock)
            return self.wrap(sock, self.address_name(sock.getsockname()), self.address_name(sock.getpeername()))
        except OSError as exc:
            sock.close()
            raise map_socket_error(exc, f"dial {self.url}") from None

    def close(self) -> None:
        s = self._inflight
        if s is not None:
            s.close()

    def forget(self) -> None:
        """In a child after fork: drop this process's copy of a connection being made."""
        s, self._inflight = self._inflight, None
        forget_socket(s)
