"""Behavioural acceptance tests of the socket core's pipes and pipe events: pipe ids and the order
of ATTACHING / ATTACHED / DETACHED, rejecting a pipe at ATTACHING, a raising pipe callback
contained, and a dialer whose pipe is rejected locally (by its own protocol or a hook) backing off,
or failing dial(fail_fast=True). One of the core suites (see test_core.py)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

import gsp
from gsp.testing import WAIT, connected, free_url, wait_for
from tests.support import TCP

# -- pipes and pipe events -------------------------------------------------------------------------

def test_pipe_ids_and_event_order(gsp_socket):
    log: list[tuple[gsp.PipeEvent, gsp.Pipe, bool]] = []
    srv = gsp_socket("pull")
    clients = [gsp_socket("push") for _ in range(5)]
    socks = [srv, *clients]
    for s in socks:
        s.on_pipe_event(lambda ev, p, s=s: log.append((ev, p, p in s.pipes)))
    lst = srv.listen(TCP)
    for c in clients:
        connected(srv, lst.url, c)
    ids = [p.id for s in socks for p in s.pipes]
    assert len(ids) == 10 and len(set(ids)) == 10
    assert all(isinstance(i, int) and 0 < i < 1 << 31 for i in ids)
    for c in clients:
        c.close()
    wait_for(lambda: not srv.pipes, what="the listener's pipes to go")
    by_pipe: dict[int, list[tuple[gsp.PipeEvent, bool]]] = {}
    for ev, p, member in log:
        by_pipe.setdefault(p.id, []).append((ev, member))
    assert sorted(by_pipe) == sorted(ids)
    expected = [(gsp.PipeEvent.ATTACHING, False), (gsp.PipeEvent.ATTACHED, True),
                (gsp.PipeEvent.DETACHED, False)]
    assert all(seq == expected for seq in by_pipe.values()), by_pipe


def test_rejecting_a_pipe_at_attaching(gsp_socket):
    seen: list[gsp.PipeEvent] = []
    rejected: list[gsp.Pipe] = []

    def reject(ev: gsp.PipeEvent, p: gsp.Pipe) -> None:
        seen.append(ev)
        if ev is gsp.PipeEvent.ATTACHING:
            rejected.append(p)
            p.close()

    pull = gsp_socket("pull", recv_timeout=0.5)
    push = gsp_socket("push", reconnect_time=0.05, send_timeout=0.1)
    unsubscribe = pull.on_pipe_event(reject)
    lst = pull.listen(TCP)
    push.dial(lst.url)
    wait_for(lambda: len(seen) >= 3, what="repeated rejections of the redialing peer")
    for i in range(20):
        try:
            push.send(b"must not cross %d" % i)
        except gsp.Timeout:
            pass
    with pytest.raises(gsp.Timeout):
        pull.recv()
    assert set(seen) == {gsp.PipeEvent.ATTACHING} and pull.pipes == []
    assert all(p.closed and p.error is None and p not in pull.pipes for p in rejected)
    unsubscribe()  # and without the hook the same peer gets in
    wait_for(lambda: pull.pipes, what="the peer to attach once no longer rejected")


@pytest.mark.parametrize("side", ["listener", "dialer"])
def test_a_raising_pipe_callback_is_contained(gsp_socket, side, caplog):
    calls: Counter[gsp.PipeEvent] = Counter()
    after: list[gsp.PipeEvent] = []

    def buggy(ev: gsp.PipeEvent, p: gsp.Pipe) -> None:
        calls[ev] += 1
        raise ValueError("a bug in user code")

    caplog.set_level("ERROR", logger="gsp")
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", reconnect_time=0.05, send_timeout=WAIT)
    watched = pull if side == "listener" else push
    watched.on_pipe_event(buggy)
    watched.on_pipe_event(lambda ev, p: after.append(ev))  # later callbacks still run
    lst = pull.listen(TCP)
    push.dial(lst.url)
    # Raising (at ATTACHING too) is logged and rejects nothing: the first attempt attaches
    # (a rejected pipe would make the dialer redial into it again and again).
    wait_for(lambda: pull.pipes and push.pipes, what="the first attempt to attach")
    assert calls[gsp.PipeEvent.ATTACHING] == 1 and calls[gsp.PipeEvent.ATTACHED] == 1
    assert after == [gsp.PipeEvent.ATTACHING, gsp.PipeEvent.ATTACHED]
    push.send(b"through")
    assert pull.recv() == b"through"
    pull.close()
    push.close()
    # Once with its traceback, though it raised at ATTACHING, ATTACHED and DETACHED.
    assert calls[gsp.PipeEvent.DETACHED] == 1
    errors = [r for r in caplog.records if r.name == "gsp.socket"]
    assert len(errors) == 1 and errors[0].exc_info is not None


@pytest.mark.parametrize("how", ["protocol", "hook"])
def test_dialer_whose_pipe_is_rejected_locally_backs_off(gsp_socket, how):
    seen: list[gsp.PipeEvent] = []
    opts = {"reconnect_time": 0.1, "max_reconnect_time": 1.0}
    a = gsp_socket("pair")
    b = gsp_socket("pair")
    c = gsp_socket("pair", **opts)
    b.on_pipe_event(lambda ev, p: seen.append(ev))
    la, lb = a.listen(TCP), b.listen(TCP)
    if how == "protocol":  # pair takes one peer: c's second pipe is refused by c itself
        connected(a, la.url, c)
    else:
        c.on_pipe_event(lambda ev, p: ev is gsp.PipeEvent.ATTACHING and p.close())
    t0 = time.monotonic()
    c.dial(lb.url)
    wait_for(lambda: seen.count(gsp.PipeEvent.ATTACHED) >= 4, what="four attempts")
    # Backoff from 0.1 s, doubling, each step at least half its length: the fourth attempt
    # comes 0.05 + 0.1 + 0.2 s after the first at the earliest; a busy loop makes hundreds.
    assert time.monotonic() - t0 >= 0.35, Counter(seen)


def test_dial_fail_fast_raises_when_its_own_protocol_rejects_the_pipe(gsp_socket):
    a = gsp_socket("pair")
    b = gsp_socket("pair")
    c = gsp_socket("pair")
    la, lb = a.listen(TCP), b.listen(TCP)
    connected(a, la.url, c)  # c's one pair peer
    with pytest.raises(gsp.ConnectionRefused):
        c.dial(lb.url, fail_fast=True)
    assert len(c.pipes) == 1


def test_dial_fail_fast_raises_the_first_error_and_keeps_no_dialer(gsp_socket):
    url = free_url("tcp")  # nothing listens there
    s = gsp_socket("push", reconnect_time=5.0)
    with pytest.raises(gsp.ConnectionRefused):
        s.dial(url, fail_fast=True)
    assert s.dialers == []
    d = s.dial(url)  # the default: the failure is kept, redialing goes on
    assert isinstance(d.last_error, gsp.ConnectionRefused) and s.dialers == [d]


def test_dial_background_returns_before_the_first_attempt(gsp_socket):
    url = free_url("tcp")
    s = gsp_socket("push", reconnect_time=5.0)
    d = s.dial(url, background=True)
    assert d.last_error is None and s.dialers == [d]  # (no attempt made yet)


def test_dial_fail_fast_and_background_together_are_refused(gsp_socket):
    s = gsp_socket("push")
    with pytest.raises(gsp.BadOption, match="cannot go together"):
        s.dial(TCP, fail_fast=True, background=True)
    with pytest.raises(gsp.BadOption, match="must be True or False"):
        s.dial(TCP, fail_fast=1)
    assert s.dialers == []


@pytest.mark.parametrize("block, new", [(True, "fail_fast=True"), (False, "background=True"),
                                        (None, "no block=")])
def test_dial_block_still_works_and_warns_naming_the_new_spelling(gsp_socket, block, new):
    url = free_url("tcp")
    s = gsp_socket("push", reconnect_time=5.0)
    with pytest.warns(DeprecationWarning, match=new) as caught:
        if block:
            with pytest.raises(gsp.ConnectionRefused):
                s.dial(url, block=block)
        else:
            s.dial(url, block=block)
    assert caught[0].filename == __file__  # points at the caller
    with pytest.raises(gsp.BadOption, match="only the new one"):
        s.dial(url, block=True, fail_fast=True)


def test_socket_dial_keyword_takes_fail_fast_and_background(gsp_socket):
    url = free_url("tcp")
    with pytest.raises(gsp.ConnectionRefused):
        gsp.socket("push", dial=url, fail_fast=True)
    with gsp.socket("push", dial=url, background=True, reconnect_time=5.0) as s:
        assert len(s.dialers) == 1 and s.dialers[0].last_error is None
    with pytest.warns(DeprecationWarning, match="fail_fast=True"), \
            pytest.raises(gsp.ConnectionRefused):
        gsp.socket("push", dial=url, block=True)
    with pytest.raises(gsp.BadOption, match=r"no dial=.*sock\.dial\(url, fail_fast=True\)"):
        gsp.socket("push", listen=url, fail_fast=True)
    with pytest.raises(gsp.BadOption, match=r"sock\.listen\(url, accept_gate=\.\.\.\)"):
        gsp.socket("push", listen=url, accept_gate=lambda listener: None)
