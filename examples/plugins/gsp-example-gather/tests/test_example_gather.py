"""gsp-example-gather through gsp.socket(): task round trips over several workers, redelivery
of a lost worker's tasks, contexts, options, timeouts, closed sockets, raw modes and a device.
Servers listen on 127.0.0.1 only."""

from __future__ import annotations

from typing import Any, Callable

import gevent
import pytest
from gevent.event import Event

import gsp
from gsp.protocol import u32
from gsp.testing import ProtocolSuite, wait_for
from gsp_example_gather import GATHER, SCATTER

ANY_PORT = "tcp://127.0.0.1:0"
WAIT = 10.0  # a safety net for waits that end on an event, never a measured time


# Both protocols through gsp's conformance kit: identity, closed sockets, timeouts without
# peers, options, raw exchanges and pipe churn.
class TestScatterProtocol(ProtocolSuite):
    protocol, peer = "scatter", "gather"
    number, peer_number = SCATTER, GATHER
    send_blocks = True  # a task waits for a worker
    contexts = True
    raw_header = u32(0x80000001)  # a task id
    options = {"redeliver": (True, [False], [1, "yes", None])}

    def prepare(self, sock: gsp.Socket) -> None:
        # The kit's churn check expects a churned peer's messages to be gone with it; scatter
        # would hand them to the next worker instead (tested on its own below).
        if sock.protocol == "scatter" and not sock.raw:
            sock.redeliver = False


class TestGatherProtocol(ProtocolSuite):
    protocol, peer = "gather", "scatter"
    number, peer_number = GATHER, SCATTER
    replies = True  # a result answers a task received
    contexts = True
    options = {"ttl": (8, [1, 255], [0, 256, "8"])}


# Every test below fails if it leaves a greenlet running or a socket open (gsp.testing's check).
pytestmark = pytest.mark.usefixtures("gsp_leak_check")


class Worker:
    """A gather socket dialing ``url`` and a greenlet answering each task with ``fn(task)``."""

    def __init__(self, url: str, fn: Callable[[bytes], bytes] = bytes.upper, **options: Any) -> None:
        self.sock = gsp.socket("gather", dial=url, **options)
        self.fn = fn
        self.tasks: list[bytes] = []
        self.greenlet = gevent.spawn(self.serve)

    def serve(self) -> None:
        try:
            while True:
                task = self.sock.recv()
                self.tasks.append(task)
                self.sock.send(self.fn(task))
        except gsp.Closed:
            pass

    def close(self) -> None:
        self.sock.close()
        self.greenlet.get(timeout=WAIT)


def workers(url: str, n: int, **kw: Any) -> list[Worker]:
    return [Worker(url, **kw) for _ in range(n)]


def close_all(ws: list[Worker]) -> None:
    for w in ws:
        w.close()


# -- tests --------------------------------------------------------------------------------------

def test_identity(gsp_socket: Callable[..., gsp.Socket]) -> None:
    assert {"scatter", "gather"} <= set(gsp.protocol_names())
    s = gsp_socket("scatter")
    g = gsp_socket("gather")
    assert (s.protocol, g.protocol) == ("scatter", "gather")
    own = ("dropped", "dropped_queue_full", "redelivered", "lost", "discarded")
    assert {k: s.stats[k] for k in own} == dict.fromkeys(own, 0)


def test_tasks_spread_over_workers_and_come_back(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    ws = workers(s.listeners[0].url, 3)
    try:
        wait_for(lambda: len(s.pipes) == 3)
        tasks = [b"task %d" % i for i in range(30)]
        for t in tasks:
            s.send(t)
        assert s.outstanding() == 30  # nothing ran yet: sending did not yield
        results = [s.recv() for _ in tasks]
        assert sorted(results) == sorted(t.upper() for t in tasks)
        assert s.outstanding() == 0
        assert [len(w.tasks) for w in ws] == [10, 10, 10]  # one peer in turn
        s.send(b"which pipe?")
        got = s.recv_msg()
        assert got.body == b"WHICH PIPE?" and got.header == b"" and got.pipe in s.pipes
    finally:
        close_all(ws)


def test_workers_may_listen_and_scatter_dial(gsp_socket: Callable[..., gsp.Socket]) -> None:
    ws: list[gsp.Socket] = [gsp.socket("gather", listen=ANY_PORT) for _ in range(2)]
    serving = []
    try:
        s = gsp_socket("scatter", recv_timeout=WAIT)
        for w in ws:
            s.dial(w.listeners[0].url)

        def serve(sock: gsp.Socket) -> None:
            try:
                while True:
                    sock.send(sock.recv() + b"!")
            except gsp.Closed:
                pass

        serving = [gevent.spawn(serve, w) for w in ws]
        wait_for(lambda: len(s.pipes) == 2)
        for i in range(4):
            s.send(b"%d" % i)
        assert sorted(s.recv() for _ in range(4)) == [b"0!", b"1!", b"2!", b"3!"]
        s.close()
    finally:
        for w in ws:
            w.close()
        gevent.joinall(serving, timeout=WAIT, raise_error=True)


def test_results_arrive_in_the_order_they_finish(gsp_socket: Callable[..., gsp.Socket]) -> None:
    release = Event()

    def slow(task: bytes) -> bytes:
        release.wait()
        return b"slow " + task

    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    url = s.listeners[0].url
    ws = [Worker(url, fn=slow)]
    try:
        wait_for(lambda: len(s.pipes) == 1)
        ws.append(Worker(url, fn=lambda t: b"fast " + t))
        wait_for(lambda: len(s.pipes) == 2)
        s.send(b"a")  # to the slow worker (it attached first)
        s.send(b"b")  # to the fast one
        assert s.recv() == b"fast b"
        release.set()
        assert s.recv() == b"slow a"
    finally:
        release.set()
        close_all(ws)


def test_tasks_of_a_lost_worker_are_sent_again(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    url = s.listeners[0].url
    dead = gsp_socket("gather", dial=url, recv_timeout=WAIT)
    wait_for(lambda: s.pipes)
    for i in range(3):
        s.send(b"job %d" % i)
    assert dead.recv() == b"job 0"  # it took the work... and dies without answering
    dead.close()
    wait_for(lambda: s.stats["redelivered"] == 3)
    assert s.outstanding() == 3
    ws = workers(url, 1)
    try:
        assert sorted(s.recv() for _ in range(3)) == [b"JOB 0", b"JOB 1", b"JOB 2"]
        assert s.outstanding() == 0
        assert s.stats["lost"] == 0
    finally:
        close_all(ws)


def test_without_redelivery_lost_tasks_are_counted_and_forgotten(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT, redeliver=False, recv_timeout=0.01)
    url = s.listeners[0].url
    with gsp.socket("gather", dial=url):
        wait_for(lambda: s.pipes)
        for i in range(3):
            s.send(b"job %d" % i)
    wait_for(lambda: s.stats["lost"] == 3)
    assert s.outstanding() == 0 and s.stats["redelivered"] == 0
    with pytest.raises(gsp.Timeout):
        s.recv()
    # handle.watch: the protocol follows the option when it changes.
    s.redeliver = True
    with gsp.socket("gather", dial=url):
        wait_for(lambda: s.pipes)
        s.send(b"job 3")
    wait_for(lambda: s.stats["redelivered"] == 1)
    assert s.outstanding() == 1


def test_contexts_receive_only_their_own_results(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    ws = workers(s.listeners[0].url, 2)
    try:
        wait_for(lambda: len(s.pipes) == 2)

        def batch(name: bytes) -> list[bytes]:
            with s.open_context() as ctx:
                for i in range(25):
                    ctx.send(b"%s-%d" % (name, i))
                assert isinstance(ctx, gsp.Context)
                results = [ctx.recv() for _ in range(25)]
                assert ctx.outstanding() == 0  # type: ignore[attr-defined]
                return results

        jobs = [gevent.spawn(batch, name) for name in (b"x", b"y", b"z")]
        s.send(b"socket-level")
        for name, job in zip((b"x", b"y", b"z"), jobs):
            got = job.get(timeout=WAIT)
            assert sorted(got) == sorted(b"%s-%d" % (name.upper(), i) for i in range(25))
        assert s.recv() == b"SOCKET-LEVEL"
    finally:
        close_all(ws)


def test_context_options_and_timeouts(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", recv_timeout=WAIT, send_timeout=WAIT)
    ctx = s.open_context()
    assert ctx.recv_timeout == WAIT
    ctx.recv_timeout = 0.01
    with pytest.raises(gsp.Timeout):
        ctx.recv()
    ctx.send_timeout = 0
    with pytest.raises(gsp.WouldBlock):
        ctx.send(b"no worker")
    assert ctx.outstanding() == 0  # type: ignore[attr-defined]
    with pytest.raises(gsp.BadOption):
        ctx.recv_timeout = -1


def test_timeouts_without_workers(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", recv_timeout=0.01, send_timeout=0.01)
    with pytest.raises(gsp.Timeout):
        s.send(b"nobody")
    with pytest.raises(gsp.Timeout):
        s.recv()
    with pytest.raises(gsp.Timeout):
        s.recv_msg()
    s.send_timeout = s.recv_timeout = 0
    with pytest.raises(gsp.WouldBlock):
        s.send(b"nobody")
    with pytest.raises(gsp.WouldBlock):
        s.recv()
    assert s.outstanding() == 0
    s.best_effort = True
    s.send(b"dropped")  # no peer had room: dropped at once, counted
    assert s.stats["dropped_queue_full"] == s.stats["dropped"] == 1
    assert s.outstanding() == 0
    s.close()
    g = gsp_socket("gather", recv_timeout=0.01)
    with pytest.raises(gsp.Timeout):
        g.recv()


def test_send_waits_for_a_worker(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    sending = gevent.spawn(s.send, b"early")
    gevent.sleep(0)
    assert not sending.dead  # no worker yet: send waits (send_timeout is None)
    ws = workers(s.listeners[0].url, 1)
    try:
        sending.get(timeout=WAIT)
        assert s.recv() == b"EARLY"
    finally:
        close_all(ws)


def test_closed_socket() -> None:
    s = gsp.socket("scatter")
    receiving = gevent.spawn(s.recv)
    sending = gevent.spawn(s.send, b"no worker")
    ctx = s.open_context()
    ctx_receiving = gevent.spawn(ctx.recv)
    gevent.sleep(0)
    s.close()
    for g in (receiving, sending, ctx_receiving):
        with pytest.raises(gsp.Closed):
            g.get(timeout=WAIT)
    for op in (lambda: s.send(b"x"), s.recv, s.recv_msg, s.outstanding, s.open_context,
               lambda: ctx.send(b"x"), ctx.recv):
        with pytest.raises(gsp.Closed):
            op()
    s.close()  # idempotent


def test_result_of_a_closed_context_is_discarded(gsp_socket: Callable[..., gsp.Socket]) -> None:
    release = Event()

    def held(task: bytes) -> bytes:
        release.wait()
        return task

    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    ws = [Worker(s.listeners[0].url, fn=held)]
    try:
        ctx = s.open_context()
        ctx.send(b"abandoned")
        wait_for(lambda: ws[0].tasks)
        ctx.close()
        release.set()
        wait_for(lambda: s.stats["discarded"] == 1)
        assert s.outstanding() == 0
    finally:
        release.set()
        close_all(ws)


def test_gather_state_and_closed(gsp_socket: Callable[..., gsp.Socket]) -> None:
    g = gsp_socket("gather", recv_timeout=WAIT)
    with pytest.raises(gsp.ProtocolStateError):
        g.send(b"a result of nothing")
    waiting = gevent.spawn(g.recv)
    gevent.sleep(0)
    g.close()
    with pytest.raises(gsp.Closed):
        waiting.get(timeout=WAIT)
    with pytest.raises(gsp.Closed):
        g.recv()


def test_options(gsp_socket: Callable[..., gsp.Socket]) -> None:
    for bad in (1, "yes", None):
        with pytest.raises(gsp.BadOption):
            gsp.socket("scatter", redeliver=bad)
    s = gsp_socket("scatter")
    assert s.redeliver is True
    s.redeliver = False
    assert s.get_option("redeliver") is False
    with pytest.raises(gsp.BadOption):
        s.redeliver = "no"
    s.close()
    with pytest.raises(gsp.BadOption):
        gsp.socket("gather", redeliver=True)  # a scatter option only
    g = gsp_socket("gather", ttl=4)
    assert g.ttl == 4
    with pytest.raises(gsp.NotSupported):
        g.outstanding()  # a scatter method only
    g.close()
    raw = gsp_socket("scatter", raw=True)
    with pytest.raises(gsp.NotSupported):
        raw.outstanding()
    with pytest.raises(gsp.NotSupported):
        raw.open_context()


def test_wrong_peers_are_refused(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT)
    url = s.listeners[0].url
    for other in ("scatter", "rep", "pull"):
        o = gsp_socket(other)
        with pytest.raises(gsp.WrongProtocol):
            o.dial(url, fail_fast=True)
        o.close()
    s.close()
    g = gsp_socket("gather", listen=ANY_PORT)
    r = gsp_socket("req")
    with pytest.raises(gsp.WrongProtocol):
        r.dial(g.listeners[0].url, fail_fast=True)


def test_raw_scatter_shows_the_task_id(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", raw=True, listen=ANY_PORT, recv_timeout=WAIT)
    ws = workers(s.listeners[0].url, 1)
    try:
        wait_for(lambda: s.pipes)
        s.send_msg(gsp.Message(b"raw task", u32(0x80000007)))
        got = s.recv_msg()
        assert (got.header, got.body) == (u32(0x80000007), b"RAW TASK")
    finally:
        close_all(ws)


def test_raw_gather_shows_pipe_and_task_id(gsp_socket: Callable[..., gsp.Socket]) -> None:
    s = gsp_socket("scatter", listen=ANY_PORT, recv_timeout=WAIT)
    g = gsp_socket("gather", raw=True, dial=s.listeners[0].url, recv_timeout=WAIT)
    wait_for(lambda: s.pipes)
    s.send(b"task")
    m = g.recv_msg()
    assert m.body == b"task" and len(m.header) == 8
    assert m.pipe is not None and m.header[:4] == u32(m.pipe.id)
    assert m.header[4] & 0x80  # the task id has its high bit set
    g.send_msg(gsp.Message(b"answer", m.header))
    assert s.recv() == b"answer"
    g.send_msg(gsp.Message(b"answer again", m.header))  # raw: nothing stops it
    wait_for(lambda: s.stats["discarded"] == 1)
    assert s.outstanding() == 0


def test_device_between_raw_gather_and_raw_scatter(gsp_socket: Callable[..., gsp.Socket]) -> None:
    front = gsp_socket("gather", raw=True, listen=ANY_PORT)
    back = gsp_socket("scatter", raw=True, listen=ANY_PORT)
    device = gsp.device(front, back)
    ws = workers(back.listeners[0].url, 2)
    try:
        s = gsp_socket("scatter", dial=front.listeners[0].url, recv_timeout=WAIT)
        wait_for(lambda: len(back.pipes) == 2 and s.pipes)
        for i in range(10):
            s.send(b"via device %d" % i)
        results = sorted(s.recv() for _ in range(10))
        assert results == sorted(b"VIA DEVICE %d" % i for i in range(10))
        s.close()
        assert all(w.tasks for w in ws)
    finally:
        device.stop()
        close_all(ws)
