"""Statistics: traffic, drops by reason, pipes, dialers, listeners and queue depths,
read as snapshots on sockets, pipes and endpoints, listed by gsp.stats()."""

from __future__ import annotations

import logging
from typing import Callable

import pytest

import gsp
from gsp.message import Message
from gsp.testing import WAIT, RawPeer, free_port, wait_for
from tests.support import HDR_REQ, TCP, connect, hops, inproc_url, raw_connect, u32

Mk = Callable[..., gsp.Socket]

SIZES = [1, 16, 100, 3000, 70000]  # a direct write, small batches, and a body over 64 KiB


def _url(scheme: str) -> str:
    return TCP if scheme == "tcp" else inproc_url()


def _traffic(stats: dict[str, int]) -> tuple[int, int, int, int]:
    return (stats["messages_sent"], stats["bytes_sent"], stats["messages_received"],
            stats["bytes_received"])


@pytest.mark.parametrize("scheme", ["tcp", "inproc"])
def test_traffic_on_both_ends_per_pipe_endpoint_and_socket(gsp_socket: Mk, scheme: str):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", reconnect_time=0.01)
    url = pull.listen(_url(scheme)).url
    dialer = push.dial(url, fail_fast=True)
    wait_for(lambda: pull.pipes, what="the pipe")
    for n in SIZES:
        push.send(b"m" * n)
    assert [len(pull.recv()) for _ in SIZES] == SIZES
    sent = (len(SIZES), sum(SIZES), 0, 0)
    wait_for(lambda: _traffic(push.stats) == sent, what="the push side counted")
    assert _traffic(push.pipes[0].stats) == sent
    assert _traffic(dialer.stats) == sent
    got = (0, 0, len(SIZES), sum(SIZES))
    assert _traffic(pull.stats) == got
    assert _traffic(pull.pipes[0].stats) == got
    assert _traffic(pull.listeners[0].stats) == got

    # A pipe goes: its counts stay in the socket's and the endpoints' totals, not in the new pipe.
    old = pull.pipes[0]
    old.close()
    wait_for(lambda: pull.pipes and pull.pipes[0] is not old, what="the redialed pipe")
    push.send(b"x" * 7)
    assert pull.recv() == b"x" * 7
    assert _traffic(old.stats) == got  # a gone pipe keeps its own counts
    assert _traffic(pull.pipes[0].stats) == (0, 0, 1, 7)
    assert _traffic(pull.stats) == (0, 0, len(SIZES) + 1, sum(SIZES) + 7)
    assert _traffic(pull.listeners[0].stats) == (0, 0, len(SIZES) + 1, sum(SIZES) + 7)
    wait_for(lambda: push.stats["messages_sent"] == len(SIZES) + 1, what="the push side")
    assert push.stats["bytes_sent"] == sum(SIZES) + 7
    for s in (pull.stats, push.stats, dialer.stats, pull.listeners[0].stats):
        assert (s["pipes"], s["pipes_attached"], s["pipes_detached"]) == (1, 2, 1)
        assert s["pipes_rejected"] == 0
    assert dialer.stats["reconnects"] == 1


def test_headers_count_as_bytes(gsp_socket: Mk):
    # REQ puts a 4-byte request id in front of each body; REP sends it back with the reply.
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT)
    req.dial(rep.listen(TCP).url, fail_fast=True)
    for body in (b"ping", b"ping again"):
        req.send(body)
        assert rep.recv() == body
        rep.send(b"pong")
        assert req.recv() == b"pong"
    assert _traffic(req.stats) == (2, 8 + 14, 2, 16)
    assert _traffic(rep.stats) == (2, 16, 2, 8 + 14)


@pytest.mark.parametrize("batch, expected", [
    ([], 0),
    ([b"ab"] * 20, 40),  # a burst of small bodies: joined
    ([b"a" * 200] * 20, 4000),  # bigger ones: measured one by one, never copied
    ([b"ab"] * 10 + [Message(b"xyz", b"h")], 24),  # a Message among bodies
    ([Message(b"xyz", b"hh")] * 3, 15),
    ([Message(b"xyz", b"hh"), b"abcd"], 9),  # a body among Messages
])
def test_a_batch_counts_its_bytes_headers_included(gsp_socket: Mk, batch: list[Message | bytes],
                                                   expected: int):
    """Messages sent in one turn of the loop leave as one batch of the pipe's writer (after
    at most one direct write): both ends count their bytes, a Message's header included."""
    pull, push = gsp_socket("pull", recv_timeout=WAIT), gsp_socket("push")
    connect(pull, push)
    for m in batch:
        if isinstance(m, Message):
            push.send_msg(m)
        else:
            push.send(m)
    for _ in batch:
        pull.recv_msg()
    wait_for(lambda: push.stats["messages_sent"] == len(batch), what="the push side counted")
    assert push.stats["bytes_sent"] == expected == pull.stats["bytes_received"]


def test_stats_are_new_dicts(gsp_socket: Mk):
    s = gsp_socket("pull")
    a = s.stats
    a["messages_received"] = 99
    assert s.stats["messages_received"] == 0
    assert s.stats is not s.stats


# -- drops by reason -----------------------------------------------------------------------------

def test_sub_counts_messages_no_subscription_matched(gsp_socket: Mk):
    pub = gsp_socket("pub")
    sub = gsp_socket("sub", recv_timeout=WAIT)
    sub.dial(pub.listen(TCP).url, fail_fast=True)
    wait_for(lambda: pub.pipes, what="the subscriber")
    sub.subscribe(b"a")
    ctx = sub.open_context()
    ctx.subscribe(b"b1")
    for m in (b"a1", b"b1", b"b2", b"c", b"a2"):
        pub.send(m)
    assert [sub.recv(), sub.recv()] == [b"a1", b"a2"]
    assert ctx.recv() == b"b1"
    st = sub.stats
    assert st["dropped_no_subscriber"] == 2  # b"b2" and b"c"; b"b1" went to the context
    assert st["dropped"] == 2 and st["dropped_queue_full"] == 0
    ctx.close()
    pub.send(b"b1")
    pub.send(b"a3")
    assert sub.recv() == b"a3"
    assert sub.stats["dropped_no_subscriber"] == 3  # no context wants b"b1" any more


def test_pub_and_sub_count_full_queues(gsp_socket: Mk):
    pub = gsp_socket("pub", send_buffer=1, linger=0)
    sub = gsp_socket("sub", recv_buffer=2, recv_timeout=WAIT)
    sub.subscribe(b"")
    sub.dial(pub.listen(TCP).url, fail_fast=True)
    wait_for(lambda: pub.pipes, what="the subscriber")
    for i in range(5):
        pub.send(b"%d" % i)
    wait_for(lambda: sub.stats["recv_queue"] == 2 and sub.stats["messages_received"] == 5,
             what="five messages at the sub")
    assert sub.stats["dropped_queue_full"] == 3  # its queue of 2 kept the newest two
    assert [sub.recv(), sub.recv()] == [b"3", b"4"]
    with RawPeer(pub.listeners[0].url, 0x21) as stalled:  # a subscriber that never reads
        wait_for(lambda: len(pub.pipes) == 2, what="the stalled subscriber")
        for _ in range(100):
            pub.send(b"h" * (1 << 18))  # 25 MiB: more than the kernel buffers hold
        st = pub.stats
        assert st["dropped_queue_full"] > 0 and st["dropped"] == st["dropped_queue_full"]
        assert stalled.recv() == b"h" * (1 << 18)


def test_bus_counts_a_full_receive_queue(gsp_socket: Mk):
    a = gsp_socket("bus", recv_buffer=3)
    b = gsp_socket("bus")
    b.dial(a.listen(TCP).url, fail_fast=True)
    wait_for(lambda: a.pipes and b.pipes, what="the pipe")
    for i in range(8):
        b.send(b"%d" % i)
    wait_for(lambda: a.stats["messages_received"] == 8, what="eight at a")
    st = a.stats
    assert (st["recv_queue"], st["dropped_queue_full"], st["dropped"]) == (3, 5, 5)


def test_pair1_drops_by_reason_add_up(gsp_socket: Mk):
    s = gsp_socket("pair1", ttl=2)
    with RawPeer(s.listen(TCP).url, 0x11) as peer:
        wait_for(lambda: s.pipes, what="the peer")
        peer.send(hops(3) + b"too far", hops(2) + b"ok")
        assert s.recv() == b"ok"
        assert (s.stats["dropped_ttl"], s.stats["dropped"]) == (1, 1)
        peer.send(b"\x01\x00\x00\x01bad")  # a header that is no hop count: the pipe closes
        peer.wait_closed()
    wait_for(lambda: s.stats["dropped_malformed"] == 1, what="the malformed message")
    st = s.stats
    assert (st["dropped"], st["pipes_detached"], st["messages_received"]) == (2, 1, 3)


def test_rep_counts_requests_over_ttl(gsp_socket: Mk):
    rep = gsp_socket("rep", ttl=2, recv_timeout=WAIT)
    with RawPeer(rep.listen(TCP).url, 0x30) as req:
        wait_for(lambda: rep.pipes, what="the requester")
        req.send(u32(1) + u32(2) + u32(0x80000001) + b"three hops")
        req.send(u32(0x80000002) + b"one hop")
        assert rep.recv() == b"one hop"
        assert (rep.stats["dropped_ttl"], rep.stats["dropped"]) == (1, 1)


def test_oversize_is_counted_on_the_receiver_and_logged(
        gsp_socket: Mk, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="gsp.pipe")
    pull = gsp_socket("pull", max_recv_size=1 << 20, recv_timeout=0.2)
    push = gsp_socket("push", reconnect_time=WAIT)
    lst = pull.listen(TCP)
    push.dial(lst.url, fail_fast=True)
    wait_for(lambda: pull.pipes, what="the pipe")
    [pipe] = pull.pipes
    push.send(b"x" * (2 << 20))
    with pytest.raises(gsp.Timeout):
        pull.recv()
    wait_for(lambda: pipe.closed, what="the pipe to close")
    assert pipe.stats["dropped_oversize"] == 1
    assert pull.stats["dropped"] == 1
    for st in (pull.stats, lst.stats):
        assert (st["dropped_oversize"], st["pipes_detached"], st["messages_received"]) == (1, 1, 0)
    assert push.stats["dropped"] == 0  # the sender sees nothing: the receiver counts it
    [rec] = [r for r in caplog.records if "MessageTooLarge" in r.getMessage()]
    assert rec.levelno == logging.WARNING and rec.gsp_size == 2 << 20


# -- endpoints -----------------------------------------------------------------------------------

def test_dialer_counts_attempts_failures_and_reconnects(gsp_socket: Mk):
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    push = gsp_socket("push", reconnect_time=0.01, max_reconnect_time=0.02)
    d = push.dial(url, background=True)
    wait_for(lambda: d.stats["dial_failures_refused"] >= 3, what="refused dials")
    with gsp.socket("pull", recv_timeout=WAIT) as pull:
        pull.listen(url)
        wait_for(lambda: d.stats["pipes"] == 1, what="the first pipe")
        st = d.stats
        assert st["dial_attempts"] == st["dial_failures"] + 1
        assert st["dial_failures"] == st["dial_failures_refused"]
        assert st["reconnects"] == 0
    wait_for(lambda: d.stats["pipes_detached"] == 1, what="the pipe lost")
    with gsp.socket("pull", recv_timeout=WAIT) as pull:
        pull.listen(url)
        wait_for(lambda: d.stats["pipes"] == 1, what="the pipe back")
        push.send(b"back")
        assert pull.recv() == b"back"
    st = d.stats
    assert (st["reconnects"], st["pipes_attached"], st["pipes_detached"]) == (1, 2, 1)
    assert st["dial_attempts"] == st["dial_failures"] + 2
    assert st["handshake_failures"] == 0


def test_dialer_counts_handshake_failures_by_kind(gsp_socket: Mk):
    wrong = gsp_socket("push")  # push dialing push: the wrong protocol
    push = gsp_socket("push", reconnect_time=0.01, max_reconnect_time=0.02)
    d = push.dial(wrong.listen(TCP).url, background=True)
    wait_for(lambda: d.stats["handshake_failures_wrong_protocol"] >= 2, what="failed handshakes")
    st = d.stats
    assert st["dial_failures_handshake"] == st["handshake_failures"] \
        == st["handshake_failures_wrong_protocol"]
    assert st["pipes_attached"] == 0


def test_dialer_counts_rejected_pipes(gsp_socket: Mk):
    a, b = gsp_socket("pair"), gsp_socket("pair")
    url = a.listen(TCP).url
    b.dial(url, fail_fast=True)
    c = gsp_socket("pair", reconnect_time=0.01, max_reconnect_time=0.02)
    d = c.dial(url, background=True)  # a pair takes one peer: a rejects c's pipes
    wait_for(lambda: a.stats["pipes_rejected"] >= 2, what="rejected pipes")
    assert a.listeners[0].stats["pipes_rejected"] == a.stats["pipes_rejected"]
    assert a.stats["pipes"] == 1 and d.stats["pipes_rejected"] == 0  # c's side saw a hang-up


def test_listener_counts_accepts_and_handshake_failures_by_kind(gsp_socket: Mk):
    pull = gsp_socket("pull", handshake_timeout=0.2)
    lst = pull.listen(TCP)
    wrong = raw_connect(lst.url)
    wrong.sendall(HDR_REQ)  # a REQ's handshake: not pull's peer
    garbage = raw_connect(lst.url)
    garbage.sendall(b"GET / HTTP/1.1\r\n")
    stalled = raw_connect(lst.url)  # sends nothing: times out
    probe = raw_connect(lst.url)
    probe.close()  # hangs up at once
    try:
        wait_for(lambda: lst.stats["handshake_failures"] == 4, what="four failed handshakes")
        st = lst.stats
        assert st["accepted"] == 4
        assert [st[f"handshake_failures_{k}"]
                for k in ("wrong_protocol", "malformed", "timeout", "closed", "tls", "other")] \
            == [1, 1, 1, 1, 0, 0]
        assert st["pipes_attached"] == 0
        with RawPeer(lst.url, 0x50):
            wait_for(lambda: lst.stats["pipes"] == 1, what="a good peer")
            assert lst.stats["accepted"] == 5 and lst.stats["handshake_failures"] == 4
    finally:
        for s in (wrong, garbage, stalled):
            s.close()


def test_tls_handshake_failures_are_counted(gsp_socket: Mk, pki):
    a = gsp_socket("pair")
    b = gsp_socket("pair", reconnect_time=0.05)
    lst = a.listen("tls+tcp://127.0.0.1:0", **pki.listen_options())
    d = b.dial(lst.url, tls_ca_file=pki.rogue_ca_file)  # b does not trust a's certificate
    wait_for(lambda: d.stats["handshake_failures_tls"] >= 1, what="the dialer's TLS failure")
    wait_for(lambda: lst.stats["handshake_failures"] >= 1, what="the listener's failure")
    ls = lst.stats
    assert ls["handshake_failures_tls"] + ls["handshake_failures_closed"] == ls["handshake_failures"]


# -- queue depths --------------------------------------------------------------------------------

def test_queue_depths(gsp_socket: Mk):
    pull = gsp_socket("pull", recv_buffer=4, recv_timeout=WAIT)
    # bounded in messages only
    push = gsp_socket("push", send_buffer=1000, send_buffer_size=0, linger=0)
    push.dial(pull.listen(TCP).url, fail_fast=True)
    wait_for(lambda: pull.pipes, what="the pipe")
    big = b"b" * (1 << 18)
    for _ in range(100):  # 25 MiB: the puller's queue fills, then the kernel's, then ours
        push.send(big, timeout=WAIT)
    wait_for(lambda: pull.stats["recv_queue"] == 4, what="a full receive queue")
    queued = push.stats["send_queue"]
    assert queued > 0
    assert push.pipes[0].stats["send_queue"] == queued == push.dialers[0].stats["send_queue"]
    assert queued == 100 - push.stats["messages_sent"]
    for _ in range(100):
        assert pull.recv() == big
    wait_for(lambda: push.stats["send_queue"] == 0, what="the send queue to drain")
    assert pull.stats["recv_queue"] == 0 and push.stats["messages_sent"] == 100


def test_sub_queue_depth_includes_contexts(gsp_socket: Mk):
    pub, sub = gsp_socket("pub"), gsp_socket("sub")
    sub.subscribe(b"")
    ctx = sub.open_context()
    ctx.subscribe(b"a")
    sub.dial(pub.listen(TCP).url, fail_fast=True)
    wait_for(lambda: pub.pipes, what="the subscriber")
    for m in (b"a", b"b", b"a"):
        pub.send(m)
    wait_for(lambda: sub.stats["recv_queue"] == 5, what="3 on the socket, 2 on the context")
    assert sub.recv() == b"a" and sub.stats["recv_queue"] == 4


def test_protocols_without_a_receive_queue_report_none(gsp_socket: Mk):
    assert "recv_queue" not in gsp_socket("push").stats and "recv_queue" in gsp_socket("pull").stats
