"""Fork scenarios for tests/serving/test_fork.py, each run in a fresh interpreter:

    python tests/apps/fork_scenario.py NAME [--monkey]

Exit status 0 and a last line ``OK {...}`` (JSON figures) when every check passed; a child's
failure is reported by the parent. ``--monkey`` runs under ``gevent.monkey.patch_all()`` first.
"""

from __future__ import annotations

import sys

if "--monkey" in sys.argv:
    from gevent import monkey

    monkey.patch_all()

import json
import logging
import os
import tempfile
import traceback
import warnings
from typing import Any, Callable

import gevent

import gsp

LOG: list[logging.LogRecord] = []


class Capture(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        LOG.append(record)


logging.getLogger("gsp").addHandler(Capture())
logging.getLogger("gsp").setLevel(logging.DEBUG)


def forked_lines() -> list[str]:
    return [r.getMessage() for r in LOG
            if r.name == "gsp.socket" and r.levelno == logging.INFO and "forked" in r.getMessage()]


def serve(rep: gsp.Socket, n: int = 8) -> list[gevent.Greenlet]:
    """Answer ``<request> from <pid>`` on ``n`` contexts."""
    def loop() -> None:
        try:  # (a copy of this greenlet that had not started at fork starts in the child)
            ctx = rep.open_context()
        except gsp.Closed:
            return
        while True:
            try:
                m = ctx.recv()
                ctx.send(m + b" from %d" % os.getpid())
            except gsp.Closed:
                return
    return [gevent.spawn(loop) for _ in range(n)]


def round_trips(req: gsp.Socket, tag: str, n: int) -> None:
    for i in range(n):
        with req.open_context() as ctx:
            msg = f"{tag}{i}".encode()
            ctx.send(msg)
            reply = ctx.recv(timeout=10)
            assert reply.startswith(msg + b" from "), (msg, reply)


def fork_child(child: Callable[[], Any]) -> int:
    """Fork; the child runs ``child`` and exits 0, or prints the traceback and exits 3. The
    parent gets the pid."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            result = child()
            print("CHILD", json.dumps(result), flush=True)
        except BaseException:
            traceback.print_exc()
            sys.stdout.flush()
            code = 3
        finally:
            os._exit(code)
    return pid


def round_trips_until_exit(req: gsp.Socket, pid: int) -> int:
    """Round-trip on ``req`` until the child ``pid`` exits, which it must with 0; how many."""
    n = 0
    while True:
        round_trips(req, "during", 5)
        n += 5
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            assert code == 0, code
            return n


def wait_child(pid: int, timeout: float = 30) -> int:
    """The child's exit status, waiting without blocking the hub (the parent serves meanwhile)."""
    with gevent.Timeout(timeout):
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            gevent.sleep(0.02)


def scenario_fork() -> dict[str, Any]:
    """A REP listening (tcp and ipc) and serving in the parent; a REQ dialing both. The child
    round-trips on the inherited REQ while the parent keeps round-tripping on its own pipes;
    the child's REP raises InheritedListener; afterwards the parent's pipes and listeners (the
    ipc path too) still work."""
    d = tempfile.mkdtemp()
    ipc = f"ipc://{d}/rep.ipc"
    rep = gsp.socket("rep", listen=["tcp://127.0.0.1:0", ipc])
    workers = serve(rep)
    tcp = rep.listeners[0].url
    req = gsp.socket("req", dial=[tcp, ipc], recv_timeout=10)
    gevent.sleep(0.1)
    round_trips(req, "before", 10)
    parent_pipes = [p.id for p in req.pipes]
    assert len(parent_pipes) == 2

    def child() -> dict[str, Any]:
        lines = forked_lines()
        assert len(lines) == 2, lines  # one per socket
        assert all(f"inherited from process {os.getppid()}" in line for line in lines), lines
        assert req.pipes == [] or all(p.id not in parent_pipes for p in req.pipes)
        try:
            rep.recv()
        except gsp.InheritedListener as exc:
            assert "address of its own" in str(exc) and "per_process" in str(exc), exc
            assert "tcp_reuseport=True" in str(exc), exc
        else:
            raise AssertionError("the inherited REP answered recv")
        assert rep.closed and rep not in gsp.sockets()
        round_trips(req, "child", 50)
        assert len(req.pipes) == 2, req.pipes
        assert len(forked_lines()) == 2
        req.close()
        return {"lines": lines}

    pid = fork_child(child)
    # The parent's own pipes keep working while the child works (and redials its own).
    n = round_trips_until_exit(req, pid)
    assert [p.id for p in req.pipes] == parent_pipes, (req.pipes, parent_pipes)
    round_trips(req, "after", 20)
    assert forked_lines() == []  # nothing happened in the parent
    late = gsp.socket("req", dial=ipc, recv_timeout=10)  # the ipc path is still the parent's
    round_trips(late, "late", 3)
    for s in (late, req, rep):
        s.close()
    gevent.joinall(workers)
    os.rmdir(d)
    return {"parent_round_trips_during_child": n}


def scenario_transports() -> dict[str, Any]:
    """tls+tcp, ws and wss: the child closes its copies with no TLS close_notify and no ws close
    frame (either would end the parent's pipes: the parent checks its pipe ids), and redials."""
    from pathlib import Path

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    from tests.support.certs import make_pki

    with tempfile.TemporaryDirectory() as d:  # the certificates, removed at the end
        return _transports(make_pki(Path(d)))


def _transports(pki: Any) -> dict[str, Any]:
    rep = gsp.socket("rep")
    for url in ("tls+tcp://127.0.0.1:0", "ws://127.0.0.1:0/sp", "wss://127.0.0.1:0/sp"):
        rep.listen(url, **(pki.listen_options() if "tls" in url or "wss" in url else {}))
    workers = serve(rep)
    urls = [lst.url for lst in rep.listeners]
    req = gsp.socket("req", recv_timeout=10)
    for url in urls:
        req.dial(url, fail_fast=True, **(pki.dial_options() if "tls" in url or "wss" in url else {}))
    round_trips(req, "before", 9)
    parent_pipes = sorted(p.id for p in req.pipes)
    rep_pipes = sorted(p.id for p in rep.pipes)
    assert len(parent_pipes) == 3

    def child() -> None:
        round_trips(req, "child", 30)
        assert len(req.pipes) == 3
        req.close()

    pid = fork_child(child)
    while True:
        round_trips(req, "during", 3)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            break
    round_trips(req, "after", 9)
    assert sorted(p.id for p in req.pipes) == parent_pipes
    assert set(rep_pipes) <= {p.id for p in rep.pipes}
    req.close()
    rep.close()
    gevent.joinall(workers)
    return {"urls": urls}


def scenario_mixed() -> dict[str, Any]:
    """A socket that listens and dials keeps working in the child through its dialer; its
    listener is the parent's (not listed in the child), and the parent's still accepts."""
    hub = gsp.socket("bus", listen="tcp://127.0.0.1:0", recv_timeout=10)
    node = gsp.socket("bus", listen="tcp://127.0.0.1:0", dial=hub.listeners[0].url,
                      recv_timeout=10)
    node_url = node.listeners[0].url
    gevent.sleep(0.1)
    node.send(b"parent hello")
    assert hub.recv() == b"parent hello"

    def child() -> None:
        assert node.listeners == [] and len(node.dialers) == 1 and not node.closed
        line, = [x for x in forked_lines() if x.startswith("bus") and "redialing" in x]
        assert "left 1 listener to the parent" in line, line
        with gevent.Timeout(5):
            while not node.pipes:
                gevent.sleep(0.01)
        node.send(b"child hello")
        node.close()

    pid = fork_child(child)
    assert hub.recv() == b"child hello"
    assert wait_child(pid) == 0
    late = gsp.socket("bus", dial=node_url, recv_timeout=10)  # the parent's listener accepts
    with gevent.Timeout(5):
        while not late.pipes:
            gevent.sleep(0.01)
    late.send(b"late")
    assert node.recv() == b"late"
    for s in (late, node, hub):
        s.close()
    return {}


def scenario_copies_closed() -> dict[str, Any]:
    """The child closed its copies at once: while it still runs, the parent's peer sees the
    parent close a pipe (EOF), and the parent's closed listener frees its port."""
    rep = gsp.socket("rep", listen="tcp://127.0.0.1:0")
    url = rep.listeners[0].url
    req = gsp.socket("req", dial=url)
    gevent.sleep(0.1)
    assert len(rep.pipes) == 1
    ours = rep.pipes[0].id
    pid = fork_child(lambda: gevent.sleep(3))  # (its REQ redials the REP meanwhile)
    gevent.sleep(0.2)
    req.close()
    with gevent.Timeout(2):
        while ours in [p.id for p in rep.pipes]:
            gevent.sleep(0.01)
    rep.close()
    host, port = url[len("tcp://"):].rsplit(":", 1)
    again = gsp.socket("rep", listen=url)  # AddressInUse if the child still listened
    assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # the child runs still
    again.close()
    assert wait_child(pid) == 0
    return {}


def scenario_midflight() -> dict[str, Any]:
    """Fork while dials and handshakes are under way (after 0 to 12 turns of the loop, some of
    them short sleeps): nothing is corrupted, both processes end up with working pipes of their
    own."""
    results = []
    for turns in range(13):
        rep = gsp.socket("rep", listen="tcp://127.0.0.1:0")
        workers = serve(rep, 2)
        req = gsp.socket("req", recv_timeout=10)
        for _ in range(3):
            req.dial(rep.listeners[0].url, background=True)
        for i in range(turns):
            gevent.sleep(0 if i % 2 else 0.0005)
        state = (len(req.pipes), len(rep.pipes))

        def child(req: gsp.Socket = req) -> None:
            round_trips(req, "child", 10)
            req.close()

        pid = fork_child(child)
        round_trips(req, "parent", 10)
        assert wait_child(pid) == 0
        round_trips(req, "parent-after", 10)
        gevent.sleep(0.05)
        assert len(req.pipes) == 3, req.pipes
        results.append(state)
        req.close()
        rep.close()
        gevent.joinall(workers)
    return {"pipes_at_fork": results}


def scenario_multiprocessing() -> dict[str, Any]:
    """multiprocessing's "fork" start method: the target uses the inherited REQ as is."""
    import multiprocessing

    rep = gsp.socket("rep", listen="tcp://127.0.0.1:0")
    workers = serve(rep)
    req = gsp.socket("req", dial=rep.listeners[0].url, recv_timeout=10)
    round_trips(req, "before", 5)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=round_trips, args=(req, f"mp{i}-", 20)) for i in range(3)]
    for p in procs:
        p.start()
    with gevent.Timeout(30):
        while any(p.exitcode is None for p in procs):
            round_trips(req, "parent", 2)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    round_trips(req, "after", 5)
    req.close()
    rep.close()
    gevent.joinall(workers)
    return {"children": len(procs)}


def scenario_per_process() -> dict[str, Any]:
    """50 greenlets ask at once: one socket made; a forked child gets its own."""
    rep = gsp.socket("rep", listen="tcp://127.0.0.1:0")
    workers = serve(rep)
    made: list[gsp.Socket] = []
    url = rep.listeners[0].url  # (in a child, the REP has no listeners: they are the parent's)

    def factory() -> gsp.Socket:
        sock = gsp.socket("req", dial=url, recv_timeout=10)
        made.append(sock)
        return sock

    holder = gsp.per_process(factory)
    assert not holder.made
    got = [gevent.spawn(holder.get) for _ in range(50)]
    gevent.joinall(got, raise_error=True)
    assert len(made) == 1 and all(g.value is made[0] for g in got), made
    round_trips(holder.get(), "parent", 3)

    def child() -> dict[str, Any]:
        assert not holder.made
        inherited = made[0]
        jobs = [gevent.spawn(holder.get) for _ in range(50)]
        gevent.joinall(jobs, raise_error=True)
        assert len(made) == 2 and all(j.value is made[1] for j in jobs), made
        assert inherited.closed  # the parent's copy, closed in the child only
        round_trips(holder.get(), "child", 5)
        holder.close()
        assert made[1].closed
        try:
            holder.get()
        except gsp.Closed:
            pass
        else:
            raise AssertionError("get after close")
        return {"made_in_child": len(made) - 1}

    pid = fork_child(child)
    round_trips(holder.get(), "parent-during", 5)
    assert wait_child(pid) == 0
    assert holder.get() is made[0] and not made[0].closed
    round_trips(holder.get(), "parent-after", 5)
    holder.close()
    rep.close()
    gevent.joinall(workers)
    return {"made_in_parent": 1}


def scenario_other_thread() -> dict[str, Any]:
    """A socket of another OS thread (gsp.blocking's hub) at fork: the child, where that thread
    does not exist, closes its copies and the socket (its calls raise Closed saying why) while
    the forking thread's REQ works on; the parent's blocking socket is untouched."""
    import gsp.blocking

    # Both of the other thread's sockets are served there (a blocking call from this thread
    # blocks this thread's hub until it returns).
    rep = gsp.blocking.socket("rep", listen="tcp://127.0.0.1:0")
    rep.hub.call(serve, rep.sock)
    url = rep.sock.listeners[0].url
    req = gsp.socket("req", dial=url, recv_timeout=10)
    other = gsp.blocking.socket("req", dial=url, recv_timeout=10)
    for i in range(5):
        other.send(b"other %d" % i)
        assert other.recv().startswith(b"other %d from" % i)
    round_trips(req, "before", 5)
    other_pipes = [p.id for p in other.pipes]
    assert len(other_pipes) == 1, other_pipes

    def child() -> dict[str, Any]:
        lines = forked_lines()
        assert len(lines) == 3, lines  # req, and the other thread's rep and req
        assert sum("another OS thread" in line for line in lines) == 2, lines
        inner = other.sock
        assert inner.closed and inner not in gsp.sockets()
        try:
            inner.recv(block=False)
        except gsp.Closed as exc:
            assert "does not exist in this forked child" in str(exc), exc
        else:
            raise AssertionError("the other thread's socket answered in the child")
        try:
            other.send(b"x")
        except gsp.Closed:
            pass
        else:
            raise AssertionError("the parent's blocking hub took a call in the child")
        round_trips(req, "child", 20)
        req.close()
        return {"lines": lines}

    pid = fork_child(child)
    code = wait_child(pid)
    assert code == 0, code
    for i in range(5):  # the parent's pipe of the other thread's socket is untouched
        other.send(b"after %d" % i)
        assert other.recv().startswith(b"after %d from" % i)
    assert [p.id for p in other.pipes] == other_pipes
    round_trips(req, "after", 5)
    assert forked_lines() == []
    other.close()
    req.close()
    rep.close()
    return {"other_thread_pipes": len(other_pipes)}


def scenario_adopted() -> dict[str, Any]:
    """socket:// and listen_fd: a REQ and a REP joined by a socketpair (socket://) and a REP
    accepting on a listening socket it was given (listen_fd). Their only endpoints are
    listeners, so the child gets InheritedListener on all three; the socketpair's pipe stays
    the parent's (its ids unchanged, round trips go on), and the child, still holding its own
    copy of the given listening socket, serves on it with a socket of its own."""
    import socket

    a, b = socket.socketpair()
    given = socket.create_server(("127.0.0.1", 0))
    address = "tcp://127.0.0.1:%d" % given.getsockname()[1]
    req = gsp.socket("req", recv_timeout=10)
    rep = gsp.socket("rep")
    req.listen("socket://").adopt(a)
    rep.listen("socket://").adopt(b)
    shared = gsp.socket("rep", listen="tcp://", listen_fd=given.fileno())
    workers = serve(rep) + serve(shared)
    round_trips(req, "before", 5)
    parent_pipes = [p.id for p in req.pipes]
    with gsp.socket("req", dial=address, recv_timeout=10) as asker:
        round_trips(asker, "shared", 3)

    def child() -> dict[str, Any]:
        for inherited in (req, rep, shared):
            try:
                inherited.open_context()
            except gsp.InheritedListener as exc:
                assert "tcp_reuseport=True" in str(exc), exc
            else:
                raise AssertionError(f"the inherited {inherited} works in the child")
        mine = gsp.socket("rep", listen="tcp://", listen_fd=given.fileno())
        assert mine.listeners[0].url == address
        mine_workers = serve(mine, 2)
        with gsp.socket("req", dial=address, recv_timeout=10) as asker:
            round_trips(asker, "child", 5)  # answered by the child's REP or the parent's
        mine.close()
        gevent.joinall(mine_workers)
        return {}

    n = round_trips_until_exit(req, fork_child(child))
    assert [p.id for p in req.pipes] == parent_pipes, (req.pipes, parent_pipes)
    round_trips(req, "after", 10)
    with gsp.socket("req", dial=address, recv_timeout=10) as asker:
        round_trips(asker, "after", 3)
    assert forked_lines() == []
    for s in (req, rep, shared):
        s.close()
    gevent.joinall(workers)
    given.close()
    return {"parent_round_trips_during_child": n}


#: Python 3.12+ warns when a process forks while it runs other OS threads (the child gets only
#: the forking one); every scenario's forks are counted: gsp keeps no thread of its own that a
#: fork would meet, so only other_thread's fork, beside gsp.blocking's hub thread, warns.
THREADS_AT_FORK = r"This process \(pid=\d+\) is multi-threaded"

if __name__ == "__main__":
    name = sys.argv[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("always", THREADS_AT_FORK, DeprecationWarning)
        figures = globals()[f"scenario_{name.replace('-', '_')}"]()
    warned = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert len(warned) == (name == "other_thread" and sys.version_info >= (3, 12)), warned
    print("OK", json.dumps(figures), flush=True)
