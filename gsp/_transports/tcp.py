"""tcp:// — SP over TCP with 8-byte length framing."""

from __future__ import annotations

from typing import Any, Mapping

from gevent import socket as gsocket

from ..hookspecs import hookimpl
from ..options import Option, boolean
from ..stream import SocketDialer, SocketListener, bind_stream_socket, connect_socket, resolve
from ..transport import Transport
from ..urls import hostport, parse_host_port

TCP_OPTIONS = {o.name: o for o in [
    Option("tcp_nodelay", True, boolean, "disable Nagle's algorithm (lower latency)"),
    Option("tcp_keepalive", True, boolean, "send TCP keepalive probes on idle connections"),
]}


def format_hostport(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{hostport(host, port)}"


def configure_tcp(sock: Any, options: Mapping[str, Any]) -> None:
    sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, int(options["tcp_nodelay"]))
    sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_KEEPALIVE, int(options["tcp_keepalive"]))


class _TCPEndpoint:
    """What a tcp listener and dialer share: per-connection options and address names."""

    scheme = "tcp"
    options: Mapping[str, Any]

    def _configure(self, sock: Any) -> None:
        configure_tcp(sock, self.options)

    def _name(self, addr: Any) -> str:
        return format_hostport(self.scheme, addr[0], addr[1])


class TCPListener(_TCPEndpoint, SocketListener):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = parse_host_port(url, listening=True)

    def _bind_socket(self) -> Any:
        family, addr = resolve(self.host, self.port, True)
        sock = bind_stream_socket(family, addr, f"listen {self.url}")
        bound = sock.getsockname()
        self.url = format_hostport(self.scheme, self.host or bound[0], bound[1])
        return sock


class TCPDialer(_TCPEndpoint, SocketDialer):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = parse_host_port(url, listening=False)

    def _connect(self) -> Any:
        family, addr = resolve(self.host, self.port, False)
        return connect_socket(self.url, family, addr, park=self._park)


class TCPTransport(Transport):
    schemes = ("tcp",)
    options = TCP_OPTIONS
    listener_class = TCPListener
    dialer_class = TCPDialer


@hookimpl
def gsp_transports() -> list[Transport]:
    return [TCPTransport()]
