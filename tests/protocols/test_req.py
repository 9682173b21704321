"""req and its raw twin (xreq), one test per mangos category (req_test, xreq).

Names follow mangos (TestReqCancelReply → test_req_cancel_reply). Where gsp follows nng 1.9 rather
than mangos the docstring says so. What every protocol must do (identity, options, closing, raw
mode, pipe churn) is checked by the conformance kit's ProtocolSuite (TestReqProtocol here,
TestRepProtocol in test_backtrace.py, with what rep shares with respondent and req with surveyor);
the rest of this file is particular to req. rep and xrep are in test_rep.py.
"""

from __future__ import annotations

import time

import gevent
import pytest

import gsp
from gsp.message import JOIN_MAX
from gsp.testing import ProtocolSuite, connected, wait_for
from tests.support import close_wakes, connect, inproc_url, scaled, u32


class TestReqProtocol(ProtocolSuite):
    protocol, peer = "req", "rep"
    number, peer_number = 0x30, 0x31
    asks = True
    contexts = True
    send_blocks = True
    raw_header = u32(0x80000001)  # a request id
    options = {"resend_time": (60.0, [0, None, 0.5, 3600], [-1, "1", True])}

    def test_the_churn_check_drops_the_request_req_sends_again(self) -> None:
        """The kit's pipe-churn check may find, on its new peer, a request the churn left
        outstanding: req sends it again on a new pipe, before the check's own request. The
        check drops it, and the exchange then works."""
        this = self.open("req", recv_timeout=5, send_timeout=5)
        url = this.listen(self.url()).url
        first = self.open("rep", recv_timeout=5)
        connected(this, url, first)
        this.send(b"churn")
        assert first.recv() == b"churn"
        first.close()  # the request is still outstanding: no reply came
        wait_for(lambda: not this.pipes, what="the first pipe to go")
        peer = self.open("rep", recv_timeout=5, send_timeout=5)
        connected(this, url, peer)
        assert peer.recv() == b"churn"  # sent again on the new pipe
        self.exchange(this, peer, b" after the churn")


# -- req: identity, options, state ---------------------------------------------------------------
def test_req_cancel_disconnect(gsp_socket):
    """resend_time disabled: when the pipe carrying the request dies, recv fails (nng
    ECONNRESET) instead of resending a request that may not be idempotent."""
    req, rep = gsp_socket("req", recv_timeout=2, resend_time=0), gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    req.send(b"ping")
    assert rep.recv() == b"ping"
    rep.pipes[0].close()
    with pytest.raises(gsp.ConnectionBroken):
        req.recv()
    with pytest.raises(gsp.ProtocolStateError):
        req.recv()


def test_req_cancel_disconnect_before_recv(gsp_socket):
    req = gsp_socket("req", recv_timeout=2, resend_time=None)
    rep = gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    req.send(b"ping")
    assert rep.recv() == b"ping"
    rep.pipes[0].close()
    wait_for(lambda: not req.pipes)
    with pytest.raises(gsp.ConnectionBroken):
        req.recv()


def test_req_cancel_reply(gsp_socket):
    """A reply not picked up before the next request is discarded."""
    req, rep = gsp_socket("req", recv_timeout=2), gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    req.send(b"query1")
    assert rep.recv() == b"query1"
    rep.send(b"reply1")
    gevent.sleep(0.05)
    req.send(b"query2")
    assert rep.recv() == b"query2"
    rep.send(b"reply2")
    assert req.recv() == b"reply2"


def test_req_best_effort(gsp_socket):
    s = gsp_socket("req", send_timeout=0.02)
    s.listen("tcp://127.0.0.1:0")
    s.best_effort = True
    s.send(b"0123")  # queued for a peer that may come
    s.send(b"0123")
    s.best_effort = False
    for _ in range(2):
        with pytest.raises(gsp.Timeout):
            s.send(b"0123")


def test_req_retry(gsp_socket):
    req = gsp_socket("req", resend_time=0.05, recv_timeout=2)
    rep = gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    t0 = time.monotonic()
    req.send(b"query")
    assert rep.recv() == b"query"
    assert rep.recv() == b"query"  # the resend
    rep.send(b"reply")
    assert req.recv() == b"reply"
    assert time.monotonic() - t0 < scaled(1)
    rep.recv_timeout = 0.2
    with pytest.raises(gsp.Timeout):  # answered: no more resends
        rep.recv()


def test_req_retry_raw_rep_ignores_first_copy(gsp_socket):
    """resend_time proven against a raw rep that drops the first copy and answers the second."""
    req = gsp_socket("req", resend_time=0.1, recv_timeout=3)
    xrep = gsp_socket("rep", raw=True, recv_timeout=3)
    connect(xrep, req)
    t0 = time.monotonic()
    req.send(b"please")
    first = xrep.recv_msg()  # ignored
    second = xrep.recv_msg()
    assert second.header == first.header and second.body == b"please"
    assert time.monotonic() - t0 >= 0.09
    xrep.send_msg(gsp.Message(b"answer", second.header))
    assert req.recv() == b"answer"


def test_req_retry_fast(gsp_socket):
    """A very short resend_time: many copies go out, the one answered still matches."""
    req = gsp_socket("req", resend_time=0.005, recv_timeout=3)
    xrep = gsp_socket("rep", raw=True, recv_timeout=3)
    connect(xrep, req)
    req.send(b"q")
    copies = [xrep.recv_msg() for _ in range(5)]
    assert len({m.header for m in copies}) == 1  # a resend reuses the request id
    xrep.send_msg(gsp.Message(b"a", copies[-1].header))
    assert req.recv() == b"a"


def test_contexts_resend_each_on_its_own_time(gsp_socket):
    """One socket-wide resend alarm serves contexts with different resend_time: each request is
    sent again when its own time comes, not the others' (and an answered one never)."""
    req, xrep = gsp_socket("req", recv_timeout=3), gsp_socket("rep", raw=True, recv_timeout=3)
    connect(xrep, req)
    fast, slow, done = (req.open_context() for _ in range(3))
    fast.resend_time, slow.resend_time, done.resend_time = 0.1, 0.45, 0.1
    t0 = time.monotonic()
    for ctx, body in ((slow, b"slow"), (fast, b"fast"), (done, b"done")):
        ctx.send(body)
    seen: dict[bytes, list[float]] = {b"slow": [], b"fast": [], b"done": []}
    while len(seen[b"slow"]) < 2:  # until slow's first resend (recv_timeout bounds the wait)
        m = xrep.recv_msg()
        seen[m.body].append(time.monotonic() - t0)
        if m.body == b"done" and len(seen[b"done"]) == 1:
            xrep.send_msg(gsp.Message(b"ok", m.header))
    assert done.recv() == b"ok" and len(seen[b"done"]) == 1  # answered: never resent
    # fast was resent on its own 0.1 s, several times before slow's first resend, at 0.45 s
    assert len(seen[b"fast"]) >= 3 and seen[b"fast"][1] >= 0.09
    assert seen[b"slow"][1] >= 0.44
    for ctx in (fast, slow, done):
        ctx.close()


def test_req_retry_late_connect(gsp_socket):
    req = gsp_socket("req", best_effort=True, recv_timeout=3)
    rep = gsp_socket("rep", recv_timeout=3)
    req.send(b"hello")  # no peer yet: queued
    connect(rep, req)
    assert rep.recv() == b"hello"
    rep.send(b"world")
    assert req.recv() == b"world"


def test_req_retry_reconnect(gsp_socket):
    """REQ to a REP that dies mid-request gets its reply from a second REP at once (resend on
    pipe loss), long before resend_time."""
    req = gsp_socket("req", resend_time=10, recv_timeout=3)
    rep1, rep2 = gsp_socket("rep", recv_timeout=3), gsp_socket("rep", recv_timeout=3)
    connect(rep1, req)
    t0 = time.monotonic()
    req.send(b"ping")
    assert rep1.recv() == b"ping"
    connect(rep2, req)
    rep1.close()  # dies holding the request
    assert rep2.recv() == b"ping"
    rep2.send(b"pong")
    assert req.recv() == b"pong"
    assert time.monotonic() - t0 < scaled(1)


def test_req_ctx_close_send(gsp_socket, spawn):
    s = gsp_socket("req")
    c = s.open_context()
    gevent.spawn_later(0.02, c.close)
    with pytest.raises(gsp.Closed):
        c.send(b"")  # no peer: waits until the close


def test_req_ctx_close_recv(gsp_socket):
    req, rep = gsp_socket("req"), gsp_socket("rep")
    connect(rep, req)
    c = req.open_context()
    c.send(b"")
    c.recv_timeout = 2
    gevent.spawn_later(0.02, c.close)
    with pytest.raises(gsp.Closed):
        c.recv()


def test_req_send_no_peers(gsp_socket):
    """nng: with no peer a request waits up to send_timeout (mangos' FailNoPeers is not offered)."""
    s = gsp_socket("req", send_timeout=0.05)
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout):
        s.send(b"x")
    assert 0.04 <= time.monotonic() - t0 < scaled(1)
    with pytest.raises(gsp.ProtocolStateError):  # the timed-out request was withdrawn
        s.recv()


def test_req_send_no_peer_disconnect(gsp_socket, spawn):
    """The only peer leaves: a send waits (it does not fail), and completes when a peer comes."""
    req, rep = gsp_socket("req", send_timeout=3, recv_timeout=3), gsp_socket("rep", recv_timeout=3)
    connect(rep, req)
    rep.close()
    wait_for(lambda: not req.pipes)
    sender = spawn(req.send, b"late")
    gevent.sleep(0.05)
    assert not sender.ready()
    rep2 = gsp_socket("rep", recv_timeout=3)
    connect(rep2, req)
    sender.get(timeout=3)
    assert rep2.recv() == b"late"


def test_req_recv_no_peer(gsp_socket):
    """A queued request with no peer: recv waits out recv_timeout (nng), then the request ends."""
    s = gsp_socket("req", best_effort=True, recv_timeout=0.05)
    s.send(b"x")
    with pytest.raises(gsp.Timeout):
        s.recv()
    with pytest.raises(gsp.ProtocolStateError):
        s.recv()


def test_req_recv_no_peer_disconnect(gsp_socket, spawn):
    """recv keeps waiting when the peer leaves; the request is resent to the next peer."""
    req, rep = gsp_socket("req", recv_timeout=3), gsp_socket("rep", recv_timeout=3)
    connect(rep, req)
    req.send(b"q")
    assert rep.recv() == b"q"
    waiter = spawn(req.recv)
    rep.close()
    wait_for(lambda: not req.pipes)
    gevent.sleep(0.02)
    assert not waiter.ready()
    rep2 = gsp_socket("rep", recv_timeout=3)
    connect(rep2, req)
    assert rep2.recv() == b"q"
    rep2.send(b"a")
    assert waiter.get(timeout=3) == b"a"


def test_req_close_wakes_blocked_calls(gsp_socket, spawn):
    s = gsp_socket("req")  # no peer: sends wait for one
    c1, c2 = s.open_context(), s.open_context()
    c1.send_timeout = None
    s.best_effort = True
    c2.send(b"queued")
    s.best_effort = False
    close_wakes(s, [spawn(s.send, b"x"), spawn(c1.send, b"y"), spawn(c2.recv)])


def test_req_wire_header(gsp_socket):
    """The request id on the wire: u32 BE with the high bit set; a resend reuses it."""
    req, xrep = gsp_socket("req", recv_timeout=2), gsp_socket("rep", raw=True, recv_timeout=2)
    connect(xrep, req)
    req.send(b"a")
    m1 = xrep.recv_msg()
    req.send(b"b")
    m2 = xrep.recv_msg()
    pid = u32(xrep.pipes[0].id)
    for m in (m1, m2):
        assert len(m.header) == 8 and m.header[:4] == pid and m.header[4] & 0x80
    assert m1.header != m2.header


@pytest.mark.parametrize("size", [0, JOIN_MAX - 1, JOIN_MAX, JOIN_MAX + 1, 1 << 20])
def test_req_rep_bodies_either_side_of_the_join_limit(gsp_socket, size):
    """A request or reply up to message.JOIN_MAX is queued as one bytes (id or backtrace joined
    to the body), a bigger one as a Message: either way the peer gets exactly the body, the
    same id on a resend, and recv_msg still tells the pipe a reply came on."""
    req = gsp_socket("req", recv_timeout=5, resend_time=0.05, max_recv_size=0)
    xrep = gsp_socket("rep", raw=True, recv_timeout=5, max_recv_size=0)
    connect(xrep, req)
    body = bytes(range(256)) * (size // 256) + b"r" * (size % 256)
    req.send(body)
    first, second = xrep.recv_msg(), xrep.recv_msg()  # the request, then its resend
    assert first.body == second.body == body and first.header == second.header
    rep = gsp_socket("rep", recv_timeout=5, max_recv_size=0)
    connect(rep, req)
    xrep.close()
    assert rep.recv() == body  # resent to the pipe that is left
    rep.send(body[::-1])
    reply = req.recv_msg()
    assert reply.body == body[::-1] and reply.header == b"" and reply.pipe is req.pipes[0]


# -- raw req (xreq) --------------------------------------------------------------------------------
def test_xreq_headers_pass_through(gsp_socket):
    """Raw req: the header goes out as given; a reply's backtrace comes back as the header."""
    xreq, rep = gsp_socket("req", raw=True, recv_timeout=2), gsp_socket("rep", recv_timeout=2)
    connect(rep, xreq)
    hdr = u32(0x11) + u32(0x80000022)
    xreq.send_msg(gsp.Message(b"q", hdr))
    assert rep.recv() == b"q"
    rep.send(b"a")
    r = xreq.recv_msg()
    assert (r.header, r.body) == (hdr, b"a")


def test_xreq_best_effort(gsp_socket):
    s = gsp_socket("req", raw=True, send_timeout=0.01)
    s.listen("tcp://127.0.0.1:0")
    s.best_effort = True
    s.send(b"0123")  # no peer: dropped
    s.send(b"0123")
    s.best_effort = False
    with pytest.raises(gsp.Timeout):
        s.send(b"0123")


def test_xreq_recv_deadline(gsp_socket):
    with pytest.raises(gsp.Timeout):
        gsp_socket("req", raw=True, recv_timeout=0.01).recv()


def test_xreq_recv_no_header(gsp_socket):
    """A reply without a high-bit word is dropped."""
    xreq, xrep = gsp_socket("req", raw=True, recv_timeout=0.05), gsp_socket("rep", raw=True)
    connect(xrep, xreq)
    route = u32(xrep.pipes[0].id)
    for junk in (b"", b"\x00\x00\x00\x01", b"\x01"):
        xrep.send_msg(gsp.Message(junk, route))
    with pytest.raises(gsp.Timeout):
        xreq.recv()


def test_xreq_resize_recv_ok(gsp_socket, spawn):
    xreq, xrep = gsp_socket("req", raw=True, recv_timeout=2), gsp_socket("rep", raw=True)
    connect(xrep, xreq)
    g = spawn(xreq.recv_msg)
    gevent.sleep(0.02)
    xreq.recv_buffer = 1
    xrep.send_msg(gsp.Message(b"hi", u32(xrep.pipes[0].id) + u32(0x80000001)))
    assert g.get(timeout=2).body == b"hi"


def test_xreq_close_recv_and_send(gsp_socket):
    """Closing a pipe or the socket with messages queued both ways does not hang."""
    xreq = gsp_socket("req", raw=True, recv_buffer=1, send_buffer=2)
    xrep = gsp_socket("rep", raw=True)
    connect(xrep, xreq, inproc_url())
    for i in range(3):
        xrep.send_msg(gsp.Message(b"", u32(xrep.pipes[0].id) + u32(0x80000000 | i)))
        xreq.send(b"\x80\x01\x01\x01")
    gevent.sleep(0.02)
    xreq.pipes[0].close()
    t0 = time.monotonic()
    xreq.close()
    assert time.monotonic() - t0 < scaled(2)
