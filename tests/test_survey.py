"""surveyor/respondent and their raw twins, one test per mangos category (surveyor_test,
respondent_test, xsurveyor, xrespondent). What every protocol must do (identity, options with
respondent's TTL family, closing, raw mode, pipe churn) is checked by the conformance kit's
ProtocolSuite (TestSurveyorProtocol, TestRespondentProtocol); the rest is particular to surveyor
and respondent."""

from __future__ import annotations

import time
from typing import Any

import gevent
import pytest

import gsp
from gsp.testing import ProtocolSuite, wait_for
from tests.support import BAD_TTL, backlog_pair, connect, echo_forever, inproc_url, u32


class TestSurveyorProtocol(ProtocolSuite):
    protocol, peer = "surveyor", "respondent"
    number, peer_number = 0x62, 0x63
    asks = True
    contexts = True
    send_blocks = False  # a survey never waits for respondents
    raw_header = u32(0x80000001)  # a survey id
    options = {"survey_time": (1.0, [0.01, 5, None], [-1, -0.5, "1"])}


class TestRespondentProtocol(ProtocolSuite):
    protocol, peer = "respondent", "surveyor"
    number, peer_number = 0x63, 0x62
    replies = True
    contexts = True
    send_blocks = False  # raw: a reply that cannot be sent at once is dropped
    options = {"ttl": (8, [1, 2, 3, 254, 255], BAD_TTL)}


def respondents(mk: Any, surveyor: gsp.Socket, n: int, **kw: Any) -> list[gsp.Socket]:
    url = surveyor.listen("tcp://127.0.0.1:0").url
    rs = [mk("respondent", dial=url, **kw) for _ in range(n)]
    wait_for(lambda: len(surveyor.pipes) == n and all(r.pipes for r in rs))
    return rs


def collect(s: Any) -> list[bytes]:
    """Every reply until the survey (or recv_timeout) ends."""
    out = []
    while True:
        try:
            out.append(s.recv())
        except gsp.Timeout:
            return out


# -- surveyor ------------------------------------------------------------------------------------
def test_surveyor_non_block(mk):
    """Sending never blocks: with no peer, and with a peer that never reads."""
    s = mk("surveyor", send_buffer=2)
    s.listen("tcp://127.0.0.1:0")
    t0 = time.monotonic()
    for _ in range(20):
        s.send(b"ABC")
    r = mk("respondent", recv_buffer=1)
    connect(s, r, inproc_url())
    for _ in range(200):
        s.send(b"ABC" * 100)
    assert time.monotonic() - t0 < 1


def test_surveyor_cancel(mk, spawn):
    """A second survey cancels a recv still waiting on the first."""
    s = mk("surveyor", survey_time=1)
    s.send(b"first")
    g = spawn(s.recv)
    gevent.sleep(0.05)
    s.send(b"second")
    with pytest.raises(gsp.ProtocolStateError, match="canceled"):
        g.get(timeout=2)


def test_surveyor_cancel_discard(mk):
    """Replies to a canceled survey (queued or still arriving) are discarded."""
    s = mk("surveyor", survey_time=1, recv_timeout=0.05)
    r1, r2 = respondents(mk, s, 2, recv_timeout=2)
    s.send(b"first")
    assert r1.recv() == b"first"
    r1.send(b"reply1")
    assert r2.recv() == b"first"
    gevent.sleep(0.02)
    s.send(b"second")
    r2.send(b"reply2")  # late: for the first survey
    with pytest.raises(gsp.Timeout):
        s.recv()


def test_surveyor_close_rx(mk, spawn):
    s = mk("surveyor", survey_time=1)
    s.send(b"first")
    g = spawn(s.recv)
    gevent.sleep(0.05)
    s.close()
    with pytest.raises(gsp.Closed):
        g.get(timeout=2)


def test_survey_expire(mk):
    """A recv waiting when the survey ends raises Timeout (nng ETIMEDOUT; mangos says
    ErrProtoState), and so does every later recv until the next survey."""
    s = mk("surveyor", survey_time=0.02)
    s.send(b"first")
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout):
        s.recv()
    assert time.monotonic() - t0 < 1
    with pytest.raises(gsp.Timeout):
        s.recv()


def test_surveyor_best_effort_send(mk):
    s = mk("surveyor", send_buffer=1, survey_time=1)
    connect(s, mk("respondent", recv_buffer=1), inproc_url())
    for i in range(100):
        s.send(bytes([i]))


def test_surveyor_rx_discard(mk, spawn):
    """More replies than recv_buffer: the surplus is dropped."""
    s = mk("surveyor", recv_buffer=2, survey_time=1, recv_timeout=0.1)
    rs = respondents(mk, s, 10, recv_timeout=2)
    s.send(b"a")
    gevent.joinall([spawn(lambda r=r: r.send_msg(r.recv_msg())) for r in rs],
                   timeout=3, raise_error=True)
    gevent.sleep(0.05)
    assert len(collect(s)) == 2


def test_surveyor_broadcast(mk, spawn):
    """Surveyor with 5 respondents collects 5 replies within survey_time, round after round; a
    late responder's reply is not delivered to the next survey."""
    s = mk("surveyor", survey_time=0.3)
    rs = respondents(mk, s, 5, recv_timeout=5)

    def answer(i: int, r: gsp.Socket, rounds: int) -> None:
        for _ in range(rounds):
            body = r.recv()
            r.send(u32(i) + body)

    servers = [spawn(answer, i, r, 3) for i, r in enumerate(rs)]
    for rnd in range(3):
        t0 = time.monotonic()
        s.send(bytes([rnd]))
        replies = collect(s)
        assert time.monotonic() - t0 < 1.0  # the survey ends at 0.3 s
        assert sorted(replies) == [u32(i) + bytes([rnd]) for i in range(5)]
    gevent.joinall(servers, timeout=2, raise_error=True)

    # A late responder: it answers survey A after A expired; survey B must not see that answer.
    s.send(b"A")
    for r in rs:
        assert r.recv() == b"A"
    gevent.sleep(0.4)  # A expires
    s.send(b"B")
    rs[0].send(b"late answer to A")
    assert rs[1].recv() == b"B"
    rs[1].send(b"answer to B")
    assert collect(s) == [b"answer to B"]


def test_surveyor_context_closed(mk):
    s = mk("surveyor")
    c = s.open_context()
    c.close()
    c.close()
    with pytest.raises(gsp.Closed):
        c.send(b"")
    c = s.open_context()
    s.close()
    assert c.closed
    with pytest.raises(gsp.Closed):
        s.open_context()


def test_surveyor_context_close_abort(mk, spawn):
    s = mk("surveyor")
    c = s.open_context()
    c.survey_time = 5
    c.send(b"q")
    g = spawn(c.recv)
    gevent.sleep(0.02)
    c.close()
    with pytest.raises(gsp.Closed):
        g.get(timeout=2)


def test_surveyor_multi_contexts(mk, spawn):
    count, repeat = 30, 20
    s = mk("surveyor", recv_buffer=count * repeat, send_buffer=count * repeat)
    r = mk("respondent", recv_buffer=count * repeat, send_buffer=count * repeat)
    connect(r, s)
    server = spawn(echo_forever, r)
    got = [0] * count

    def client(i: int) -> None:
        with s.open_context() as c:
            c.recv_timeout = 10
            c.survey_time = 30
            for _ in range(repeat):
                c.send(u32(i))
                assert c.recv() == u32(i)
                got[i] += 1

    gevent.joinall([spawn(client, i) for i in range(count)], timeout=30, raise_error=True)
    r.close()
    server.get(timeout=2)
    assert got == [repeat] * count


def test_surveyor_recv_garbage(mk):
    s = mk("surveyor", recv_timeout=0.05, survey_time=2)
    x = mk("respondent", raw=True, recv_timeout=2)
    connect(s, x)
    route = u32(x.pipes[0].id)
    for junk in (b"abc", b"", b"\x00\x01\x02\x03", b"\x01\x02\x03\x04"):
        s.send(b"")
        x.recv_msg()
        x.send_msg(gsp.Message(junk, route))
        with pytest.raises(gsp.Timeout):
            s.recv()
    s.send(b"")
    m = x.recv_msg()
    x.send_msg(gsp.Message(b"fine", m.header))
    s.recv_timeout = 2
    assert s.recv() == b"fine"


# -- respondent ----------------------------------------------------------------------------------
def test_respondent_ttl_drop(mk):
    """TTLDrop for respondent (the rest of the TTL family: test_reqrep.py test_rep_ttl_*)."""
    r = mk("respondent", ttl=2, recv_timeout=0.1)
    xs = mk("surveyor", raw=True, recv_timeout=2)
    connect(r, xs)
    xs.send_msg(gsp.Message(b"3 words", u32(1) + u32(2) + u32(0x80000001)))
    with pytest.raises(gsp.Timeout):
        r.recv()
    xs.send_msg(gsp.Message(b"2 words", u32(1) + u32(0x80000002)))
    assert r.recv() == b"2 words"
    r.send(b"back")
    m = xs.recv_msg()
    assert (m.header, m.body) == (u32(1) + u32(0x80000002), b"back")


def test_respondent_close_socket_recv(mk):
    """Back-pressure reaches the surveyor's pipe; closing the respondent still returns."""
    r, s = mk("respondent", recv_buffer=1), mk("surveyor")
    connect(r, s, inproc_url())
    for _ in range(50):
        s.send(b"")
    t0 = time.monotonic()
    r.close()
    assert time.monotonic() - t0 < 2


def test_respondent_resize_recv(mk):
    """Shrinking recv_buffer with surveys queued keeps only what fits."""
    r = mk("respondent", recv_buffer=20, recv_timeout=0.05)
    s = mk("surveyor")
    connect(r, s)
    for i in range(20):
        s.send(bytes([i]))
    wait_for(lambda: len(r._proto._recvq) == 20)
    r.recv_buffer = 1
    assert collect(r) == [bytes([19])]


def test_respondent_resize_recv_waiting(mk, spawn):
    """A recv waiting through a resize picks up the next survey from the new queue."""
    r = mk("respondent", recv_buffer=10, recv_timeout=5)
    s = mk("surveyor")
    connect(r, s)
    r.recv_buffer = 1
    g = spawn(r.recv)
    gevent.sleep(0.01)
    r.recv_buffer = 2
    gevent.sleep(0.01)
    s.send(b"after")
    assert g.get(timeout=3) == b"after"


def test_respondent_close_pipe_recv(mk):
    r, s = mk("respondent", recv_buffer=1, recv_timeout=2), mk("surveyor")
    connect(r, s)
    s.send(b"")
    m = r.recv_msg()
    for _ in range(10):
        s.send(b"")
    m.pipe.close()
    wait_for(lambda: not r.pipes)


def test_respondent_close_pipe_send(mk):
    """The surveyor's pipe is gone: the reply is dropped quietly."""
    r, s = mk("respondent", recv_timeout=2), mk("surveyor")
    connect(r, s)
    s.send(b"")
    m = r.recv_msg()
    m.pipe.close()
    wait_for(lambda: not r.pipes)
    r.send_msg(m)


def test_respondent_recv_expire(mk):
    with pytest.raises(gsp.Timeout):
        mk("respondent", recv_timeout=0.01).recv_msg()


def test_respondent_send_state(mk):
    with pytest.raises(gsp.ProtocolStateError):
        mk("respondent").send(b"")


def test_respondent_best_effort_send(mk):
    s, p = backlog_pair(mk, "respondent", "surveyor", best_effort=True)
    t0 = time.monotonic()
    for i in range(100):
        p.send_msg(gsp.Message(b"x" * 100, u32(0x80000000 | i)))
        s.recv()
        s.send(b"r" * 100)
    assert time.monotonic() - t0 < 2


def test_respondent_send_back_pressure(mk):
    s, p = backlog_pair(mk, "respondent", "surveyor", send_timeout=0.01)
    for i in range(100):
        p.send_msg(gsp.Message(b"x" * 100, u32(0x80000000 | i)))
        s.recv()
        try:
            s.send(b"r" * 100)
        except gsp.Timeout:
            break
    else:
        pytest.fail("no back-pressure")
    assert 0 < i < 60


def test_respondent_close_context_send(mk):
    s, p = backlog_pair(mk, "respondent", "surveyor")
    c = s.open_context()
    c.send_timeout, c.recv_timeout = 0.01, 2
    for i in range(100):
        p.send_msg(gsp.Message(b"x" * 100, u32(0x80000000 | i)))
        c.recv()
        try:
            c.send(b"r" * 100)
        except gsp.Timeout:
            break
    else:
        pytest.fail("no back-pressure")
    p.send_msg(gsp.Message(b"x", u32(0x80001000)))
    c.recv()
    c.send_timeout = 60
    gevent.spawn_later(0.02, c.close)
    with pytest.raises(gsp.Closed):
        c.send(b"r")


def test_respondent_context_closed(mk):
    s = mk("respondent")
    c = s.open_context()
    c.close()
    with pytest.raises(gsp.Closed):
        c.recv()
    c = s.open_context()
    s.close()
    assert c.closed
    with pytest.raises(gsp.Closed):
        s.open_context()


def test_respondent_multi_contexts(mk, spawn):
    count, repeat = 30, 20
    r = mk("respondent", recv_buffer=count * repeat, send_buffer=count * repeat)
    s = mk("surveyor", recv_buffer=count * repeat, send_buffer=count * repeat)
    connect(s, r)
    recv, sent = [0] * count, [0] * count

    def pair(c1: Any, c2: Any, i: int) -> None:
        for _ in range(repeat):
            c2.send(u32(i))
            recv[int.from_bytes(c1.recv(), "big")] += 1
            c1.send(b"answer")
            assert c2.recv() == b"answer"
            sent[i] += 1

    glets = []
    for i in range(count):
        c1, c2 = r.open_context(), s.open_context()
        c1.recv_timeout = c1.send_timeout = c2.recv_timeout = 15
        c2.survey_time = 30
        glets.append(spawn(pair, c1, c2, i))
    gevent.joinall(glets, timeout=30, raise_error=True)
    assert recv == [repeat] * count and sent == [repeat] * count


# -- raw surveyor (xsurveyor) and raw respondent (xrespondent) ----------------------------------
def test_xsurveyor_headers_and_broadcast(mk):
    """Raw surveyor: header as given to every respondent, without blocking; replies arrive with
    the survey id as header; no survey_time applies (no expiry, no filtering)."""
    xs = mk("surveyor", raw=True, recv_timeout=2)
    rs = respondents(mk, xs, 3, recv_timeout=2)
    sid = u32(0x80000abc)
    xs.send_msg(gsp.Message(b"all?", sid))
    for i, r in enumerate(rs):
        assert r.recv() == b"all?"
        r.send(bytes([i]))
    got = sorted((m.header, m.body) for m in (xs.recv_msg() for _ in rs))
    assert got == [(sid, bytes([i])) for i in range(3)]


def test_xsurveyor_recv_garbage(mk):
    xs, xr = mk("surveyor", raw=True, recv_timeout=0.05), mk("respondent", raw=True)
    connect(xs, xr)
    route = u32(xr.pipes[0].id)
    for junk in (b"", b"\x00\x00\x00\x01"):
        xr.send_msg(gsp.Message(junk, route))
    with pytest.raises(gsp.Timeout):
        xs.recv()


def test_xrespondent_headers(mk):
    """Raw respondent: header = pipe id + backtrace; send routes by the first word."""
    s, xr = mk("surveyor", recv_timeout=2), mk("respondent", raw=True, recv_timeout=2)
    connect(s, xr)
    s.send(b"q")
    m = xr.recv_msg()
    assert m.header[:4] == u32(m.pipe.id) and len(m.header) == 8 and m.header[4] & 0x80
    xr.send_msg(gsp.Message(b"a", m.header))
    assert s.recv() == b"a"
    xr.send_msg(gsp.Message(b"nowhere", u32(1) + m.header[4:]))  # unknown pipe: dropped
    xr.send(b"no header")  # dropped


def test_xrespondent_recv_junk_and_ttl(mk):
    xr = mk("respondent", raw=True, ttl=2, recv_timeout=0.05)
    xs = mk("surveyor", raw=True)
    connect(xr, xs)
    for junk in (b"", b"\x00\x01", b"\x00\x01\x02\x03"):
        xs.send_msg(gsp.Message(junk))
    xs.send_msg(gsp.Message(b"3 words", u32(1) + u32(2) + u32(0x80000001)))
    with pytest.raises(gsp.Timeout):
        xr.recv()
    assert len(xr.pipes) == 1


def test_xrespondent_back_pressure_and_close(mk):
    xr, xs = backlog_pair(mk, "respondent", "surveyor", raw=True, send_timeout=0.01)
    route = u32(xr.pipes[0].id)
    for i in range(200):
        try:
            xr.send_msg(gsp.Message(b"r" * 100, route + u32(0x80000000 | i)))
        except gsp.Timeout:
            break
    else:
        pytest.fail("no back-pressure")
    t0 = time.monotonic()
    xr.close()
    assert time.monotonic() - t0 < 2
