"""star (mangos' experimental protocol, from the separately installed gsp-star plugin).

The plugin is reached only through gsp's registry (``gsp.socket("star")``), as a user would.
Names follow mangos' star/xstar test categories (raw_star* for xstar).
"""

from __future__ import annotations

import ast
import sys
import time
from contextlib import ExitStack
from importlib.metadata import entry_points

import gevent
import pytest

import gsp
from gsp.testing import WAIT, ProtocolSuite, RawPeer, wait_for
from tests.support import BAD_TTL, TCP, connect, hops, silent

STAR = 0x640


class TestStarProtocol(ProtocolSuite):
    """The gsp-star plugin through the conformance kit, as any third-party protocol would be."""

    protocol = peer = "star"
    number = peer_number = STAR
    send_blocks = False  # never waits: a peer whose queue is full misses the message
    raw_header = hops(0)
    options = {"ttl": (8, [1, 255], BAD_TTL)}


def test_star_is_a_separate_plugin_on_public_api():
    # Registered by the gevent-sp-star distribution through the "gsp" entry-point group ...
    eps = [ep for ep in entry_points(group="gsp") if ep.name == "star"]
    assert [ep.dist.name for ep in eps] == ["gevent-sp-star"]
    module = sys.modules[gsp.registry.protocol("star").factory.__module__]
    assert module.__name__ == "gsp_star"
    # ... and importing nothing private from gsp.
    tree = ast.parse(open(module.__file__).read())
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            used.add(node.module or "")
        elif isinstance(node, ast.Import):
            used.update(a.name for a in node.names)
    gsp_mods = {m for m in used if m == "gsp" or m.startswith("gsp.")}
    private = {m for m in gsp_mods if any(part.startswith("_") for part in m.split("."))}
    assert gsp_mods and not private, private


def test_star_cooked(gsp_socket):
    a, b = gsp_socket("star"), gsp_socket("star", recv_timeout=WAIT)
    connect(a, b)
    assert a.raw is False
    a.send(b"hello")
    m = b.recv_msg()
    assert (m.header, m.body, m.pipe) == (b"", b"hello", b.pipes[0])


def test_star_wire_format_and_discard_header(gsp_socket):
    # Cooked sends carry hop count 0 whatever header the caller gave; receivers never show it.
    s = gsp_socket("star", recv_timeout=WAIT)
    with RawPeer(s.listen(TCP).url, STAR) as peer:
        assert peer.peer_protocol == STAR
        wait_for(lambda: s.pipes, what="the pipe")
        s.send_msg(gsp.Message(b"abc", b"\x00\x01\x02\x03"))
        assert peer.recv() == hops(0) + b"abc"
        peer.send(hops(0) + b"in")
        m = s.recv_msg()
        assert (m.header, m.body) == (b"", b"in")


@pytest.mark.parametrize("topology", ["hub", "chain"])
def test_star_three_nodes_exactly_once(topology):
    # hub: b listens, a and c dial it; chain: a -> b -> c. Either way a message from any node
    # reaches the other two exactly once (and never comes back to its sender).
    with ExitStack() as st:
        a, b, c = (st.enter_context(gsp.socket("star", recv_timeout=WAIT)) for _ in range(3))
        url_b = b.listen(TCP).url
        a.dial(url_b, fail_fast=True)
        if topology == "hub":
            c.dial(url_b, fail_fast=True)
        else:
            b.dial(c.listen(TCP).url, fail_fast=True)
        wait_for(lambda: len(b.pipes) == 2 and a.pipes and c.pipes, what="the links")
        nodes = {"a": a, "b": b, "c": c}
        for name, src in nodes.items():
            src.send(b"from " + name.encode())
            for other, dst in nodes.items():
                if other != name:
                    assert dst.recv() == b"from " + name.encode()
        assert all(silent(s) for s in nodes.values())


def test_star_many_members():
    # mangos TestStar: one listener, four dialers, everyone sends 7; each member gets the other
    # 28 in per-sender order and never its own.
    num, pkts = 5, 7
    with ExitStack() as st:
        socks = [st.enter_context(gsp.socket("star", recv_timeout=WAIT)) for _ in range(num)]
        url = socks[0].listen(TCP).url
        for s in socks[1:]:
            s.dial(url, fail_fast=True)
        wait_for(lambda: len(socks[0].pipes) == num - 1, what="every member")

        def sender(i: int) -> None:
            for k in range(pkts):
                socks[i].send(bytes([i, k]))
                gevent.sleep(0.001 * (k % 3))

        def receiver(i: int) -> list[int]:
            seen = [0] * num
            for _ in range((num - 1) * pkts):
                peer, k = socks[i].recv()
                assert peer != i, "got its own message"
                assert k == seen[peer], "out of order"
                seen[peer] += 1
            return seen

        receivers = [gevent.spawn(receiver, i) for i in range(num)]
        senders = [gevent.spawn(sender, i) for i in range(num)]
        gevent.joinall(senders + receivers, timeout=WAIT, raise_error=True)
        for i, r in enumerate(receivers):
            assert r.get(timeout=0) == [0 if j == i else pkts for j in range(num)]
        assert all(silent(s, 0.05) for s in socks)


def test_star_ttl_drop(gsp_socket):
    # Hop counts below ttl are delivered and forwarded one hop further; ttl or more is dropped.
    s = gsp_socket("star", ttl=8, recv_timeout=0.1)
    url = s.listen(TCP).url
    with RawPeer(url, STAR) as src, RawPeer(url, STAR) as other:
        wait_for(lambda: len(s.pipes) == 2, what="two peers")
        src.send(hops(7) + b"last hop", hops(8) + b"too far", hops(0xff) + b"way too far")
        assert s.recv() == b"last hop"
        assert other.recv() == hops(8) + b"last hop"
        assert silent(s)
        other.assert_silent()
        src.assert_silent()  # nothing is sent back where it came from
        assert s.stats["dropped_ttl"] == 2
        s.ttl = 1
        src.send(hops(1) + b"now too far", hops(0) + b"ok")
        assert s.recv() == b"ok"
        assert other.recv() == hops(1) + b"ok"


# ================================ raw star (mangos xstar) =======================================

def test_raw_star_recv_header(gsp_socket):
    # Any non-zero byte among the first three drops the message; the hop count is incremented.
    s = gsp_socket("star", raw=True, recv_timeout=WAIT)
    with RawPeer(s.listen(TCP).url, STAR) as peer:
        peer.send(b"\x01\x00\x00\x01" + b"1", b"\x00\x01\x00\x01" + b"2",
                  b"\x00\x00\x01\x01" + b"3", hops(1) + b"4")
        m = s.recv_msg()
        assert (m.header, m.body) == (hops(2), b"4")
        assert silent(s)
        assert s.stats["dropped_malformed"] == 3


def test_raw_star_recv_no_header(gsp_socket):
    s = gsp_socket("star", raw=True, recv_timeout=0.05)
    with RawPeer(s.listen(TCP).url, STAR) as peer:
        peer.send(b"", b"\x00\x00\x00")
        with pytest.raises(gsp.Timeout):
            s.recv_msg()
        peer.send(hops(0))  # an empty body with its header is fine
        s.recv_timeout = WAIT
        assert s.recv_msg().body == b""
        assert s.stats["dropped_malformed"] == 2


def test_raw_star_no_header_send(gsp_socket):
    # mangos: a raw send without its 4-byte header is dropped quietly.
    a, b = gsp_socket("star", raw=True), gsp_socket("star", raw=True, recv_timeout=0.05)
    connect(a, b)
    a.send(b"no header")
    a.send_msg(gsp.Message(b"short", b"\x00\x00"))
    with pytest.raises(gsp.Timeout):
        b.recv_msg()
    assert a.stats["dropped_malformed"] == 2


def test_raw_star_send_recv(gsp_socket):
    a, b = gsp_socket("star", raw=True), gsp_socket("star", raw=True, recv_timeout=WAIT)
    connect(a, b)
    a.send_msg(gsp.Message(b"test", hops(0)))
    m = b.recv_msg()
    assert (m.header, m.body) == (hops(1), b"test")


def raw_line(st: ExitStack, mid: dict | None = None, **opts: object
             ) -> tuple[gsp.Socket, gsp.Socket, gsp.Socket]:
    """s1 - s2 - s3, all raw star (s2 listens, both others dial it); ``mid``: s2's own options."""
    s1, s2, s3 = (st.enter_context(gsp.socket("star", raw=True, recv_timeout=WAIT,
                                              **(opts | (mid or {}) if i == 1 else opts)))
                  for i in range(3))
    url = s2.listen(TCP).url
    s1.dial(url, fail_fast=True)
    s3.dial(url, fail_fast=True)
    wait_for(lambda: len(s2.pipes) == 2 and s1.pipes and s3.pipes, what="the line")
    return s1, s2, s3


def test_raw_star_redistribute():
    with ExitStack() as st:
        s1, s2, s3 = raw_line(st, recv_buffer=5)
        s1.send_msg(gsp.Message(b"test", hops(0)))
        m = s3.recv_msg()
        assert (m.header, m.body) == (hops(2), b"test")  # two hops to get here
        assert s2.recv_msg().header == hops(1)
        assert silent(s1)


def test_raw_star_redistribute_back_pressure():
    # The middle node forwards without waiting, so a tiny send queue just loses messages.
    with ExitStack() as st:
        s1, s2, s3 = raw_line(st, {"send_buffer": 1}, recv_buffer=5, send_buffer=2)
        for _ in range(10):
            s1.send_msg(gsp.Message(b"test", hops(0)))
        m = s3.recv_msg()
        assert (m.header, m.body) == (hops(2), b"test")
        assert silent(s1)


def test_raw_star_nonblock(gsp_socket):
    s = gsp_socket("star", raw=True, send_buffer=2, linger=0, send_timeout=60)
    t0 = time.monotonic()
    for _ in range(100):
        s.send_msg(gsp.Message(b"abc", hops(0)))  # no peers
    with RawPeer(s.listen(TCP).url, STAR) as stalled, \
            RawPeer(s.listeners[0].url, STAR) as stalled2:
        wait_for(lambda: len(s.pipes) == 2, what="two stalled peers")
        huge = b"h" * (1 << 18)
        for _ in range(200):
            s.send_msg(gsp.Message(huge, hops(0)))
        assert time.monotonic() - t0 < 3
        assert s.stats["dropped"] > 0
        assert stalled.recv() == hops(0) + huge
        assert stalled2.recv() == hops(0) + huge


def test_raw_star_back_pressure_and_resize(gsp_socket):
    # A full receive queue holds the pipe's reader (back-pressure, as mangos); growing it lets
    # the held messages in, in order.
    s = gsp_socket("star", raw=True, recv_buffer=1, recv_timeout=WAIT)
    with RawPeer(s.listen(TCP).url, STAR) as peer:
        peer.send(*(hops(0) + bytes([i]) for i in range(3)))
        gevent.sleep(0.05)
        s.recv_buffer = 5
        assert [s.recv() for _ in range(3)] == [b"\x00", b"\x01", b"\x02"]
        g = gevent.spawn(s.recv)  # a posted receive across a resize
        gevent.sleep(0.01)
        s.recv_buffer = 2
        peer.send(hops(0) + b"late")
        assert g.get(timeout=WAIT) == b"late"
