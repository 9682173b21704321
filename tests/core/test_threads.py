"""docs/concurrency.md's rule for OS threads: each thread has its own hub and its own sockets,
connected over ipc/tcp; many greenlets of one hub share a socket, contexts give each request its
own state."""

from __future__ import annotations

import threading
from typing import Any

import gevent

import gsp


def test_threads_with_their_own_hubs_talk_over_ipc(gsp_free_url: Any) -> None:
    url = gsp_free_url("ipc")
    listening = threading.Event()
    stop = threading.Event()
    got: list[bytes] = []
    hubs: list[Any] = []

    def consumer() -> None:  # its own OS thread, hence its own hub
        hub = gevent.get_hub()
        hubs.append(hub)
        try:
            with gsp.socket("pull", listen=url, recv_timeout=0.1) as pull:
                listening.set()
                while not stop.is_set() and len(got) < 50:
                    try:
                        got.append(pull.recv())
                    except gsp.Timeout:
                        continue
        finally:
            hub.destroy(destroy_loop=True)

    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    try:
        assert listening.wait(10)
        with gsp.socket("push", dial=url, send_timeout=5) as push:
            assert hubs[0] is not gevent.get_hub()
            for i in range(50):
                push.send(b"%d" % i)
            # Not t.join(): it would block this thread's hub, and with it push's writer.
            with gevent.Timeout(10):
                while t.is_alive():
                    gevent.sleep(0.01)
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert got == [b"%d" % i for i in range(50)]


def test_many_greenlets_share_one_req_socket_through_contexts(gsp_free_url: Any) -> None:
    url = gsp_free_url("inproc")
    with gsp.socket("rep", listen=url) as rep, gsp.socket("req", dial=url) as req:
        def worker() -> None:
            with rep.open_context() as ctx:
                while True:
                    try:
                        msg = ctx.recv()
                    except gsp.Closed:
                        return
                    gevent.sleep(0.01 * (msg[0] % 3))  # answers come back out of order
                    ctx.send(b"re:" + msg)

        def ask(i: int) -> bytes:
            with req.open_context() as ctx:
                ctx.recv_timeout = 5
                ctx.send(bytes([i]))
                reply: bytes = ctx.recv()
                return reply

        workers = [gevent.spawn(worker) for _ in range(4)]
        asks = [gevent.spawn(ask, i) for i in range(30)]
        gevent.joinall(asks, timeout=10, raise_error=True)
        assert [a.value for a in asks] == [b"re:" + bytes([i]) for i in range(30)]
    gevent.joinall(workers, timeout=5)
    assert all(w.dead for w in workers)


def test_a_second_send_on_the_req_socket_itself_cancels_the_first(gsp_free_url: Any) -> None:
    url = gsp_free_url("inproc")
    with gsp.socket("rep", listen=url) as rep, \
            gsp.socket("req", dial=url, recv_timeout=5) as req:
        req.send(b"first")
        waiting = gevent.spawn(req.recv)
        gevent.sleep(0.01)
        req.send(b"second")  # another greenlet's request, on the same (default) context
        try:
            waiting.get(timeout=5)
            raise AssertionError("the first request's recv should have failed")
        except gsp.ProtocolStateError:
            pass
        assert rep.recv() in (b"first", b"second")
