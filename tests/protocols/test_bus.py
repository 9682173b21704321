"""bus, cooked and raw, named after mangos' test categories (bus*, raw_bus* for xbus)."""

from __future__ import annotations

import random
import time

import gevent
import pytest

import gsp
from gsp.testing import WAIT, ProtocolSuite, RawPeer, wait_for
from tests.support import TCP, connect, recv_across_resize, scaled, silent


class TestBusProtocol(ProtocolSuite):
    protocol = peer = "bus"
    number = peer_number = 0x70
    send_blocks = False  # never waits: a peer whose queue is full misses the message


def pid(p: gsp.Pipe) -> bytes:
    return p.id.to_bytes(4, "big")


def test_bus_cooked(gsp_socket):
    a = gsp_socket("bus", recv_timeout=WAIT)
    b = gsp_socket("bus")
    connect(a, b)
    assert a.raw is False
    b.send(b"hi")
    m = a.recv_msg()
    assert (m.header, m.body, m.pipe) == (b"", b"hi", a.pipes[0])


def test_bus_device(gsp_socket):
    # head - [raw|raw] x5 - tail, each [raw|raw] pair joined by gsp.device: messages cross the
    # whole chain both ways, exactly once.
    hops = 5
    devices: list[gsp.Device] = []
    head = gsp_socket("bus", recv_timeout=WAIT)
    tail = gsp_socket("bus", recv_timeout=WAIT)
    last = head
    links: list[gsp.Socket] = []
    for _ in range(hops):
        s1 = gsp_socket("bus", raw=True)
        s2 = gsp_socket("bus", raw=True)
        links += [s1, s2]
        s1.dial(last.listen(TCP).url, fail_fast=True)
        devices.append(gsp.device(s1, s2))
        last = s2
    tail.dial(last.listen(TCP).url, fail_fast=True)
    wait_for(lambda: head.pipes and tail.pipes, what="the chain")
    gevent.sleep(0.05)  # every link's far side attaches too
    rng = random.Random(32)
    for _ in range(10):
        src, dst = (head, tail) if rng.random() < 0.5 else (tail, head)
        val = rng.getrandbits(32).to_bytes(4, "big")
        src.send(val)
        assert dst.recv() == val
    assert silent(head) and silent(tail)
    for s in links:
        s.close()
    assert all(d.join(WAIT) for d in devices)  # they end when their sockets close
    assert [d.forwarded for d in devices] == [10] * hops  # each message crossed each device once


def test_bus_fan_out(gsp_socket):
    count, n_peers = 20, 50
    hub = gsp_socket("bus", send_buffer=count)
    url = hub.listen(TCP).url
    peers = [gsp_socket("bus", recv_timeout=WAIT) for _ in range(n_peers)]
    for p in peers:
        p.dial(url, fail_fast=True)
    wait_for(lambda: len(hub.pipes) == n_peers, what="every peer")
    for i in range(count):
        hub.send(i.to_bytes(4, "big"))
    for p in peers:
        assert [int.from_bytes(p.recv(), "big") for _ in range(count)] == list(range(count))
    assert all(silent(p, 0.01) for p in peers)
    assert hub.stats["dropped"] == 0


def test_bus_fan_in(gsp_socket):
    count, n_peers = 20, 50
    hub = gsp_socket("bus", recv_buffer=count * n_peers, recv_timeout=WAIT)
    url = hub.listen(TCP).url
    peers = [gsp_socket("bus") for _ in range(n_peers)]
    for p in peers:
        p.dial(url, fail_fast=True)
    wait_for(lambda: len(hub.pipes) == n_peers and all(p.pipes for p in peers),
             what="every peer")

    def talk(index: int) -> None:
        for j in range(count):
            peers[index].send(index.to_bytes(4, "big") + j.to_bytes(4, "big"))
            gevent.sleep(0)

    talkers = [gevent.spawn(talk, i) for i in range(n_peers)]
    counts = [0] * n_peers
    for _ in range(count * n_peers):
        m = hub.recv()
        index, num = int.from_bytes(m[:4], "big"), int.from_bytes(m[4:], "big")
        assert num == counts[index]  # in order per peer
        counts[index] += 1
    assert counts == [count] * n_peers
    assert silent(hub, 0.01)
    gevent.joinall(talkers, timeout=WAIT)


def test_bus_discard_header(gsp_socket):
    a = gsp_socket("bus")
    b = gsp_socket("bus", recv_timeout=WAIT)
    connect(a, b)
    a.send_msg(gsp.Message(b"abc", b"\x00\x01\x02\x03"))
    m = b.recv_msg()
    assert (m.header, m.body) == (b"", b"abc")


def test_bus_recv_queue_full_drops_newest(gsp_socket):
    # Like nng, a full bus receive queue drops arriving messages instead of pushing back.
    a = gsp_socket("bus", recv_buffer=5, recv_timeout=0.05)
    b = gsp_socket("bus")
    connect(a, b)
    for i in range(100):
        b.send(b"%d" % i)
    wait_for(lambda: a.stats["dropped"] == 95, what="95 drops")
    assert [a.recv() for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    assert silent(a)


# ================================ raw bus (mangos xbus) =========================================

def test_raw_bus_recv_header(gsp_socket):
    # Raw receive: the arriving pipe's id, big-endian, is the whole header.
    a = gsp_socket("bus", raw=True, recv_timeout=WAIT)
    b = gsp_socket("bus")
    connect(a, b)
    b.send(b"abc")
    m = a.recv_msg()
    assert (m.body, m.header) == (b"abc", pid(m.pipe))
    assert m.pipe is a.pipes[0]


def test_raw_bus_send_recv_header(gsp_socket):
    # A raw send's 4-byte header is a pipe id for routing, never put on the wire.
    a = gsp_socket("bus", raw=True, recv_timeout=WAIT)
    b = gsp_socket("bus", raw=True)
    connect(a, b)
    b.send_msg(gsp.Message(b"abc", b"\x01\x02\x03\x04"))
    m = a.recv_msg()
    assert (m.body, m.header) == (b"abc", pid(a.pipes[0]))


def test_raw_bus_header_on_the_wire(gsp_socket):
    # nng trims only the first word: a shorter header goes out whole, a longer one minus 4 bytes.
    s = gsp_socket("bus", raw=True)
    with RawPeer(s.listen(TCP).url, 0x70) as peer:
        wait_for(lambda: s.pipes, what="the pipe")
        s.send_msg(gsp.Message(b"body", b"\x09\x09"))
        s.send_msg(gsp.Message(b"body", b"\x00\x00\x00\x07xy"))
        s.send(b"plain")
        assert [peer.recv() for _ in range(3)] == [b"\x09\x09body", b"xybody", b"plain"]


def test_raw_bus_no_loop(gsp_socket):
    # Sending back what was received skips the pipe it came from.
    a = gsp_socket("bus", raw=True, recv_timeout=WAIT)
    b = gsp_socket("bus", raw=True, recv_timeout=0.05)
    connect(a, b)
    b.send_msg(gsp.Message(b"abc", b"\x01\x02\x03\x04"))
    m = a.recv_msg()
    a.send_msg(m)
    with pytest.raises(gsp.Timeout):
        b.recv_msg()


def test_raw_bus_reflector_device_no_echo(gsp_socket):
    # One raw socket as its own device: each message reaches every other peer, never its sender.
    hub = gsp_socket("bus", raw=True)
    url = hub.listen(TCP).url
    peers = [gsp_socket("bus", recv_timeout=WAIT) for _ in range(3)]
    for p in peers:
        p.dial(url, fail_fast=True)
    wait_for(lambda: len(hub.pipes) == 3, what="three peers")
    reflector = gsp.device(hub)
    peers[0].send(b"from 0")
    assert peers[1].recv() == b"from 0" and peers[2].recv() == b"from 0"
    peers[2].send(b"from 2")
    assert peers[0].recv() == b"from 2" and peers[1].recv() == b"from 2"
    assert all(silent(p) for p in peers)
    hub.close()
    assert reflector.join(WAIT)  # it ends when the socket closes
    assert reflector.forwarded == 2


def test_raw_bus_resize_recv(gsp_socket):
    # A receive posted before a resize still gets the next message.
    a = gsp_socket("bus", raw=True, recv_buffer=20, recv_timeout=WAIT)
    b = gsp_socket("bus")
    connect(a, b)
    recv_across_resize(a, b, 10, b"\x01")


def test_raw_bus_resize(gsp_socket):
    # Shrinking a full queue keeps the newest that fit; the drops are counted.
    a = gsp_socket("bus", raw=True, recv_buffer=5, recv_timeout=0.05)
    b = gsp_socket("bus")
    connect(a, b)
    for i in range(10):
        b.send(bytes([i]))
    wait_for(lambda: a.stats["dropped"] == 5, what="five drops (queue full)")
    a.recv_buffer = 2
    assert a.stats["dropped"] == 8
    assert [a.recv(), a.recv()] == [b"\x03", b"\x04"]
    assert silent(a)
    a.recv_buffer = 10
    b.send(b"more")
    a.recv_timeout = WAIT
    assert a.recv() == b"more"


def test_raw_bus_back_pressure(gsp_socket):
    # A raw bus that never reads exerts no back-pressure: the sender is never held up.
    a = gsp_socket("bus", raw=True, recv_buffer=2)
    b = gsp_socket("bus", raw=True, send_buffer=2, send_timeout=60)
    connect(a, b)
    t0 = time.monotonic()
    for _ in range(100):
        b.send(b"")
    assert time.monotonic() - t0 < scaled(1)
    wait_for(lambda: a.stats["dropped"] + b.stats["dropped"] == 98, what="98 drops")


def test_bus_tight_loop_loses_nothing_to_a_reader(gsp_socket):
    # Drops are for peers that fall behind: a tight send loop with default queues and a peer that
    # keeps receiving loses nothing on either side.
    n = 5000
    a = gsp_socket("bus", recv_timeout=WAIT)
    b = gsp_socket("bus")
    connect(a, b)
    reader = gevent.spawn(lambda: [a.recv() for _ in range(n)])
    for i in range(n):
        b.send(b"%d" % i)
    assert reader.get(timeout=WAIT) == [b"%d" % i for i in range(n)]
    assert a.stats["dropped"] == 0 and b.stats["dropped"] == 0
