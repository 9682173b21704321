"""gsp-example-zlib through gsp.socket(): round trips, the wire format, its option, bad URLs and
the size limits (including zlib bombs). Servers listen on 127.0.0.1 only."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from typing import Callable

import gevent
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import TransportSuite, wait_for
from gsp.transport import parse_host_port, wire
from gsp_example_zlib import compress_bound

ANY_PORT = "tcp+zlib://127.0.0.1:0"
WAIT = 10.0  # a safety net for waits that end on an event, never a measured time
PAIR = 0x10


# The transport through gsp's conformance kit: connect and close, 0 B to 1 MiB, oversize
# messages, many pipes, handshake timeouts, wrong peers, bad URLs and options, leaks.
class TestZlibTransport(TransportSuite):
    scheme = "tcp+zlib"
    bad_urls = ("tcp+zlib://", "tcp+zlib://127.0.0.1", "tcp+zlib://127.0.0.1:port",
                "tcp+zlib://127.0.0.1:70000", "tcp+zlib://127.0.0.1:5555/path",
                "tcp+zlib://127.0.0.1:5555?level=9", "tcp+zlib://127.0.0.1:5555#here",
                "tcp+zlib://user@127.0.0.1:5555", "tcp+zlib:/127.0.0.1:5555")
    options = {"zlib_level": (9, 10)}

    def anonymous_url(self) -> str:
        return ANY_PORT

    def raw_connect(self, url: str) -> gsocket.socket:
        """A plain tcp socket: the SP header goes uncompressed, as on tcp."""
        return gsocket.create_connection(parse_host_port(url, listening=False))


# Every test below fails if it leaves a greenlet running or a socket open (gsp.testing's check).
pytestmark = pytest.mark.usefixtures("gsp_leak_check")


def detached_errors(sock: gsp.Socket) -> list[BaseException | None]:
    """A list that collects ``pipe.error`` of every pipe of ``sock`` that goes away."""
    errors: list[BaseException | None] = []

    def on_event(event: gsp.PipeEvent, pipe: gsp.Pipe) -> None:
        if event is gsp.PipeEvent.DETACHED:
            errors.append(pipe.error)

    sock.on_pipe_event(on_event)
    return errors


class RawClient:
    """A plain TCP connection to a tcp+zlib listener that speaks the SP handshake as
    ``protocol`` and then trades frames by hand: what a test sees is exactly the wire."""

    def __init__(self, url: str, protocol: int = PAIR) -> None:
        host, port = parse_host_port(url, listening=False)
        self.sock = gsocket.create_connection((host, port), timeout=WAIT)
        self.sock.sendall(wire.handshake(protocol))
        self.peer = wire.parse_handshake(self.read(8))

    def read(self, n: int) -> bytes:
        got = b""
        while len(got) < n:
            chunk = self.sock.recv(n - len(got))
            if not chunk:
                raise EOFError("the listener closed the connection")
            got += chunk
        return got

    def recv_frame(self) -> bytes:
        (n,) = struct.unpack(">Q", self.read(8))
        return self.read(n)

    def send_frames(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(struct.pack(">Q", len(f)) + f for f in frames))

    def wait_eof(self) -> None:
        while self.sock.recv(65536):
            pass

    def close(self) -> None:
        self.sock.close()


def mixed(size: int) -> bytes:
    """Half random (incompressible), half zeros."""
    return os.urandom(size // 2) + bytes(size - size // 2)


# -- tests --------------------------------------------------------------------------------------

def test_scheme_is_installed() -> None:
    assert "tcp+zlib" in gsp.transport_schemes()


BY_HAND = """\
import gsp, gsp_example_zlib
gsp.register_plugin(gsp_example_zlib)      # gsp.unregister_plugin(...) undoes it
"""


def test_registered_by_hand_when_autoload_is_off() -> None:
    """docs/plugins.md shows BY_HAND: with GSP_DISABLE_PLUGIN_AUTOLOAD set it is how to load."""
    code = ("import gsp\nassert 'tcp+zlib' not in gsp.transport_schemes()\n" + BY_HAND +
            "assert 'tcp+zlib' in gsp.transport_schemes()\n"
            "gsp.unregister_plugin(gsp_example_zlib)\nassert 'tcp+zlib' not in gsp.transport_schemes()\n")
    env = dict(os.environ, GSP_DISABLE_PLUGIN_AUTOLOAD="1")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


@pytest.mark.parametrize("size", [0, 1, 1000, 70_000, 1 << 20])
def test_round_trip_both_ways(gsp_socket: Callable[..., gsp.Socket], size: int) -> None:
    a = gsp_socket("pair", listen=ANY_PORT, recv_timeout=WAIT)
    b = gsp_socket("pair", dial=a.listeners[0].url, recv_timeout=WAIT)
    ping, pong = mixed(size), os.urandom(size)  # the random one is at most 1 MiB too
    b.send(ping)
    assert a.recv() == ping
    a.send(pong)
    assert b.recv() == pong


def test_many_messages_in_order(gsp_socket: Callable[..., gsp.Socket]) -> None:
    """Batches (send_messages) and single writes (send_now) keep the order."""
    pull = gsp_socket("pull", listen=ANY_PORT, recv_timeout=WAIT)
    push = gsp_socket("push", dial=pull.listeners[0].url)
    msgs = [b"message %d " % i * (i % 50) for i in range(3000)]

    def send_all() -> None:
        for m in msgs:
            push.send(m)

    sender = gevent.spawn(send_all)
    assert [pull.recv() for _ in msgs] == msgs
    sender.get(timeout=WAIT)


def test_bound_url_and_pipe_addresses(gsp_socket: Callable[..., gsp.Socket]) -> None:
    a = gsp_socket("pair", listen=ANY_PORT)
    url = a.listeners[0].url
    assert url.startswith("tcp+zlib://127.0.0.1:") and not url.endswith(":0")
    b = gsp_socket("pair", dial=url)
    wait_for(lambda: a.pipes and b.pipes)
    assert a.pipes[0].local_address == url
    assert b.pipes[0].remote_address == url
    assert a.pipes[0].remote_address == b.pipes[0].local_address


def test_wire_format_is_one_zlib_stream_per_message(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("pair", listen=ANY_PORT, recv_timeout=WAIT)
    peer = RawClient(s.listeners[0].url)
    try:
        assert peer.peer == PAIR
        wait_for(lambda: s.pipes)
        text = b"the same words again and again " * 100
        s.send(text)
        frame = peer.recv_frame()
        assert zlib.decompress(frame) == text
        assert len(frame) < len(text) // 10
        peer.send_frames(zlib.compress(b"from a hand-made peer"))
        assert s.recv() == b"from a hand-made peer"
    finally:
        peer.close()


def test_zlib_level_option(gsp_socket: Callable[..., gsp.Socket]) -> None:
    for bad in (10, -1, "6", 6.0, True, None):
        with pytest.raises(gsp.BadOption):
            gsp.socket("pair", zlib_level=bad)
    s = gsp_socket("pair")
    assert s.zlib_level == 6  # the default
    s.zlib_level = 1
    assert s.get_option("zlib_level") == 1
    with pytest.raises(gsp.BadOption):
        s.zlib_level = 42
    assert s.zlib_level == 1
    with pytest.raises(gsp.BadOption):
        s.listen(ANY_PORT, zlib_level="best")
    # Another transport's endpoint does not take it.
    with pytest.raises(gsp.BadOption):
        s.listen("tcp://127.0.0.1:0", zlib_level=9)


@pytest.mark.parametrize("where", ["socket", "listen"])
def test_zlib_level_reaches_the_wire(where: str) -> None:
    """Level 0 stores the message (it shows through, a few bytes longer); 9 squeezes it."""
    text = b"abcdefgh" * 1000
    sizes = {}
    for level in (0, 9):
        if where == "socket":
            s = gsp.socket("pair", listen=ANY_PORT, zlib_level=level)
        else:
            s = gsp.socket("pair", zlib_level=5)
            s.listen(ANY_PORT, zlib_level=level)  # the endpoint's value wins
        with s:
            peer = RawClient(s.listeners[0].url)
            try:
                wait_for(lambda: s.pipes)  # noqa: B023 (called before the loop moves on)
                s.send(text)
                frame = peer.recv_frame()
            finally:
                peer.close()
        assert zlib.decompress(frame) == text
        sizes[level] = len(frame)
    assert sizes[0] > len(text) > 50 * sizes[9]


@pytest.mark.parametrize("url", ["tcp+zlib://127.0.0.1:0", "tcp+zlib://:5555"])
def test_dialing_needs_a_host_and_a_port(gsp_socket: Callable[..., gsp.Socket], url: str) -> None:
    s = gsp_socket("pair")
    with pytest.raises(gsp.InvalidAddress):
        s.dial(url)


def test_address_in_use_and_connection_refused(gsp_socket: Callable[..., gsp.Socket]) -> None:
    a = gsp_socket("pair", listen=ANY_PORT)
    b = gsp_socket("pair")
    url = a.listeners[0].url
    with pytest.raises(gsp.AddressInUse):
        b.listen(url)
    a.listeners[0].close()
    with pytest.raises(gsp.ConnectionRefused):
        b.dial(url, fail_fast=True)


@pytest.mark.parametrize("size", [100, 1000, 10_000])
def test_compress_bound_holds_for_random_data(size: int) -> None:
    data = os.urandom(size)
    for level in range(10):
        assert len(zlib.compress(data, level)) <= compress_bound(size)


def test_message_at_the_limit_passes(gsp_socket: Callable[..., gsp.Socket]) -> None:
    pull = gsp_socket("pull", listen=ANY_PORT, max_recv_size=1000, recv_timeout=WAIT)
    push = gsp_socket("push", dial=pull.listeners[0].url)
    exact = os.urandom(1000)  # compresses to more than 1000 bytes: the frame still fits
    push.send(exact)
    assert pull.recv() == exact


@pytest.mark.parametrize("oversize, refused_by", [
    pytest.param(os.urandom(2000), "length prefix", id="frame-too-long"),
    pytest.param(bytes(500_000), "inflate", id="zlib-bomb"),  # ~500 bytes of zlib
])
def test_oversize_message_closes_the_pipe(
        gsp_socket: Callable[..., gsp.Socket], oversize: bytes, refused_by: str) -> None:
    frame_fits = len(zlib.compress(oversize, 6)) <= compress_bound(1000)
    assert frame_fits == (refused_by == "inflate")  # the case tests what it says it does
    pull = gsp_socket("pull", listen=ANY_PORT, max_recv_size=1000, recv_timeout=WAIT)
    errors = detached_errors(pull)
    push = gsp_socket("push", dial=pull.listeners[0].url, reconnect_time=0.01)
    wait_for(lambda: push.pipes)
    first = push.pipes[0]
    push.send(oversize)
    wait_for(lambda: errors)
    assert isinstance(errors[0], gsp.MessageTooLarge)
    # The socket serves on: the dialer comes back and small messages pass.
    wait_for(lambda: first.closed and push.pipes and pull.pipes)
    push.send(b"small")
    assert pull.recv() == b"small"


def test_recv_max_size_of_a_dialer_and_zero_for_unlimited(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    big = bytes(3 << 20)  # over the default 1 MiB limit once inflated
    a = gsp_socket("pair", listen=ANY_PORT)
    b = gsp_socket("pair", recv_timeout=WAIT)
    errors = detached_errors(b)
    b.dial(a.listeners[0].url, max_recv_size=1000)  # the endpoint's own limit
    wait_for(lambda: a.pipes)
    a.send(b"y" * 5000)
    wait_for(lambda: errors)
    assert isinstance(errors[0], gsp.MessageTooLarge)
    a.close()
    a = gsp_socket("pair", listen=ANY_PORT, max_recv_size=0, recv_timeout=WAIT)
    b = gsp_socket("pair", dial=a.listeners[0].url)
    b.send(big)
    assert a.recv() == big


@pytest.mark.parametrize("bad", [
    pytest.param(b"not zlib at all", id="not-zlib"),
    pytest.param(zlib.compress(b"hello") + b"junk", id="trailing-bytes"),
    pytest.param(zlib.compress(b"hello world")[:-3], id="truncated"),
])
def test_bad_frame_after_a_good_one(gsp_socket: Callable[..., gsp.Socket], bad: bytes) -> None:
    """The good message that came before a bad frame is delivered; then the pipe closes."""
    s = gsp_socket("pair", listen=ANY_PORT, recv_timeout=WAIT)
    errors = detached_errors(s)
    peer = RawClient(s.listeners[0].url)
    try:
        peer.send_frames(zlib.compress(b"good"), bad)  # one write: one batch
        assert s.recv() == b"good"
        wait_for(lambda: errors)
        assert isinstance(errors[0], gsp.BadFrame)
        peer.wait_eof()
    finally:
        peer.close()


def test_plain_tcp_peer_is_cut_off_at_its_first_message(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """The SP header is tcp's, so a tcp:// dialer connects; its first frame is not zlib."""
    pull = gsp_socket("pull", listen=ANY_PORT)
    errors = detached_errors(pull)
    port = parse_host_port(pull.listeners[0].url, listening=False)[1]
    push = gsp_socket("push", dial=f"tcp://127.0.0.1:{port}")
    push.send(b"plain bytes")
    wait_for(lambda: errors)
    assert isinstance(errors[0], gsp.BadFrame)


def test_handshake_timeout_drops_a_silent_peer(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("pair", listen=ANY_PORT, handshake_timeout=0.05)
    host, port = parse_host_port(s.listeners[0].url, listening=False)
    silent = gsocket.create_connection((host, port), timeout=WAIT)
    try:
        assert silent.recv(8) == wire.handshake(PAIR)  # then we say nothing
        assert silent.recv(8) == b""  # the listener gave up and closed the connection
        assert not s.pipes
    finally:
        silent.close()
