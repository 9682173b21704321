"""Behavioural acceptance tests of the socket core: load balancing, sending without peers, options,
closing and messages. The rest of the core suites: endpoints (dialing, hostile peers) in
test_core_endpoints.py, pipes and pipe events in test_core_pipes.py, plugins in
test_core_plugins.py; tests/core/test_monkey.py runs all four again under gevent.monkey.patch_all()."""

from __future__ import annotations

import time
from collections import Counter

import gevent
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import WAIT, connected, free_url, wait_for
from tests.support import HDR_PULL, HDR_PUSH, TCP, recv_until_timeout, scaled, spawn_all

# -- load balancing -------------------------------------------------------------------------------

def test_pull_fair_queues_three_pushers(gsp_socket):
    n = 1000
    push_opts = {"send_timeout": WAIT}
    pull = gsp_socket("pull", recv_timeout=WAIT)
    pushers = [gsp_socket("push", **push_opts) for _ in range(3)]
    lst = pull.listen(TCP)
    for p in pushers:
        connected(pull, lst.url, p)

    def pump(k: int, p: gsp.Socket) -> None:
        for i in range(n):
            p.send(b"%d:%d" % (k, i))

    gs = spawn_all(pump, list(enumerate(pushers)))
    try:
        wait_for(lambda: all(g.ready() or not p.poll("send") for g, p in zip(gs, pushers)),
                 what="every pusher done or blocked: its messages queued")
        got = [pull.recv().split(b":") for _ in range(3 * n)]
        gevent.joinall(gs, timeout=WAIT, raise_error=True)
    finally:
        gevent.killall(gs)
    first_half = Counter(k for k, _ in got[: 3 * n // 2])
    # Fair share is 500 each; a pull that drained one pipe first would give 1000/500/0.
    assert all(first_half[b"%d" % k] >= 350 for k in range(3)), first_half
    for k in range(3):  # nothing lost, nothing reordered within a pipe
        assert [int(i) for kk, i in got if kk == b"%d" % k] == list(range(n))


def test_push_spreads_evenly_over_three_pullers(gsp_socket):
    push = gsp_socket("push", send_timeout=WAIT)
    pullers = [gsp_socket("pull", recv_timeout=0.5) for _ in range(3)]
    lst = push.listen(TCP)
    for p in pullers:
        connected(push, lst.url, p)
    wait_for(lambda: len(push.pipes) == 3, what="three pullers")
    for i in range(300):
        push.send(b"%d" % i)
    results = [g.get() for g in spawn_all(recv_until_timeout, [(p,) for p in pullers])]
    assert sorted(int(m) for r in results for m in r) == list(range(300))
    assert all(95 <= len(r) <= 105 for r in results), [len(r) for r in results]


# -- sending without peers ------------------------------------------------------------------------

def test_push_send_blocks_until_a_peer_connects(gsp_socket):
    push = gsp_socket("push")
    pull = gsp_socket("pull", recv_timeout=WAIT)
    lst = push.listen(TCP)
    g = gevent.spawn(push.send, b"waited")
    try:
        gevent.sleep(0.05)  # a send that did not wait would have returned by now
        assert not g.ready(), "send returned with no peer to take the message"
        assert not push.poll("send")
        pull.dial(lst.url)
        g.get(timeout=WAIT)
    finally:
        g.kill()
    assert pull.recv() == b"waited"


def test_push_send_timeout_and_best_effort_without_peers(gsp_socket):
    timed = gsp_socket("push", send_timeout=0.2)
    lossy = gsp_socket("push", best_effort=True)
    pull = gsp_socket("pull", recv_timeout=WAIT)
    t0 = time.monotonic()
    with pytest.raises(gsp.Timeout):
        timed.send(b"nobody")
    assert 0.15 <= time.monotonic() - t0 < scaled(1.5)
    assert lossy.poll("send")
    lossy.send(b"dropped", block=False)  # no peer: dropped at once instead of blocking
    lst = lossy.listen(TCP)
    connected(lossy, lst.url, pull)
    lossy.send(b"kept")
    assert pull.recv() == b"kept"


# -- options ---------------------------------------------------------------------------------------

OPTION_VALUES = {
    "recv_timeout": 1.5, "send_timeout": 2, "max_recv_size": 4096, "reconnect_time": 0.2,
    "max_reconnect_time": 3, "send_buffer": 7, "recv_buffer": 9, "linger": 0.25,
    "best_effort": True, "handshake_timeout": 4, "tcp_nodelay": False, "tcp_keepalive": False,
    "ipc_file_mode": 0o600,
}
BAD_VALUES = [
    ("recv_timeout", -1), ("recv_timeout", "1"), ("recv_timeout", float("nan")),
    ("send_timeout", True), ("max_recv_size", -1), ("max_recv_size", 1.5),
    ("reconnect_time", 0), ("reconnect_time", None), ("max_reconnect_time", -0.1),
    ("send_buffer", 0), ("recv_buffer", 0), ("linger", None), ("linger", -1),
    ("best_effort", 1), ("handshake_timeout", 0), ("tcp_nodelay", "yes"), ("ipc_file_mode", -1),
]


def test_options_kwargs_attributes_and_accessors_agree(gsp_socket):
    with gsp.socket("pair", **OPTION_VALUES) as s:
        for name, v in OPTION_VALUES.items():
            assert getattr(s, name) == s.get_option(name) == s.options[name] == v, name
    s = gsp_socket("pair")
    defaults = dict(s.options)
    assert set(OPTION_VALUES) <= set(defaults)
    for name, v in OPTION_VALUES.items():
        setattr(s, name, v)
        assert s.get_option(name) == v
    for name, v in defaults.items():
        s.set_option(name, v)
        assert getattr(s, name) == v
    assert s.options == defaults


@pytest.mark.parametrize("name,value", BAD_VALUES)
def test_bad_option_values_raise_bad_option(gsp_socket, name, value):
    with pytest.raises(gsp.BadOption):
        gsp.socket("pair", **{name: value})
    s = gsp_socket("pair")
    before = s.get_option(name)
    with pytest.raises(gsp.BadOption):
        s.set_option(name, value)
    with pytest.raises(gsp.BadOption):
        setattr(s, name, value)
    assert s.get_option(name) == before


def test_endpoint_options_inherit_from_the_socket(gsp_socket):
    detached: list[gsp.Pipe] = []
    socks = [
        gsp_socket("pull", max_recv_size=100, reconnect_time=0.3, recv_timeout=WAIT),
        gsp_socket("push", send_timeout=WAIT),
        gsp_socket("push", send_timeout=WAIT),
    ]
    pull, small, big = socks
    pull.on_pipe_event(lambda ev, p: ev is gsp.PipeEvent.DETACHED and detached.append(p))
    inherit = pull.listen(TCP)
    own = pull.listen(TCP, max_recv_size=1000)
    d = pull.dial(free_url("inproc"), background=True, max_reconnect_time=7)
    assert inherit.options["max_recv_size"] == 100 and own.options["max_recv_size"] == 1000
    assert d.options["reconnect_time"] == 0.3 and d.options["max_reconnect_time"] == 7
    pull.max_recv_size = 200  # later socket changes reach endpoints that did not override
    pull.reconnect_time = 0.4
    assert inherit.options["max_recv_size"] == 200 and own.options["max_recv_size"] == 1000
    assert d.options["reconnect_time"] == 0.4
    connected(pull, inherit.url, small)
    connected(pull, own.url, big)
    big.send(b"b" * 1000)
    assert pull.recv() == b"b" * 1000
    small.send(b"s" * 200)
    assert pull.recv() == b"s" * 200
    small.send(b"s" * 201)
    wait_for(lambda: detached, what="the pipe over the inherited limit to close")
    assert isinstance(detached[0].error, gsp.MessageTooLarge)
    assert detached[0].listener is inherit


# -- closing --------------------------------------------------------------------------------------

def test_close_wakes_blocked_recv_and_send(gsp_socket):
    pull = gsp_socket("pull")
    pusher = gsp_socket("push")
    lonely = gsp_socket("push")
    lst = pull.listen(TCP)
    connected(pull, lst.url, pusher)
    blocked = [gevent.spawn(pull.recv), gevent.spawn(pull.recv_msg),
               gevent.spawn(lonely.send, b"nobody"), gevent.spawn(lonely.send_msg,
                                                                  gsp.Message(b"x"))]
    try:
        gevent.sleep(0.02)  # every call is waiting
        assert not any(g.ready() for g in blocked)
        pull.close()
        lonely.close()
        gevent.joinall(blocked, timeout=WAIT)
        assert all(isinstance(g.exception, gsp.Closed) for g in blocked), blocked
    finally:
        gevent.killall(blocked)


def test_many_greenlets_on_one_socket_lose_nothing(gsp_socket):
    senders, per = 8, 250
    total = senders * per
    a = gsp_socket("pair", send_timeout=WAIT)
    b = gsp_socket("pair", send_timeout=WAIT)
    lst = a.listen(TCP)
    connected(a, lst.url, b)
    got: dict[str, list[bytes]] = {"a": [], "b": []}

    def send(s: gsp.Socket, tag: bytes, k: int) -> None:
        for i in range(per):
            s.send(b"%s:%d:%d" % (tag, k, i))

    def recv(s: gsp.Socket, into: list[bytes]) -> None:
        while True:
            try:
                into.append(s.recv())
            except gsp.Closed:
                return

    gs = spawn_all(recv, [(a, got["a"]), (b, got["b"])] * senders)
    gs += spawn_all(send, [(s, t, k) for k in range(senders)
                           for s, t in ((a, b"A"), (b, b"B"))])
    try:
        wait_for(lambda: len(got["a"]) == len(got["b"]) == total, timeout=30,
                 what="every message to arrive")
        a.close()
        b.close()
        gevent.joinall(gs, timeout=WAIT, raise_error=True)
    finally:
        gevent.killall(gs)
    for side, tag in (("a", b"B"), ("b", b"A")):
        want = {b"%s:%d:%d" % (tag, k, i) for k in range(senders) for i in range(per)}
        assert len(got[side]) == total and set(got[side]) == want


def test_linger_delivers_messages_queued_before_close(gsp_socket):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    lst = pull.listen(TCP)
    push = gsp.socket("push", linger=5)
    try:
        connected(pull, lst.url, push)
        for i in range(100):
            push.send(b"%d" % i + b"." * 10000)
    finally:
        push.close()  # no greenlet switch happened since the sends: all 100 are still queued
    assert [pull.recv()[:3].rstrip(b".") for _ in range(100)] == [b"%d" % i for i in range(100)]


@pytest.mark.parametrize("linger", [0.0, 0.5])
def test_close_with_a_stalled_peer_returns_after_linger(linger):
    srv = gsocket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    push = gsp.socket("push", send_timeout=0.3, linger=linger, send_buffer=8)
    conn = None
    try:
        push.dial("tcp://127.0.0.1:%d" % srv.getsockname()[1], background=True)
        conn, _ = srv.accept()
        conn.settimeout(WAIT)
        conn.sendall(HDR_PULL)
        assert conn.recv(8) == HDR_PUSH  # a pull that handshakes, then never reads
        wait_for(lambda: push.pipes, what="the push pipe")
        chunk = b"x" * (256 << 10)
        with pytest.raises(gsp.Timeout):
            for _ in range(400):  # fill the queue and both kernel buffers
                push.send(chunk)
        t0 = time.monotonic()
        push.close()
        took = time.monotonic() - t0
        assert linger * 0.9 <= took < linger + scaled(0.5), took
    finally:
        push.close()
        if conn is not None:
            conn.close()
        srv.close()


# -- messages --------------------------------------------------------------------------------------

def test_recv_msg_carries_the_pipe_and_send_msg_works(gsp_socket):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    a = gsp_socket("push")
    b = gsp_socket("push")
    lst = pull.listen(TCP)
    connected(pull, lst.url, a)
    connected(pull, lst.url, b)
    a.send_msg(gsp.Message(b"from a"))
    b.send_msg(gsp.Message(bytearray(b"from b")))
    msgs = {m.body: m for m in (pull.recv_msg(), pull.recv_msg())}
    assert set(msgs) == {b"from a", b"from b"}
    pa, pb = msgs[b"from a"].pipe, msgs[b"from b"].pipe
    assert isinstance(msgs[b"from a"], gsp.Message) and msgs[b"from a"].header == b""
    assert pa in pull.pipes and pb in pull.pipes and pa is not pb
    assert pa.remote_address == a.pipes[0].local_address
    with pytest.raises(TypeError):
        a.send_msg(b"not a message")


def test_large_batches_are_written_without_joining_the_whole_batch(gsp_socket):
    # 16 x 1 MiB queued at once must arrive intact (large bodies bypass the join).
    big = [bytes([i]) * (1 << 20) for i in range(16)]
    pull = gsp_socket("pull", recv_timeout=WAIT, max_recv_size=0)
    push = gsp_socket("push", send_buffer=16)
    connected(pull, pull.listen(TCP).url, push)
    for m in big:
        push.send(m)
    assert [pull.recv() for _ in big] == big
