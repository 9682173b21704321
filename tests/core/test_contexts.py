"""Contexts: independent state machines on one socket (req, rep, surveyor, respondent)."""

from __future__ import annotations

from typing import Any

import gevent
import gevent.event
import pytest

import gsp
from gsp.message import Message
from gsp.protocol import ContextHost, Protocol, ProtocolContext, ProtocolSpec
from gsp.testing import wait_for
from tests.support import close_wakes, connect, u32

COOKED = ["req", "rep", "surveyor", "respondent"]


def test_rep_16_contexts_serve_slow_requests_concurrently(gsp_socket, spawn):
    """REP with 16 contexts on 16 greenlets holds 16 slow requests at once: each handler's work
    ends only when all 16 are in hand, which requests served one at a time never are."""
    rep, req = gsp_socket("rep"), gsp_socket("req")
    connect(rep, req)
    in_hand: list[bytes] = []
    release = gevent.event.Event()

    def worker(ctx: gsp.Context) -> None:
        try:
            while True:
                body = ctx.recv()
                in_hand.append(body)
                release.wait()  # slow work
                ctx.send(b"done " + body)
        except gsp.Closed:
            pass

    workers = [spawn(worker, rep.open_context()) for _ in range(16)]

    def client(i: int) -> bytes:
        with req.open_context() as c:
            c.recv_timeout = 5
            c.send(u32(i))
            return c.recv()

    clients = [spawn(client, i) for i in range(16)]
    wait_for(lambda: len(in_hand) == 16, what="16 requests in the handlers' hands at once")
    release.set()
    gevent.joinall(clients, timeout=5, raise_error=True)
    assert sorted(g.value for g in clients) == sorted(b"done " + u32(i) for i in range(16))
    rep.close()
    gevent.joinall(workers, timeout=2, raise_error=True)  # socket close ended every recv


@pytest.mark.parametrize("proto", COOKED)
def test_context_timeouts_default_to_socket(gsp_socket, proto):
    s = gsp_socket(proto, recv_timeout=0.25, send_timeout=0.5)
    c = s.open_context()
    assert (c.recv_timeout, c.send_timeout) == (0.25, 0.5)
    c.recv_timeout = None
    c.send_timeout = 2
    assert (s.recv_timeout, s.send_timeout) == (0.25, 0.5)  # the socket keeps its own
    for bad in (-1, "1"):
        with pytest.raises(gsp.BadOption):
            c.recv_timeout = bad
        with pytest.raises(gsp.BadOption):
            c.send_timeout = bad
    assert c.socket is s and isinstance(c, gsp.Context)


@pytest.mark.parametrize("proto", COOKED)
def test_socket_close_wakes_blocked_context_calls(gsp_socket, spawn, proto):
    s = gsp_socket(proto)
    ctxs = [s.open_context() for _ in range(3)]
    if proto == "req":
        blocked = [spawn(c.send, b"q") for c in ctxs]  # no peer: a request waits for one
    else:
        if proto == "surveyor":
            for c in ctxs:
                c.survey_time = 5
                c.send(b"survey")
        blocked = [spawn(c.recv) for c in ctxs]
    close_wakes(s, blocked)
    assert all(c.closed for c in ctxs)


def test_contexts_are_independent_state_machines(gsp_socket):
    """Each REQ context has its own outstanding request; each REP context its own reply route."""
    req, rep = gsp_socket("req", recv_timeout=2), gsp_socket("rep", recv_timeout=2)
    connect(rep, req)
    a, b = req.open_context(), req.open_context()
    for c in (a, b):
        c.recv_timeout = 2
    ra, rb = rep.open_context(), rep.open_context()
    for c in (ra, rb):
        c.recv_timeout = 2
    a.send(b"to-a")
    b.send(b"to-b")
    with pytest.raises(gsp.ProtocolStateError):
        req.recv()  # the socket's own state machine has no request
    first, second = ra.recv(), rb.recv()
    rb.send(b"re:" + second)  # answer in the opposite order
    ra.send(b"re:" + first)
    assert a.recv() == b"re:to-a" and b.recv() == b"re:to-b"
    with pytest.raises(gsp.ProtocolStateError):
        ra.send(b"twice")


def test_surveyor_contexts_collect_only_their_own_replies(gsp_socket, spawn):
    s, r = gsp_socket("surveyor"), gsp_socket("respondent", recv_timeout=2)
    connect(s, r)
    a, b = s.open_context(), s.open_context()
    for c in (a, b):
        c.survey_time = 0.3
    a.send(b"A")
    b.send(b"B")
    for _ in range(2):
        body = r.recv()
        r.send(body.lower())
    assert a.recv() == b"a" and b.recv() == b"b"
    with pytest.raises(gsp.Timeout):
        a.recv()  # until a's survey expires


def test_context_survey_time_and_resend_time_per_context(gsp_socket):
    s = gsp_socket("surveyor", survey_time=2)
    c = s.open_context()
    assert c.survey_time == 2
    c.survey_time = 0.5
    assert s.survey_time == 2
    with pytest.raises(gsp.BadOption):
        c.survey_time = -1
    q = gsp_socket("req", resend_time=7)
    qc = q.open_context()
    assert qc.resend_time == 7
    qc.resend_time = None
    assert q.resend_time == 7


def _parked_rep(gsp_socket, spawn, n: int) -> tuple[gsp.Socket, gsp.Socket, list[gsp.Context],
                                             list[gevent.Greenlet]]:
    """A rep with ``n`` contexts, each with a greenlet parked in ``recv`` (oldest first)."""
    rep, req = gsp_socket("rep"), gsp_socket("req", recv_timeout=5)
    connect(rep, req)
    ctxs = [rep.open_context() for _ in range(n)]
    greenlets = []
    for c in ctxs:
        greenlets.append(spawn(c.recv, 5))
        gevent.sleep(0)  # parked before the next one
    return rep, req, ctxs, greenlets


def deliver_request(rep: gsp.Socket, request_id: int) -> None:
    """Hand REP's protocol a request ``b"q"`` from its pipe, as the pipe's reader does, within
    the caller's turn of the loop (white box: the one way to make the race below)."""
    pipe = rep.pipes[0]
    rep._proto._deliver(b"q", u32(pipe.id) + u32(request_id), pipe)


def test_rep_request_handed_to_a_receiver_killed_before_it_ran_goes_to_the_next(gsp_socket, spawn):
    """A parked receiver is handed the request directly; interrupted before it could return it,
    it passes the request on to the next parked receiver instead of losing it."""
    rep, req, _, (first, second) = _parked_rep(gsp_socket, spawn, 2)

    def deliver_then_interrupt() -> None:  # in the hub: the first receiver cannot run between
        deliver_request(rep, 0x80000001)
        first.throw(gevent.GreenletExit)

    gevent.get_hub().loop.run_callback(deliver_then_interrupt)
    assert second.get(timeout=5) == b"q"
    assert first.dead and isinstance(first.value, gevent.GreenletExit)


def test_rep_request_handed_to_a_receiver_killed_alone_is_queued(gsp_socket, spawn):
    rep, req, _, (only,) = _parked_rep(gsp_socket, spawn, 1)

    def deliver_then_interrupt() -> None:
        deliver_request(rep, 0x80000002)
        only.throw(gevent.GreenletExit)

    gevent.get_hub().loop.run_callback(deliver_then_interrupt)
    only.join(timeout=5)
    assert rep.poll("recv")  # queued, not lost
    assert rep.stats["recv_queue"] == 1  # and counted: its backtrace and body
    assert rep.stats["recv_queue_bytes"] == 8 + 1
    assert rep.recv(timeout=5) == b"q"
    assert rep.stats["recv_queue_bytes"] == 0


def test_rep_closed_context_never_takes_a_request(gsp_socket, spawn):
    """A context closed while parked in recv fails with Closed; the next request goes to a
    receiver still open."""
    rep, req, (c1, _), (first, second) = _parked_rep(gsp_socket, spawn, 2)
    c1.close()
    req.send(b"hello")
    assert second.get(timeout=5) == b"hello"
    with pytest.raises(gsp.Closed, match="context closed"):
        first.get(timeout=5)


def test_rep_receiver_timing_out_leaves_the_request_to_others(gsp_socket, spawn):
    rep, req = gsp_socket("rep"), gsp_socket("req", recv_timeout=5)
    connect(rep, req)
    ctx = rep.open_context()
    with pytest.raises(gsp.Timeout):
        ctx.recv(timeout=0.05)  # parked, then gone: no longer handed anything
    req.send(b"later")
    assert rep.recv(timeout=5) == b"later"
    assert not ctx.poll("recv")


# -- ContextHost for a third party's protocol ------------------------------------------------------
class _Keeps:
    """A context's hooks that give back what was sent on it (do_send and do_recv only)."""

    def __init__(self, handle: Any) -> None:
        super().__init__(handle)  # type: ignore[call-arg]
        self.kept: list[Message] = []

    def do_send(self, msg: Message, timeout: float | None) -> None:
        self.kept.append(msg)

    def do_recv(self, timeout: float | None) -> Message:
        if not self.kept:
            raise gsp.WouldBlock("nothing sent")
        return self.kept.pop(0)

    def on_close(self) -> None:
        self.kept.clear()


class _LoopContext(_Keeps, ProtocolContext):
    """A context that gives back what was sent on it (implements only do_send and do_recv)."""


class _Loop(ContextHost, Protocol):
    context_class: Any = _LoopContext

    def __init__(self, handle: Any, raw: bool) -> None:
        super().__init__(handle, raw)
        self.closed = False
        self.host_contexts(self.context_class(handle))

    def new_context(self) -> ProtocolContext:
        ctx: ProtocolContext = self.context_class(self.handle)
        return ctx

    def close(self) -> None:
        self.closed = True
        self.close_contexts()


class _LoopOwnRecv(_Loop):
    def recv_body(self, timeout: float | None) -> bytes:
        return b"own " + self.recv(timeout).body


class _LoopPlugin:
    @gsp.hookimpl
    def gsp_protocols(self) -> list[ProtocolSpec]:
        return [ProtocolSpec("testloop", 0x7E0, "testloop", 0x7E0, _Loop),
                ProtocolSpec("testloop2", 0x7E1, "testloop2", 0x7E1, _LoopOwnRecv)]


def test_context_host_socket_calls_reach_the_default_context_or_the_protocols_own():
    """The socket's send(bytes)/recv() of a ContextHost protocol call its default context's
    do_send_body/do_recv_body; a context implementing only do_send/do_recv gets them from
    ProtocolContext (a
    Message made and unmade); a protocol overriding recv_body keeps its own."""
    plugin = _LoopPlugin()
    gsp.register_plugin(plugin)
    try:
        with gsp.socket("testloop") as s, gsp.socket("testloop2") as own:
            s.send(b"one")
            s.send(bytearray(b"two"))
            assert [s.recv(), s.recv()] == [b"one", b"two"]
            with pytest.raises(gsp.WouldBlock):
                s.recv()
            s.send_msg(Message(b"three"))
            assert s.recv_msg().body == b"three"
            own.send(b"four")
            assert own.recv() == b"own four"
            ctx = s.open_context()
            ctx.send(b"five")
            assert ctx.recv() == b"five"
    finally:
        gsp.unregister_plugin(plugin)


def test_the_users_context_shows_the_users_calls_and_the_hooks_are_the_sdks() -> None:
    # gsp.Context names what a user calls; the hooks a protocol implements are on
    # gsp.protocol.ProtocolContext, which every protocol's context derives from.
    user = {n for n in vars(gsp.Context) if not n.startswith("_")}
    assert {"send", "recv", "send_msg", "recv_msg", "poll", "close", "closed"} <= user
    assert not {n for n in user if n.startswith(("do_", "on_"))}
    assert "closing_case" not in user and "own_options" not in user
    assert {"do_send", "do_recv", "on_close", "closing_case"} <= set(vars(ProtocolContext))
    with gsp.socket("req") as req:
        ctx = req.open_context()
        assert isinstance(ctx, gsp.Context) and isinstance(ctx, ProtocolContext)


def test_a_context_written_against_the_old_base_works_and_warns() -> None:
    # A third party's protocol whose context derives from gsp.Context (or names
    # gsp.protocol.Context), as the SDK had it: it is made a ProtocolContext, with a warning
    # that names the new base.
    with pytest.warns(DeprecationWarning, match="gsp.protocol.ProtocolContext"):
        class OldLoopContext(_Keeps, gsp.Context):
            pass
    assert issubclass(OldLoopContext, ProtocolContext)
    with pytest.warns(DeprecationWarning, match=r"gsp.protocol.Context is deprecated: use "
                                                r"gsp.protocol.ProtocolContext"):
        old = gsp.protocol.Context
    assert old is ProtocolContext

    class OldLoop(_Loop):
        context_class = OldLoopContext

    class Plugin:
        @gsp.hookimpl
        def gsp_protocols(self) -> list[ProtocolSpec]:
            return [ProtocolSpec("testoldloop", 0x7E2, "testoldloop", 0x7E2, OldLoop)]

    plugin = Plugin()
    gsp.register_plugin(plugin)
    try:
        with gsp.socket("testoldloop") as s:
            s.send(b"one")
            assert s.recv() == b"one"
            ctx = s.open_context()
            ctx.send(b"two")
            assert ctx.recv() == b"two"
            ctx.close()
            with pytest.raises(gsp.Closed):
                ctx.recv()
    finally:
        gsp.unregister_plugin(plugin)
