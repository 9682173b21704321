"""Interop matrix against real nng (pynng): pair0 and push0/pull0 over tcp and ipc.

Every case runs in both connection set-ups (gsp listens and nng dials; nng listens and gsp dials).
Blocking pynng calls go through ``nng.run``/``nng.spawn`` so the gevent hub keeps serving gsp.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterator

import gevent
import pynng
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import socket_fds, wait_for
from tests.support import nng

pytestmark = pytest.mark.interop

MIB = 1 << 20
MAX = MIB  # gsp's default recv_max_size; set on every pynng socket too (pynng's default is 0)
SIZES = [1, 64 * 1024, MIB - 16]
MANY = 2000
T = 10.0  # generous per-operation bound, seconds

TRANSPORTS = ["tcp", "ipc"]
SETUPS = ["gsp_listens", "nng_listens"]
# (gsp protocol, pynng protocol): pair talks both ways; push/pull one way each.
LINKS = [("pair", "pair"), ("push", "pull"), ("pull", "push")]


def fresh_url(transport: str, ipc_dir: str, name: str = "s") -> str:
    return f"ipc://{ipc_dir}/{name}.sock" if transport == "ipc" else "tcp://127.0.0.1:0"


def same(got: bytes, want: bytes) -> None:
    """Byte-for-byte equality with a short failure message (no megabyte diffs)."""
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pytest.fail(f"payload differs: got {len(got)} bytes, want {len(want)}; first diff at {first}")


def payload(size: int, tag: int = 0) -> bytes:
    return (tag.to_bytes(4, "big") + os.urandom(size))[:size] if size >= 4 else os.urandom(size)


def nsock(kind: str, **kw: object) -> pynng.Socket:
    kw.setdefault("recv_max_size", MAX)
    return nng.socket(kind, **kw)


def nng_url(sock: pynng.Socket, url: str, transport: str) -> str:
    return nng.bound_url(sock.listen(url), transport)


def close_all(gsp_socks: list[gsp.Socket], nng_socks: list[pynng.Socket],
              settle: bool = False) -> None:
    """Close gsp's sockets first, then nng's. With ``settle``, wait a moment in between: nng 1.11
    leaks a connection's fd when nng_close races a connection that is still being negotiated or
    torn down, which is what a peer being refused over and over looks like."""
    try:
        for g in gsp_socks:
            g.close()
        if settle:
            gevent.sleep(0.3)
    finally:
        for n in nng_socks:
            nng.run(n.close)


@contextmanager
def linked(gproto: str, nkind: str, transport: str, setup: str,
           ipc_dir: str) -> Iterator[tuple[gsp.Socket, pynng.Socket]]:
    """A gsp socket and a pynng socket with one established pipe between them."""
    g = gsp.socket(gproto, recv_timeout=T, send_timeout=T)
    n = nsock(nkind, recv_timeout=int(T * 1000), send_timeout=int(T * 1000))
    try:
        url = fresh_url(transport, ipc_dir)
        if setup == "gsp_listens":
            nng.run(n.dial, g.listen(url).url, block=True)
        else:
            g.dial(nng_url(n, url, transport), fail_fast=True)
        wait_for(lambda: len(g.pipes) == 1, T)
        yield g, n
    finally:
        close_all([g], [n])


def gsp_to_nng(g: gsp.Socket, n: pynng.Socket, msgs: list[bytes]) -> None:
    rx = nng.spawn(nng.recv_many, n, len(msgs))
    for m in msgs:
        g.send(m)
    got = rx.get(timeout=T * 3)
    assert len(got) == len(msgs)
    for i, (a, b) in enumerate(zip(got, msgs)):
        if a != b:
            same(a, b)  # fails with the details
            pytest.fail(f"message {i} out of order or altered")


def nng_to_gsp(n: pynng.Socket, g: gsp.Socket, msgs: list[bytes]) -> None:
    tx = nng.spawn(nng.send_many, n, msgs)
    got = [g.recv() for _ in msgs]
    tx.get(timeout=T)
    for i, (a, b) in enumerate(zip(got, msgs)):
        if a != b:
            same(a, b)
            pytest.fail(f"message {i} out of order or altered")


def exchange(gproto: str, g: gsp.Socket, n: pynng.Socket, msgs: list[bytes]) -> None:
    """Send ``msgs`` every way the link allows (pair: both ways at once)."""
    if gproto == "pair":
        back = [m[::-1] for m in msgs]
        other = gevent.spawn(gsp_to_nng, g, n, msgs)
        try:
            nng_to_gsp(n, g, back)
            other.get(timeout=T * 3)
        finally:
            other.kill()
    elif gproto == "push":
        gsp_to_nng(g, n, msgs)
    else:
        nng_to_gsp(n, g, msgs)


# -- the matrix ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES, ids=["1B", "64KiB", "1MiB-16"])
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("gproto,nkind", LINKS, ids=["pair", "gsp_push", "gsp_pull"])
def test_sizes(gproto: str, nkind: str, transport: str, setup: str, size: int, ipc_dir: str) -> None:
    with linked(gproto, nkind, transport, setup, ipc_dir) as (g, n):
        exchange(gproto, g, n, [payload(size, 1), payload(size, 2)])


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("gproto,nkind", LINKS, ids=["pair", "gsp_push", "gsp_pull"])
def test_many_in_flight(gproto: str, nkind: str, transport: str, setup: str, ipc_dir: str) -> None:
    msgs = [i.to_bytes(4, "big") + os.urandom(i % 200) for i in range(MANY)]
    with linked(gproto, nkind, transport, setup, ipc_dir) as (g, n):
        exchange(gproto, g, n, msgs)


# -- the receive-size boundary (both sides at 1 MiB) -------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_exactly_max_size_crosses_both_ways(transport: str, ipc_dir: str) -> None:
    with linked("pair", "pair", transport, "gsp_listens", ipc_dir) as (g, n):
        exchange("pair", g, n, [payload(MAX, 7)])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_oversize_from_nng_closes_gsp_pipe(transport: str, ipc_dir: str) -> None:
    with linked("pull", "push", transport, "gsp_listens", ipc_dir) as (g, n):
        pipe = g.pipes[0]
        nng.run(n.send, payload(MAX + 1))
        assert pipe.wait_closed(T), "gsp kept a pipe that sent an oversize message"
        assert isinstance(pipe.error, gsp.MessageTooLarge)
        g.recv_timeout = 0.2
        with pytest.raises(gsp.Timeout):
            g.recv()


# -- 0-byte messages (gsp <-> gsp; pynng cannot receive an empty message) -----------------------

@pytest.mark.parametrize("transport", ["tcp", "ipc", "inproc"])
@pytest.mark.parametrize("sender,receiver", [("pair", "pair"), ("push", "pull")])
def test_empty_messages_gsp_to_gsp(
        gsp_socket: Callable[..., gsp.Socket], sender: str, receiver: str, transport: str, ipc_dir: str) -> None:
    url = f"inproc://empty-{sender}-{transport}" if transport == "inproc" else fresh_url(transport, ipc_dir)
    msgs = [b"", b"x", b"", b"", b"yz", b""]
    rx = gsp_socket(receiver, recv_timeout=T)
    tx = gsp_socket(sender, send_timeout=T, dial=rx.listen(url).url)
    for m in msgs:
        tx.send(m)
    assert [rx.recv() for _ in msgs] == msgs
    if sender == "pair":  # and back
        for m in msgs:
            rx.send(m)
        tx.recv_timeout = T
        assert [tx.recv() for _ in msgs] == msgs


# -- wrong-protocol peers ------------------------------------------------------------------------

def _events(g: gsp.Socket) -> list[gsp.PipeEvent]:
    seen: list[gsp.PipeEvent] = []
    g.on_pipe_event(lambda ev, _p: seen.append(ev))
    return seen


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_wrong_protocol_gsp_push_dials_nng_push(transport: str, ipc_dir: str) -> None:
    g = gsp.socket("push", send_timeout=0.3, reconnect_time=0.05, max_reconnect_time=0.05)
    bad = nsock("push", send_timeout=300)
    good = nsock("pull")
    try:
        seen = _events(g)
        bad_added = nng.added_pipes(bad)
        bad_url = nng_url(bad, fresh_url(transport, ipc_dir, "bad"), transport)
        with pytest.raises(gsp.WrongProtocol):
            g.dial(bad_url, fail_fast=True)
        d = g.dial(bad_url)  # keeps redialing in the background, failing every time
        wait_for(lambda: d.stats["handshake_failures_wrong_protocol"] >= 3, T,
                 what="several redials, each refused")
        assert g.pipes == [] and seen == []
        assert isinstance(d.last_error, gsp.HandshakeError), d.last_error
        with pytest.raises(gsp.Timeout):
            g.send(b"lost")  # no pipe takes it
        assert nng.raises(pynng.Timeout, bad.send, b"nowhere")  # nng has no pipe either
        assert bad_added == []
        # A correct peer is still served, and gets only what was sent after it came.
        g.dial(nng_url(good, fresh_url(transport, ipc_dir, "good"), transport), fail_fast=True)
        g.send(b"ok")
        assert nng.run(good.recv) == b"ok"
        assert len(g.pipes) == 1 and seen == [gsp.PipeEvent.ATTACHING, gsp.PipeEvent.ATTACHED]
    finally:
        close_all([g], [bad, good], settle=True)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_wrong_protocol_nng_push_dials_gsp_push(transport: str, ipc_dir: str) -> None:
    g = gsp.socket("push", send_timeout=0.3)
    bad = nsock("push", send_timeout=300, reconnect_time_min=50, reconnect_time_max=50)
    good = nsock("pull")
    try:
        seen = _events(g)
        bad_added = nng.added_pipes(bad)
        url = g.listen(fresh_url(transport, ipc_dir)).url
        nng.run(bad.dial, url, block=False)
        wait_for(lambda: g.listeners[0].stats["handshake_failures_wrong_protocol"] >= 3, T,
                 what="several nng redials, each refused")
        assert g.pipes == [] and seen == []
        with pytest.raises(gsp.Timeout):
            g.send(b"lost")
        assert nng.raises(pynng.Timeout, bad.send, b"nowhere")
        assert bad_added == []
        nng.run(good.dial, url, block=True)
        wait_for(lambda: len(g.pipes) == 1, T)
        g.send(b"ok")
        assert nng.run(good.recv) == b"ok"
        assert seen == [gsp.PipeEvent.ATTACHING, gsp.PipeEvent.ATTACHED]
    finally:
        close_all([g], [bad, good], settle=True)


# -- pair0 keeps its first peer ------------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pair_gsp_listener_rejects_second_nng_peer(transport: str, ipc_dir: str) -> None:
    g = gsp.socket("pair", recv_timeout=T, send_timeout=T)
    first = nsock("pair", recv_timeout=int(T * 1000))
    second = nsock("pair", recv_timeout=300, send_timeout=300,
                   reconnect_time_min=50, reconnect_time_max=50)
    try:
        url = g.listen(fresh_url(transport, ipc_dir)).url
        nng.run(first.dial, url, block=True)
        wait_for(lambda: len(g.pipes) == 1, T)
        kept = g.pipes[0]
        nng.run(second.dial, url, block=False)
        wait_for(lambda: g.listeners[0].stats["pipes_rejected"] >= 3, T,
                 what="the second peer connecting, refused, redialing, ...")
        assert g.pipes == [kept]
        g.send(b"to-first")
        assert nng.run(first.recv) == b"to-first"
        assert nng.raises(pynng.Timeout, second.recv)
        # May land on a pipe gsp is refusing, or time out; either way gsp must not deliver it.
        nng.raises(pynng.Timeout, second.send, b"intruder")
        nng.run(first.send, b"from-first")
        msg = g.recv_msg()
        assert msg.body == b"from-first" and msg.pipe is kept
        g.recv_timeout = 0.3
        with pytest.raises(gsp.Timeout):
            g.recv()
        assert g.pipes == [kept]
    finally:
        close_all([g], [first, second], settle=True)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pair_nng_listener_rejects_second_gsp_peer(transport: str, ipc_dir: str) -> None:
    n = nsock("pair", recv_timeout=int(T * 1000))
    first = gsp.socket("pair", recv_timeout=T, send_timeout=T)
    second = gsp.socket("pair", recv_timeout=0.3, send_timeout=0.3,
                        reconnect_time=0.05, max_reconnect_time=0.05)
    try:
        added = nng.added_pipes(n)
        url = nng_url(n, fresh_url(transport, ipc_dir), transport)
        first.dial(url, fail_fast=True)
        wait_for(lambda: len(added) == 1, T)
        dialer = second.dial(url)
        wait_for(lambda: dialer.stats["dial_attempts"] >= 3, T,
                 what="nng refusing each of second's connections")
        assert len(added) == 1 and len(first.pipes) == 1
        nng.run(n.send, b"to-first")
        assert first.recv() == b"to-first"
        with pytest.raises(gsp.Timeout):
            second.recv()
        try:
            second.send(b"intruder")  # may slip into a pipe nng is refusing, or time out
        except gsp.Timeout:
            pass
        first.send(b"from-first")
        assert nng.run(n.recv) == b"from-first"
        n.recv_timeout = 300
        assert nng.raises(pynng.Timeout, n.recv)
        assert len(added) == 1
    finally:
        close_all([second, first], [n], settle=True)


@pytest.mark.parametrize("transport", ["tcp", "ipc", "inproc"])
def test_pair_gsp_listener_rejects_second_gsp_peer(
        gsp_socket: Callable[..., gsp.Socket], transport: str, ipc_dir: str) -> None:
    url = "inproc://pair-second" if transport == "inproc" else fresh_url(transport, ipc_dir)
    g = gsp_socket("pair", recv_timeout=T, send_timeout=T)
    url = g.listen(url).url
    first = gsp_socket("pair", recv_timeout=T, send_timeout=T, dial=url)
    wait_for(lambda: len(g.pipes) == 1 and len(first.pipes) == 1, T)
    kept = g.pipes[0]
    second = gsp_socket("pair", recv_timeout=0.3, send_timeout=0.3, reconnect_time=0.05,
                        max_reconnect_time=0.05, dial=url)
    wait_for(lambda: g.listeners[0].stats["pipes_rejected"] >= 3, T,
             what="second connecting, refused, redialing, ...")
    assert g.pipes == [kept]
    g.send(b"to-first")
    assert first.recv() == b"to-first"
    with pytest.raises(gsp.Timeout):
        second.recv()
    first.send(b"from-first")
    assert g.recv_msg().pipe is kept


# -- a dial killed mid-connect --------------------------------------------------------------------

def peer_of(sock: gsocket.socket) -> object:
    """The address a non-blocking socket is connected to; None while it connects."""
    try:
        return sock.getpeername()
    except OSError:
        return None


def test_dial_killed_mid_connect_closes_its_socket() -> None:
    """A dial killed mid-connect must close its socket. Dialer.close kills the redial greenlet
    after ``TransportDialer.close`` looked for an in-flight socket; a greenlet still in the
    resolver then (getaddrinfo on gevent's threadpool) goes on into connect and is killed there,
    and its socket must not leak (the wrong-protocol and pair tests above redial all along)."""
    lst = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_STREAM)
    fillers: list[gsocket.socket] = []
    try:
        lst.bind(("127.0.0.1", 0))
        lst.listen(0)
        for _ in range(3):  # fill the accept queue: further SYNs are dropped, connects hang
            f = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_STREAM)
            f.setblocking(False)
            f.connect_ex(lst.getsockname())
            fillers.append(f)
        wait_for(lambda: peer_of(fillers[0]) is not None, T, what="the accept queue filled")
        before = socket_fds()
        url = f"tcp://127.0.0.1:{lst.getsockname()[1]}"
        td = gsp.registry.transport_for(url).dialer(url, {})
        g = gevent.spawn(td.dial)
        wait_for(lambda: len(socket_fds() - before) == 1, T, what="the dial's socket")
        assert not g.dead, "the connect should still be pending"
        g.kill(block=True)
        gevent.sleep(0.05)  # gevent closes a socket fd from a hub callback
        assert socket_fds() - before == set()
    finally:
        for f in fillers:
            f.close()
        lst.close()
