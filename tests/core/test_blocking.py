"""gsp.blocking: gsp from plain OS threads through a hub running in a background thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable, Iterator

import gevent
import pytest

import gsp
import gsp.blocking
from gsp.blocking import Hub
from tests.conftest import MONKEY
from tests.support import scaled

pytestmark = pytest.mark.skipif(MONKEY, reason="needs real OS threads (tests/core/test_wrong_thread.py "
                                "has the monkey-patched case)")


@pytest.fixture
def hub() -> Iterator[Hub]:
    h = Hub("test-hub")
    yield h
    h.close()
    assert not h.thread.is_alive()


@pytest.fixture
def echo(hub: Hub, gsp_free_url: Any) -> str:
    """A REP in ``hub``'s thread answering ``b"<request>!"`` from 8 contexts."""
    url = gsp_free_url("tcp")
    rep = hub.socket("rep", listen=url)

    def worker() -> None:
        with rep.sock.open_context() as ctx:
            while True:
                try:
                    ctx.send(ctx.recv() + b"!")
                except gsp.Closed:
                    return

    def start() -> None:
        for _ in range(8):
            gevent.spawn(worker)
    hub.call(start)
    return url


def threads(n: int, fn: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            fn(k)
        except BaseException as exc:
            errors.append(exc)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
        assert not t.is_alive()
    return errors


def test_many_plain_threads_at_once(echo: str) -> None:
    # 8 threads x 50 round trips, each thread its own REQ, all through the process-wide hub.
    answered: list[int] = []

    def client(k: int) -> None:
        with gsp.blocking.socket("req", dial=echo, send_timeout=5, recv_timeout=5) as s:
            for i in range(50):
                s.send(b"%d-%d" % (k, i))
                assert s.recv() == b"%d-%d!" % (k, i)
                answered.append(k)

    assert threads(8, client) == []
    assert len(answered) == 400
    assert gsp.blocking.hub().thread.name == "gsp-blocking"


def test_one_socket_shared_by_threads_through_contexts(echo: str) -> None:
    with gsp.blocking.socket("req", dial=echo, recv_timeout=5) as s:
        def client(k: int) -> None:
            with s.open_context() as ctx:
                for i in range(50):
                    ctx.send_obj({"k": k, "i": i})
                    reply = ctx.recv()
                    assert gsp.objects.unpack(reply[:-1]) == {"k": k, "i": i}, reply
        assert threads(8, client) == []


def test_objects_options_and_protocol_methods(hub: Hub, gsp_free_url: Any) -> None:
    url = gsp_free_url("tcp")
    with hub.socket("pair", listen=url, recv_timeout=5) as a, \
            hub.socket("pair", dial=url, recv_timeout=5, send_timeout=5) as b:
        b.send_obj({"x": [1, 2]})
        assert a.recv_obj() == {"x": [1, 2]}
        b.send_msg(gsp.Message(b"m"))
        assert a.recv_msg().body == b"m"
        b.send(bytearray(b"many1"))
        b.send(memoryview(b"many2"))
        deadline = time.monotonic() + 5
        got: list[bytes] = []
        while len(got) < 2 and time.monotonic() < deadline:
            got += a.recv_many(10)
        assert got == [b"many1", b"many2"]
        assert a.recv_timeout == 5.0
        a.recv_timeout = 0.1
        assert a.get_option("recv_timeout") == 0.1
        assert a.stats["pipes"] == 1
        assert hub.call(lambda: a.sock.recv_timeout) == 0.1
    with hub.socket("sub", recv_timeout=5) as sub:
        sub.subscribe(b"")  # a protocol method, shipped like the rest
        sub.unsubscribe(b"")


def test_timeouts_are_honored(hub: Hub) -> None:
    with hub.socket("pull", recv_timeout=0.2) as s:
        t0 = time.monotonic()
        with pytest.raises(gsp.Timeout, match=r"recv timed out after 0.2 s \(recv_timeout=0.2\)"):
            s.recv()
        assert 0.15 < time.monotonic() - t0 < scaled(2)
        with pytest.raises(gsp.WouldBlock):
            s.recv(block=False)
        with pytest.raises(gsp.Timeout, match=r"\(timeout=0.1\)"):
            s.recv(timeout=0.1)


def test_errors_cross_threads(hub: Hub) -> None:
    with hub.socket("push") as s:
        with pytest.raises(gsp.NotSupported):
            s.recv()
        with pytest.raises(gsp.BadOption, match="recv_timeout"):
            s.recv_timeout = -1
        with pytest.raises(gsp.BadOption):
            hub.socket("push", no_such_option=1)
        with pytest.raises(gsp.UnknownPlugin):
            hub.socket("no-such-protocol")
        with pytest.raises(ZeroDivisionError):
            hub.call(lambda: 1 / 0)
    # The socket itself, touched from this thread, says so at once.
    with hub.socket("pull") as s:
        with pytest.raises(gsp.WrongThread):
            s.sock.recv()


def test_close_wakes_a_blocked_call_in_another_thread(hub: Hub) -> None:
    s = hub.socket("pull")  # recv waits forever
    errors: list[BaseException] = []
    calling = threading.Event()

    def call() -> None:
        calling.set()
        errors.append(pytest.raises(gsp.Closed, s.recv).value)

    t = threading.Thread(target=call)
    t.start()
    assert calling.wait(5)
    time.sleep(0.02)  # the recv is waiting in the hub's thread
    assert t.is_alive()
    s.close()
    t.join(5)
    assert not t.is_alive() and isinstance(errors[0], gsp.Closed)
    assert s.closed
    with pytest.raises(gsp.Closed):
        s.recv()
    s.close()  # idempotent


def test_hub_close_closes_its_sockets_and_stops(gsp_free_url: Any) -> None:
    h = Hub("short-lived")
    s = h.socket("pull", listen=gsp_free_url("tcp"))
    blocked = h.submit(s.sock.recv)
    assert h.call(lambda: 42) == 42
    assert h.submit(lambda x: x * 2, 21).result(5) == 42
    h.close()
    assert not h.thread.is_alive() and h.closed and s.closed
    with pytest.raises(gsp.Closed):
        blocked.result(5)
    with pytest.raises(gsp.Closed, match="hub is closed"):
        h.call(lambda: 1)
    with pytest.raises(gsp.Closed):
        h.socket("pull")


def test_call_from_the_hub_thread_runs_at_once(hub: Hub) -> None:
    def nested() -> int:
        return hub.call(lambda: 7) + 1  # no deadlock: already in the hub's thread
    assert hub.call(nested) == 8


def test_the_process_wide_hub_flushes_and_stops_at_exit(gsp_free_url: Any) -> None:
    # A script that sends through gsp.blocking and exits without closing: every message arrives
    # (the hub closes its sockets at exit, each flushing within its linger) and exit is clean.
    url = gsp_free_url("tcp")
    script = textwrap.dedent(f"""
        import gsp.blocking
        s = gsp.blocking.socket("push", dial={url!r}, send_timeout=5)
        for i in range(1000):
            s.send(b"%d" % i)
        print("sent", flush=True)
    """)
    with gsp.socket("pull", listen=url, recv_timeout=10) as pull:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        got = [pull.recv() for _ in range(1000)]
        while proc.poll() is None:
            gevent.sleep(0.05)
        out, err = proc.communicate(timeout=10)
    assert got == [b"%d" % i for i in range(1000)]
    assert proc.returncode == 0 and out == "sent\n", err
    assert "Traceback" not in err and "LoopExit" not in err, err


def test_after_fork_the_parents_hub_is_closed_in_the_child_and_a_new_one_starts() -> None:
    script = textwrap.dedent("""
        import os, sys, time, gsp, gsp.blocking
        old = gsp.blocking.socket("pair", listen="inproc://before-fork", recv_timeout=5)
        peer = gsp.blocking.socket("pair", dial="inproc://before-fork", send_timeout=5)
        pid = os.fork()
        if pid == 0:
            t0 = time.monotonic()
            try:
                old.recv()
                os._exit(3)
            except gsp.Closed as exc:
                # at once, not after recv_timeout
                assert time.monotonic() - t0 < 4 and "hub is closed" in str(exc), exc
            with gsp.blocking.socket("pair", listen="inproc://after", recv_timeout=5) as a, \\
                    gsp.blocking.socket("pair", dial="inproc://after", send_timeout=5) as b:
                b.send(b"child")
                assert a.recv() == b"child"
            assert gsp.blocking.hub() is not old.hub
            sys.stdout.flush()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        peer.send(b"parent")
        assert old.recv() == b"parent"
        print("child", os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "child 0\n", out.stdout + out.stderr
