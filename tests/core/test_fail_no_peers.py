"""fail_no_peers (mangos' OptionFailNoPeers) and gsp.NoPeers: every call that would wait for a
peer to exist fails at once instead; with the option off, or with a peer, nothing changes."""

from __future__ import annotations

import time

import gevent
import pytest

import gsp
from tests.support import connect, inproc_url

#: The protocols whose send waits for a peer (or, for bus, star and surveyor, drops for want of
#: one), each with its peer.
SENDERS = {"push": "pull", "req": "rep", "surveyor": "respondent", "pair": "pair",
           "pair1": "pair1", "bus": "bus", "star": "star"}
#: Of those, the ones whose send waits (the others return at once, the message going nowhere).
WAITERS = ["push", "req", "pair", "pair1"]
FAST = 0.1  # "at once": well under this, with a 10 s timeout in force


def fails_fast(call) -> gsp.NoPeers:  # type: ignore[no-untyped-def]
    t = time.monotonic()
    with pytest.raises(gsp.NoPeers) as info:
        call()
    assert time.monotonic() - t < FAST
    return info.value


def test_no_peers_is_a_plain_gsp_error_exported_and_named_in_its_message(gsp_socket):
    assert issubclass(gsp.NoPeers, gsp.GspError) and "NoPeers" in gsp.__all__
    for other in (gsp.Timeout, gsp.Closed, gsp.ConnectionBroken):
        assert not issubclass(gsp.NoPeers, other)
    s = gsp_socket("push", fail_no_peers=True, send_timeout=10)
    err = fails_fast(lambda: s.send(b"x"))
    assert "fail_no_peers" in str(err) and "push" in str(err)


def test_the_option_defaults_off_and_is_set_three_ways(gsp_socket):
    s = gsp_socket("push")
    assert s.fail_no_peers is False and s.get_option("fail_no_peers") is False
    s.fail_no_peers = True
    assert s.get_option("fail_no_peers") is True
    s.set_option("fail_no_peers", False)
    assert s.fail_no_peers is False
    assert gsp_socket("push", fail_no_peers=True).fail_no_peers is True
    with pytest.raises(gsp.BadOption):
        s.fail_no_peers = 1


@pytest.mark.parametrize("proto", sorted(SENDERS))
def test_send_with_no_peer_fails_at_once(gsp_socket, proto):
    s = gsp_socket(proto, fail_no_peers=True, send_timeout=10)
    fails_fast(lambda: s.send(b"x"))
    fails_fast(lambda: s.send_msg(gsp.Message(b"x", b"\0\0\0\1" if proto in ("pair1", "star")
                                              else b"")))


@pytest.mark.parametrize("proto", sorted(SENDERS))
def test_set_later_it_applies_to_the_next_call(gsp_socket, proto):
    s = gsp_socket(proto, send_timeout=10)
    s.set_option("fail_no_peers", True)
    fails_fast(lambda: s.send(b"x"))


@pytest.mark.parametrize("proto", sorted(SENDERS))
def test_block_false_with_no_peer_raises_no_peers_not_would_block(gsp_socket, proto):
    s = gsp_socket(proto, fail_no_peers=True)
    fails_fast(lambda: s.send(b"x", block=False))
    if proto != "star":  # (star's sockets cannot be polled)
        assert s.poll("send")  # a send would not wait: it fails at once


@pytest.mark.parametrize("proto", WAITERS)
def test_best_effort_with_no_peer_still_raises_no_peers(gsp_socket, proto):
    s = gsp_socket(proto, fail_no_peers=True, best_effort=True)
    fails_fast(lambda: s.send(b"x"))


def test_raw_req_and_raw_pair1_fail_fast_too(gsp_socket):
    xreq = gsp_socket("req", raw=True, fail_no_peers=True)
    fails_fast(lambda: xreq.send_msg(gsp.Message(b"x", b"\x80\0\0\1")))
    xpair1 = gsp_socket("pair1", raw=True, fail_no_peers=True)
    fails_fast(lambda: xpair1.send_msg(gsp.Message(b"x", b"\0\0\0\0")))


@pytest.mark.parametrize("proto", WAITERS)
def test_default_off_still_waits_for_a_peer(gsp_socket, proto):
    s = gsp_socket(proto, send_timeout=0.2)
    t = time.monotonic()
    with pytest.raises(gsp.Timeout):
        s.send(b"x")
    assert time.monotonic() - t >= 0.15


@pytest.mark.parametrize("proto", ["bus", "star", "surveyor"])
def test_default_off_broadcasts_still_go_nowhere_quietly(gsp_socket, proto):
    gsp_socket(proto, send_timeout=10).send(b"x")


@pytest.mark.parametrize("proto", ["pub"])
def test_pub_is_unaffected(gsp_socket, proto):
    gsp_socket(proto, fail_no_peers=True).send(b"x")  # as in mangos: no subscriber is no error


@pytest.mark.parametrize("proto", sorted(SENDERS))
def test_with_a_peer_it_sends_normally(gsp_socket, proto):
    peer = SENDERS[proto]
    s = gsp_socket(proto, fail_no_peers=True, send_timeout=5)
    p = gsp_socket(peer, recv_timeout=5)
    connect(p, s, inproc_url())
    s.send(b"hello")
    assert p.recv() == b"hello"
    if proto in ("req", "surveyor"):
        p.send(b"answer")
        assert s.recv(timeout=5) == b"answer"


@pytest.mark.parametrize("proto", ["req", "surveyor"])
def test_contexts_follow_the_socket_option(gsp_socket, proto):
    s = gsp_socket(proto, send_timeout=10)
    ctx = s.open_context()
    ctx.send_timeout = 10
    with pytest.raises(gsp.Timeout) if proto == "req" else _nothing():
        ctx.send(b"x", timeout=0.05)  # off: req waits; a survey goes nowhere
    s.fail_no_peers = True
    fails_fast(lambda: ctx.send(b"x"))
    other = s.open_context()
    fails_fast(lambda: other.send(b"x"))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_a_failed_survey_leaves_the_last_one_running(gsp_socket):
    sur = gsp_socket("surveyor", fail_no_peers=True, recv_timeout=5, survey_time=5)
    res = gsp_socket("respondent", recv_timeout=5)
    connect(sur, res, inproc_url())
    sur.send(b"survey")
    assert res.recv() == b"survey"
    res.pipes[0].close()
    gevent.sleep(0.05)  # the pipe is gone on both sides
    assert not sur.pipes
    fails_fast(lambda: sur.send(b"next"))
    with pytest.raises(gsp.Timeout):  # the first survey still collects (nobody left to answer)
        sur.recv(timeout=0.05)


def test_req_recv_after_failed_send_is_a_state_error(gsp_socket):
    req = gsp_socket("req", fail_no_peers=True)
    fails_fast(lambda: req.send(b"x"))
    with pytest.raises(gsp.ProtocolStateError):
        req.recv(timeout=0.05)


@pytest.mark.parametrize("resend_time", [60.0, 0])
@pytest.mark.parametrize("on_context", [False, True])
def test_req_whose_pipe_dies_fails_its_recv_with_no_peers(
        gsp_socket, spawn, resend_time, on_context):
    url = inproc_url()
    rep = gsp_socket("rep", recv_timeout=5)
    req = gsp_socket("req", fail_no_peers=True, recv_timeout=10, resend_time=resend_time)
    connect(rep, req, url)
    user = req.open_context() if on_context else req
    user.send(b"q")
    assert rep.recv() == b"q"
    rep.close()  # the only peer goes while the request is out
    t = time.monotonic()
    with pytest.raises(gsp.NoPeers):
        user.recv()
    assert time.monotonic() - t < 1  # as soon as the pipe's end is seen, not after 10 s
    with pytest.raises(gsp.ProtocolStateError):  # the request is over
        user.recv(timeout=0.05)


def test_req_recv_already_waiting_when_the_last_pipe_dies(gsp_socket, spawn):
    rep = gsp_socket("rep", recv_timeout=5)
    req = gsp_socket("req", fail_no_peers=True, recv_timeout=10)
    connect(rep, req, inproc_url())
    ctxs = [req.open_context() for _ in range(3)]
    for i, c in enumerate(ctxs):
        c.send(b"q%d" % i)
    for _ in ctxs:
        rep.recv()  # (every request is left unanswered)
    waiting = [spawn(c.recv) for c in ctxs]
    gevent.sleep(0.05)
    t = time.monotonic()
    req.pipes[0].close()
    gevent.joinall(waiting, timeout=5)
    assert time.monotonic() - t < FAST
    assert all(isinstance(g.exception, gsp.NoPeers) for g in waiting)


def test_req_without_the_option_resends_when_a_peer_comes_back(gsp_socket):
    url = inproc_url()
    rep = gsp_socket("rep", recv_timeout=5)
    req = gsp_socket("req", recv_timeout=5)
    rep.listen(url)
    req.dial(url, fail_fast=True)
    req.send(b"q")
    assert rep.recv() == b"q"
    req.pipes[0].close()  # the dialer redials; the request goes again on the new pipe
    assert rep.recv() == b"q"
    rep.send(b"a")
    assert req.recv() == b"a"


def test_req_recv_of_a_request_with_no_pipe_fails_at_once(gsp_socket):
    # best_effort: a request sent with no pipe stays queued (mangos RetryLateConnect); with
    # fail_no_peers set since, its recv fails at once instead of waiting for a pipe.
    req = gsp_socket("req", best_effort=True, recv_timeout=10)
    req.send(b"q")
    req.fail_no_peers = True
    fails_fast(lambda: req.recv())


def test_a_reply_already_in_is_still_received_after_the_last_pipe_went(gsp_socket):
    rep = gsp_socket("rep", recv_timeout=5)
    req = gsp_socket("req", fail_no_peers=True, recv_timeout=5)
    connect(rep, req, inproc_url())
    req.send(b"q")
    rep.recv()
    rep.send(b"a")
    gevent.sleep(0.05)  # the reply is in
    req.pipes[0].close()
    gevent.sleep(0.05)
    assert req.recv() == b"a"


def _fill(sender: gsp.Socket, timeout: float | None = None) -> None:
    """Send with block=False (or a short timeout) until the peer's queues are full (it does not
    read): WouldBlock (or Timeout), never NoPeers."""
    for _ in range(100_000):
        try:
            if timeout is None:
                sender.send(b"x" * 1000, block=False)
            else:
                sender.send(b"x" * 1000, timeout=timeout)
        except (gsp.WouldBlock, gsp.Timeout):
            return
    raise AssertionError("the queues never filled")


@pytest.mark.parametrize("proto", ["pair", "push"])
def test_with_a_peer_that_does_not_read_block_false_is_would_block(gsp_socket, proto):
    s = gsp_socket(proto, fail_no_peers=True, send_buffer=1)
    p = gsp_socket(SENDERS[proto], recv_buffer=1)
    connect(p, s, inproc_url())
    _fill(s)  # it raised WouldBlock, not NoPeers: there is a peer
    assert not s.poll("send")


@pytest.mark.parametrize("proto", ["pair", "push"])
def test_a_send_waiting_for_room_fails_when_the_last_peer_goes(gsp_socket, spawn, proto):
    s = gsp_socket(proto, fail_no_peers=True, send_buffer=1, send_timeout=10)
    p = gsp_socket(SENDERS[proto], recv_buffer=1)
    connect(p, s, inproc_url())
    _fill(s, 0.05)  # full even for a sender that waits a little
    waiting = spawn(s.send, b"y")
    gevent.sleep(0.05)
    assert not waiting.ready()
    t = time.monotonic()
    p.close()
    waiting.join(5)
    assert isinstance(waiting.exception, gsp.NoPeers)
    assert time.monotonic() - t < 1


def test_polyamorous_pair1_fails_only_with_no_peer_at_all(gsp_socket):
    s = gsp_socket("pair1", polyamorous=True, fail_no_peers=True)
    fails_fast(lambda: s.send(b"x"))
    p1 = gsp_socket("pair1", polyamorous=True, recv_timeout=5)
    p2 = gsp_socket("pair1", polyamorous=True, recv_timeout=5)
    url = s.listen(inproc_url()).url
    p1.dial(url, fail_fast=True)
    p2.dial(url, fail_fast=True)
    gevent.sleep(0.05)
    gone = s.pipes[0]
    gone.close()
    gevent.sleep(0.05)
    s.send_msg(gsp.Message(b"to the gone one", pipe=gone))  # dropped, as without the option
    assert s.stats["dropped_no_peer"] == 1


def test_time_to_fail_fast(gsp_socket):
    """The figures in docs/webapp.md: ``python -m pytest -n 0 -s tests/core/test_fail_no_peers.py -k
    time_to_fail``. A send with no peer, and a REQ recv from the moment its only pipe closes."""
    n = 1000
    figures = {}
    for proto in ("push", "req"):
        s = gsp_socket(proto, fail_no_peers=True, send_timeout=10)
        t = time.perf_counter()
        for _ in range(n):
            try:
                s.send(b"x")
            except gsp.NoPeers:
                pass
        figures[proto] = (time.perf_counter() - t) / n
    rep = gsp_socket("rep", recv_timeout=5)
    req = gsp_socket("req", fail_no_peers=True, recv_timeout=10)
    connect(rep, req, TCP_URL)
    req.send(b"q")
    rep.recv()
    t = time.perf_counter()
    req.pipes[0].close()
    with pytest.raises(gsp.NoPeers):
        req.recv()
    died = time.perf_counter() - t
    assert max(figures.values()) < FAST / 10 and died < FAST
    print(f"send with no peer -> NoPeers: push {figures['push'] * 1e6:.1f} µs, "
          f"req {figures['req'] * 1e6:.1f} µs (mean of {n}, send_timeout=10); "
          f"req recv after its only pipe closed -> NoPeers in {died * 1e3:.2f} ms")


TCP_URL = "tcp://127.0.0.1:0"
