"""Socket.drain: take no new work, finish the work in hand, flush, close."""

from __future__ import annotations

import time

import gevent
import pytest

import gsp
from gsp.testing import wait_for
from tests.support import ROOT, connect, scaled

TCP = "tcp://127.0.0.1:0"
WORK = 0.3  # seconds a handler takes


def serve(ctx: gsp.Context, done: list[bytes], work: float = WORK, prefix: bytes = b"re:",
          taken: list[bytes] | None = None) -> None:
    """A REP handler loop: answer each request (``prefix`` + it) after ``work`` seconds, until
    recv says Closed. A request goes in ``taken`` once received, in ``done`` once answered."""
    while True:
        try:
            q = ctx.recv()
        except gsp.Closed:
            return
        if taken is not None:
            taken.append(q)
        gevent.sleep(work)
        ctx.send(prefix + q)
        done.append(q)


def ask(ctx: gsp.Context, body: bytes, out: dict[bytes, object]) -> None:
    ctx.send(body)
    try:
        out[body] = ctx.recv()
    except gsp.GspError as exc:
        out[body] = exc



def rep_req(gsp_socket, timeout: float | None = None) -> tuple[gsp.Socket, gsp.Socket]:
    """A REP and a REQ connected over tcp; ``timeout`` is both recv timeouts (else the REQ's 10)."""
    rep = gsp_socket("rep") if timeout is None else gsp_socket("rep", recv_timeout=timeout)
    req = gsp_socket("req", recv_timeout=10 if timeout is None else timeout)
    connect(rep, req, TCP)
    return rep, req


def one_in_hand(rep: gsp.Socket, req: gsp.Socket, spawn, work: float) -> list[bytes]:
    """One request taken by a handler that answers after ``work`` seconds."""
    done: list[bytes] = []
    taken: list[bytes] = []
    spawn(serve, rep.open_context(), done, work, b"re:", taken)
    spawn(ask, req.open_context(), b"q", {})
    wait_for(lambda: taken, what="the handler to take the request")
    return done

def test_rep_drain_answers_every_request_its_contexts_took(gsp_socket, spawn):
    n = 8
    rep, req = rep_req(gsp_socket)
    done: list[bytes] = []
    taken: list[bytes] = []
    workers = [spawn(serve, rep.open_context(), done, WORK, b"re:", taken) for _ in range(n)]
    out: dict[bytes, object] = {}
    askers = [spawn(ask, req.open_context(), b"%d" % i, out) for i in range(n)]
    wait_for(lambda: len(taken) == n, what="every request in a handler's hands")
    t = time.monotonic()
    rep.drain(timeout=5)
    took = time.monotonic() - t
    assert rep.closed
    assert sorted(done) == sorted(b"%d" % i for i in range(n))
    gevent.joinall(askers, timeout=5)
    assert out == {b"%d" % i: b"re:%d" % i for i in range(n)}  # every reply reached its REQ
    assert took < WORK + scaled(0.5)  # as long as the handlers took, not the 5 s
    gevent.joinall(workers, timeout=5)
    assert all(w.ready() for w in workers)  # every handler's next recv raised Closed
    print(f"drain of {n} requests in hand, {WORK} s each: {took:.3f} s")


def test_a_request_not_taken_before_drain_is_resent_to_another_server(gsp_socket, spawn):
    """Server A is draining: the request it queued (not taken by a context) and one arriving
    after the drain began are not taken; when A closes, the REQ resends both at once on its
    pipe to server B. Nothing is lost."""
    a, b = gsp_socket("rep"), gsp_socket("rep")
    req = gsp_socket("req", recv_timeout=10)
    url_a = a.listen(TCP).url
    url_b = b.listen(TCP).url
    req.dial(url_a, fail_fast=True)
    took_a: list[bytes] = []
    took_b: list[bytes] = []
    in_hand: list[bytes] = []
    for _ in range(2):
        spawn(serve, a.open_context(), took_a, WORK, b"re:", in_hand)
    out: dict[bytes, object] = {}
    askers = [spawn(ask, req.open_context(), body, out) for body in (b"1", b"2", b"3")]
    wait_for(lambda: len(in_hand) == 2 and a.stats["recv_queue"] == 1,
             what="two requests in A's handlers, the third in A's queue")
    drain = spawn(a.drain, 5)
    gevent.sleep(0)  # the drain begins
    askers.append(spawn(ask, req.open_context(), b"4", out))  # reaches A, which is draining
    wait_for(lambda: a.stats["messages_received"] == 4, what="the fourth request to reach A")
    req.dial(url_b, fail_fast=True)  # B comes up: where the REQ resends when A's pipe closes
    for _ in range(2):
        spawn(serve, b.open_context(), took_b, 0)
    drain.join(5)
    assert drain.successful()
    gevent.joinall(askers, timeout=5)
    assert out == {q: b"re:" + q for q in (b"1", b"2", b"3", b"4")}
    assert sorted(took_a) == [b"1", b"2"]  # A answered what it had taken, nothing more
    assert sorted(took_b) == [b"3", b"4"]


def test_recv_open_context_and_endpoints_after_drain_raise_closed(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket, 5)
    ctx = rep.open_context()
    def park() -> BaseException | None:
        try:
            ctx.recv()
        except gsp.Closed as exc:
            return exc
        return None
    parked = spawn(park)  # waiting for a request when the drain begins
    req.send(b"q")
    assert rep.recv() == b"q"  # the socket's own state machine holds a request
    drain = spawn(rep.drain, 5)
    gevent.sleep(0)  # the drain begins
    assert not drain.ready()  # it waits for the reply owed
    parked.join(1)
    assert isinstance(parked.value, gsp.Closed)
    for call in (ctx.recv, rep.open_context, lambda: rep.listen(TCP), lambda: rep.dial(TCP)):
        with pytest.raises(gsp.Closed):
            call()
    assert not rep.listeners
    rep.send(b"a")  # the reply owed still goes out
    drain.join(5)
    assert drain.successful() and rep.closed
    assert req.recv() == b"a"


def test_a_handler_that_recvs_again_abandons_its_request(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket, 5)
    req.send(b"q")
    assert rep.recv() == b"q"
    drain = spawn(rep.drain, 5)
    gevent.sleep(0)  # the drain begins
    with pytest.raises(gsp.Closed):
        rep.recv()  # nng: a new recv abandons the request; here it also ends the drain
    drain.join(1)
    assert drain.successful()


def test_drain_timeout_closes_anyway_and_raises(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket)
    done: list[bytes] = []
    taken: list[bytes] = []
    spawn(serve, rep.open_context(), done, 5, b"re:", taken)  # far slower than the drain allows
    req_ctx = req.open_context()
    spawn(req_ctx.send, b"slow")
    wait_for(lambda: taken, what="the handler to take the request")
    t = time.monotonic()
    with pytest.raises(gsp.Timeout) as info:
        rep.drain(timeout=0.2)
    took = time.monotonic() - t
    assert rep.closed and info.value.timeout == 0.2
    assert "drain" in str(info.value)
    assert 0.15 < took < scaled(1.5)  # the timeout plus close()'s own work, not the handler's 5 s
    print(f"drain timeout 0.2 s: raised after {took:.3f} s")


def test_req_drain_lets_requests_out_get_their_replies(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket)
    done: list[bytes] = []
    for _ in range(3):
        spawn(serve, rep.open_context(), done, 0.2)
    ctxs = [req.open_context() for _ in range(3)]
    for i, c in enumerate(ctxs):
        c.send(b"%d" % i)
    out: dict[bytes, object] = {}
    receivers = [spawn(lambda c=c, i=i: out.__setitem__(i, c.recv())) for i, c in enumerate(ctxs)]
    drain = spawn(req.drain, 5)
    gevent.sleep(0)  # the drain begins
    for s in (req, ctxs[0]):
        with pytest.raises(gsp.Closed):  # no new request
            s.send(b"new")
    with pytest.raises(gsp.Closed):
        req.open_context()
    drain.join(5)
    assert drain.successful() and req.closed
    gevent.joinall(receivers, timeout=1)
    assert out == {i: b"re:%d" % i for i in range(3)}


def test_req_drain_waits_for_a_reply_to_be_received(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket, 5)
    req.send(b"q")
    rep.recv()
    rep.send(b"a")
    wait_for(lambda: req.stats["messages_received"] == 1, what="the reply to arrive")
    drain = spawn(req.drain, 5)
    gevent.sleep(0.02)  # a drain that did not wait would have closed the socket by now
    assert not drain.ready() and not req.closed
    assert req.recv() == b"a"
    drain.join(1)
    assert drain.successful()


def test_push_drain_flushes_what_is_queued(gsp_socket, spawn):
    n, pad = 400, b"." * 65536  # 26 MB: far more than the kernel's buffers hold
    pull = gsp_socket("pull", recv_buffer=1, recv_timeout=5)
    push = gsp_socket("push", send_buffer=n, send_buffer_size=0, send_timeout=5, linger=0)
    connect(pull, push, TCP)
    for i in range(n):
        push.send(b"%d" % i + pad)  # most stay queued: the puller does not read yet
    assert push.pipes[0].stats["send_queue"] > 0
    drain = spawn(push.drain, 10)
    gevent.sleep(0.02)  # a drain that did not wait would have closed the socket by now
    assert not drain.ready()  # waiting for the queue to empty (linger=0 does not cut it)
    with pytest.raises(gsp.Closed):
        push.send(b"late")
    t = time.monotonic()
    got = [pull.recv() for _ in range(n)]
    assert got == [b"%d" % i + pad for i in range(n)]
    drain.join(5)
    assert drain.successful() and push.closed
    print(f"push drain: {n} x 64 KiB flushed {time.monotonic() - t:.3f} s after the puller "
          "began to read")


@pytest.mark.parametrize("proto", ["push", "pub", "pair", "bus", "surveyor"])
def test_sends_after_drain_began_raise_closed(gsp_socket, spawn, proto):
    s = gsp_socket(proto)
    s.drain()
    assert s.closed
    with pytest.raises(gsp.Closed):
        s.send(b"x")


def test_surveyor_contexts_send_no_new_survey(gsp_socket, spawn):
    sur = gsp_socket("surveyor", survey_time=5)
    res = gsp_socket("respondent", recv_timeout=5)
    connect(res, sur, TCP)
    ctx = sur.open_context()
    ctx.send(b"s1")
    drain = spawn(sur.drain, 5)
    gevent.sleep(0)  # the drain began (it waits for nothing: it closes the socket soon)
    with pytest.raises(gsp.Closed):
        ctx.send(b"s2")
    drain.join(5)
    assert drain.successful()


def test_a_zero_timeout_fails_only_if_something_had_to_wait(gsp_socket):
    gsp_socket("push").drain(timeout=0)  # nothing in hand, nothing queued
    rep, req = rep_req(gsp_socket, 5)
    req.send(b"q")
    assert rep.recv() == b"q"
    with pytest.raises(gsp.Timeout):
        rep.drain(timeout=0)  # a reply is owed
    assert rep.closed


def test_drain_is_idempotent_and_a_no_op_on_a_closed_socket(gsp_socket, spawn):
    s = gsp_socket("push")
    s.drain()
    s.drain()  # drained: nothing to do
    t = gsp_socket("pull")
    t.close()
    t.drain()  # closed: nothing to do


def test_a_concurrent_drain_waits_for_the_same_end(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket)
    done = one_in_hand(rep, req, spawn, WORK)
    first = spawn(rep.drain, 5)
    gevent.sleep(0)  # the first drain begins
    t = time.monotonic()
    rep.drain()  # returns when the first one ends
    assert rep.closed and done == [b"q"]
    first.join(1)
    assert first.successful()
    assert time.monotonic() - t > WORK / 2


def test_a_concurrent_drain_with_less_time_closes_it(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket)
    one_in_hand(rep, req, spawn, 5)
    first = spawn(rep.drain, 10)
    gevent.sleep(0)  # the first drain begins
    with pytest.raises(gsp.Timeout):
        rep.drain(timeout=0.1)
    assert rep.closed
    first.join(2)
    assert first.ready()


def test_close_during_drain_ends_it(gsp_socket, spawn):
    rep, req = rep_req(gsp_socket)
    one_in_hand(rep, req, spawn, 5)
    drain = spawn(rep.drain)
    gevent.sleep(0)  # the drain begins
    rep.close()
    drain.join(2)
    assert drain.successful()


def test_drain_stops_dialers_but_keeps_their_pipes(gsp_socket, spawn):
    pull = gsp_socket("pull", recv_timeout=5)
    push = gsp_socket("push")
    url = pull.listen(TCP).url
    push.dial(url, fail_fast=True)
    assert push.dialers and push.pipes
    push.send(b"before")
    push.drain(5)
    assert pull.recv() == b"before"


BACKEND = r'''
import signal, sys
import gevent, gsp
from tests.core.test_drain import serve

name = sys.argv[1].encode()
rep = gsp.socket("rep", listen="tcp://127.0.0.1:0")
print(rep.listeners[0].url, flush=True)
taken, answered = [], []
workers = [gevent.spawn(serve, rep.open_context(), answered, 0.02, name + b":", taken)
           for _ in range(8)]
stop = gevent.event.Event()
gevent.signal_handler(signal.SIGTERM, stop.set)
stop.wait()
rep.drain(timeout=10)  # on SIGTERM: answer what the handlers took, then close
gevent.joinall(workers, timeout=5)
print("drained", len(taken), len(answered), flush=True)
'''


def test_sigterm_under_load_loses_no_request(spawn):
    """Two backend processes; one gets SIGTERM while 32 clients keep asking: it drains. Every
    request is answered (by the draining backend if its handler had taken it, else resent to the
    other), and the backend exits cleanly."""
    import signal
    import subprocess
    import sys

    from tests.support import stop_server

    root = str(ROOT)  # BACKEND imports serve
    procs = [subprocess.Popen([sys.executable, "-c", BACKEND, name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=root) for name in ("a", "b")]
    try:
        urls = [p.stdout.readline().strip() for p in procs]
        req = gsp.socket("req", recv_timeout=10, send_timeout=10)
        try:
            for url in urls:
                req.dial(url, fail_fast=True)
            answers: dict[bytes, bytes] = {}

            def client(i: int) -> None:
                ctx = req.open_context()
                for j in range(30):
                    q = b"%d.%d" % (i, j)
                    ctx.send(q)
                    answers[q] = ctx.recv()

            clients = [spawn(client, i) for i in range(32)]
            wait_for(lambda: len(answers) >= 32, what="the clients under way")  # under load
            assert 0 < len(answers) < 32 * 30
            procs[0].send_signal(signal.SIGTERM)
            gevent.joinall(clients, timeout=30)
            assert all(c.successful() for c in clients), [c.exception for c in clients]
            assert len(answers) == 32 * 30  # none lost, none failed
            assert all(a.endswith(b":" + q) for q, a in answers.items())
            by_a = sum(a.startswith(b"a:") for a in answers.values())
            assert 0 < by_a < len(answers)
            out, err = procs[0].communicate(timeout=10)  # the drained backend exits by itself
            assert procs[0].returncode == 0 and "drained" in out and "Traceback" not in err, err
            taken, answered = map(int, out.split()[-2:])
            assert taken == answered >= by_a  # it answered every request its handlers took
            print(f"SIGTERM under load: {len(answers)} requests, all answered, {by_a} by the "
                  f"draining backend ({taken} taken, {answered} answered), the rest by the other")
        finally:
            req.close()
    finally:
        for p in procs:
            if p.returncode is None:
                stop_server(p)


def test_the_default_drain_refuses_sends_by_class_and_keeps_what_the_protocol_can() -> None:
    """Protocol.drain's default gives the protocol a subclass whose sends refuse (no method set
    on the instance): the rest of the protocol, and what it says it can do, stay as they were."""
    from gsp.message import Message
    from gsp.protocol import Protocol

    class _Handle:
        protocol = "sink"
        options = {"best_effort": False}

        def watch(self, name: str, fn: object) -> None:
            pass

    class _Sink(Protocol):  # receives only
        def pipe_recv(self, pipe: object, data: bytes) -> None:
            pass

        def recv(self, timeout: float | None) -> Message:
            return Message(b"r")

    proto = _Sink(_Handle(), False)
    assert not proto.can("send")
    proto.drain(None)
    assert isinstance(proto, _Sink) and type(proto) is not _Sink
    for send in (lambda: proto.send(Message(b"x"), None), lambda: proto.send_body(b"x", None)):
        with pytest.raises(gsp.Closed, match="draining"):
            send()
    assert proto.recv(None).body == b"r" and proto.can("recv") and not proto.can("send")
    proto.drain(None)  # (a second drain keeps the class)
    assert type(proto).__mro__.count(_Sink) == 1
    other = _Sink(_Handle(), False)
    other.drain(None)
    assert type(other) is type(proto)  # one class per protocol class
