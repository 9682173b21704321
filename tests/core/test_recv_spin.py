"""recv_spin, the opt-in low-latency mode: a wait for a reply or a request polls the event loop
for a while before the hub sleeps (gsp._core.readers.Readers.spinning). The option validates;
round trips stay correct with it on (tcp, ipc, inproc, contexts, many sockets, a peer in another
process); a kill or a timeout during a spin behaves as without one; and a spin ends: a socket
waiting with it on burns no CPU while nothing comes (process CPU time, not a timing).
No test here times a round trip: what the mode gains is shown by `gsp bench lat --libs
raw-gevent,gsp,gsp-spin` (docs/measuring.md)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from datetime import timedelta
from typing import Any, Callable

import gevent
import pytest

import gsp
from gsp.options import SPIN_MAX
from tests.support import connect, inproc_url

SPIN = 200e-6


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- the option ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1e-6, SPIN_MAX * 2, 1.0, None, "1e-4", True, float("nan"),
                                 timedelta(seconds=1)])
def test_recv_spin_refuses_bad_values(gsp_socket: Callable[..., gsp.Socket], bad: Any) -> None:
    with pytest.raises(gsp.BadOption, match="recv_spin"):
        gsp.socket("req", recv_spin=bad)
    s = gsp_socket("rep")
    with pytest.raises(gsp.BadOption, match="recv_spin"):
        s.recv_spin = bad
    assert s.recv_spin == 0.0  # unchanged: off by default


def test_recv_spin_takes_seconds_and_timedeltas_and_turns_off(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("req", recv_spin=50e-6)
    assert s.recv_spin == 50e-6
    s.set_option("recv_spin", timedelta(microseconds=300))
    assert s.get_option("recv_spin") == pytest.approx(300e-6)
    s.recv_spin = SPIN_MAX
    assert s.recv_spin == SPIN_MAX
    s.recv_spin = 0
    assert s.recv_spin == 0.0 and isinstance(s.recv_spin, float)


# -- round trips with it on ----------------------------------------------------------------------
def echo(rep: Any, n: int) -> None:
    for _ in range(n):
        rep.send(rep.recv())


@pytest.mark.parametrize("transport", ["tcp", "ipc", "inproc"])
def test_round_trips_are_right_with_recv_spin_on_both_ends(
        gsp_socket: Callable[..., gsp.Socket], spawn: Callable[..., gevent.Greenlet], ipc_url: str,
        transport: str) -> None:
    url = {"tcp": "tcp://127.0.0.1:0", "ipc": ipc_url, "inproc": inproc_url()}[transport]
    rep = gsp_socket("rep", recv_spin=SPIN, recv_timeout=10)
    req = gsp_socket("req", recv_spin=SPIN, recv_timeout=10)
    rep.listen(url)
    req.dial(rep.listeners[0].url)
    n = 300
    g = spawn(echo, rep, n)
    for i in range(n):
        body = b"%d" % i * (1 + i % 7)
        req.send(body)
        assert req.recv() == body
    g.get(timeout=10)


def test_contexts_and_many_sockets_with_recv_spin(
        gsp_socket: Callable[..., gsp.Socket], spawn: Callable[..., gevent.Greenlet]) -> None:
    """Eight req sockets and a req with eight contexts, all spinning, on one spinning rep served
    by four contexts: every reply reaches the request it answers."""
    rep = gsp_socket("rep", recv_spin=SPIN, recv_timeout=10)
    rep.listen("tcp://127.0.0.1:0")
    url = rep.listeners[0].url
    per = 40
    reqs = [gsp_socket("req", recv_spin=SPIN, recv_timeout=10) for _ in range(8)]
    shared = gsp_socket("req", recv_spin=SPIN, recv_timeout=10)
    for r in [*reqs, shared]:
        r.dial(url)
    clients: list[Any] = [*reqs, *(shared.open_context() for _ in range(8))]

    def serve(ctx: Any) -> None:
        while True:
            ctx.send(ctx.recv())

    servers = [spawn(serve, rep.open_context()) for _ in range(4)]

    def client(k: int, c: Any) -> int:
        for i in range(per):
            body = b"%d-%d" % (k, i)
            c.send(body)
            assert c.recv() == body
        return per

    done = [spawn(client, k, c) for k, c in enumerate(clients)]
    assert sum(g.get(timeout=30) for g in done) == per * len(clients)
    gevent.killall(servers)


def test_surveyor_and_respondent_with_recv_spin(
        gsp_socket: Callable[..., gsp.Socket], spawn: Callable[..., gevent.Greenlet]) -> None:
    sv = gsp_socket("surveyor", recv_spin=SPIN, survey_time=5)
    rs = [gsp_socket("respondent", recv_spin=SPIN, recv_timeout=10) for _ in range(3)]
    for r in rs:
        connect(sv, r)

    def answer(k: int, r: Any) -> None:
        for _ in range(20):
            r.send(r.recv() + b"/%d" % k)

    gs = [spawn(answer, k, r) for k, r in enumerate(rs)]
    for i in range(20):
        sv.send(b"q%d" % i)
        got = sorted(sv.recv() for _ in rs)
        assert got == [b"q%d/%d" % (i, k) for k in range(3)]
    for g in gs:
        g.get(timeout=10)


def test_round_trips_with_a_spinning_peer_in_another_process(
        gsp_socket: Callable[..., gsp.Socket], ipc_url: str) -> None:
    """The spin's real case: the reply comes from another process, read by the spinning
    greenlet during its spin (a lent read), not after the hub slept."""
    n = 500
    code = textwrap.dedent(f"""
        import sys, gsp
        rep = gsp.socket("rep", recv_spin={SPIN!r}, recv_timeout=20)
        rep.listen({ipc_url!r})
        print("up", flush=True)
        for _ in range({n}):
            rep.send(rep.recv())
        rep.close()
    """)
    peer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout is not None and peer.stdout.readline() == "up\n"
        req = gsp_socket("req", recv_spin=SPIN, recv_timeout=20)
        req.dial(ipc_url)
        for i in range(n):
            req.send(b"r%d" % i)
            assert req.recv() == b"r%d" % i
        assert peer.wait(20) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
        if peer.stdout is not None:
            peer.stdout.close()


# -- what ends a spin ----------------------------------------------------------------------------
def test_a_timeout_shorter_than_the_spin_still_times_out(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    req, rep = gsp_socket("req", recv_spin=SPIN_MAX), gsp_socket("rep")
    connect(rep, req)
    req.send(b"never answered")
    assert rep.recv() == b"never answered"
    with pytest.raises(gsp.Timeout):
        req.recv(timeout=0.001)


def test_a_kill_during_a_spin_leaves_the_socket_working(
        gsp_socket: Callable[..., gsp.Socket], spawn: Callable[..., gevent.Greenlet]) -> None:
    rep = gsp_socket("rep", recv_spin=SPIN_MAX, recv_timeout=10)
    req = gsp_socket("req", recv_timeout=10)
    connect(rep, req)
    for _ in range(5):  # killed in its spin (at most 10 ms), over and over
        g = spawn(rep.recv)
        gevent.sleep(0)
        g.kill(timeout=5)
        assert g.dead and isinstance(g.value, gevent.GreenletExit)
    g = spawn(echo, rep, 1)
    req.send(b"after the kills")
    assert req.recv() == b"after the kills"
    g.get(timeout=10)


def test_waiting_with_recv_spin_on_burns_no_cpu_while_nothing_comes(
        gsp_socket: Callable[..., gsp.Socket], spawn: Callable[..., gevent.Greenlet]) -> None:
    """A spin is bounded: a rep waiting for requests and a req waiting for a reply that does
    not come, both at the longest spin, use (nearly) no CPU time once their spins ran out. A
    spin that did not end would use all of the 0.5 s."""
    rep = gsp_socket("rep", recv_spin=SPIN_MAX)
    req = gsp_socket("req", recv_spin=SPIN_MAX)
    connect(rep, req)
    idle_rep = gsp_socket("rep", recv_spin=SPIN_MAX)  # never sent anything at all
    idle_rep.listen("tcp://127.0.0.1:0")
    req.send(b"unanswered")
    assert rep.recv() == b"unanswered"
    waits = [spawn(req.recv), spawn(rep.recv), spawn(idle_rep.recv)]
    gevent.sleep(5 * SPIN_MAX)  # every spin began (and, at SPIN_MAX at most, ended)
    window = 0.5
    c0 = cpu_seconds()
    gevent.sleep(window)
    used = cpu_seconds() - c0
    assert not any(g.ready() for g in waits)
    gevent.killall(waits)
    # Idle waits use (nearly) none of the window's CPU; a spin that did not end, all of it.
    assert used < 0.3 * window, f"{used:.3f} s of CPU in {window} s of waiting"


def test_a_spin_gives_way_to_another_process_that_wants_the_cpu(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """On a busy CPU the mode gives way: this process and a busy one pinned to the same CPU,
    twenty waits that each could spin 10 ms for a reply that never comes. Each turn of a spin
    yields the CPU, a spin ends at the first yield that let the other process run, and the
    waits of the next 50 ms do not spin, so the waits use (nearly) no CPU time; a spinner that
    held on to the CPU would use tens of ms (75 ms, measured with the yield taken out)."""
    req, rep = gsp_socket("req", recv_spin=SPIN_MAX), gsp_socket("rep")
    connect(rep, req)
    before = os.sched_getaffinity(0)
    cpu = min(before)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        waits = 20
        c0 = cpu_seconds()
        for i in range(waits):
            req.send(b"unanswered %d" % i)
            with pytest.raises(gsp.Timeout):
                req.recv(timeout=0.02)
        used = cpu_seconds() - c0
    finally:
        os.sched_setaffinity(0, before)
        busy.kill()
        busy.wait()
    # What the waits would burn spinning to the end (docs/measuring.md: a spin lasts at most
    # recv_spin, and gives way at the first yield that let another process run).
    spun_out = waits * SPIN_MAX
    assert used < 0.15 * spun_out, f"{used:.3f} s of CPU in {waits} waits beside a busy process"
