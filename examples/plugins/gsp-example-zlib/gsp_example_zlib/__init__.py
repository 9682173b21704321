"""tcp+zlib:// — SP over TCP with every message zlib-compressed on the wire (a gsp plugin).

Wire format: the SP connection header as on tcp (``00 'S' 'P' 00 <protocol u16 BE> 00 00``, each
way, once), then frames of ``<u64 BE length><zlib stream>``; one complete zlib stream
(RFC 1950) per message, holding the message's header and body. Every message is compressed on
its own, so a receiver needs no state from earlier messages.

Limits: ``max_recv_size`` bounds the *decompressed* message. A frame longer than zlib's bound for
a message of that size is refused before any of it is read, and inflating stops one byte past
the limit, so a small frame that would inflate to gigabytes (a zlib bomb) costs at most
``max_recv_size + 1`` bytes of memory. Either way the pipe closes with :class:`gsp.MessageTooLarge`.

This package uses only gsp's public plugin SDK (no ``gsp._*`` import).
"""

from __future__ import annotations

import socket as _stdsocket
import zlib
from typing import TYPE_CHECKING, Any, Mapping, Sequence
from urllib.parse import urlsplit

from gevent import socket as gsocket

import gsp
from gsp.message import message_bytes
from gsp.options import Option, integer
from gsp.transport import (
    Connection,
    SocketDialer,
    SocketListener,
    StreamConnection,
    Transport,
    bind_stream_socket,
    connect_socket,
    hostport,
    parse_host_port,
    resolve,
    split_url,
    wire,
)

if TYPE_CHECKING:
    from gsp.message import Message

__all__ = [
    "SCHEME", "ZLIB_LEVEL", "ZlibConnection", "ZlibListener", "ZlibDialer", "ZlibTransport",
    "compress_bound", "inflate", "gsp_transports",
]

SCHEME = "tcp+zlib"

#: The transport's own option: given to gsp.socket(), listen() or dial(), validated by gsp.
ZLIB_LEVEL = Option("zlib_level", 6, integer(0, 9),
                    "zlib compression level of sent messages: 0 (stored) .. 9 (smallest)")


def compress_bound(size: int) -> int:
    """The longest zlib stream a ``size``-byte message can compress to (zlib's compressBound,
    with room to spare); 0 stays 0 (no limit)."""
    if size == 0:
        return 0
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 64


def inflate(frame: bytes, max_size: int) -> bytes:
    """Decompress one frame into the message it carries, never producing more than
    ``max_size + 1`` bytes (``max_size`` 0: no limit).

    Raises :class:`gsp.MessageTooLarge` past ``max_size`` and :class:`gsp.BadFrame` for
    anything that is not exactly one complete zlib stream.
    """
    d = zlib.decompressobj()
    try:
        data = d.decompress(frame, max_size + 1) if max_size else d.decompress(frame)
    except zlib.error as exc:
        raise gsp.BadFrame(f"tcp+zlib frame is not a zlib stream: {exc}") from None
    if max_size and len(data) > max_size:
        raise gsp.MessageTooLarge(
            f"peer sent a message that inflates past the limit of {max_size} bytes")
    if not d.eof:
        raise gsp.BadFrame("tcp+zlib frame ends inside its zlib stream")
    if d.unused_data:
        raise gsp.BadFrame("tcp+zlib frame has bytes after its zlib stream")
    return data


class ZlibConnection(StreamConnection):
    """A :class:`gsp.transport.stream.StreamConnection` whose frames carry compressed messages.

    The base class does the SP handshake, the framing and all socket I/O; this class compresses
    on the way out and inflates on the way in.
    """

    def __init__(self, sock: Any, options: Mapping[str, Any], local: str, remote: str) -> None:
        max_size: int = options["max_recv_size"]
        # The frame limit is the largest stream a message of max_size bytes compresses to: the
        # decoder refuses a longer frame from its length prefix, before buffering any of it.
        super().__init__(sock, wire.TCP, compress_bound(max_size), local, remote)
        self.max_size = max_size
        self.level: int = options["zlib_level"]
        self._error: gsp.WireError | None = None  # a bad frame, raised after the good ones
        self._packed: tuple[object, bytes] | None = None  # (message, its stream) from send_now

    def _deflate(self, msg: "Message | bytes") -> bytes:
        return zlib.compress(message_bytes(msg), self.level)

    def send_now(self, msg: "Message | bytes") -> int:
        data = self._deflate(msg)
        done = super().send_now(data)
        if done == 0:
            # The core will queue ``msg`` and hand it to send_messages: keep the compressed copy.
            self._packed = (msg, data)
        return done

    def send_messages(self, messages: "Sequence[Message | bytes]") -> None:
        packed, self._packed = self._packed, None
        out: list[Message | bytes] = []
        for m in messages:
            if packed is not None and m is packed[0]:
                out.append(packed[1])
                packed = None
            else:
                out.append(self._deflate(m))
        super().send_messages(out)

    def recv_messages(self) -> list[bytes]:
        if self._error is not None:
            raise self._error
        out: list[bytes] = []
        for frame in super().recv_messages():
            try:
                out.append(inflate(frame, self.max_size))
            except gsp.WireError as exc:
                if not out:
                    raise
                self._error = exc  # deliver the good messages first, fail on the next call
                break
        return out


def parse_url(url: str, listening: bool) -> tuple[str, int]:
    """``(host, port)`` of ``tcp+zlib://host:port``; :class:`gsp.InvalidAddress` otherwise."""
    scheme, _ = split_url(url)
    if scheme != SCHEME:
        raise gsp.InvalidAddress(f"not a {SCHEME}:// URL: {url!r}")
    host, port = parse_host_port(url, listening=listening)
    if urlsplit(url).path:
        raise gsp.InvalidAddress(f"a {SCHEME}:// URL has no path: {url!r}")
    return host, port


def _name(addr: Any) -> str:
    return f"{SCHEME}://{hostport(addr[0], addr[1])}"


def _nodelay(sock: Any) -> None:
    sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, 1)


class ZlibListener(SocketListener):
    """Binds like tcp://; accepted sockets become :class:`ZlibConnection` objects."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = parse_url(url, listening=True)  # refuse a bad URL before binding

    def bind_socket(self) -> Any:
        family, addr = resolve(self.host, self.port, True)
        sock = bind_stream_socket(family, addr, f"listen {self.url}")
        bound = sock.getsockname()
        self.url = f"{SCHEME}://{hostport(self.host or bound[0], bound[1])}"  # the real port
        return sock

    def configure(self, sock: Any) -> None:
        _nodelay(sock)

    def address_name(self, addr: Any) -> str:
        return _name(addr)

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return ZlibConnection(sock, self.options, local, remote)


class ZlibDialer(SocketDialer):
    """Connects like tcp://; the connected socket becomes a :class:`ZlibConnection`."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = parse_url(url, listening=False)

    def connect(self) -> Any:
        family, addr = resolve(self.host, self.port, False)
        return connect_socket(self.url, family, addr, prepare=_nodelay, park=self.park_connecting)

    def address_name(self, addr: Any) -> str:
        return _name(addr)

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return ZlibConnection(sock, self.options, local, remote)


class ZlibTransport(Transport):
    schemes = (SCHEME,)
    options = {ZLIB_LEVEL.name: ZLIB_LEVEL}
    listener_class = ZlibListener
    dialer_class = ZlibDialer

    def free_url(self, scheme: str, directory: str | None = None) -> str:
        """A URL on 127.0.0.1 that nothing listens on yet (for gsp.testing's suites)."""
        with _stdsocket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return f"{scheme}://127.0.0.1:{s.getsockname()[1]}"


_TRANSPORT = ZlibTransport()


@gsp.hookimpl
def gsp_transports() -> list[Transport]:
    return [_TRANSPORT]
