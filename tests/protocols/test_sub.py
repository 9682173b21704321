"""sub, cooked and raw, named after mangos' test categories (sub*, raw_sub*): the conformance kit's
ProtocolSuite for sub, then subscriptions, queue length and resizing, contexts (each with its own
subscriptions and queue), raw SUB (no filter, no contexts), and bursts bigger than recv_buffer
losing nothing to a waiting receiver. pub is in test_pub.py."""

from __future__ import annotations

import random
import time
from contextlib import ExitStack

import gevent
import pytest

import gsp
from gsp.testing import WAIT, ProtocolSuite, wait_for
from tests.support import TCP, pub_sub, recv_across_resize, scaled
from tests.support import silent as drained


class TestSubProtocol(ProtocolSuite):
    protocol, peer = "sub", "pub"
    number, peer_number = 0x21, 0x20
    can_send = False
    contexts = True


# ================================ sub ===========================================================

@pytest.mark.parametrize("raw", [False, True])
def test_sub_recv_deadline(raw):
    with gsp.socket("sub", raw=raw, recv_timeout=0.01) as s:
        t0 = time.monotonic()
        with pytest.raises(gsp.Timeout):
            s.recv()
        assert time.monotonic() - t0 < scaled(1)


def test_sub_subscribe():
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_opts={"recv_timeout": 0.05})
        pub.send(b"nothing yet")  # no subscriptions: nothing is received
        assert drained(sub)
        sub.subscribe("topic")
        sub.subscribe("topic")  # twice is once
        sub.subscribe(b"\x00\x01")
        sub.subscribe(bytearray(b"by"))
        sub.subscribe("é")  # str is UTF-8
        for bad in (1, None, 2.5, ["a"]):
            with pytest.raises(gsp.BadOption):
                sub.subscribe(bad)
        for m in [b"topic", b"topical", b"topi", b"\x00\x01\x02", b"\x00", b"bye", b"b",
                  "é!".encode(), b"\xc3"]:
            pub.send(m)
        assert [sub.recv() for _ in range(5)] == [b"topic", b"topical", b"\x00\x01\x02", b"bye",
                                                  "é!".encode()]
        assert drained(sub)
        with pytest.raises(gsp.BadOption):
            sub.unsubscribe("nope")
        with pytest.raises(gsp.BadOption):
            sub.unsubscribe(False)
        sub.unsubscribe("topic")
        with pytest.raises(gsp.BadOption):
            sub.unsubscribe("topic")  # only once
        sub.unsubscribe(b"\x00\x01")
        pub.send(b"topic again")
        assert drained(sub)
        sub.subscribe(b"")  # the empty prefix matches everything
        pub.send(b"anything")
        pub.send(b"")
        assert [sub.recv(), sub.recv()] == [b"anything", b""]


def test_sub_unsubscribe_drops():
    # Queued messages that only the removed subscription matched are dropped with it.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_opts={"recv_buffer": 50})
        sub.subscribe("1")
        sub.subscribe("2")
        for _ in range(10):
            pub.send(b"1")
            pub.send(b"2")
        wait_for(lambda: queued(sub) == 20, what="20 queued")
        sub.unsubscribe("1")
        assert [sub.recv() for _ in range(10)] == [b"2"] * 10
        assert drained(sub)


def queued(sub: gsp.Socket) -> int:
    return sub.stats["recv_queue"]


def test_sub_unsubscribe_load():
    # Unsubscribing while publishers keep sending: afterwards only the remaining topic arrives.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_opts={"recv_buffer": 1}, pub_opts={"send_buffer": 100})
        sub.subscribe("1")
        sub.subscribe("2")
        stop = False

        def flood(data: bytes) -> None:
            while not stop:
                pub.send(data)
                gevent.sleep(0)

        floods = [gevent.spawn(flood, b) for b in (b"1", b"2", b"2")]
        try:
            gevent.sleep(0.02)
            sub.unsubscribe("1")
            assert all(sub.recv() == b"2" for _ in range(50))
        finally:
            stop = True
            gevent.joinall(floods, timeout=WAIT)
        assert all(g.successful() for g in floods)


@pytest.mark.parametrize("raw", [False, True])
def test_sub_recv_qlen(raw: bool):
    # A full SUB queue drops its oldest message (nng prefers new ones), cooked and raw.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_raw=raw, sub_opts={"recv_buffer": 2, "recv_timeout": 0.05})
        if not raw:
            sub.subscribe(b"")
        for m in (b"one", b"two", b"three"):
            pub.send(m)
        wait_for(lambda: sub.stats["dropped"] == 1, what="one drop")
        assert [sub.recv(), sub.recv()] == [b"two", b"three"]
        assert drained(sub)


def test_sub_recv_qlen_resize_discard():
    # Resizing keeps the newest messages that still fit (nng keeps what fits; mangos drops all).
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_opts={"recv_buffer": 10, "recv_timeout": 0.05})
        sub.subscribe(b"")
        for m in (b"one", b"two", b"three", b"four"):
            pub.send(m)
        wait_for(lambda: queued(sub) == 4, what="four queued")
        sub.recv_buffer = 20
        assert sub.recv() == b"one"
        sub.recv_buffer = 1
        assert sub.get_option("recv_buffer") == 1
        assert sub.recv() == b"four"
        assert drained(sub)
        assert sub.stats["dropped"] == 2  # "two" and "three" did not fit


def test_sub_recv_resize_continue():
    # A receive waiting during a resize still gets the next message.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_opts={"recv_buffer": 10})
        sub.subscribe(b"")
        recv_across_resize(sub, pub, 2, b"ping")


def test_sub_context_open():
    s = gsp.socket("sub")
    with s.open_context() as c:
        assert isinstance(c, gsp.Context) and not c.closed
        with pytest.raises(gsp.NotSupported):
            c.send(b"")
        with pytest.raises(gsp.NotSupported):
            c.send_msg(gsp.Message(b""))
        assert c.recv_timeout is None and c.recv_buffer == s.recv_buffer == 1024
        c.recv_timeout = 0.01
        with pytest.raises(gsp.BadOption):
            c.recv_timeout = -1
        with pytest.raises(gsp.BadOption):
            c.recv_buffer = 0
        with pytest.raises(gsp.Timeout):
            c.recv()
    assert c.closed
    c.close()  # idempotent
    with pytest.raises(gsp.Closed):
        c.recv()
    with pytest.raises(gsp.Closed):
        c.subscribe(b"")
    s.close()


def test_sub_socket_close_context():
    s = gsp.socket("sub")
    c = s.open_context()
    g = gevent.spawn(c.recv)
    gevent.sleep(0.01)
    s.close()
    assert c.closed
    g.join(WAIT)
    assert isinstance(g.exception, gsp.Closed)
    with pytest.raises(gsp.Closed):
        c.recv_msg()


def test_sub_multi_contexts():
    # Each context has its own subscriptions and queue; the socket's own gets nothing it did not
    # subscribe to.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st)
        c1 = st.enter_context(sub.open_context())
        c2 = st.enter_context(sub.open_context())
        c3 = st.enter_context(sub.open_context())  # subscribes to nothing
        assert c1 is not c2
        c1.subscribe("1")
        c2.subscribe("2")
        sub.subscribe("2")
        recv = [0, 0]

        def reader(c, index: int) -> None:
            while True:
                try:
                    m = c.recv_msg()
                except gsp.Closed:
                    return
                assert m.body == b"%d" % (index + 1) and m.pipe is sub.pipes[0]
                recv[index] += 1

        readers = [gevent.spawn(reader, c1, 0), gevent.spawn(reader, c2, 1)]
        rng = random.Random(32)
        sent = [0, 0]
        for _ in range(101):
            i = rng.randrange(2)
            pub.send(b"%d" % (i + 1))
            sent[i] += 1
        wait_for(lambda: recv == sent, what="every message to its context")
        c1.close()
        c2.close()
        gevent.joinall(readers, timeout=WAIT)
        assert all(g.successful() for g in readers)
        assert [sub.recv() for _ in range(sent[1])] == [b"2"] * sent[1]
        assert drained(sub)
        c3.recv_timeout = 0.01
        with pytest.raises(gsp.Timeout):
            c3.recv()


def test_sub_context_queue_is_separate():
    # A context with a tiny queue drops its oldest without touching the socket's own queue.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_opts={"recv_timeout": 0.05})
        ctx = st.enter_context(sub.open_context())
        ctx.recv_buffer = 1
        ctx.recv_timeout = 0.05
        ctx.subscribe(b"")
        sub.subscribe(b"")
        for m in (b"a", b"b", b"c"):
            pub.send(m)
        assert [sub.recv() for _ in range(3)] == [b"a", b"b", b"c"]
        assert ctx.recv() == b"c"
        with pytest.raises(gsp.Timeout):
            ctx.recv()
        ctx.unsubscribe(b"")
        with pytest.raises(gsp.BadOption):
            ctx.unsubscribe(b"")


# ================================ raw sub =======================================================

def test_raw_sub_recv_clean():
    # Raw SUB filters nothing: every message arrives, whole, with no header.
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_raw=True)
        pub.send(b"Hello world")
        pub.send(b"")
        m = sub.recv_msg()
        assert (m.header, m.body, m.pipe) == (b"", b"Hello world", sub.pipes[0])
        assert sub.recv() == b""


def test_raw_sub_cannot_subscribe():
    with gsp.socket("sub", raw=True) as s:
        with pytest.raises(gsp.NotSupported):
            s.subscribe(b"topic")
        with pytest.raises(gsp.NotSupported):
            s.unsubscribe(b"topic")
        with pytest.raises(gsp.NotSupported):
            s.open_context()


def test_raw_sub_recv_qlen_resize():
    with ExitStack() as st:
        pub, [sub] = pub_sub(st, sub_raw=True, sub_opts={"recv_buffer": 4, "recv_timeout": 0.05},
                             pub_opts={"send_buffer": 10})
        for m in (b"one", b"two", b"three"):
            pub.send(m)
        wait_for(lambda: queued(sub) == 3, what="three queued")
        assert sub.recv() == b"one"
        sub.recv_buffer = 1  # shrink: only the newest stays
        assert sub.recv() == b"three"
        assert drained(sub)
        sub.recv_timeout = WAIT
        pub.send(b"four")
        assert sub.recv() == b"four"
        recv_across_resize(sub, pub, 5, b"five")


def test_raw_sub_pound_pipes_and_close(gsp_socket):
    # Many publishers flooding one raw SUB; closing everything mid-flood leaves nothing behind.
    sub = gsp_socket("sub", raw=True, recv_buffer=8)
    url = sub.listen(TCP).url
    pubs = [gsp_socket("pub", send_buffer=4) for _ in range(10)]
    for p in pubs:
        p.dial(url, fail_fast=True)
    wait_for(lambda: len(sub.pipes) == 10 and all(p.pipes for p in pubs), what="all pipes")
    stop = False

    def flood(p: gsp.Socket) -> None:
        while not stop:
            try:
                p.send(b"yes")
            except gsp.Closed:
                return
            gevent.sleep(0)

    floods = [gevent.spawn(flood, p) for p in pubs]
    gevent.sleep(0.05)
    assert sub.recv() == b"yes"
    sub.close()
    gevent.sleep(0.02)
    stop = True
    gevent.joinall(floods, timeout=WAIT)
    assert all(g.successful() for g in floods)


@pytest.mark.parametrize("sub_raw", [False, True], ids=["cooked", "raw"])
def test_sub_bursts_bigger_than_recv_buffer_lose_nothing_to_a_waiting_receiver(sub_raw):
    # One tcp read can hold thousands of frames, delivered to SUB as one batch: a receiver that
    # keeps up must still get every message (SUB yields to it before dropping anything).
    with ExitStack() as st:
        pub, (sub,) = pub_sub(st, sub_opts={"recv_buffer": 16}, sub_raw=sub_raw)
        if not sub_raw:
            sub.subscribe(b"")
        ctx = None if sub_raw else st.enter_context(sub.open_context())
        if ctx is not None:
            ctx.subscribe(b"1")  # a context with its own filter sees the same batches
        n = 5000
        got: list[bytes] = []
        got_ctx: list[bytes] = []

        def consume(recv, out, count):
            for _ in range(count):
                out.append(recv())

        g = gevent.spawn(consume, sub.recv, got, n)
        wanted = [b"%d" % i for i in range(n) if str(i).startswith("1")]
        gs = [g] if ctx is None else [g, gevent.spawn(consume, ctx.recv, got_ctx, len(wanted))]
        gevent.sleep(0.01)
        for i in range(n):
            pub.send(b"%d" % i)
        gevent.joinall(gs, timeout=WAIT, raise_error=True)
        assert got == [b"%d" % i for i in range(n)]
        assert sub.stats["dropped"] == 0 and pub.stats["dropped"] == 0
        if ctx is not None:
            assert got_ctx == wanted
