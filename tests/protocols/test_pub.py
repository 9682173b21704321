"""pub, cooked and raw, named after mangos' test categories (pub*, raw_pub*): the conformance kit's
ProtocolSuite for pub, then PUB's own rules: it owns the header when cooked, cannot subscribe,
never waits (a full pipe queue drops its oldest), broadcasts by prefix, closes a pipe that sends,
and keeps up with fifty subscribers and a slow one. sub is in test_sub.py."""

from __future__ import annotations

import random
import time
from contextlib import ExitStack

import gevent
import pytest

import gsp
from gsp.testing import WAIT, ProtocolSuite, RawPeer, wait_for
from tests.support import TCP, pub_sub, scaled
from tests.support import silent as drained


class TestPubProtocol(ProtocolSuite):
    protocol, peer = "pub", "sub"
    number, peer_number = 0x20, 0x21
    can_recv = False
    send_blocks = False  # never waits: a pipe whose queue is full misses the message


# ================================ pub ===========================================================

def test_pub_cooked():
    # Cooked PUB owns the (empty) header: a header given to send_msg never reaches the wire.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st)
        assert pub.raw is False
        sub.subscribe(b"")
        pub.send_msg(gsp.Message(b"body", b"HEAD"))
        m = sub.recv_msg()
        assert (m.header, m.body) == (b"", b"body")


@pytest.mark.parametrize("raw", [False, True])
def test_pub_cannot_subscribe(gsp_socket, raw):
    s = gsp_socket("pub", raw=raw)
    with pytest.raises(gsp.NotSupported):
        s.subscribe(b"")


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("proto,peer_number,send_buffer", [("pub", 0x21, 2), ("bus", 0x70, 1)])
def test_pub_and_bus_never_block(gsp_socket, proto, peer_number, send_buffer, raw):
    # No peer at all, then a peer that never reads: PUB and BUS sends never wait, and the stalled
    # pipe's full queue loses messages (counted: PUB its oldest, BUS the new one).
    s = gsp_socket(proto, raw=raw, send_buffer=send_buffer, linger=0, send_timeout=60)
    t0 = time.monotonic()
    for _ in range(100):
        s.send(b"ABC")
    assert s.stats["dropped"] == 0  # no pipes: nothing to queue, nothing dropped
    with RawPeer(s.listen(TCP).url, peer_number) as stalled:
        wait_for(lambda: s.pipes, what="the stalled peer")
        huge = b"h" * (1 << 18)
        for _ in range(200):  # 50 MiB: far more than kernel buffers take
            s.send(huge)
        assert time.monotonic() - t0 < scaled(3)
        assert s.stats["dropped"] > 0
        assert stalled.recv() == huge  # no header on the wire


def test_pub_broadcast():
    with ExitStack() as st:
        pub, [s1, s2] = pub_sub(st, 2, sub_opts={"recv_timeout": 0.05})
        s1.subscribe("topic1")
        s2.subscribe("topic2")
        s1.subscribe("both")
        s2.subscribe("both")
        for m in [b"topic1one", b"neither", b"topic2two", b"bothan", b"topic2again",
                  b"topic1again", b"garbage"]:
            pub.send(m)
        got1 = [s1.recv() for _ in range(3)]
        got2 = [s2.recv() for _ in range(3)]
        assert got1 == [b"topic1one", b"bothan", b"topic1again"]
        assert got2 == [b"topic2two", b"bothan", b"topic2again"]
        assert drained(s1) and drained(s2)


def test_pub_recv_discard():
    # A SUB never sends; nng closes a pipe that does, and PUB keeps serving the others.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st)
        sub.subscribe(b"")
        with RawPeer(pub.listeners[0].url, 0x21) as rogue:
            wait_for(lambda: len(pub.pipes) == 2, what="the rogue pipe")
            rogue.send(b"garbage")
            rogue.wait_closed()
        wait_for(lambda: len(pub.pipes) == 1, what="the rogue pipe to go")
        pub.send(b"still here")
        assert sub.recv() == b"still here"


def test_raw_pub_header_passthrough(gsp_socket):
    # Raw PUB puts a given header on the wire unchanged (pub/sub itself has none).
    pub = gsp_socket("pub", raw=True)
    with RawPeer(pub.listen(TCP).url, 0x21) as peer:
        wait_for(lambda: pub.pipes, what="the pipe")
        pub.send_msg(gsp.Message(b"body", b"HEAD"))
        pub.send(b"plain")
        assert [peer.recv(), peer.recv()] == [b"HEADbody", b"plain"]


def test_pub_fifty_subs_prefixes_and_a_slow_sub():
    # 50 subscribers, each on its own prefix, get exactly their messages in order; a slow one
    # with a tiny queue that never receives blocks neither PUB nor the others.
    n, per = 50, 10
    with ExitStack() as st:
        pub, subs = pub_sub(st, n + 1)  # default queues: 128 a pipe, fewer than PUB sends
        *subs, slow = subs
        slow.recv_buffer = 2
        slow.subscribe(b"")
        for i, s in enumerate(subs):
            s.subscribe(f"s{i:02d}/")
        expected: dict[int, list[bytes]] = {i: [] for i in range(n)}
        sent: list[bytes] = []
        t0 = time.monotonic()
        order = [i for i in range(n) for _ in range(per)]
        random.Random(7).shuffle(order)
        for k, i in enumerate(order):
            if k % 25 == 0:
                noise = b"zz/nobody wants this %d" % k
                sent.append(noise)
                pub.send(noise)
            msg = f"s{i:02d}/{len(expected[i])}".encode()
            expected[i].append(msg)
            sent.append(msg)
            pub.send(msg)
        assert time.monotonic() - t0 < scaled(2), "PUB waited for someone"
        assert pub.stats["dropped"] == 0
        for i, s in enumerate(subs):
            assert [s.recv() for _ in range(per)] == expected[i]
        for s in subs:
            assert drained(s, 0.01)
        wait_for(lambda: slow.stats["dropped"] == len(sent) - 2, what="the slow SUB to drop")
        assert [slow.recv(), slow.recv()] == sent[-2:]  # it kept the newest
        assert drained(slow, 0.01)


def test_pub_tight_loop_loses_nothing_to_a_reader():
    n = 5000
    with ExitStack() as st:
        pub, [sub] = pub_sub(st)
        sub.subscribe(b"")
        reader = gevent.spawn(lambda: [sub.recv() for _ in range(n)])
        for i in range(n):
            pub.send(b"%d" % i)
        assert reader.get(timeout=WAIT) == [b"%d" % i for i in range(n)]
        assert pub.stats["dropped"] == 0 and sub.stats["dropped"] == 0
