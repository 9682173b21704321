"""gsp.prefork: one tcp address served by several worker processes (tests/apps/prefork_app.py
runs the supervisor in a fresh interpreter; the clients are this process's sockets)."""

from __future__ import annotations

import mmap
import os
import signal
import socket as stdsocket
import sys
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import gevent
import pytest
from gevent import subprocess

import gsp
from gsp._core.prefork import ACCEPT_STALL, _Turns
from gsp.testing import WAIT

APP = Path(__file__).resolve().parents[1] / "apps" / "prefork_app.py"
pytestmark = pytest.mark.timeout(60)


class Server:
    """The supervisor process: its first line (URL and worker pids), and its other lines."""

    def __init__(self, proc: Any, ready: bool) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.url, self.pids = "", []
        if not ready:
            return
        first = self.line()
        self.url, *pids = first.split()
        assert self.url.startswith(("tcp://", "tls+tcp://")), first
        self.pids = [int(p) for p in pids]

    def line(self, wait: float = 30) -> str:
        with gevent.Timeout(wait, AssertionError(f"no line from the supervisor: {self.lines}")):
            text = self.proc.stdout.readline().decode()
        assert text, f"the supervisor exited ({self.proc.wait()}): {self.lines}"
        self.lines.append(text.strip())
        return text.strip()

    def until(self, prefix: str, count: int = 1) -> list[str]:
        """Read lines until ``count`` of them start with ``prefix``; those."""
        while len(got := [ln for ln in self.lines if ln.startswith(prefix)]) < count:
            self.line()
        return got

    def stop(self) -> int:
        """SIGTERM the supervisor, read the rest of its output; its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        with gevent.Timeout(30, AssertionError("the supervisor did not stop on SIGTERM")):
            rest = self.proc.stdout.read().decode()
            code: int = self.proc.wait()
        self.lines += rest.splitlines()
        return code


@contextmanager
def server(mode: str, procs: int, *extra: str, ready: bool = True) -> Iterator[Server]:
    proc = subprocess.Popen([sys.executable, str(APP), mode, str(procs), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield Server(proc, ready)
    finally:
        if proc.poll() is None:
            proc.kill()  # the workers get SIGTERM from the kernel (PR_SET_PDEATHSIG) and drain
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie nobody reaped yet has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def requesters(stack: ExitStack, url: str, n: int) -> list[gsp.Socket]:
    """``n`` REQ sockets, each its own connection (the kernel spreads connections, not
    requests, among the workers)."""
    return [stack.enter_context(gsp.socket("req", dial=url, recv_timeout=WAIT * 3,
                                           send_timeout=WAIT * 3)) for _ in range(n)]


def ask_all(socks: list[gsp.Socket], rounds: int, tag: str) -> Counter[int]:
    """Every socket asks ``rounds`` times at once with the others; each reply must be its own
    request's. The answering pids, counted."""
    def client(i: int) -> list[int]:
        pids = []
        for r in range(rounds):
            body = f"{tag}-{i}-{r}".encode()
            socks[i].send(body)
            pid, echoed = socks[i].recv().split(b" ", 1)
            assert echoed == body
            pids.append(int(pid))
        return pids

    tasks = [gevent.spawn(client, i) for i in range(len(socks))]
    try:
        gevent.joinall(tasks, raise_error=True)
    finally:
        gevent.killall(tasks)
    return Counter(pid for t in tasks for pid in t.value)


@pytest.mark.parametrize("monkey, balance", [(False, "pipes"), (True, "pipes"),
                                             (False, "kernel")],
                         ids=["plain", "monkey", "kernel"])
def test_three_rep_workers_answer_sixteen_clients_each_request_once(monkey: bool,
                                                                    balance: str) -> None:
    extra = (["--monkey"] if monkey else []) + (["--kernel"] if balance == "kernel" else [])
    with server("rep", 3, *extra) as srv, ExitStack() as stack:
        assert len(set(srv.pids)) == 3
        socks = requesters(stack, srv.url, 16)
        answered = ask_all(socks, 25, "a")
        assert sum(answered.values()) == 16 * 25
        assert set(answered) <= set(srv.pids)
        assert len(answered) > 1  # 16 connections: all on one worker is 3 × 3**-16
        stack.close()
        assert srv.stop() == 0
        assert srv.lines[-1] == "done"
        served = {int(ln.split()[1]): int(ln.split()[2]) for ln in srv.lines
                  if ln.startswith("served ")}
        assert served == dict(answered)  # each request reached one worker, once
        assert all(gone(p) for p in srv.pids)


@pytest.mark.parametrize("workers, peer", [("pull", "push"), ("sub", "pub")])
def test_workers_receive_every_message_of_many_peers_once(tmp_path: Path, workers: str,
                                                          peer: str) -> None:
    """PULL workers fed by PUSH peers, SUB workers by PUBs dialing them: each peer's messages go
    to the worker its connection landed on, every one exactly once."""
    peers, each = 12, 200
    with server(workers, 3, str(tmp_path)) as srv, ExitStack() as stack:
        pushers = [stack.enter_context(gsp.socket(peer, dial=srv.url, send_timeout=WAIT * 3,
                                                  linger=WAIT)) for _ in range(peers)]
        with gevent.Timeout(WAIT * 3, AssertionError("a peer did not connect")):
            while not all(p.pipes for p in pushers):  # (a PUB drops what it sends to nobody)
                gevent.sleep(0.01)
        sends = [gevent.spawn(lambda i, p: [p.send(b"%d-%d" % (i, k)) for k in range(each)], i, p)
                 for i, p in enumerate(pushers)]
        gevent.joinall(sends, raise_error=True)

        def received() -> list[bytes]:
            return [m for f in tmp_path.iterdir() for m in f.read_bytes().split(b"\n") if m]

        with gevent.Timeout(WAIT * 3, AssertionError("not every message arrived")):
            while len(received()) < peers * each:
                gevent.sleep(0.05)
        stack.close()
        assert srv.stop() == 0 and srv.lines[-1] == "done"
        got = Counter(received())
        assert set(got) == {b"%d-%d" % (i, k) for i in range(peers) for k in range(each)}
        assert set(got.values()) == {1}
        per_worker = {int(f.name) for f in tmp_path.iterdir() if f.stat().st_size}
        assert len(per_worker) > 1 and per_worker <= set(srv.pids)


def who(sock: gsp.Socket) -> int:
    sock.send(b"who")
    pid, _ = sock.recv().split(b" ", 1)
    return int(pid)


@pytest.mark.parametrize("monkey", [False, True], ids=["plain", "monkey"])
def test_a_few_long_connections_are_spread_evenly_over_the_workers(monkey: bool) -> None:
    # balance="pipes": a worker accepts only while it holds no more connections than the
    # other. Two clients must get two workers every time; the kernel's reuseport hash puts
    # both on one worker half the time (the 8 rounds here pass by chance once in 128).
    # ACCEPT_STALL is 5 s: only a worker that is stuck that long gives its turn away.
    # The connections stay up: a worker counts a closed one until it notices the close.
    with server("rep", 2, "--stall", "5", *(["--monkey"] if monkey else [])) as srv, \
            ExitStack() as stack:
        for r in range(8):  # two clients at a time
            a, b = requesters(stack, srv.url, 2)
            assert {who(a), who(b)} == set(srv.pids), f"round {r}"
        answered = Counter()  # then one by one, each answered before the next dials
        for _ in range(6):
            answered[who(requesters(stack, srv.url, 1)[0])] += 1
        assert sorted(answered.values()) == [3, 3] and set(answered) == set(srv.pids)
        stack.close()
        assert srv.stop() == 0


def test_tls_workers_take_turns_too(pki: Any) -> None:
    with server("rep", 2, "--stall", "5", "--tls", pki.server_cert_file,
                pki.server_key_file) as srv, ExitStack() as stack:
        assert srv.url.startswith("tls+tcp://")
        socks = [stack.enter_context(gsp.socket("req", recv_timeout=WAIT * 3))
                 for _ in range(4)]
        for s in socks:
            s.dial(srv.url, fail_fast=True, **pki.dial_options())
        answered = Counter(who(s) for s in socks)
        assert sorted(answered.values()) == [2, 2] and set(answered) == set(srv.pids)
        stack.close()
        assert srv.stop() == 0


def wakeups(pid: int) -> int:
    """The times process ``pid`` went to sleep and was woken (voluntary context switches)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))


def test_a_worker_waiting_for_its_turn_sleeps_while_no_connection_comes() -> None:
    # One connection: its worker holds more than the other, and waits for its turn. With no
    # connection in the backlog it must sleep, not look again every few milliseconds (one
    # that looked every 5 ms would wake some 200 times a second).
    with server("rep", 2) as srv, ExitStack() as stack:
        busy = who(requesters(stack, srv.url, 1)[0])
        before = {pid: wakeups(pid) for pid in srv.pids}
        gevent.sleep(1.0)
        woke = {pid: wakeups(pid) - before[pid] for pid in srv.pids}
        assert woke[busy] < 20, woke
        stack.close()
        assert srv.stop() == 0


def test_a_stuck_worker_gives_its_turn_to_the_others() -> None:
    # Worker 0 blocks its whole process for 3 s from its start: it holds no connection, so
    # worker 1, holding one, must not wait for it to take the next one longer than
    # ACCEPT_STALL (50 ms) once a connection waits.
    with server("stuck", 2) as srv, ExitStack() as stack:
        a, b = requesters(stack, srv.url, 2)
        with gevent.Timeout(2, AssertionError("a connection waited for the stuck worker")):
            assert who(a) == who(b) == srv.pids[1]
        stack.close()
        assert srv.stop() == 0


def test_a_killed_worker_is_started_again_and_clients_keep_being_answered(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    with server("rep", 2) as srv, ExitStack() as stack:
        socks = requesters(stack, srv.url, 8)
        first = ask_all(socks, 5, "before")
        victim = first.most_common(1)[0][0]
        os.kill(victim, signal.SIGKILL)
        # Every client's later requests are answered: those of the victim's connections are
        # resent by REQ once its dialer reconnects (to the survivor or to the new worker).
        after = ask_all(socks, 10, "after")
        assert victim not in after and sum(after.values()) == 8 * 10
        # The supervisor started a new worker in the victim's place: fresh connections reach it.
        survivor = ({p for p in srv.pids} - {victim}).pop()
        with gevent.Timeout(WAIT * 3, AssertionError("no new worker answered")):
            while True:
                one = gsp_socket("req", dial=srv.url, recv_timeout=WAIT)
                one.send(b"who")
                pid = int(one.recv().split()[0])
                one.close()
                if pid not in (victim, survivor):
                    break
        stack.close()
        assert srv.stop() == 0 and srv.lines[-1] == "done"
        err = srv.proc.stderr.read().decode()
        assert f"(pid {victim}) exited with signal SIGKILL" in err
        assert "starting it again" in err
        assert all(gone(p) for p in (survivor, pid))


def test_sigterm_lets_every_worker_answer_the_requests_it_took_then_all_exit() -> None:
    with server("slow", 2) as srv, ExitStack() as stack:
        socks = requesters(stack, srv.url, 6)
        for i, s in enumerate(socks):
            s.send(b"r%d" % i)
        srv.until("took ", 6)  # every request is in a worker's hands (each answers in 1 s)
        srv.proc.send_signal(signal.SIGTERM)
        replies = [s.recv() for s in socks]
        assert [r.split()[1] for r in replies] == [b"r%d" % i for i in range(6)]
        with gevent.Timeout(30, AssertionError("the supervisor did not return")):
            code = srv.proc.wait()
        assert code == 0
        assert srv.proc.stdout.read().decode().splitlines()[-1] == "done"
        assert all(gone(p) for p in srv.pids)
        with pytest.raises(gsp.ConnectionRefused):  # nothing listens there any more
            stack.enter_context(gsp.socket("req")).dial(srv.url, fail_fast=True)


def test_workers_drain_and_exit_when_the_supervisor_is_killed() -> None:
    with server("rep", 2) as srv, ExitStack() as stack:
        ask_all(requesters(stack, srv.url, 4), 3, "a")
        srv.proc.kill()  # no stop from it: the kernel sends each worker SIGTERM (PDEATHSIG)
        assert srv.proc.wait() == -signal.SIGKILL
        with gevent.Timeout(WAIT * 3, AssertionError("a worker outlived its supervisor")):
            while not all(gone(p) for p in srv.pids):
                gevent.sleep(0.05)
        served = srv.proc.stdout.read().decode().split("\n")
        assert sorted(int(ln.split()[1]) for ln in served if ln.startswith("served ")) == \
            sorted(srv.pids)  # each drained and ended its serve()


def test_a_worker_that_keeps_failing_makes_prefork_raise_worker_failed() -> None:
    with server("crash", 2, ready=False) as srv:
        with gevent.Timeout(30, AssertionError("prefork did not give up")):
            rest = srv.proc.stdout.read().decode()
            code = srv.proc.wait()
        assert code == 3, rest
        failed = [ln for ln in rest.splitlines() if ln.startswith("failed ")]
        assert len(failed) == 1 and failed[0].split()[2] == "1"  # the worker's exit code
        err = srv.proc.stderr.read().decode()
        assert "RuntimeError: worker" in err  # the worker's traceback


def serve_nothing(sock: gsp.Socket, worker: gsp.PreforkWorker) -> None:
    raise AssertionError("no worker starts on bad input")


@pytest.mark.parametrize("url", ["ipc:///tmp/gsp-prefork.sock", "inproc://x", "ws://127.0.0.1:0/",
                                 "127.0.0.1:5555"])
def test_an_address_other_than_tcp_is_refused_before_any_fork(url: str) -> None:
    with pytest.raises(gsp.InvalidAddress):
        gsp.prefork("rep", url, serve_nothing, procs=2)


@pytest.mark.parametrize("procs", [0, -1, "2", 1.5, True])
def test_procs_must_be_a_positive_int(procs: Any) -> None:
    with pytest.raises(gsp.BadOption, match="procs must be an int of at least 1"):
        gsp.prefork("rep", "tcp://127.0.0.1:0", serve_nothing, procs=procs)


def test_other_bad_input_is_refused_before_any_fork() -> None:
    url = "tcp://127.0.0.1:0"
    with pytest.raises(gsp.UnknownPlugin):
        gsp.prefork("nosuch", url, serve_nothing, procs=1)
    with pytest.raises(gsp.BadOption):
        gsp.prefork("rep", url, serve_nothing, procs=1, no_such_option=1)
    with pytest.raises(gsp.BadOption, match="give no listen= or dial="):
        gsp.prefork("rep", url, serve_nothing, procs=1, listen="tcp://127.0.0.1:0")
    with pytest.raises(gsp.BadOption, match="cannot be turned off"):
        gsp.prefork("rep", url, serve_nothing, procs=1, tcp_reuseport=False)
    with pytest.raises(gsp.BadOption, match="drain_timeout"):
        gsp.prefork("rep", url, serve_nothing, procs=1, drain_timeout=0)
    with pytest.raises(gsp.BadOption, match="serve must be a callable"):
        gsp.prefork("rep", url, "serve", procs=1)  # type: ignore[arg-type]
    with pytest.raises(gsp.BadOption, match="balance must be one of 'pipes', 'kernel'"):
        gsp.prefork("rep", url, serve_nothing, procs=1, balance="round-robin")


def test_an_address_held_without_reuseport_is_refused_before_any_fork() -> None:
    with stdsocket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(gsp.AddressInUse, match="cannot hold"):
            gsp.prefork("rep", f"tcp://127.0.0.1:{port}", serve_nothing, procs=2)


def test_a_busier_workers_stall_is_timed_by_the_clock_even_when_its_hub_is_busy() -> None:
    # The gate of a worker holding more connections than another, with a connection waiting
    # and nobody taking it: it must take it once ACCEPT_STALL (50 ms) has passed by the clock.
    # Here a greenlet holds this hub 40 ms at a time (the worker's own connections, busy), so
    # each 5 ms sleep between looks lasts 40 ms: a gate counting its sleeps would wait for 10
    # of them (10 turns of the hog, some 400 ms); the clock takes two or three turns.
    with ExitStack() as stack:
        peer = stack.enter_context(gsp.socket("rep", listen="tcp://127.0.0.1:0"))
        sock = stack.enter_context(gsp.socket("req"))
        sock.dial(peer.listeners[0].url, fail_fast=True)  # this worker holds one pipe
        backlog = stack.enter_context(stdsocket.socket())
        backlog.bind(("127.0.0.1", 0))
        backlog.listen(8)
        # a connection in the backlog, which nobody accepts
        stack.enter_context(stdsocket.create_connection(backlog.getsockname()))
        loads = memoryview(mmap.mmap(-1, 16)).cast("q")
        turns = _Turns(loads, 0, backlog.fileno(), sock)
        loads[1] = 0  # the other worker holds none, and never accepts
        done = []
        held = []  # one entry per 40 ms the hog held the hub

        def hog() -> None:
            while not done:
                time.sleep(0.04)  # blocks this hub
                held.append(1)
                gevent.sleep(0.001)  # (a timer: sleep(0) would run again before the loop turns)

        hogger = gevent.spawn(hog)
        try:
            start = time.monotonic()
            with gevent.Timeout(5):
                turns(None)
            took = time.monotonic() - start
            hog_turns = len(held)
        finally:
            done.append(True)
            hogger.join(1)
        assert took >= ACCEPT_STALL, took
        assert hog_turns <= 5, f"the gate waited {hog_turns} turns of the hog ({took:.3f} s)"
        assert loads[0] == 1  # its own count, published
