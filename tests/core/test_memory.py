"""Memory follows the bytes a peer sent, never the size it announced.

A hostile peer completes the handshake, announces a big message and sends nothing (or a
trickle): the socket holds only what arrived, a pipe whose message stops arriving is closed with
FrameStalled after recv_partial_timeout, and max_recv_partial bounds what all pipes hold
together. Big messages still arrive intact however their bytes are split.
"""

from __future__ import annotations

import random
import re
import ssl
import struct
import time
import tracemalloc
from contextlib import ExitStack
from typing import Any, Callable, Iterator

import gevent
import pytest
from gevent import ssl as gssl

import gsp
from gsp.testing import WAIT, wait_for
from gsp.transport import wire
from tests.support import raw_connect, silent

PUSH = wire.handshake(0x50)  # what a pusher says to a pull socket
MIB = 1 << 20


def frame(body: bytes) -> bytes:
    return struct.pack(">Q", len(body)) + body


@pytest.fixture
def traced() -> Iterator[Callable[[], int]]:
    """``grown()``: bytes Python allocated (and still holds) since the test began."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        yield lambda: tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()


# -- the decoder (sans-IO) ----------------------------------------------------------------------

def test_an_announcement_and_a_byte_cost_the_byte_not_the_announcement(traced):
    dec = wire.FrameDecoder(wire.TCP, max_size=0)
    assert dec.feed(struct.pack(">Q", 16 * MIB)) == []
    assert dec.feed(b"x") == []  # not a buffer of the 16 MiB announced
    assert dec.buffered == 9 and dec.body_left == 16 * MIB - 1
    assert traced() < 64 * 1024


def test_a_dribbling_peer_costs_about_what_it_sent(traced):
    dec = wire.FrameDecoder(wire.TCP, max_size=0)
    dec.feed(struct.pack(">Q", MIB))
    for _ in range(20000):  # one byte per read: no object (~40 bytes) per byte
        assert dec.feed(b"y") == []
    assert dec.buffered == 8 + 20000
    assert traced() < 2 * 20000 + 64 * 1024


SIZES = [0, 1, 4095, 4096, 4097, wire.DIRECT_SIZE - 1, wire.DIRECT_SIZE, wire.DIRECT_SIZE + 1,
         64 * 1024 + 3, 300_001, MIB]


@pytest.mark.parametrize("framing", [wire.TCP, wire.IPC], ids=["tcp", "ipc"])
def test_big_and_small_bodies_survive_any_split(framing):
    rnd = random.Random(14)
    bodies = [rnd.randbytes(n) for n in SIZES]
    prefix = wire.prefixer(framing)
    stream = b"".join(prefix(len(b)) + b for b in bodies)
    for cuts in ([1, 7, 9, 4096, 5000, 70000], [len(stream)], [3] * 50 + [40000] * 40):
        dec = wire.FrameDecoder(framing, max_size=0)
        got: list[bytes] = []
        pos = 0
        while pos < len(stream):
            step = cuts[len(got) % len(cuts)] if cuts[0] != len(stream) else len(stream)
            step = rnd.choice([step, rnd.randint(1, 100_000)])
            got += dec.feed(stream[pos:pos + step])
            pos += step
        assert got == bodies and dec.buffered == 0


# -- sockets: hostile peers over tcp, ipc and tls+tcp --------------------------------------------

def raw_tls(url: str, pki: Any) -> Any:
    """A TLS client socket (gevent) to a tls+tcp listener, handshake done."""
    ctx = ssl.create_default_context(cafile=pki.ca_file)
    sock = raw_connect("tcp://" + url.split("://", 1)[1])
    tls = gssl.SSLSocket(sock=sock, server_hostname="localhost", _context=ctx)
    tls.do_handshake()
    return tls


def hostile_peer(url: str, pki: Any) -> Any:
    """A pusher that completed the SP handshake (a raw socket)."""
    sock = raw_tls(url, pki) if url.startswith("tls+tcp") else raw_connect(url)
    sock.sendall(PUSH)
    got = b""
    while len(got) < 8:
        got += sock.recv(8 - len(got))
    return sock


def listen(pull: gsp.Socket, scheme: str, pki: Any, ipc_url: str) -> str:
    if scheme == "ipc":
        return pull.listen(ipc_url).url
    opts = pki.listen_options() if scheme == "tls+tcp" else {}
    return pull.listen(f"{scheme}://127.0.0.1:0", **opts).url


def held_bytes(sock: gsp.Socket) -> int:
    """Bytes the socket's pipes hold of messages still arriving (white box: no stat shows it;
    a test waits on it for a peer's bytes to be read)."""
    return int(sock._recv_limits.held)


def announce(sock: Any, url: str, size: int, body: bytes = b"") -> None:
    prefix = wire.prefixer(wire.IPC if url.startswith("ipc") else wire.TCP)
    sock.sendall(prefix(size) + body)


@pytest.mark.parametrize("scheme", ["tcp", "ipc", "tls+tcp"])
def test_peers_announcing_recv_max_size_cost_what_they_sent(gsp_socket, scheme, pki, ipc_url,
                                                            traced):
    n = 40
    with ExitStack() as st:
        pull = gsp_socket("pull")
        url = listen(pull, scheme, pki, ipc_url)
        peers = []
        for _ in range(n):
            peers.append(hostile_peer(url, pki))
            st.callback(peers[-1].close)
        wait_for(lambda: len(pull.pipes) == n, what="every peer attached")
        idle = traced()
        for p in peers:  # 1 MiB announced, one byte of it sent
            announce(p, url, pull.max_recv_size, b"z")
        wait_for(lambda: held_bytes(pull) >= n * 9, what="every peer's prefix and byte read")
        assert len(pull.pipes) == n
        # A few KiB per pipe at most, not the n × 1 MiB (40 MiB) announced.
        assert traced() - idle < n * 16 * 1024


@pytest.mark.parametrize("scheme", ["tcp", "ipc", "tls+tcp"])
def test_a_stalled_message_closes_its_pipe_and_others_are_served(gsp_socket, scheme, pki, ipc_url):
    gone: list[gsp.Pipe] = []
    with ExitStack() as st:
        pull = gsp_socket("pull", recv_timeout=WAIT, recv_partial_timeout=0.3)
        pull.on_pipe_event(lambda ev, p: gone.append(p) if ev is gsp.PipeEvent.DETACHED else None)
        url = listen(pull, scheme, pki, ipc_url)
        bad = hostile_peer(url, pki)
        st.callback(bad.close)
        announce(bad, url, 100_000, b"half a message" * 10)
        good = gsp_socket("push")
        good.dial(url, fail_fast=True, **(pki.dial_options() if scheme == "tls+tcp" else {}))
        for i in range(5):  # the good peer is served meanwhile
            good.send(b"%d" % i)
            assert pull.recv() == b"%d" % i
            gevent.sleep(0.05)
        wait_for(lambda: gone, what="the stalled pipe closed")
        (pipe,) = gone
        assert isinstance(pipe.error, gsp.FrameStalled)
        assert isinstance(pipe.error, gsp.ConnectionBroken)
        held = 140 + (9 if scheme == "ipc" else 8)  # the body so far and its length prefix
        assert f"sent nothing more of a message for 0.3 s (recv_partial_timeout); {held} " \
               "bytes of it had arrived" in str(pipe.error)
        assert bad.recv(100) == b""  # closed on the peer too
        good.send(b"still here")
        assert pull.recv() == b"still here"
        assert pull.stats["pipes_stalled"] == 1  # counted too
        assert pull.listeners[0].stats["pipes_stalled"] == 1


def test_the_stall_timeout_can_be_turned_off():
    with gsp.socket("pull", recv_partial_timeout=None) as pull:
        url = pull.listen("tcp://127.0.0.1:0").url
        bad = hostile_peer(url, None)
        try:
            announce(bad, url, 1000, b"x")
            wait_for(lambda: pull.pipes, what="the pipe")
            assert silent(pull, 0.5) and pull.pipes  # still up, still waiting
        finally:
            bad.close()
    with pytest.raises(gsp.BadOption, match="recv_partial_timeout"):
        gsp.socket("pull", recv_partial_timeout=0)


def test_a_message_that_keeps_arriving_slowly_is_not_stalled(gsp_socket):
    pull = gsp_socket("pull", recv_timeout=WAIT, recv_partial_timeout=0.3)
    url = pull.listen("tcp://127.0.0.1:0").url
    slow = hostile_peer(url, None)
    try:
        body = bytes(range(256)) * 40
        slow.sendall(frame(body)[:100])
        for i in range(100, len(body) + 8, 1000):  # a piece every 0.1 s, for over a second
            gevent.sleep(0.1)
            slow.sendall(frame(body)[i:i + 1000])
        assert pull.recv() == body
    finally:
        slow.close()


def test_messages_split_one_after_another_are_not_stalled_by_an_earlier_timer(gsp_socket):
    """The stall timer stays armed from one message to the next; firing while a later message
    is under way, it counts from that message's last bytes, not the earlier one's."""
    pull = gsp_socket("pull", recv_timeout=WAIT, recv_partial_timeout=0.3)
    url = pull.listen("tcp://127.0.0.1:0").url
    peer = hostile_peer(url, None)
    try:
        bodies = [b"%d" % i * 3000 for i in range(8)]
        for body in bodies:  # 0.25 s a message, for two seconds: the timer fires mid-message
            data = frame(body)
            peer.sendall(data[:1000])
            gevent.sleep(0.15)
            peer.sendall(data[1000:])
            gevent.sleep(0.1)
        assert [pull.recv() for _ in bodies] == bodies
        assert pull.stats["pipes_stalled"] == 0 and len(pull.pipes) == 1
    finally:
        peer.close()


def test_a_shorter_stall_timeout_applies_to_a_timer_armed_already(gsp_socket):
    gone: list[gsp.Pipe] = []
    pull = gsp_socket("pull", recv_timeout=WAIT, recv_partial_timeout=30)
    pull.on_pipe_event(lambda ev, p: gone.append(p) if ev is gsp.PipeEvent.DETACHED else None)
    url = pull.listen("tcp://127.0.0.1:0").url
    peer = hostile_peer(url, None)
    try:
        data = frame(b"first" * 1000)
        peer.sendall(data[:100])  # part of a message: the timer is armed for 30 s
        gevent.sleep(0.05)
        peer.sendall(data[100:])
        assert pull.recv() == b"first" * 1000
        pull.recv_partial_timeout = 0.3
        t0 = time.monotonic()
        peer.sendall(frame(b"second" * 1000)[:100])  # and nothing more
        wait_for(lambda: gone, what="the stalled pipe closed")
        assert 0.25 < time.monotonic() - t0 < 5  # the new 0.3 s, not what is left of 30 s
        assert isinstance(gone[0].error, gsp.FrameStalled)
    finally:
        peer.close()


@pytest.mark.parametrize("room", ["the biggest holder goes", "the bound is lifted"])
def test_recv_partial_max_holds_back_a_pipe_until_there_is_room(gsp_socket, room):
    with ExitStack() as st:
        pull = gsp_socket("pull", recv_timeout=WAIT, max_recv_partial=256 * 1024)
        url = pull.listen("tcp://127.0.0.1:0").url
        big = hostile_peer(url, None)  # holds 300 KiB of a 1 MiB message: over the bound alone
        st.callback(big.close)
        announce(big, url, MIB, bytes(300 * 1024))
        wait_for(lambda: held_bytes(pull) >= 300 * 1024, what="the first pipe's 300 KiB held")
        second = hostile_peer(url, None)
        st.callback(second.close)
        body = random.Random(1).randbytes(512 * 1024)
        second.sendall(frame(body)[:20000])
        wait_for(lambda: held_bytes(pull) >= 300 * 1024 + 20000, what="the second's first piece held")
        second.sendall(frame(body)[20000:])  # all of it sent; the socket reads no further
        small = gsp_socket("push")
        small.dial(url, fail_fast=True)
        small.send(b"small messages still flow")  # a pipe between messages always reads
        assert pull.recv() == b"small messages still flow"
        assert silent(pull, 0.3)  # the second message waits for room
        if room == "the biggest holder goes":
            big.close()  # its bytes are released
        else:
            pull.max_recv_partial = 0  # an option changed applies to pipes already up
        assert pull.recv() == body
    with pytest.raises(gsp.BadOption, match="max_recv_partial"):
        gsp.socket("pull", max_recv_partial=-1)


def test_a_pipe_held_back_too_long_by_recv_partial_max_is_closed(gsp_socket):
    gone: list[gsp.Pipe] = []
    with ExitStack() as st:
        pull = gsp_socket("pull", max_recv_partial=256 * 1024, recv_partial_timeout=0.5)
        pull.on_pipe_event(lambda ev, p: gone.append(p) if ev is gsp.PipeEvent.DETACHED else None)
        url = pull.listen("tcp://127.0.0.1:0").url
        big = hostile_peer(url, None)
        st.callback(big.close)
        announce(big, url, MIB, bytes(300 * 1024))
        wait_for(lambda: held_bytes(pull) >= 300 * 1024, what="the first pipe's 300 KiB held")
        second = hostile_peer(url, None)
        st.callback(second.close)
        second.sendall(frame(bytes(512 * 1024))[:20000])
        wait_for(lambda: held_bytes(pull) >= 300 * 1024 + 20000, what="the second's first piece held")
        second.sendall(bytes(100_000))  # the socket reads no further of it
        for _ in range(int(WAIT / 0.1)):  # the biggest holder keeps sending: never stalled
            if gone:
                break
            big.sendall(b"x")
            gevent.sleep(0.1)
        (pipe,) = gone
        assert isinstance(pipe.error, gsp.FrameStalled)
        assert "a message still arriving was held back for 0.5 s by max_recv_partial=262144 (" \
               in str(pipe.error)
        held = re.search(r"\((\d+) bytes held in incomplete messages, (\d+) of them by this "
                         r"pipe\)$", str(pipe.error))
        assert held and int(held[1]) > 300 * 1024 and 20000 <= int(held[2]) < 300 * 1024
        assert len(pull.pipes) == 1
        try:
            assert second.recv(100) == b""
        except ConnectionResetError:  # closed with bytes of ours unread: a reset, not a FIN
            pass


@pytest.mark.parametrize("scheme", ["tcp", "tls+tcp"])
@pytest.mark.parametrize("size", [wire.DIRECT_SIZE - 1, wire.DIRECT_SIZE, 100_003, MIB])
def test_big_messages_arrive_intact_in_pieces(gsp_socket, scheme, size, pki, ipc_url):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    url = listen(pull, scheme, pki, ipc_url)
    peer = hostile_peer(url, pki)
    try:
        rnd = random.Random(size)
        bodies = [rnd.randbytes(size) for _ in range(3)]
        data = b"".join(frame(b) for b in bodies)
        pos = 0
        while pos < len(data):
            step = rnd.choice([1, 9, 4096, 30000, 200_000])
            peer.sendall(data[pos:pos + step])
            pos += step
            gevent.sleep(0.001 if rnd.random() < 0.3 else 0)
        assert [pull.recv() for _ in bodies] == bodies
    finally:
        peer.close()
