"""udp:// (udp4://, udp6://) — experimental: one SP message per datagram, as nng 2.0 speaks it.

Wire (nng 2.0's UDP transport since its June 2025 rewrite, the one in nng 2.0.0 snapshots):
every datagram starts with an 8-byte header, little-endian: version (1), opcode, the sender's
SP protocol number, then two 16-bit fields whose meaning depends on the opcode:

=======  =====  ==========================================================================
opcode   value  fields
=======  =====  ==========================================================================
DATA     0      length of the SP header + body that follow; (unused)
CREQ     1      the sender's receive limit; its refresh interval in whole seconds
CACK     2      as CREQ: the listener's answer to each connection request
DISC     3      the reason (0 closed, 1 wrong protocol, 3 refused, 4 too large, 5
                negotiation, 6 inactive, 7 protocol error, 8 no resources); (unused)
=======  =====  ==========================================================================

A dialer sends CREQ every 200 ms until a CACK comes (giving up after 5 s), then every refresh
interval (the smaller of the two sides': nng dialers offer 1 s) as its keep-alive; the
listener answers each CREQ with a CACK. Either side drops a peer it heard nothing from (CREQ,
CACK or DATA) for five refresh intervals, sending DISC. A message (SP header + body) travels
only if it fits the peer's receive limit (at most 65,000 bytes); a datagram over ours
disconnects the peer (DISC "too large"), as nng does. There is no sequence number on the wire:
a datagram lost is lost, and one duplicated or reordered by the network is delivered as it
comes, as by nng 2.0 (its older 20-byte header had sequence numbers; nng 2.0 dropped them).
A pipe holds at most 256 received messages not yet read; more drop the oldest (nng: 16).
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import gevent
from gevent import socket as gsocket
from gevent.event import Event

from ..chan import Chan
from ..errors import (
    AddressInUse,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    GspError,
    InvalidAddress,
    MessageTooLarge,
    Timeout,
    WouldBlock,
)
from ..hookspecs import hookimpl
from ..message import message_bytes
from ..transport import (
    Connection,
    Transport,
    TransportDialer,
    TransportListener,
    hostport,
    parse_host_port,
    split_url,
    wire,
)
from .queued import close_queued, next_accepted

if TYPE_CHECKING:
    from ..message import Message
    from ..protocol import ProtocolSpec

__all__ = ["UDP_MAX", "UDPTransport"]

_log = logging.getLogger("gsp.transport.udp")

HEADER = struct.Struct("<BBHHH")
VERSION = 1
DATA, CREQ, CACK, DISC = 0, 1, 2, 3
DISC_CLOSED, DISC_TYPE, DISC_REFUSED, DISC_MSGSIZE, DISC_NEGO, DISC_INACTIVE, DISC_PROTO, \
    DISC_NOBUF = 0, 1, 3, 4, 5, 6, 7, 8
REASONS = {DISC_CLOSED: "closed", DISC_TYPE: "wrong protocol", DISC_REFUSED: "refused",
           DISC_MSGSIZE: "message too large", DISC_NEGO: "negotiation failed",
           DISC_INACTIVE: "inactive", DISC_PROTO: "protocol error", DISC_NOBUF: "no resources"}

#: The most a message (SP header + body) may weigh on udp://: nng 2.0's NNG_UDP_RECVMAX.
UDP_MAX = 65000
REFRESH = 5.0  #: seconds: a listener's keep-alive interval (nng's NNG_UDP_REFRESH)
CONN_RETRY = 0.2  #: seconds between a dialer's connection requests (NNG_UDP_CONNRETRY)
CONN_EXPIRE = 5.0  #: seconds a dialer waits for the listener's answer (NNG_UDP_CONNEXPIRE)
MAX_PEERS = 1024  #: peers one listener admits (NNG_UDP_MAX_PEERS)
RX_QUEUE = 256  #: received messages a pipe holds unread; more drop the oldest
_BURST = 64  #: datagrams read before the reader lets other greenlets run


def _refresh_seconds(interval: float) -> int:
    return max(1, int(-(-interval // 1)))  # rounded up, as nng sends it


class UDPConnection(Connection):
    """One logical connection: a peer address on an endpoint's datagram socket."""

    def __init__(self, ep: "_Endpoint", addr: Any, *, dialer: bool) -> None:
        self.ep = ep
        self.addr = addr
        self.dialer = dialer
        self.local_address = ep.local_name()
        self.remote_address = ep.name_of(addr)
        self.properties = {"peer_address": self.remote_address}
        self.peer_type: int | None = None
        self.own_type: int | None = None
        self.want_peer: int | None = None
        self.sndmax = UDP_MAX
        self.refresh = CONN_RETRY if dialer else REFRESH
        self.expire = time.monotonic() + (CONN_EXPIRE if dialer else 5 * REFRESH)
        self.acked = Event()
        self._inbox: collections.deque[bytes] = collections.deque(maxlen=RX_QUEUE)
        self._ready = Event()
        self.closed = False
        self.error: GspError | None = None
        self._keeper: gevent.Greenlet | None = None
        #: messages the peer would have refused (over its receive limit), dropped at send
        self.dropped_oversize = 0

    # -- what the endpoint's reader calls -----------------------------------------------------
    def heard(self) -> None:
        self.expire = time.monotonic() + 5 * self.refresh

    def agree(self, proto: int, recvmax: int, refresh: int) -> None:
        """The peer's terms, from its first CREQ (a listener's) or its CACK (a dialer's): its
        protocol, its receive limit and its refresh interval (not 0)."""
        self.peer_type, self.sndmax = proto, min(recvmax, UDP_MAX)
        self.refresh = min(REFRESH, float(refresh))
        self.heard()

    def deliver(self, data: bytes) -> None:
        self._inbox.append(data)
        self._ready.set()

    def refusal(self, proto: int, reason: int) -> GspError:
        """The error for the peer's DISC: a wrong protocol while connecting is
        :class:`gsp.WrongProtocol` (the DISC carries the peer's protocol number)."""
        if reason == DISC_TYPE and not self.acked.is_set() and self.want_peer is not None:
            return wire.wrong_protocol(proto, self.want_peer, self.own_type)
        return ConnectionBroken(f"udp peer {self.remote_address} disconnected: "
                                f"{REASONS.get(reason, reason)}")

    def lost(self, error: GspError, reason: int | None = None) -> None:
        """The connection ends: ``error`` for the pipe; DISC ``reason`` to the peer, if any."""
        if self.closed:
            return
        if reason is not None and self.own_type is not None:
            self.ep.send_header(self.addr, DISC, self.own_type, reason)
        self.error = error
        self._end()

    # -- Connection ---------------------------------------------------------------------------
    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        self.own_type, self.want_peer = spec.number, spec.peer_number
        if self.dialer:
            self._request(timeout)  # until the listener's answer names its protocol
        if self.peer_type != spec.peer_number:
            self.ep.send_header(self.addr, DISC, spec.number, DISC_TYPE)
            raise wire.wrong_protocol(self.peer_type or 0, spec.peer_number, spec.number)
        if not self.dialer:
            self.ack()
        self.heard()
        self._keeper = gevent.spawn(self._keep_alive)

    def _request(self, timeout: float | None) -> None:
        deadline = time.monotonic() + min(CONN_EXPIRE, timeout if timeout is not None else
                                          CONN_EXPIRE)
        while not self.acked.is_set():
            self._check()
            now = time.monotonic()
            if now >= deadline:
                raise Timeout(f"udp: no answer from {self.remote_address} within "
                              f"{CONN_EXPIRE:g} s")
            self.send_request()
            self.acked.wait(min(CONN_RETRY, deadline - now))
        self._check()

    def _check(self) -> None:
        if self.closed:
            raise self.error or Closed("connection closed locally")

    def send_request(self) -> None:
        assert self.own_type is not None
        self.ep.send_header(self.addr, CREQ, self.own_type, self.ep.rcvmax,
                            _refresh_seconds(self.refresh))

    def ack(self) -> None:
        if self.own_type is not None:
            self.ep.send_header(self.addr, CACK, self.own_type, self.ep.rcvmax,
                                _refresh_seconds(self.refresh))

    def _keep_alive(self) -> None:
        while not self.closed:
            gevent.sleep(min(self.refresh, max(0.05, self.expire - time.monotonic())))
            if self.closed:
                return
            if time.monotonic() > self.expire:
                _log.info("udp: peer %s timed out (nothing heard for %g s)",
                          self.remote_address, 5 * self.refresh)
                self.lost(ConnectionBroken(f"udp peer {self.remote_address} went silent "
                                           f"({5 * self.refresh:g} s)"), DISC_INACTIVE)
                return
            if self.dialer:
                self.send_request()

    def send_messages(self, messages: "Sequence[Message | bytes]") -> None:
        for m in messages:
            self._check()
            data = m if type(m) is bytes else message_bytes(m)
            if len(data) > self.sndmax:  # the peer would disconnect: nng drops it here too
                self.dropped_oversize += 1
                _log.warning("udp: a %d-byte message to %s dropped: over its receive limit "
                             "of %d bytes", len(data), self.remote_address, self.sndmax)
                continue
            self.ep.send_data(self.addr, self.own_type or 0, data)

    def recv_messages(self) -> list[bytes]:
        while not self._inbox:
            self._check()
            self._ready.clear()
            if self._inbox:
                break
            self._ready.wait()
        out = list(self._inbox)
        self._inbox.clear()
        return out

    def close(self) -> None:
        if not self.closed:
            if self.error is None:
                self.ep.send_header(self.addr, DISC, self.own_type or 0, DISC_CLOSED)
            self.error = self.error or Closed("connection closed locally")
            self._end()

    def _end(self) -> None:
        self.closed = True
        self._ready.set()
        self.acked.set()
        self.ep.forget(self)
        keeper, self._keeper = self._keeper, None
        if keeper is not None and keeper is not gevent.getcurrent():
            keeper.kill(block=False)


class _Endpoint:
    """A datagram socket and the connections on it, read by one greenlet."""

    def __init__(self, scheme: str, sock: Any, *, dialer: bool, rcvmax: int,
                 on_request: Callable[[Any, int, int, int], None] | None = None) -> None:
        self.scheme = scheme
        self.sock = sock
        self.dialer = dialer
        self.rcvmax = rcvmax
        self.conns: dict[Any, UDPConnection] = {}
        self.on_request = on_request
        self.closed = self._closing = False
        self.nomatch = 0
        self._reader = gevent.spawn(self._read_loop)

    def local_name(self) -> str:
        try:
            return self.name_of(self.sock.getsockname())
        except OSError:
            return f"{self.scheme}://"

    def name_of(self, addr: Any) -> str:
        return f"{self.scheme}://{hostport(addr[0], addr[1])}"

    def send_header(self, addr: Any, op: int, proto: int, p0: int = 0, p1: int = 0) -> None:
        self._sendto(HEADER.pack(VERSION, op, proto, p0 & 0xFFFF, p1 & 0xFFFF), addr)

    def send_data(self, addr: Any, proto: int, data: bytes) -> None:
        self._sendto(HEADER.pack(VERSION, DATA, proto, len(data), 0) + data, addr)

    def _sendto(self, datagram: bytes, addr: Any) -> None:
        if self.closed:
            return
        try:
            self.sock.sendto(datagram, addr)
        except OSError as exc:  # ENOBUFS, an ICMP error queued for an earlier datagram, ...
            if exc.errno not in (errno.ENOBUFS, errno.EAGAIN, errno.ECONNREFUSED,
                                 errno.EHOSTUNREACH, errno.ENETUNREACH):
                _log.debug("udp: sendto %s failed: %s", addr, exc)

    def forget(self, conn: UDPConnection) -> None:
        if self.conns.get(conn.addr) is conn:
            del self.conns[conn.addr]
        if self.dialer:
            self.close()

    def _read_loop(self) -> None:
        n = 0
        while not self.closed:
            try:
                datagram, addr = self.sock.recvfrom(UDP_MAX + 1024)
            except OSError as exc:
                if self.closed or exc.errno == errno.EBADF:
                    return
                continue  # ECONNREFUSED from an ICMP error and the like: keep reading
            self._dispatch(datagram, addr)
            n += 1
            if n % _BURST == 0:
                gevent.sleep(0)

    def _dispatch(self, datagram: bytes, addr: Any) -> None:
        if len(datagram) < HEADER.size:
            return
        ver, op, proto, p0, p1 = HEADER.unpack_from(datagram)
        if ver != VERSION:
            return
        addr = addr[:2]
        conn = self.conns.get(addr)
        if op == DATA:
            self._data(conn, datagram, p0)
        elif op == CREQ:
            self._creq(conn, addr, proto, p0, p1)
        elif op == CACK:
            if conn is not None and not conn.closed:
                if p1 == 0:
                    conn.lost(ConnectionBroken("udp peer offered no refresh interval"), DISC_NEGO)
                    return
                conn.agree(proto, p0, p1)
                conn.acked.set()
        elif op == DISC:
            if conn is not None:
                conn.lost(conn.refusal(proto, p0))
        else:
            self.send_header(addr, DISC, 0, DISC_PROTO)

    def _data(self, conn: UDPConnection | None, datagram: bytes, length: int) -> None:
        if conn is None or conn.closed:
            self.nomatch += 1
            return
        if length > len(datagram) - HEADER.size or length > self.rcvmax:
            conn.lost(MessageTooLarge(f"udp peer {conn.remote_address} sent {length} bytes; "
                                      f"the limit is {self.rcvmax}", size=length,
                                      limit=self.rcvmax), DISC_MSGSIZE)
            return
        conn.heard()
        if conn.own_type is not None:  # data before our side's handshake is dropped
            conn.deliver(datagram[HEADER.size:HEADER.size + length])

    def _creq(self, conn: UDPConnection | None, addr: Any, proto: int, recvmax: int,
              refresh: int) -> None:
        if self.dialer:
            self.send_header(addr, DISC, 0, DISC_REFUSED)
            return
        if conn is not None:
            if conn.peer_type != proto:
                conn.lost(ConnectionBroken("udp peer changed its protocol"), DISC_TYPE)
            elif refresh == 0:
                conn.lost(ConnectionBroken("udp peer offered no refresh interval"), DISC_NEGO)
            else:
                conn.refresh = min(conn.refresh, float(refresh))
                conn.heard()
                conn.ack()
            return
        if self.on_request is not None:
            self.on_request(addr, proto, recvmax, refresh)

    def close(self) -> None:
        if self.closed or self._closing:
            return
        self._closing = True
        for conn in list(self.conns.values()):
            conn.close()
        self.closed = True
        self.sock.close()
        if self._reader is not gevent.getcurrent():
            self._reader.kill(block=False)


_FAMILY = {"udp4": gsocket.AF_INET, "udp6": gsocket.AF_INET6}


def _resolve(scheme: str, host: str, port: int) -> tuple[int, Any]:
    """``(family, (host, port))``: the family udp4:// or udp6:// asks for, else the address's
    (an empty host: every address, IPv4's but on udp6://). An IP literal comes back in the form
    ``recvfrom`` gives a datagram's sender in, by which the reader finds a dialer's connection
    (``[0:0::1]`` as ``::1``)."""
    want = _FAMILY.get(scheme, 0)
    if not host:
        family = want or gsocket.AF_INET
        return family, ("::" if family == gsocket.AF_INET6 else "0.0.0.0", port)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # a name
        try:
            infos = gsocket.getaddrinfo(host, port, want, gsocket.SOCK_DGRAM)
        except OSError as exc:
            raise InvalidAddress(f"cannot resolve {host!r}: {exc}") from None
        family, _, _, _, addr = infos[0]
        return family, addr[:2]
    family = gsocket.AF_INET6 if ip.version == 6 else gsocket.AF_INET
    try:
        host = gsocket.inet_ntop(family, gsocket.inet_pton(family, host))
    except OSError:  # an IPv6 address with its scope (fe80::1%eth0): as it is
        pass
    return family, (host, port)


def _rcvmax(options: Mapping[str, Any]) -> int:
    limit = options["max_recv_size"]
    return min(limit, UDP_MAX) if limit else UDP_MAX


def _parse(url: str, listening: bool) -> tuple[str, str, int]:
    scheme, rest = split_url(url)
    if rest.partition("/")[2]:
        raise InvalidAddress(f"{url!r}: a udp URL has no path")
    host, port = parse_host_port(url, listening=listening)
    if scheme in _FAMILY and host:  # udp4://, udp6://: an IP literal of that family
        try:
            wrong = ipaddress.ip_address(host).version != int(scheme[-1])
        except ValueError:
            wrong = False  # a name: resolved in that family
        if wrong:
            raise InvalidAddress(f"{url!r}: {host} is not an IPv{scheme[-1]} address")
    return scheme, host, port


class UDPListener(TransportListener):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.scheme, self.host, self.port = _parse(url, True)
        self.url = url
        self.options = options
        self._accepts: Chan[UDPConnection] = Chan(64)
        self._ep: _Endpoint | None = None
        self.refused = 0

    def bind(self) -> None:
        family, addr = _resolve(self.scheme, self.host, self.port)
        sock = gsocket.socket(family, gsocket.SOCK_DGRAM)
        try:
            sock.bind(addr)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise AddressInUse(f"listen {self.url}: address in use") from None
            raise InvalidAddress(f"listen {self.url}: {exc.strerror or exc}") from None
        self._ep = _Endpoint(self.scheme, sock, dialer=False, rcvmax=_rcvmax(self.options),
                             on_request=self._request)
        bound = sock.getsockname()
        self.url = f"{self.scheme}://{hostport(self.host or bound[0], bound[1])}"

    def _request(self, addr: Any, proto: int, recvmax: int, refresh: int) -> None:
        ep = self._ep
        assert ep is not None
        if refresh == 0:
            ep.send_header(addr, DISC, 0, DISC_NEGO)
            return
        if len(ep.conns) >= MAX_PEERS or self._accepts.closed:
            self.refused += 1
            ep.send_header(addr, DISC, 0, DISC_NOBUF)
            return
        conn = UDPConnection(ep, addr, dialer=False)
        conn.agree(proto, recvmax, refresh)
        try:
            self._accepts.send(conn, block=False)
        except (WouldBlock, Closed):  # the core is not keeping up: let it retry
            self.refused += 1
            ep.send_header(addr, DISC, 0, DISC_NOBUF)
            return
        ep.conns[addr] = conn

    def accept(self) -> Connection:
        return next_accepted(self._accepts)

    def close(self) -> None:
        close_queued(self._accepts)
        if self._ep is not None:
            self._ep.close()


class UDPDialer(TransportDialer):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        self.scheme, self.host, self.port = _parse(url, False)
        self.url = url
        self.options = options
        self._ep: _Endpoint | None = None

    def dial(self) -> Connection:
        family, addr = _resolve(self.scheme, self.host, self.port)
        sock = gsocket.socket(family, gsocket.SOCK_DGRAM)
        try:
            sock.bind(("::" if family == gsocket.AF_INET6 else "0.0.0.0", 0))
        except OSError as exc:
            sock.close()
            raise ConnectionRefused(f"dial {self.url}: {exc.strerror or exc}") from None
        ep = _Endpoint(self.scheme, sock, dialer=True, rcvmax=_rcvmax(self.options))
        self._ep = ep
        conn = UDPConnection(ep, addr, dialer=True)
        ep.conns[addr] = conn
        return conn

    def close(self) -> None:
        ep, self._ep = self._ep, None
        if ep is not None and not ep.conns:
            ep.close()


class UDPTransport(Transport):
    schemes = ("udp", "udp4", "udp6")
    message_max = UDP_MAX
    listener_class = UDPListener
    dialer_class = UDPDialer

    def free_url(self, scheme: str, directory: str | None = None) -> str | None:
        s = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_DGRAM)
        try:
            s.bind(("127.0.0.1", 0))
            return f"{scheme}://127.0.0.1:{s.getsockname()[1]}"
        finally:
            s.close()


@hookimpl
def gsp_transports() -> list[Transport]:
    return [UDPTransport()]
