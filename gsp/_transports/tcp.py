"""tcp:// — SP over TCP with 8-byte length framing."""

from __future__ import annotations

from typing import Any, Mapping

from gevent import socket as gsocket

from ..errors import InvalidAddress
from ..hookspecs import hookimpl
from ..options import Option, boolean, duration, integer, whole_seconds
from ..transport import (
    LISTEN_FD,
    SocketDialer,
    SocketListener,
    Transport,
    bind_stream_socket,
    connect_socket,
    hostport,
    parse_host_port,
    resolve,
    split_url,
)

TCP_OPTIONS = {o.name: o for o in [
    Option("tcp_nodelay", True, boolean, "disable Nagle's algorithm (lower latency)"),
    Option("tcp_keepalive", True, boolean, "send TCP keepalive probes on idle connections"),
    # A peer that vanishes without a FIN (power loss, a dead router) is noticed after about
    # idle + interval * count seconds (60 s with these) instead of the OS's two hours and more.
    Option("tcp_keepalive_idle", 30, whole_seconds(1, 32767),
           "seconds a connection is idle before the first keepalive probe"),
    Option("tcp_keepalive_interval", 10, whole_seconds(1, 32767),
           "seconds between keepalive probes"),
    Option("tcp_keepalive_count", 3, integer(1, 127, unit="probes"),
           "unanswered keepalive probes before the connection is declared dead"),
    # A partition (or a host that vanished) while data is in flight: keepalive does not probe a
    # connection with unacknowledged data, and TCP retransmits for ~15 minutes. With this the
    # kernel ends it once sent data stayed unacknowledged that long: the pipe ends, a round
    # robin (push, req) stops choosing it, req resends on another pipe, and a dialer redials.
    # It also ends a connection whose peer advertised a zero window for that long (a reader
    # holding it back): so give more than the longest a peer may stop reading.
    Option("tcp_user_timeout", None, duration(allow_zero=False),
           "seconds sent data may stay unacknowledged before the kernel ends the connection "
           "(TCP_USER_TIMEOUT; Linux); None = the OS's retransmission limit"),
    # Several processes (a pre-fork server's workers) each listening on one address: the kernel
    # spreads the connections among them (Linux). Only sockets of one user can share a port.
    Option("tcp_reuseport", False, boolean,
           "set SO_REUSEPORT before binding, so that several listeners (in this process or "
           "others of the same user) that all set it listen on one address and the kernel "
           "spreads new connections among them (Linux); give a real port: :0 binds a new one "
           "each time",
           scope="listen"),
    LISTEN_FD,
]}

#: The keepalive knobs this OS has (Linux has all three; macOS names the idle time differently).
_KEEPALIVE_KNOBS = [(name, getattr(gsocket, opt)) for name, opt in (
    ("tcp_keepalive_idle", "TCP_KEEPIDLE" if hasattr(gsocket, "TCP_KEEPIDLE") else "TCP_KEEPALIVE"),
    ("tcp_keepalive_interval", "TCP_KEEPINTVL"),
    ("tcp_keepalive_count", "TCP_KEEPCNT"),
) if hasattr(gsocket, opt)]


#: TCP_USER_TIMEOUT where the OS has it (Linux; Python names it from 3.6 on Linux only).
_USER_TIMEOUT: int | None = getattr(gsocket, "TCP_USER_TIMEOUT", None)


def format_hostport(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{hostport(host, port)}"


def configure_tcp(sock: Any, options: Mapping[str, Any]) -> None:
    sock.setsockopt(gsocket.IPPROTO_TCP, gsocket.TCP_NODELAY, int(options["tcp_nodelay"]))
    sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_KEEPALIVE, int(options["tcp_keepalive"]))
    if options["tcp_keepalive"]:
        for name, opt in _KEEPALIVE_KNOBS:
            sock.setsockopt(gsocket.IPPROTO_TCP, opt, options[name])
    user_timeout = options["tcp_user_timeout"]
    if user_timeout is not None and _USER_TIMEOUT is not None:
        sock.setsockopt(gsocket.IPPROTO_TCP, _USER_TIMEOUT, max(1, round(user_timeout * 1000)))


class _TCPEndpoint:
    """What a tcp listener and dialer share: per-connection options and address names."""

    scheme = "tcp"
    options: Mapping[str, Any]

    def configure(self, sock: Any) -> None:
        configure_tcp(sock, self.options)

    def address_name(self, addr: Any) -> str:
        return format_hostport(self.scheme, addr[0], addr[1])


class TCPListener(_TCPEndpoint, SocketListener):
    listen_families = (gsocket.AF_INET, gsocket.AF_INET6)

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        if options["listen_fd"] is not None and split_url(url)[1] in ("", "*"):
            self.host, self.port = "", 0  # tcp:// on an inherited socket: its address it is
        else:
            self.host, self.port = parse_host_port(url, listening=True)

    def adopt_socket(self, fd: int) -> Any:
        sock = super().adopt_socket(fd)
        bound = sock.getsockname()[1]
        if self.port and self.port != bound:
            sock.close()
            raise InvalidAddress(f"listen {format_hostport(self.scheme, self.host, self.port)}: "
                                 f"listen_fd={fd} listens on port {bound}, not {self.port}")
        return sock

    def bind_socket(self) -> Any:
        family, addr = resolve(self.host, self.port, True)
        sock = bind_stream_socket(family, addr, f"listen {self.url}",
                                  reuseport=self.options["tcp_reuseport"])
        bound = sock.getsockname()
        self.url = format_hostport(self.scheme, self.host or bound[0], bound[1])
        return sock


class TCPDialer(_TCPEndpoint, SocketDialer):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = parse_host_port(url, listening=False)

    def connect(self) -> Any:
        family, addr = resolve(self.host, self.port, False)
        return connect_socket(self.url, family, addr, park=self.park_connecting)


class TCPTransport(Transport):
    schemes = ("tcp",)
    options = TCP_OPTIONS
    listener_class = TCPListener
    dialer_class = TCPDialer


@hookimpl
def gsp_transports() -> list[Transport]:
    return [TCPTransport()]
