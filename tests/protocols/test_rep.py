"""rep and its raw twin (xrep), one test per mangos category (rep_test, xrep).

Names follow mangos, as in test_req.py. Where gsp follows nng 1.9 rather than mangos the
docstring says so. What every protocol must do (identity, options, closing, raw mode, pipe churn)
is checked by the conformance kit's ProtocolSuite (TestRepProtocol in test_backtrace.py, with what
rep shares with respondent); the rest of this file is particular to rep. req and xreq are in
test_req.py.
"""

from __future__ import annotations

import time

import gevent
import pytest

import gsp
from gsp.testing import wait_for
from tests.support import backlog_pair, connect, inproc_url, scaled, u32


# -- rep -----------------------------------------------------------------------------------------
def test_rep_send_state(gsp_socket):
    with pytest.raises(gsp.ProtocolStateError):
        gsp_socket("rep").send(b"")


def test_rep_send_state_after_reply(gsp_socket):
    req, rep = gsp_socket("req", recv_timeout=2), gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    req.send(b"q")
    rep.recv()
    rep.send(b"a")
    with pytest.raises(gsp.ProtocolStateError):  # one reply per request
        rep.send(b"again")
    assert req.recv() == b"a"


def _request(p: gsp.Socket, i: int) -> None:
    p.send_msg(gsp.Message(b"x" * 100, u32(0x80000000 | i)))


@pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
def test_rep_recv_junk(gsp_socket, raw):
    """Empty, short and id-less requests are dropped without closing the pipe."""
    rep = gsp_socket("rep", raw=raw, recv_timeout=0.05)
    xreq = gsp_socket("req", raw=True, recv_timeout=2)
    connect(rep, xreq)
    for junk in (b"", b"\x01\x02", b"\x00\x01", b"\x01\x02\x03\x04", b"\x00\x01\x02\x03",
                 b"\x00\x01\x02\x03\x80"):
        xreq.send_msg(gsp.Message(junk))
    with pytest.raises(gsp.Timeout):
        rep.recv()
    assert len(rep.pipes) == 1
    xreq.send_msg(gsp.Message(b"ok", u32(0x80000009)))
    rep.recv_timeout = 2
    assert rep.recv() == b"ok"


def test_rep_double_recv(gsp_socket, spawn):
    s = gsp_socket("rep", recv_timeout=1)
    first = spawn(s.recv)
    gevent.sleep(0.01)
    with pytest.raises(gsp.ProtocolStateError):
        s.recv()
    s.close()
    with pytest.raises(gsp.Closed):
        first.get(timeout=2)


def test_rep_closed_reply(gsp_socket):
    """The requester left: the reply is dropped quietly."""
    req, rep = gsp_socket("req"), gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    req.send(b"ping")
    assert rep.recv() == b"ping"
    req.close()
    wait_for(lambda: not rep.pipes)
    rep.send(b"nack")


def test_rep_pipe_recv_close_pipe(gsp_socket):
    req = gsp_socket("req", send_timeout=0.01)
    rep = gsp_socket("rep", recv_timeout=2, recv_buffer=1)
    connect(rep, req)
    req.send(b"")
    m = rep.recv_msg()
    ctxs = [req.open_context() for _ in range(10)]
    for c in ctxs:
        try:
            c.send(b"")
        except gsp.Timeout:
            break
    m.pipe.close()
    wait_for(lambda: not rep.pipes)


def test_rep_pipe_recv_close_socket(gsp_socket):
    req, rep = gsp_socket("req", send_timeout=0.01), gsp_socket("rep", recv_buffer=1)
    connect(rep, req)
    for c in [req.open_context() for _ in range(10)]:
        try:
            c.send(b"")
        except gsp.Timeout:
            break
    t0 = time.monotonic()
    rep.close()  # with readers blocked on a full queue
    assert time.monotonic() - t0 < scaled(2)


# -- raw rep (xrep) --------------------------------------------------------------------------------
def test_xrep_headers_pass_through(gsp_socket):
    """Raw rep: header = receiving pipe id + backtrace; send routes by the first word."""
    req, xrep = gsp_socket("req", recv_timeout=2), gsp_socket("rep", raw=True, recv_timeout=2)
    connect(xrep, req)
    req.send(b"body")
    m = xrep.recv_msg()
    assert m.header[:4] == u32(m.pipe.id) and len(m.header) == 8 and m.body == b"body"
    xrep.send_msg(gsp.Message(b"reply", m.header))
    assert req.recv() == b"reply"


def test_xrep_no_header(gsp_socket):
    """Nothing to route by (or an unknown pipe): dropped, not an error."""
    s = gsp_socket("rep", raw=True)
    s.send(b"")
    s.send_msg(gsp.Message(b"", b"\x01\x01\x01\x01\x80\x00\x00\x01"))


def test_xrep_recv_deadline(gsp_socket):
    s = gsp_socket("rep", raw=True, recv_timeout=0.01)
    with pytest.raises(gsp.Timeout):
        s.recv()


def test_xrep_send_best_effort(gsp_socket):
    s, p = backlog_pair(gsp_socket, "rep", "req", raw=True, send_timeout=5, best_effort=True)
    route = u32(s.pipes[0].id)
    t0 = time.monotonic()
    for i in range(200):
        s.send_msg(gsp.Message(b"r" * 100, route + u32(0x80000000 | i)))
    assert time.monotonic() - t0 < scaled(2)


def test_xrep_pipe_close_drops_silently(gsp_socket):
    """Replies to a full pipe drop at once (counted); once the pipe is gone they drop silently
    (gsp, like nng; mangos returns ErrClosed)."""
    s, p = backlog_pair(gsp_socket, "rep", "req", raw=True, send_timeout=5)
    pipe = s.pipes[0]
    route = u32(pipe.id)
    for i in range(50):
        s.send_msg(gsp.Message(b"r" * 100, route + u32(0x80000000 | i)))
    dropped = s.stats["dropped_queue_full"]
    assert dropped > 0
    pipe.close()
    s.send_msg(gsp.Message(b"late", route + u32(0x80000000)))
    assert s.stats["dropped_queue_full"] == dropped  # a gone pipe is not a full one


def test_xrep_recv_close_abort(gsp_socket):
    s = gsp_socket("rep", raw=True, recv_buffer=1)
    xreq = gsp_socket("req", raw=True)
    connect(s, xreq, inproc_url())
    for i in range(5):
        _request(xreq, i)
    gevent.sleep(0.02)
    s.pipes[0].close()
    s.close()


def test_xrep_resize_recv(gsp_socket, spawn):
    """Growing recv_buffer while a recv waits: the waiter moves to the new queue (needs the
    core's Protocol.set_option hook)."""
    s = gsp_socket("rep", raw=True, recv_buffer=1, recv_timeout=2)
    xreq = gsp_socket("req", raw=True)
    connect(s, xreq)
    g = spawn(s.recv)
    gevent.sleep(0.02)
    s.recv_buffer = 2
    _request(xreq, 1)
    assert g.get(timeout=2) == b"x" * 100


def test_xrep_resize_shrink_discards(gsp_socket):
    s = gsp_socket("rep", raw=True, recv_buffer=20, recv_timeout=0.05)
    xreq = gsp_socket("req", raw=True)
    connect(s, xreq)
    for i in range(10):
        xreq.send_msg(gsp.Message(bytes([i]), u32(0x80000000 | i)))
    wait_for(lambda: s.stats["recv_queue"] == 10)
    s.recv_buffer = 3
    got = []
    with pytest.raises(gsp.Timeout):
        while True:
            got.append(s.recv())
    assert got == [bytes([7]), bytes([8]), bytes([9])]  # the oldest went
