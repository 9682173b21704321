"""socket:// — SP over an already-connected stream socket the application hands over (nng's socket
transport: one end of a ``socketpair``, a connection accepted or inherited elsewhere).

As in nng, ``socket://`` is listen-only and names nothing more: ``sock.listen("socket://")`` makes
a listener that binds nothing, and each ``listener.adopt(fd)`` (nng: setting ``NNG_OPT_SOCKET_FD``
on the listener) becomes one connection its accept loop hands to the core, which runs the SP
handshake and attaches the pipe. The wire is tcp's: 8-byte length framing, whatever the
socket's family, so a gsp peer and an nng one (``socket://`` there too) speak across a
socketpair.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from gevent import socket as gsocket

from ..chan import Chan
from ..errors import Closed, InvalidAddress, NotSupported
from ..hookspecs import hookimpl
from ..transport import (
    Connection,
    StreamConnection,
    Transport,
    TransportDialer,
    TransportListener,
    adopt_connected_socket,
    forget_socket,
    hostport,
    split_url,
    wire,
)

SCHEME = "socket"
_BACKLOG = 1024  # adopted connections the accept loop has not taken yet


def _check_url(url: str) -> None:
    scheme, rest = split_url(url)
    if scheme != SCHEME or rest:
        raise InvalidAddress(f"{url!r}: the socket transport's URL is socket:// alone (the "
                             f"connections come from listener.adopt(fd))")


def _peer_name(sock: Any) -> str:
    """A connection's remote address as users see it: ``socket://host:port`` of an inet peer,
    ``socket://<path>`` of a named Unix one, ``socket://`` otherwise (a socketpair's end)."""
    try:
        addr = sock.getpeername()
    except OSError:
        return f"{SCHEME}://"
    if sock.family in (gsocket.AF_INET, gsocket.AF_INET6):
        return f"{SCHEME}://{hostport(addr[0], addr[1])}"
    return f"{SCHEME}://{addr if isinstance(addr, str) else ''}"


class SocketFdListener(TransportListener):
    """Binds nothing; accepts the connections :meth:`adopt` was given, oldest first."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        _check_url(url)
        self.url = f"{SCHEME}://"
        self.options = options
        self._incoming: Chan[Any] = Chan(_BACKLOG)
        self._closed = False

    def bind(self) -> None:
        pass

    def adopt(self, fd: int) -> None:
        if self._closed:
            raise Closed("listener closed")
        sock = adopt_connected_socket(fd, f"adopt on {self.url}")
        try:
            self._incoming.send(sock)
        except BaseException:
            sock.detach()  # not taken: the descriptor stays the caller's
            raise

    def accept(self) -> Connection:
        try:
            sock = self._incoming.recv()
        except Closed:
            raise Closed("listener closed") from None
        except BaseException:
            if self._closed:  # killed by close(): what was being handed over went back
                self.close()
            raise
        return StreamConnection(sock, wire.TCP, self.options["max_recv_size"], self.url,
                                _peer_name(sock))

    def close(self) -> None:
        self._stop(_close)

    def forget(self) -> None:
        """In a child after fork: connections adopted but not accepted yet are the parent's."""
        self._stop(forget_socket)

    def _stop(self, release: Callable[[Any], None]) -> None:
        """Accept no more; ``release`` each connection adopted but not accepted yet."""
        self._closed = True
        self._incoming.close()
        for sock in self._incoming.drain(_BACKLOG):
            release(sock)


def _close(sock: Any) -> None:
    sock.close()  # adopted, so ours: the peer sees the connection end


class SocketFdTransport(Transport):
    schemes = (SCHEME,)
    listener_class = SocketFdListener

    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        raise NotSupported(f"cannot dial {url!r}: socket:// is listen-only, as in nng; "
                           f"listen on socket:// and adopt a connected descriptor there "
                           f"(listener.adopt(fd))")


@hookimpl
def gsp_transports() -> list[Transport]:
    return [SocketFdTransport()]
