"""A transport written as a third party would write one on :class:`gsp.transport.ParkingConnection`
(not on :class:`~gsp.transport.StreamConnection`): SP over tcp in a few dozen lines, the
parking reader inherited. It passes the whole transport conformance kit, its parking-reader
check included, and its idle pipes hold no greenlet."""

from __future__ import annotations

import socket as _stdsocket
from typing import Any, Callable, Mapping, Sequence

import gevent
import pytest
from gevent import socket as gsocket

import gsp
from gsp.message import message_bytes
from gsp.testing import TransportSuite, connected, wait_for
from gsp.transport import (
    Connection,
    ParkingConnection,
    SocketDialer,
    SocketListener,
    Transport,
    bind_stream_socket,
    connect_socket,
    hostport,
    map_socket_error,
    nonblocking_socket,
    parse_host_port,
    resolve,
    split_url,
    wire,
)

SCHEME = "parktcp"
WAIT = 10.0  # a safety net for waits that end on an event, never a measured time


class ParkTCPConnection(ParkingConnection):
    """SP's tcp framing over a gevent socket: a blocking read (:meth:`recv_messages`) and one
    that does not wait (:meth:`read_ready`); the base parks an idle pipe."""

    def __init__(self, sock: Any, max_size: int, local: str, remote: str) -> None:
        super().__init__()
        self.sock = sock
        self.local_address = local
        self.remote_address = remote
        self.decoder = wire.FrameDecoder(wire.TCP, max_size)
        self.closed = False

    def _error(self, exc: OSError, what: str) -> Exception:
        if self.closed:
            return gsp.Closed("connection closed locally")
        if isinstance(exc, gsp.GspError):  # the handshake's time limit
            return exc
        return map_socket_error(exc, f"{what} on {self.remote_address}")

    def _eof(self) -> Exception:
        return gsp.Closed("connection closed locally") if self.closed else \
            gsp.ConnectionBroken(f"{self.remote_address} closed the connection")

    def _recv(self, n: int) -> bytes:
        try:
            data: bytes = self.sock.recv(n)
        except OSError as exc:
            raise self._error(exc, "recv") from None
        if not data:
            raise self._eof()
        return data

    def handshake(self, spec: Any, timeout: float | None) -> None:
        with gevent.Timeout(timeout, gsp.Timeout(f"handshake with {self.remote_address}")):
            try:
                self.sock.sendall(wire.handshake(spec.number))
            except OSError as exc:
                raise self._error(exc, "send") from None
            got = b""
            while len(got) < wire.HANDSHAKE_SIZE:
                got += self._recv(wire.HANDSHAKE_SIZE - len(got))
                wire.check_handshake_start(got)
        wire.parse_handshake(got, spec.peer_number, own=spec.number)
        self.nowait_socket = nonblocking_socket(self.sock)  # reads may park from here on

    def send_messages(self, messages: "Sequence[Any]") -> None:
        data = b"".join(wire.encode_frames(wire.TCP, ((b"", message_bytes(m)) for m in messages)))
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise self._error(exc, "send") from None

    def recv_messages(self) -> list[bytes]:
        while True:
            msgs = self.decoder.feed(self._recv(65536))  # (raises a framing error once alone)
            if msgs:
                return msgs

    def read_ready(self, raw: Any) -> list[bytes] | None:
        decoder = self.decoder
        if decoder.buffered or decoder.error is not None:
            self.between = False
            return []  # part of a message, or an error to report: recv_messages goes on
        try:
            data = raw.recv(65536)
        except BlockingIOError:
            self.between = True
            return None  # nothing came: the base parks
        except OSError as exc:
            raise self._error(exc, "recv") from None
        if not data:
            raise self._eof()
        msgs = decoder.feed(data)
        self.between = not decoder.buffered and decoder.error is None
        self.drained = self.between and len(data) < 65536
        return msgs

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.stop_parking()  # before the descriptor goes
            self.sock.close()

    def forget(self) -> None:
        self.closed = True
        self.stop_parking()


def _parse(url: str, listening: bool) -> tuple[str, int]:
    if split_url(url)[0] != SCHEME:
        raise gsp.InvalidAddress(f"not a {SCHEME}:// URL: {url!r}")
    return parse_host_port(url, listening=listening)


def _name(addr: Any) -> str:
    return f"{SCHEME}://{hostport(addr[0], addr[1])}"


class ParkTCPListener(SocketListener):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = _parse(url, listening=True)

    def bind_socket(self) -> Any:
        family, addr = resolve(self.host, self.port, True)
        sock = bind_stream_socket(family, addr, f"listen {self.url}")
        self.url = f"{SCHEME}://{hostport(self.host, sock.getsockname()[1])}"
        return sock

    def address_name(self, addr: Any) -> str:
        return _name(addr)

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        conn = ParkTCPConnection(sock, self.options["max_recv_size"], local, remote)
        ACCEPTED.append(conn)
        return conn


#: The connections the listeners made, newest last (what the test looks at).
ACCEPTED: list[ParkTCPConnection] = []


class ParkTCPDialer(SocketDialer):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.host, self.port = _parse(url, listening=False)

    def connect(self) -> Any:
        family, addr = resolve(self.host, self.port, False)
        return connect_socket(self.url, family, addr, park=self.park_connecting)

    def address_name(self, addr: Any) -> str:
        return _name(addr)

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return ParkTCPConnection(sock, self.options["max_recv_size"], local, remote)


class ParkTCPTransport(Transport):
    schemes = (SCHEME,)
    listener_class = ParkTCPListener
    dialer_class = ParkTCPDialer

    def free_url(self, scheme: str, directory: str | None = None) -> str:
        with _stdsocket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return f"{scheme}://127.0.0.1:{s.getsockname()[1]}"


class _Plugin:
    @gsp.hookimpl
    def gsp_transports(self) -> list[Transport]:
        return [ParkTCPTransport()]


@pytest.fixture(autouse=True, scope="module")
def _registered() -> Any:
    plugin = _Plugin()
    gsp.register_plugin(plugin)
    yield
    gsp.unregister_plugin(plugin)


class TestParkTCPTransport(TransportSuite):
    scheme = SCHEME
    bad_urls = ("parktcp://", "parktcp://127.0.0.1", "parktcp://127.0.0.1:x")

    def listen_url(self) -> str:
        return "parktcp://127.0.0.1:0"

    anonymous_url = listen_url

    def raw_connect(self, url: str) -> Any:
        return gsocket.create_connection(parse_host_port(url, listening=False))


def test_its_idle_pipes_park_and_a_waiting_greenlet_reads_them(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """What the base gives it: between requests its pipes park (no reader greenlet), and a
    request wakes them; it talks to gsp's own tcp, whose framing it speaks."""
    rep = gsp_socket("rep", recv_timeout=WAIT)
    reqs = [gsp_socket("req", recv_timeout=WAIT) for _ in range(5)]
    url = rep.listen("parktcp://127.0.0.1:0").url
    del ACCEPTED[:]
    for r in reqs:
        connected(rep, url, r)
    for rnd in range(2):
        for i, r in enumerate(reqs):
            r.send(b"%d.%d" % (rnd, i))
            rep.send(rep.recv() + b"!")
            assert r.recv() == b"%d.%d!" % (rnd, i)
        wait_for(lambda: len(ACCEPTED) == 5 and all(c.parked for c in ACCEPTED),
                 what="every pipe parked")
    plain = gsp_socket("req", recv_timeout=WAIT)
    connected(rep, "tcp://" + url[len("parktcp://"):], plain)
    plain.send(b"from tcp")
    assert rep.recv() == b"from tcp"
