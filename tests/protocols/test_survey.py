"""surveyor/respondent and their raw twins, one test per mangos category (surveyor_test,
respondent_test, xsurveyor, xrespondent). What every protocol must do (identity, options with
respondent's TTL family, closing, raw mode, pipe churn) is checked by the conformance kit's
ProtocolSuite (TestSurveyorProtocol here, TestRespondentProtocol in test_backtrace.py); what rep
and respondent share is in test_backtrace.py; the rest is particular to surveyor and respondent."""

from __future__ import annotations

import time
from typing import Any

import gevent
import pytest

import gsp
from gsp.testing import ProtocolSuite, wait_for
from tests.support import connect, inproc_url, recv_until_timeout, scaled, u32


class TestSurveyorProtocol(ProtocolSuite):
    protocol, peer = "surveyor", "respondent"
    number, peer_number = 0x62, 0x63
    asks = True
    contexts = True
    send_blocks = False  # a survey never waits for respondents
    raw_header = u32(0x80000001)  # a survey id
    options = {"survey_time": (1.0, [0.01, 5, None], [-1, -0.5, "1"])}


def respondents(gsp_socket: Any, surveyor: gsp.Socket, n: int, **kw: Any) -> list[gsp.Socket]:
    url = surveyor.listen("tcp://127.0.0.1:0").url
    rs = [gsp_socket("respondent", dial=url, **kw) for _ in range(n)]
    wait_for(lambda: len(surveyor.pipes) == n and all(r.pipes for r in rs))
    return rs


# -- surveyor ------------------------------------------------------------------------------------
def test_surveyor_non_block(gsp_socket):
    """Sending never blocks: with no peer, and with a peer that never reads."""
    s = gsp_socket("surveyor", send_buffer=2)
    s.listen("tcp://127.0.0.1:0")
    t0 = time.monotonic()
    for _ in range(20):
        s.send(b"ABC")
    r = gsp_socket("respondent", recv_buffer=1)
    connect(s, r, inproc_url())
    for _ in range(200):
        s.send(b"ABC" * 100)
    assert time.monotonic() - t0 < scaled(1)


def test_surveyor_cancel_discard(gsp_socket):
    """Replies to a canceled survey (queued or still arriving) are discarded."""
    s = gsp_socket("surveyor", survey_time=1, recv_timeout=0.05)
    r1, r2 = respondents(gsp_socket, s, 2, recv_timeout=2)
    s.send(b"first")
    assert r1.recv() == b"first"
    r1.send(b"reply1")
    assert r2.recv() == b"first"
    gevent.sleep(0.02)
    s.send(b"second")
    r2.send(b"reply2")  # late: for the first survey
    with pytest.raises(gsp.Timeout):
        s.recv()


def test_surveyor_close_rx(gsp_socket, spawn):
    # survey_time outlasts any stall of a loaded machine: the close, not the expiry, ends recv
    s = gsp_socket("surveyor", survey_time=60)
    s.send(b"first")
    g = spawn(s.recv)
    gevent.sleep(0)  # g runs until it blocks in recv
    assert not g.dead
    s.close()
    with pytest.raises(gsp.Closed):
        g.get(timeout=2)


def test_surveyor_best_effort_send(gsp_socket):
    s = gsp_socket("surveyor", send_buffer=1, survey_time=1)
    connect(s, gsp_socket("respondent", recv_buffer=1), inproc_url())
    for i in range(100):
        s.send(bytes([i]))


def test_surveyor_rx_discard(gsp_socket, spawn):
    """More replies than recv_buffer: the surplus is dropped."""
    s = gsp_socket("surveyor", recv_buffer=2, survey_time=1, recv_timeout=0.1)
    rs = respondents(gsp_socket, s, 10, recv_timeout=2)
    s.send(b"a")
    gevent.joinall([spawn(lambda r=r: r.send_msg(r.recv_msg())) for r in rs],
                   timeout=3, raise_error=True)
    gevent.sleep(0.05)
    assert len(recv_until_timeout(s)) == 2


def test_surveyor_broadcast(gsp_socket, spawn):
    """Surveyor with 5 respondents collects 5 replies within survey_time, round after round; a
    late responder's reply is not delivered to the next survey."""
    s = gsp_socket("surveyor", survey_time=0.3)
    rs = respondents(gsp_socket, s, 5, recv_timeout=5)

    def answer(i: int, r: gsp.Socket, rounds: int) -> None:
        for _ in range(rounds):
            body = r.recv()
            r.send(u32(i) + body)

    servers = [spawn(answer, i, r, 3) for i, r in enumerate(rs)]
    for rnd in range(3):
        t0 = time.monotonic()
        s.send(bytes([rnd]))
        replies = recv_until_timeout(s)
        assert time.monotonic() - t0 < scaled(1.0)  # the survey ends at 0.3 s
        assert sorted(replies) == [u32(i) + bytes([rnd]) for i in range(5)]
    gevent.joinall(servers, timeout=2, raise_error=True)

    # A late responder: it answers survey A after A expired; survey B must not see that answer.
    s.send(b"A")
    for r in rs:
        assert r.recv() == b"A"
    with pytest.raises(gsp.Timeout):
        s.recv()  # A expires
    s.send(b"B")
    rs[0].send(b"late answer to A")
    assert rs[1].recv() == b"B"
    rs[1].send(b"answer to B")
    assert recv_until_timeout(s) == [b"answer to B"]


# -- respondent ----------------------------------------------------------------------------------
def test_respondent_close_socket_recv(gsp_socket):
    """Back-pressure reaches the surveyor's pipe; closing the respondent still returns."""
    r, s = gsp_socket("respondent", recv_buffer=1), gsp_socket("surveyor")
    connect(r, s, inproc_url())
    for _ in range(50):
        s.send(b"")
    t0 = time.monotonic()
    r.close()
    assert time.monotonic() - t0 < scaled(2)


def test_respondent_resize_recv(gsp_socket):
    """Shrinking recv_buffer with surveys queued keeps only what fits."""
    r = gsp_socket("respondent", recv_buffer=20, recv_timeout=0.05)
    s = gsp_socket("surveyor")
    connect(r, s)
    for i in range(20):
        s.send(bytes([i]))
    wait_for(lambda: r.stats["recv_queue"] == 20)
    r.recv_buffer = 1
    assert recv_until_timeout(r) == [bytes([19])]


def test_respondent_resize_recv_waiting(gsp_socket, spawn):
    """A recv waiting through a resize picks up the next survey from the new queue."""
    r = gsp_socket("respondent", recv_buffer=10, recv_timeout=5)
    s = gsp_socket("surveyor")
    connect(r, s)
    r.recv_buffer = 1
    g = spawn(r.recv)
    gevent.sleep(0.01)
    r.recv_buffer = 2
    gevent.sleep(0.01)
    s.send(b"after")
    assert g.get(timeout=3) == b"after"


def test_respondent_close_pipe_recv(gsp_socket):
    r, s = gsp_socket("respondent", recv_buffer=1, recv_timeout=2), gsp_socket("surveyor")
    connect(r, s)
    s.send(b"")
    m = r.recv_msg()
    for _ in range(10):
        s.send(b"")
    m.pipe.close()
    wait_for(lambda: not r.pipes)


def test_respondent_close_pipe_send(gsp_socket):
    """The surveyor's pipe is gone: the reply is dropped quietly."""
    r, s = gsp_socket("respondent", recv_timeout=2), gsp_socket("surveyor")
    connect(r, s)
    s.send(b"")
    m = r.recv_msg()
    m.pipe.close()
    wait_for(lambda: not r.pipes)
    r.send_msg(m)


def test_respondent_recv_expire(gsp_socket):
    with pytest.raises(gsp.Timeout):
        gsp_socket("respondent", recv_timeout=0.01).recv_msg()


def test_respondent_send_state(gsp_socket):
    with pytest.raises(gsp.ProtocolStateError):
        gsp_socket("respondent").send(b"")


# -- raw surveyor (xsurveyor) and raw respondent (xrespondent) ----------------------------------
def test_xsurveyor_headers_and_broadcast(gsp_socket):
    """Raw surveyor: header as given to every respondent, without blocking; replies arrive with
    the survey id as header; no survey_time applies (no expiry, no filtering)."""
    xs = gsp_socket("surveyor", raw=True, recv_timeout=2)
    rs = respondents(gsp_socket, xs, 3, recv_timeout=2)
    sid = u32(0x80000abc)
    xs.send_msg(gsp.Message(b"all?", sid))
    for i, r in enumerate(rs):
        assert r.recv() == b"all?"
        r.send(bytes([i]))
    got = sorted((m.header, m.body) for m in (xs.recv_msg() for _ in rs))
    assert got == [(sid, bytes([i])) for i in range(3)]


def test_xsurveyor_recv_garbage(gsp_socket):
    xs, xr = gsp_socket("surveyor", raw=True, recv_timeout=0.05), gsp_socket("respondent", raw=True)
    connect(xs, xr)
    route = u32(xr.pipes[0].id)
    for junk in (b"", b"\x00\x00\x00\x01"):
        xr.send_msg(gsp.Message(junk, route))
    with pytest.raises(gsp.Timeout):
        xs.recv()


def test_xrespondent_headers(gsp_socket):
    """Raw respondent: header = pipe id + backtrace; send routes by the first word."""
    s = gsp_socket("surveyor", recv_timeout=2)
    xr = gsp_socket("respondent", raw=True, recv_timeout=2)
    connect(s, xr)
    s.send(b"q")
    m = xr.recv_msg()
    assert m.header[:4] == u32(m.pipe.id) and len(m.header) == 8 and m.header[4] & 0x80
    xr.send_msg(gsp.Message(b"a", m.header))
    assert s.recv() == b"a"
    xr.send_msg(gsp.Message(b"nowhere", u32(1) + m.header[4:]))  # unknown pipe: dropped
    xr.send(b"no header")  # dropped


def test_xrespondent_recv_junk_and_ttl(gsp_socket):
    xr = gsp_socket("respondent", raw=True, ttl=2, recv_timeout=0.05)
    xs = gsp_socket("surveyor", raw=True)
    connect(xr, xs)
    for junk in (b"", b"\x00\x01", b"\x00\x01\x02\x03"):
        xs.send_msg(gsp.Message(junk))
    xs.send_msg(gsp.Message(b"3 words", u32(1) + u32(2) + u32(0x80000001)))
    with pytest.raises(gsp.Timeout):
        xr.recv()
    assert len(xr.pipes) == 1
