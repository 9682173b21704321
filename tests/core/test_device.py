"""gsp.device(): forwarding between raw sockets (chains, ttl cut-off, loops, reflectors)."""

from __future__ import annotations

import time
from typing import Any, Callable

import gevent
import pytest

import gsp
from gsp.testing import wait_for
from tests.support import connect, scaled


def make_device(gsp_socket: Callable[..., gsp.Socket], server: str, client: str,
                devices: list[gsp.Device]) -> tuple[gsp.Socket, gsp.Socket]:
    """A raw ``server``-side socket (faces requesters) and raw ``client``-side socket (faces
    responders), joined by a device; returns them (both listening on tcp port 0)."""
    front = gsp_socket(server, raw=True)
    back = gsp_socket(client, raw=True)
    front.listen("tcp://127.0.0.1:0")
    back.listen("tcp://127.0.0.1:0")
    devices.append(gsp.device(front, back))
    return front, back


@pytest.fixture
def devices():
    """Devices stopped (greenlets joined) at teardown."""
    made: list[gsp.Device] = []
    yield made
    for d in made:
        d.stop()


def url(s: gsp.Socket) -> str:
    return s.listeners[0].url


def chain(
        gsp_socket: Any, devices: list[gsp.Device], hops: int, **rep_opts: Any) -> tuple[Any, Any]:
    """REQ → ``hops`` rep/req devices → REP."""
    req = gsp_socket("req", recv_timeout=2, resend_time=None)
    rep = gsp_socket("rep", **rep_opts)
    prev = req
    for _ in range(hops):
        front, back = make_device(gsp_socket, "rep", "req", devices)
        prev.dial(url(front))
        prev = back
    rep.dial(url(prev))
    wait_for(lambda: all(len(d.sockets[0].pipes) == 1 and len(d.sockets[1].pipes) == 1
                         for d in devices) and rep.pipes and req.pipes)
    return req, rep


def test_xreq_device(gsp_socket, devices):
    """REQ → (raw rep | raw req) → REP, both directions."""
    req, rep = chain(gsp_socket, devices, 1, recv_timeout=2)
    req.send(b"PING")
    assert rep.recv() == b"PING"
    rep.send(b"PONG")
    assert req.recv() == b"PONG"
    assert devices[0].forwarded == 2


def test_device_chain_of_3_hops_answers(gsp_socket, devices, spawn):
    req, rep = chain(gsp_socket, devices, 3, recv_timeout=2)
    m = None

    def serve() -> None:
        nonlocal m
        m = rep.recv()
        rep.send(b"answer to " + m)

    g = spawn(serve)
    req.send(b"question")
    assert req.recv() == b"answer to question"
    g.get(timeout=2)


@pytest.mark.parametrize("ttl, answered", [(4, True), (3, False), (2, False)])
def test_rep_ttl_drop_through_device_chain(gsp_socket, devices, ttl, answered):
    """TTLDrop: after 3 devices the request carries 4 backtrace words; a REP whose ttl is lower
    drops it (and never answers); ttl=4 is just enough."""
    req, rep = chain(gsp_socket, devices, 3, ttl=ttl, recv_timeout=0.3)
    req.send(b"q")
    if answered:
        assert rep.recv() == b"q"
        rep.send(b"a")
        assert req.recv() == b"a"
    else:
        with pytest.raises(gsp.Timeout):
            rep.recv()
        assert all(d.forwarded == 1 for d in devices)  # it got all the way, then was dropped
        assert len(rep.pipes) == 1  # dropped, not disconnected


def test_device_loop_cut_by_default_ttl(gsp_socket, devices):
    """A loop of 3 devices: without a ttl a request would circle forever. Every raw rep it
    enters adds a backtrace word, so on its 9th hop it carries 9 words > ttl 8 and is dropped:
    exactly 8 forwards, no reply, and the loop goes quiet."""
    ring = [make_device(gsp_socket, "rep", "req", devices) for _ in range(3)]
    for i, (_, back) in enumerate(ring):
        back.dial(url(ring[(i + 1) % 3][0]))
    req = gsp_socket("req", recv_timeout=0.5, resend_time=None)
    req.dial(url(ring[0][0]))
    wait_for(lambda: req.pipes and all(len(back.pipes) == 1 for _, back in ring)
             and [len(f.pipes) for f, _ in ring] == [2, 1, 1])
    req.send(b"round and round")
    with pytest.raises(gsp.Timeout):
        req.recv()
    wait_for(lambda: sum(f.stats["dropped_ttl"] for f, _ in ring) == 1,
             what="the message dropped at its ninth hop")
    assert sum(d.forwarded for d in devices) == 8  # and nothing else circling
    assert all(d.running for d in devices)


def test_surveyor_through_device(gsp_socket, devices):
    s = gsp_socket("surveyor", survey_time=0.5)
    front, back = make_device(gsp_socket, "respondent", "surveyor", devices)
    s.dial(url(front))
    rs = [gsp_socket("respondent", dial=url(back), recv_timeout=2) for _ in range(3)]
    wait_for(lambda: len(back.pipes) == 3 and front.pipes and s.pipes)
    s.send(b"who?")
    for i, r in enumerate(rs):
        assert r.recv() == b"who?"
        r.send(bytes([i]))
    got = []
    with pytest.raises(gsp.Timeout):
        while True:
            got.append(s.recv())
    assert sorted(got) == [b"\x00", b"\x01", b"\x02"]


def test_device_pair_reflector(gsp_socket, devices):
    refl = gsp_socket("pair", raw=True)
    peer = gsp_socket("pair", recv_timeout=2)
    connect(refl, peer)
    devices.append(gsp.device(refl))
    peer.send(b"echo")
    assert peer.recv() == b"echo"


def test_device_pair_both_ways(gsp_socket, devices):
    a, b = make_device(gsp_socket, "pair", "pair", devices)
    pa, pb = gsp_socket("pair", recv_timeout=2), gsp_socket("pair", recv_timeout=2)
    connect(a, pa)
    connect(b, pb)
    pa.send(b"a->b")
    assert pb.recv() == b"a->b"
    pb.send(b"b->a")
    assert pa.recv() == b"b->a"


def test_device_push_pull_one_way(gsp_socket, devices):
    push_raw, pull_raw = gsp_socket("push", raw=True), gsp_socket("pull", raw=True)
    d = gsp.device(push_raw, pull_raw)
    devices.append(d)
    producer, consumer = gsp_socket("push", send_timeout=2), gsp_socket("pull", recv_timeout=2)
    connect(pull_raw, producer)
    connect(push_raw, consumer)
    producer.send(b"work")
    assert consumer.recv() == b"work"


def test_device_pub_sub_one_way(gsp_socket, devices):
    pub_raw, sub_raw = gsp_socket("pub", raw=True), gsp_socket("sub", raw=True)
    devices.append(gsp.device(pub_raw, sub_raw))
    pub, sub = gsp_socket("pub"), gsp_socket("sub", recv_timeout=2)
    sub.subscribe(b"")
    connect(sub_raw, pub)
    connect(pub_raw, sub)
    pub.send(b"news")
    assert sub.recv() == b"news"


def test_device_bus_reflector_no_echo(gsp_socket, devices):
    hub = gsp_socket("bus", raw=True)
    a, b = gsp_socket("bus", recv_timeout=0.3), gsp_socket("bus", recv_timeout=2)
    connect(hub, a)
    connect(hub, b)
    devices.append(gsp.device(hub))
    a.send(b"from a")
    assert b.recv() == b"from a"
    with pytest.raises(gsp.Timeout):
        a.recv()  # the raw header kept it from going back to its sender


@pytest.mark.parametrize("s1, s2", [("req", "rep"), ("rep", "req"), ("pair", "pair")])
def test_device_refuses_cooked(gsp_socket, s1, s2):
    with pytest.raises(gsp.BadOption, match="raw"):
        gsp.device(gsp_socket(s1), gsp_socket(s2, raw=True))
    with pytest.raises(gsp.BadOption, match="raw"):
        gsp.device(gsp_socket(s1, raw=True), gsp_socket(s2))


@pytest.mark.parametrize("s1, s2", [("req", "req"), ("rep", "surveyor"), ("push", "sub"),
                                    ("bus", "pair"), ("rep", None), ("surveyor", None)])
def test_device_refuses_mismatched(gsp_socket, s1, s2):
    a = gsp_socket(s1, raw=True)
    b = None if s2 is None else gsp_socket(s2, raw=True)
    with pytest.raises(gsp.BadOption):
        gsp.device(a, b)


def test_device_refuses_closed_and_non_sockets(gsp_socket):
    a, b = gsp_socket("rep", raw=True), gsp_socket("req", raw=True)
    b.close()
    with pytest.raises(gsp.Closed):
        gsp.device(a, b)
    with pytest.raises(TypeError):
        gsp.device(a, "req")  # type: ignore[arg-type]


def test_device_stop_and_join(gsp_socket, devices):
    req, rep = chain(gsp_socket, devices, 1, recv_timeout=0.2)
    d = devices[0]
    assert d.running and not d.join(0.01)
    d.stop()
    assert not d.running and d.join(0)
    req.send(b"lost")
    with pytest.raises(gsp.Timeout):
        rep.recv()  # nothing forwards any more; the sockets stay open
    assert not d.sockets[0].closed


def test_device_ends_when_a_socket_closes(gsp_socket):
    front, back = gsp_socket("rep", raw=True), gsp_socket("req", raw=True, recv_timeout=0.01)
    d = gsp.device(front, back)
    gevent.sleep(0.02)  # back's recv keeps timing out: the device must keep waiting
    assert d.running
    t0 = time.monotonic()
    back.close()
    assert d.join(2)  # both directions end, though front is still open
    assert time.monotonic() - t0 < scaled(2) and not front.closed
