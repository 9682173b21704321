"""The two request/reply families share gsp.protocol.backtrace: rep and respondent are one state machine
with two protocol numbers, req and surveyor both stamp ids and route replies by them. Every check
here runs on both families; what is particular to one protocol stays in test_req.py, test_rep.py
and test_survey.py."""

from __future__ import annotations

import time
from typing import Any

import gevent
import pytest

import gsp
from gsp.testing import ProtocolSuite, wait_for
from tests.support import BAD_TTL, backlog_pair, connect, echo_forever, scaled, u32

# (responder, its asker, the most replies a peer that never reads may absorb before a reply
# waits: None where the exact figure depends on the queue sizes alone)
RESPONDERS = [("rep", "req", None), ("respondent", "surveyor", 60)]
IDS = ["rep", "respondent"]
RESPONDERS_OF = [("req", "rep"), ("surveyor", "respondent")]
#: What each asker needs so that a test's wait, not the protocol, decides when it gives up.
ASKER_OPTIONS = {"req": {"resend_time": None}, "surveyor": {"survey_time": 30}}


class _ResponderSuite(ProtocolSuite):
    """rep and respondent through the conformance kit: the same declarations but the names."""

    replies = True
    contexts = True
    send_blocks = False  # raw: a reply that cannot be sent at once is dropped
    options = {"ttl": (8, [1, 2, 3, 254, 255], BAD_TTL)}


class TestRepProtocol(_ResponderSuite):
    protocol, peer = "rep", "req"
    number, peer_number = 0x31, 0x30


class TestRespondentProtocol(_ResponderSuite):
    protocol, peer = "respondent", "surveyor"
    number, peer_number = 0x63, 0x62


def _ask(p: gsp.Socket, i: int) -> None:
    """A raw asker's request or survey with id ``i``."""
    p.send_msg(gsp.Message(b"x" * 100, u32(0x80000000 | i)))


def _roomy(gsp_socket: Any, responder: str, asker: str, room: int) -> tuple[gsp.Socket, gsp.Socket]:
    """A responder and an asker linked, with queues of ``room`` messages on both."""
    r = gsp_socket(responder, recv_buffer=room, send_buffer=room)
    a = gsp_socket(asker, recv_buffer=room, send_buffer=room)
    connect(r, a)
    return r, a


def _answer_until_a_reply_drops(p: gsp.Socket, s: Any, tries: int = 3000) -> int:
    """Answer ``p``'s requests on ``s`` (a socket or context) while ``p`` never reads, until a
    reply is dropped for a full pipe; how many went out before (fails if none is dropped)."""
    for i in range(tries):
        _ask(p, i)
        s.recv()
        t0 = time.monotonic()
        s.send(b"r" * 100)
        assert time.monotonic() - t0 < scaled(1)  # a reply never waits on its peer
        if s.socket.stats["dropped_queue_full"] if isinstance(s, gsp.Context) else \
                s.stats["dropped_queue_full"]:
            return i
    pytest.fail("no reply was dropped")


@pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=IDS)
def test_ttl_drop(gsp_socket, responder, asker, _, raw):
    """A request carrying more backtrace words than ttl is dropped; the pipe stays up.
    (The device-chain form of TTLDrop is in test_device.py.)"""
    r = gsp_socket(responder, raw=raw, ttl=3, recv_timeout=0.1)
    x = gsp_socket(asker, raw=True, recv_timeout=2)
    connect(r, x)
    hops = u32(1) + u32(2)
    x.send_msg(gsp.Message(b"4 words", hops + u32(7) + u32(0x80000001)))
    with pytest.raises(gsp.Timeout):
        r.recv()
    x.send_msg(gsp.Message(b"3 words", hops + u32(0x80000002)))
    m = r.recv_msg()
    assert m.body == b"3 words"
    r.send_msg(gsp.Message(b"back", m.header))
    back = x.recv_msg()
    assert (back.header, back.body) == (hops + u32(0x80000002), b"back")
    assert len(x.pipes) == 1


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=IDS)
def test_best_effort_send(gsp_socket, responder, asker, _):
    s, p = backlog_pair(gsp_socket, responder, asker, best_effort=True)
    t0 = time.monotonic()
    for i in range(100):
        _ask(p, i)
        s.recv()
        s.send(b"r" * 100)  # the peer never reads: replies beyond the queues are dropped
    assert time.monotonic() - t0 < scaled(2)


@pytest.mark.parametrize("responder,asker,most", RESPONDERS, ids=IDS)
def test_reply_to_a_full_pipe_is_dropped_and_counted(gsp_socket, responder, asker, most):
    """A peer that never reads its replies cannot park a responder: once that pipe's queue stays
    full a reply is dropped and counted (nng and mangos xrep drop too)."""
    s, p = backlog_pair(gsp_socket, responder, asker, send_timeout=5)
    i = _answer_until_a_reply_drops(p, s)
    assert i > 0 and (most is None or i < most)
    c = s.open_context()  # a context's replies drop the same way, into the socket's count
    before = s.stats["dropped_queue_full"]
    _ask(p, 5000)
    c.recv(timeout=2)
    c.send(b"r")
    assert s.stats["dropped_queue_full"] == before + 1
    with pytest.raises(gsp.ProtocolStateError):
        c.send(b"again")  # one reply per request, dropped or not
    c.close()


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=IDS)
def test_a_stalled_and_a_flooding_peer_do_not_stop_a_good_one(
        gsp_socket, spawn, responder, asker, _):
    """One raw asker never reads its replies, another floods requests; a well-behaved asker
    still gets its answers within a second each."""
    server = gsp_socket(responder, recv_timeout=5)
    url = server.listen("tcp://127.0.0.1:0").url
    stalled = gsp_socket(asker, raw=True, recv_buffer=1)
    flood = gsp_socket(asker, raw=True)
    good = gsp_socket(asker, **ASKER_OPTIONS[asker], recv_timeout=1)
    for peer in (stalled, flood, good):
        peer.dial(url, fail_fast=True)
    spawn(echo_forever, server)
    big = b"x" * 65536

    def flooding() -> None:
        for i in range(100_000):
            flood.send_msg(gsp.Message(b"f", u32(0x80000000 | i)))
            if i % 64 == 0:
                gevent.sleep(0)

    def stalling() -> None:  # 64 KiB requests whose replies it never reads
        for i in range(100_000):
            stalled.send_msg(gsp.Message(big, u32(0x80000000 | i)))
            gevent.sleep(0)  # let its writer go (a raw surveyor drops what finds no room)

    spawn(flooding)
    spawn(stalling)
    wait_for(lambda: server.stats["dropped_queue_full"] > 0 and flood.stats["messages_sent"] > 0,
             what="the flood under way and replies dropped for the stalled peer")
    for k in range(20):
        t0 = time.monotonic()
        good.send(b"good %d" % k)
        assert good.recv() == b"good %d" % k
        assert time.monotonic() - t0 < scaled(1)


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=IDS)
def test_a_request_that_waited_for_room_reaches_a_receiver_parked_meanwhile(
        gsp_socket, responder, asker, _):
    """A reader waiting for room in a full queue may get in only after the receiver took the
    last request and parked on the empty queue: the request is handed to it, not left queued
    until the receiver times out."""
    server = gsp_socket(responder, recv_buffer=1)
    url = server.listen("tcp://127.0.0.1:0").url
    peer = gsp_socket(asker, raw=True)
    peer.dial(url, fail_fast=True)
    for i in (1, 2):
        peer.send_msg(gsp.Message(b"%d" % i, u32(0x80000000 | i)))
    wait_for(lambda: server.stats["recv_queue"] == 1, what="the first request queued")
    gevent.sleep(0.05)  # the second is read, and its put waits for room
    assert server.recv(timeout=1) == b"1"  # takes it without yielding: the reader is let in
    server.send(b"ok")
    assert server.recv(timeout=1) == b"2"  # parks on the empty queue, then is handed it


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=IDS)
def test_multi_contexts(gsp_socket, spawn, responder, asker, _):
    """30 responder contexts and 30 asker contexts, 20 exchanges each, all at once."""
    count, repeat = 30, 20
    r, a = _roomy(gsp_socket, responder, asker, count * repeat)
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
        c1, c2 = r.open_context(), a.open_context()
        c1.recv_timeout = c1.send_timeout = c2.recv_timeout = c2.send_timeout = 15
        if asker == "surveyor":
            c2.survey_time = 30
        glets.append(spawn(pair, c1, c2, i))
    gevent.joinall(glets, timeout=30, raise_error=True)
    assert recv == [repeat] * count and sent == [repeat] * count


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=["req", "surveyor"])
def test_asker_recv_garbage(gsp_socket, responder, asker, _):
    """Replies that are garbage or answer another request are dropped; the socket carries on."""
    a = gsp_socket(asker, recv_timeout=0.05, **ASKER_OPTIONS[asker])
    x = gsp_socket(responder, raw=True, recv_timeout=2)
    connect(x, a)
    route = u32(x.pipes[0].id)
    for junk in (b"abc", b"", b"\x00\x01\x02\x03", u32(0x12345678) + b"\x80\x04\x03\x02",
                 b"\x01\x02\x03\x04"):
        a.send(b"")
        x.recv_msg()
        x.send_msg(gsp.Message(junk, route))
        with pytest.raises(gsp.Timeout):
            a.recv()
    a.recv_timeout = 2
    a.send(b"real")
    m = x.recv_msg()
    x.send_msg(gsp.Message(b"fine", m.header))
    assert a.recv() == b"fine"


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=["req", "surveyor"])
def test_asker_multi_contexts(gsp_socket, spawn, responder, asker, _):
    """30 asker contexts, 20 requests each, against one echoing responder."""
    count, repeat = 30, 20
    r, a = _roomy(gsp_socket, responder, asker, count * repeat)
    server = spawn(echo_forever, r)
    got = [0] * count

    def client(i: int) -> None:
        with a.open_context() as c:
            c.recv_timeout = 10
            if asker == "surveyor":
                c.survey_time = 30
            for _ in range(repeat):
                c.send(u32(i))
                assert c.recv() == u32(i)
                got[i] += 1

    gevent.joinall([spawn(client, i) for i in range(count)], timeout=30, raise_error=True)
    r.close()
    server.get(timeout=2)
    assert got == [repeat] * count


@pytest.mark.parametrize("responder,asker,_", RESPONDERS, ids=IDS)
def test_raw_replies_to_a_full_pipe_drop(gsp_socket, responder, asker, _):
    """A raw responder's reply to a full pipe is dropped and counted at once (nng and mangos
    xrep); closing the socket then returns at once."""
    xr, xa = backlog_pair(gsp_socket, responder, asker, raw=True, send_timeout=5)
    route = u32(xr.pipes[0].id)
    t0 = time.monotonic()
    for i in range(200):
        xr.send_msg(gsp.Message(b"r" * 100, route + u32(0x80000000 | i)))
    assert time.monotonic() - t0 < scaled(2) and xr.stats["dropped_queue_full"] > 0
    t0 = time.monotonic()
    xr.close()
    assert time.monotonic() - t0 < scaled(2)


@pytest.mark.parametrize("asker,options", [("req", {"recv_timeout": 2, "best_effort": True}),
                                           ("surveyor", {"survey_time": 5})],
                         ids=["req", "surveyor"])
def test_asker_cancel(gsp_socket, spawn, asker, options):
    """A new request or survey cancels a recv still waiting on the previous one (req: with no
    peer and best_effort, requests stay queued)."""
    s = gsp_socket(asker, **options)
    s.send(b"first")
    g = spawn(s.recv)
    gevent.sleep(0.05)
    s.send(b"second")
    with pytest.raises(gsp.ProtocolStateError, match="canceled"):
        g.get(timeout=2)


@pytest.mark.parametrize("asker,options,then", [
    ("req", {"recv_timeout": 0.02}, gsp.ProtocolStateError),
    ("surveyor", {"survey_time": 0.02}, gsp.Timeout)], ids=["req", "surveyor"])
def test_asker_recv_deadline(gsp_socket, asker, options, then):
    """A recv with no answer ends at its deadline with Timeout: REQ's recv_timeout (nng: a
    failed recv ends the request, so the next recv has nothing to wait for), the surveyor's
    survey_time (nng ETIMEDOUT; mangos says ErrProtoState), and so does every later recv until
    the next survey."""
    a = gsp_socket(asker, **options)
    connect(gsp_socket(dict(RESPONDERS_OF)[asker], recv_timeout=2), a)
    a.send(b"")
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout):
        a.recv()
    assert time.monotonic() - t0 < scaled(1)
    with pytest.raises(then):
        a.recv()
