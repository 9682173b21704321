"""gsp.select over sockets, contexts and channels, and gsp.Poller."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any, Callable

import gevent
import pytest

import gsp
from gsp.testing import wait_for

_names = itertools.count()

Mk = Callable[..., gsp.Socket]

#: (sender protocol, receiver protocol): every built-in way to receive, and star.
RECEIVERS = [("push", "pull"), ("pair", "pair"), ("pair1", "pair1"), ("pub", "sub"),
             ("bus", "bus"), ("star", "star")]


def url() -> str:
    return f"inproc://select-{next(_names)}"


def linked(gsp_socket: Mk, a_proto: str, b_proto: str, a_opts: dict[str, Any] | None = None,
           where: str = "", **b_opts: Any) -> tuple[gsp.Socket, gsp.Socket]:
    """``a`` listens (on ``where``, default a fresh inproc URL), ``b`` dials; returns once both
    have their pipe."""
    a = gsp_socket(a_proto, **(a_opts or {}))
    u = a.listen(where or url()).url
    b = gsp_socket(b_proto, **b_opts)
    b.dial(u, fail_fast=True)
    wait_for(lambda: a.pipes and b.pipes, what="the pipe")
    if b_proto == "sub":
        b.subscribe(b"")
    return a, b


def pulls(gsp_socket: Mk, n: int) -> tuple[list[gsp.Socket], list[gsp.Socket]]:
    pairs = [linked(gsp_socket, "push", "pull") for _ in range(n)]
    return [p for p, _ in pairs], [q for _, q in pairs]


@pytest.mark.parametrize("where", ["", "tcp://127.0.0.1:0"])
@pytest.mark.parametrize("sender,receiver", RECEIVERS)
def test_select_receives_from_every_protocol(gsp_socket: Mk, spawn: Any, sender: str, receiver: str,
                                             where: str) -> None:
    a, b = linked(gsp_socket, sender, receiver, where=where)
    idle = gsp.Chan[Any]()
    g = spawn(lambda: gsp.select([gsp.Recv(idle), gsp.Recv(b)], timeout=5))
    gevent.sleep(0.05)
    assert not g.ready()  # nothing to receive yet: it waits
    a.send(b"hello")
    assert g.get(timeout=5) == (1, b"hello")


def test_select_over_many_sockets_gets_every_message_once(gsp_socket: Mk) -> None:
    pushes, pullers = pulls(gsp_socket, 40)
    sent = []
    for k in range(400):
        i = random.randrange(len(pushes))
        body = f"{i}:{k}".encode()
        pushes[i].send(body)
        sent.append(body)
    got = []
    cases = [gsp.Recv(p) for p in pullers]
    for _ in sent:
        i, body = gsp.select(cases, timeout=5)
        assert body.split(b":")[0] == str(i).encode()  # the index names the socket it came from
        got.append(body)
    assert sorted(got) == sorted(sent)
    with pytest.raises(gsp.WouldBlock, match=r"select would block: no case is ready \(timeout=0\)"):
        gsp.select(cases, timeout=0)


def test_select_is_fair_among_ready_sockets_and_channels(gsp_socket: Mk) -> None:
    (push_a, push_b), (pull_a, pull_b) = pulls(gsp_socket, 2)
    chan = gsp.Chan[bytes](2000)
    for _ in range(700):
        push_a.send(b"a")
        push_b.send(b"b")
        chan.send(b"c")
    wait_for(lambda: pull_a.poll() and pull_b.poll())
    seen: Counter[int] = Counter()
    for _ in range(600):
        i, _ = gsp.select([gsp.Recv(pull_a), gsp.Recv(pull_b), gsp.Recv(chan)], timeout=5)
        seen[i] += 1
    assert min(seen[i] for i in range(3)) > 120, seen  # each about a third, none starved


def test_select_mixes_channel_cases_that_complete(gsp_socket: Mk, spawn: Any) -> None:
    _, pull = linked(gsp_socket, "push", "pull")
    out = gsp.Chan[int]()
    taker = spawn(out.recv)
    i, value = gsp.select([gsp.Recv(pull), gsp.Send(out, 42)], timeout=5)
    assert (i, value) == (1, None)
    assert taker.get(timeout=5) == 42
    chan = gsp.Chan[int](1)
    spawn(lambda: (gevent.sleep(0.05), chan.send(7)))
    assert gsp.select([gsp.Recv(pull), gsp.Recv(chan)], timeout=5) == (1, 7)
    chan.close()
    assert gsp.select([gsp.Recv(pull), gsp.Recv(chan)], timeout=5) == (1, gsp.CLOSED)


def test_select_sends_to_a_socket_once_it_has_room(gsp_socket: Mk, spawn: Any) -> None:
    push, pull = linked(gsp_socket, "push", "pull", {"send_buffer": 1}, recv_buffer=1)
    sent = 0
    for _ in range(10_000):  # fill every queue on the way (nobody reads the pull socket)
        try:
            push.send(b"m%d" % sent, block=False)
            sent += 1
        except gsp.WouldBlock:
            gevent.sleep(0.01)
            if not push.poll("send"):
                break
    assert not push.poll("send")
    g = spawn(lambda: gsp.select([gsp.Send(push, b"last")], timeout=5))
    gevent.sleep(0.05)
    assert not g.ready()
    got = [pull.recv(timeout=5) for _ in range(sent + 1)]  # reading makes room: select sends
    assert g.get(timeout=5) == (0, None)
    assert got == [b"m%d" % k for k in range(sent)] + [b"last"]


def test_select_timeout_names_the_timeout(gsp_socket: Mk) -> None:
    _, pull = linked(gsp_socket, "push", "pull")
    with pytest.raises(gsp.Timeout, match=r"select timed out after 0.05 s \(timeout=0.05\)") as e:
        gsp.select([gsp.Recv(pull), gsp.Recv(gsp.Chan[Any]())], timeout=0.05)
    assert e.value.timeout == 0.05
    from datetime import timedelta
    with pytest.raises(gsp.Timeout, match=r"after 0.02 s"):
        gsp.select([gsp.Recv(pull)], timeout=timedelta(milliseconds=20))
    with pytest.raises(gsp.BadOption, match="timeout must be a number of seconds"):
        gsp.select([gsp.Recv(pull)], timeout=-1)


def test_select_does_not_spin_while_waiting(gsp_socket: Mk, spawn: Any) -> None:
    """Waiting costs no polling: the sockets are asked again only when something changed."""
    _, pull = linked(gsp_socket, "push", "pull")
    asked = Counter[str]()

    class Watched:
        def poll(self, op: str) -> bool:
            asked[op] += 1
            return bool(pull.poll(op))  # type: ignore[arg-type]

        def _wake_cases(self, op: Any) -> list[gsp.Recv]:
            return pull._wake_cases(op)  # (gsp's own part of gsp.poller.Selectable)

        def recv(self, timeout: Any = ..., block: bool = True) -> bytes:
            return pull.recv(timeout, block)

    g = spawn(lambda: gsp.select([gsp.Recv(Watched())], timeout=5))  # type: ignore[arg-type]
    gevent.sleep(0.05)  # a select that polled in a loop would have asked hundreds of times
    assert asked["recv"] == 1 and not g.ready()


def test_killing_a_waiting_select_loses_nothing(gsp_socket: Mk, spawn: Any) -> None:
    push, pull = linked(gsp_socket, "push", "pull")
    chan = gsp.Chan[int]()
    g = spawn(lambda: gsp.select([gsp.Recv(pull), gsp.Recv(chan)]))
    gevent.sleep(0.05)
    g.kill(timeout=5)
    push.send(b"after the kill")
    assert pull.recv(timeout=5) == b"after the kill"
    with gevent.Timeout(0.05, False):  # an outer gevent timeout interrupts it the same way
        gsp.select([gsp.Recv(pull), gsp.Recv(chan)])
    spawn(lambda: chan.send(1))
    assert chan.recv(timeout=5) == 1


def test_a_closed_socket_makes_select_raise(gsp_socket: Mk, spawn: Any) -> None:
    _, pull = linked(gsp_socket, "push", "pull")
    g = spawn(lambda: gsp.select([gsp.Recv(pull)], timeout=5))
    gevent.sleep(0.05)
    pull.close()
    with pytest.raises(gsp.Closed, match="socket is closed"):
        g.get(timeout=5)
    with pytest.raises(gsp.Closed):
        gsp.select([gsp.Recv(pull), gsp.Recv(gsp.Chan[Any]())], timeout=5)


def test_select_over_req_contexts_takes_the_first_reply(gsp_socket: Mk, spawn: Any) -> None:
    rep, req = linked(gsp_socket, "rep", "req")
    ctxs = [req.open_context() for _ in range(3)]
    for k, ctx in enumerate(ctxs):
        ctx.send(b"q%d" % k)
    waiting = list(ctxs)
    with pytest.raises(gsp.WouldBlock):
        gsp.select([gsp.Recv(c) for c in waiting], timeout=0)  # requests out, no reply yet
    for _ in ctxs:
        rep_ctx = rep.open_context()
        q = rep_ctx.recv(timeout=5)
        rep_ctx.send(b"re:" + q)
        i, body = gsp.select([gsp.Recv(c) for c in waiting], timeout=5)
        assert body == b"re:" + q == b"re:q%d" % ctxs.index(waiting[i])
        del waiting[i]  # answered: a recv there now fails at once (no request out)
        rep_ctx.close()
    with pytest.raises(gsp.ProtocolStateError, match="req must send a request"):
        gsp.select([gsp.Recv(ctxs[0])], timeout=5)
    for c in ctxs:
        c.close()


def test_select_on_a_rep_socket_and_its_reply(gsp_socket: Mk, spawn: Any) -> None:
    rep, req = linked(gsp_socket, "rep", "req")
    g = spawn(lambda: req.send(b"ping") or req.recv(timeout=5))
    i, body = gsp.select([gsp.Recv(rep)], timeout=5)
    assert (i, body) == (0, b"ping")
    assert gsp.select([gsp.Send(rep, b"pong")], timeout=5) == (0, None)
    assert g.get(timeout=5) == b"pong"


def test_select_over_surveyor_contexts(gsp_socket: Mk, spawn: Any) -> None:
    surveyor, respondent = linked(gsp_socket, "surveyor", "respondent")
    surveyor.survey_time = 0.3
    ctx = surveyor.open_context()
    ctx.send(b"who?")
    spawn(lambda: (respondent.recv(timeout=5), gevent.sleep(0.05), respondent.send(b"me")))
    assert gsp.select([gsp.Recv(ctx)], timeout=5) == (0, b"me")
    with pytest.raises(gsp.Timeout, match="the survey expired"):
        gsp.select([gsp.Recv(ctx)], timeout=5)  # the survey's own time ends the wait
    ctx.close()


def test_a_context_closing_wakes_select(gsp_socket: Mk, spawn: Any) -> None:
    _, sub = linked(gsp_socket, "pub", "sub")
    ctx = sub.open_context()
    ctx.subscribe(b"")
    g = spawn(lambda: gsp.select([gsp.Recv(ctx)], timeout=5))
    gevent.sleep(0.05)
    ctx.close()
    with pytest.raises(gsp.Closed, match="context is closed"):
        g.get(timeout=5)


@pytest.mark.plugins("gsp_examples")
def test_a_protocol_without_readiness_says_so(gsp_socket: Mk) -> None:
    scatter = gsp_socket("scatter")
    with pytest.raises(gsp.NotSupported, match="scatter sockets cannot be polled or selected on "
                                               r"for recv \(the protocol does not implement"):
        gsp.select([gsp.Recv(scatter), gsp.Recv(gsp.Chan[Any]())], timeout=1)
    push = gsp_socket("push")
    with pytest.raises(gsp.NotSupported, match="push sockets cannot receive"):
        gsp.select([gsp.Recv(push)], timeout=1)  # an operation it lacks fails at once
    with pytest.raises(ValueError, match="op must be 'recv' or 'send', not 'read'"):
        push.poll("read")  # type: ignore[arg-type]


# -- Poller ------------------------------------------------------------------------------------
def test_poller_reports_what_is_ready(gsp_socket: Mk, spawn: Any) -> None:
    pushes, pullers = pulls(gsp_socket, 5)
    poller = gsp.Poller()
    for p in pullers:
        poller.register(p)
    assert poller.poll(timeout=0.05) == []
    spawn(lambda: (gevent.sleep(0.05), pushes[3].send(b"x")))
    assert poller.poll(timeout=5) == [(pullers[3], gsp.POLLIN)]
    pushes[1].send(b"y")
    wait_for(lambda: pullers[1].poll())
    assert dict(poller.poll(timeout=5)) == {pullers[1]: gsp.POLLIN, pullers[3]: gsp.POLLIN}
    assert pullers[3].recv(block=False) == b"x"
    poller.unregister(pullers[1])
    assert poller.poll(timeout=0.05) == []
    poller.register(pushes[0], gsp.POLLOUT)
    assert poller.poll(timeout=5) == [(pushes[0], gsp.POLLOUT)]  # room in its queue
    poller.modify(pushes[0], 0)
    assert pushes[0] not in poller.registered


def test_poller_refuses_what_it_cannot_watch(gsp_socket: Mk) -> None:
    poller = gsp.Poller()
    with pytest.raises(ValueError, match="flags must be POLLIN, POLLOUT or both, not 4"):
        poller.register(gsp_socket("pull"), 4)
    with pytest.raises(TypeError, match="cannot poll a Chan: register sockets or contexts"):
        poller.register(gsp.Chan[Any]())  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        poller.modify(gsp_socket("pull"), gsp.POLLIN)
