"""What tcp and ipc share: a gevent socket listener/dialer producing StreamConnections."""

from __future__ import annotations

from typing import Any, Mapping

from .. import wire
from .._errors import Closed, ConnectionBroken
from ..transport import (
    Connection,
    StreamConnection,
    TransportDialer,
    TransportListener,
    map_socket_error,
)


class SocketListener(TransportListener):
    """Accepts on a bound gevent socket; subclasses fill in ``_bind_socket``."""

    framing: wire.Framing = wire.TCP

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = options
        self._sock: Any = None
        self._closed = False

    def _bind_socket(self) -> Any:
        raise NotImplementedError

    def _configure(self, sock: Any) -> None:
        """Per-connection socket options (TCP_NODELAY, ...)."""

    def _wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return StreamConnection(sock, self.framing, self.options["recv_max_size"], local, remote)

    def bind(self) -> None:
        self._sock = self._bind_socket()

    def accept(self) -> Connection:
        if self._closed or self._sock is None:
            raise Closed("listener closed")
        try:
            sock, _ = self._sock.accept()
        except OSError as exc:
            if self._closed:
                raise Closed("listener closed") from None
            raise map_socket_error(exc, "accept") from None
        try:
            self._configure(sock)
            return self._wrap(sock, self._name(sock.getsockname()), self._name(sock.getpeername()))
        except OSError as exc:  # the peer left before we looked at it
            sock.close()
            raise ConnectionBroken(f"accept: {exc}") from None

    def _name(self, addr: Any) -> str:
        return str(addr)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sock is not None:
            self._sock.close()


class SocketDialer(TransportDialer):
    framing: wire.Framing = wire.TCP

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = options
        self._inflight: Any = None

    def _connect(self) -> Any:
        raise NotImplementedError

    def _configure(self, sock: Any) -> None:
        pass

    def _name(self, addr: Any) -> str:
        return str(addr)

    def _wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return StreamConnection(sock, self.framing, self.options["recv_max_size"], local, remote)

    def dial(self) -> Connection:
        sock = self._connect()
        try:
            self._configure(sock)
            return self._wrap(sock, self._name(sock.getsockname()), self._name(sock.getpeername()))
        except OSError as exc:
            sock.close()
            raise map_socket_error(exc, f"dial {self.url}") from None

    def close(self) -> None:
        s = self._inflight
        if s is not None:
            s.close()
