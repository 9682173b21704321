"""A socket, context or channel used from an OS thread other than the one whose hub made it
raises gsp.WrongThread at once (docs/concurrency.md), and still works in its own thread after."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable

import gevent
import pytest

import gsp
from tests.conftest import MONKEY
from tests.support import scaled

pytestmark = pytest.mark.skipif(MONKEY, reason="needs real OS threads (its monkey case: below)")


def in_thread(fn: Callable[[], Any]) -> tuple[BaseException | None, float]:
    """Run ``fn`` in a new OS thread; what it raised and how long it took."""
    out: list[Any] = []

    def run() -> None:
        t0 = time.monotonic()
        try:
            fn()
        except BaseException as exc:
            out.append((exc, time.monotonic() - t0))
        else:
            out.append((None, time.monotonic() - t0))

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not t.is_alive()
    result: tuple[BaseException | None, float] = out[0]
    return result


def wrong_thread(fn: Callable[[], Any], what: str) -> gsp.WrongThread:
    exc, took = in_thread(fn)
    assert isinstance(exc, gsp.WrongThread), repr(exc)
    assert isinstance(exc, gsp.GspError)
    assert took < scaled(0.5), took  # at once, not when a timeout fires
    msg = str(exc)
    assert f"this {what} belongs to the gevent hub of OS thread 'MainThread'" in msg, msg
    assert "gsp.blocking" in msg and "docs/concurrency.md" in msg, msg
    assert exc.owner == threading.main_thread().ident and exc.thread != exc.owner
    return exc


def test_socket_recv_send_close_from_another_thread(gsp_free_url: Any) -> None:
    url = gsp_free_url("tcp")
    with gsp.socket("pull", listen=url, recv_timeout=5) as pull, \
            gsp.socket("push", send_timeout=5) as idle, \
            gsp.socket("req", dial=url, send_timeout=5, recv_timeout=5) as req, \
            gsp.socket("push", dial=url, send_timeout=5) as push:
        wrong_thread(pull.recv, "socket")                  # would wait: nothing queued
        wrong_thread(lambda: idle.send(b"x"), "socket")    # would wait: no peer
        wrong_thread(lambda: req.send(b"x"), "socket")     # req's send (its request state)
        assert isinstance(in_thread(req.recv)[0], gsp.ProtocolStateError)  # no wait: no check
        wrong_thread(pull.close, "socket")
        wrong_thread(lambda: idle.dial(url), "socket")
        assert not pull.closed and not idle.dialers
        # ... and all of them still work in their own thread.
        push.send(b"after")
        assert pull.recv() == b"after"
        with pytest.raises(gsp.WouldBlock):
            idle.send(b"x", block=False)


def test_context_from_another_thread(gsp_free_url: Any) -> None:
    url = gsp_free_url("tcp")
    with gsp.socket("rep", listen=url, recv_timeout=5) as rep, \
            gsp.socket("req", dial=url, recv_timeout=5) as req:
        ctx = rep.open_context()
        rctx = req.open_context()
        wrong_thread(ctx.recv, "context")
        wrong_thread(lambda: rctx.send(b"x"), "context")
        wrong_thread(rctx.recv_msg, "context")
        wrong_thread(ctx.close, "context")
        wrong_thread(rep.open_context, "socket")
        assert not ctx.closed
        req.send(b"on the socket")  # then its recv waits, in a context of its own inside
        wrong_thread(req.recv, "socket")
        assert ctx.recv() == b"on the socket"
        ctx.send(b"answer")
        assert req.recv() == b"answer"

        def serve() -> None:
            ctx.send(ctx.recv() + b"!")
        g = gevent.spawn(serve)
        rctx.send(b"hi")
        assert rctx.recv() == b"hi!"
        g.join()
        ctx.close()
        rctx.close()


def test_chan_from_another_thread() -> None:
    ch: gsp.Chan[int] = gsp.Chan(1)
    wrong_thread(ch.recv, "channel")                          # would wait
    wrong_thread(lambda: gsp.select([gsp.Recv(ch)]), "channel")
    wrong_thread(ch.close, "channel")
    parked = gevent.spawn(ch.recv)
    gevent.sleep(0)  # parked on the channel: a send would wake it from the wrong thread
    wrong_thread(lambda: ch.send(1), "channel")
    ch.send(2)
    assert parked.get(timeout=5) == 2
    ch.send(3)
    wrong_thread(lambda: ch.send(4, timeout=5), "channel")     # full: would wait
    assert ch.recv() == 3
    ch.close()
    assert ch.closed


def test_the_thread_that_made_it_may_be_any_thread(gsp_free_url: Any) -> None:
    # Made in a worker thread, used there: fine; the main thread is then the foreign one.
    url = gsp_free_url("ipc")
    made: list[Any] = []
    go, done = threading.Event(), threading.Event()

    def worker() -> None:
        hub = gevent.get_hub()
        try:
            with gsp.socket("pull", listen=url, recv_timeout=5) as pull:
                made.append(pull)
                go.wait(10)
                with gsp.socket("push", dial=url, send_timeout=5) as push:
                    push.send(b"own thread")
                    made.append(pull.recv())
            done.set()
        finally:
            hub.destroy(destroy_loop=True)

    t = threading.Thread(target=worker)
    t.start()
    deadline = time.monotonic() + 10
    while not made and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(gsp.WrongThread, match="used from OS thread 'MainThread'"):
        made[0].recv(timeout=1)
    go.set()
    t.join(10)
    assert done.is_set() and made[1] == b"own thread"


def test_greenlets_of_a_patched_program_share_sockets(tmp_path: Any) -> None:
    # Under monkey patching a "thread" is a greenlet of the one hub: no WrongThread.
    script = tmp_path / "patched.py"
    script.write_text(textwrap.dedent("""
        from gevent import monkey; monkey.patch_all()
        import threading, gsp, gsp.blocking
        pull = gsp.socket("pull", listen="inproc://patched", recv_timeout=5)
        push = gsp.socket("push", dial="inproc://patched", send_timeout=5)
        ch = gsp.Chan()
        got = []
        t = threading.Thread(target=lambda: got.append((pull.recv(), ch.recv())))
        t.start()
        push.send(b"m"); ch.send(1)
        t.join(5)
        with gsp.blocking.socket("pair", recv_timeout=0.05) as s:  # runs in the caller's greenlet
            try:
                s.recv()
            except gsp.Timeout:
                got.append("timeout")
        pull.close(); push.close()
        print(got)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(b'm', 1), 'timeout']", out.stdout + out.stderr
