"""Interop against real nng (pynng): pair1 (incl. polyamorous), pub/sub and bus, tcp and ipc.

Every case runs both ways round (gsp listens and nng dials; nng listens and gsp dials).
Blocking pynng calls go through ``nng.run`` so the gevent hub keeps serving gsp.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import pynng
import pytest

import gsp
from gsp.testing import wait_for
from tests.support import hops, nng

pytestmark = pytest.mark.interop

T = 5.0
TRANSPORTS = ["tcp", "ipc"]
SETUPS = ["gsp_listens", "nng_listens"]
matrix = pytest.mark.parametrize("transport,setup",
                                 [(t, s) for t in TRANSPORTS for s in SETUPS])


def fresh_url(transport: str, ipc_dir: str, name: str = "s") -> str:
    return f"ipc://{ipc_dir}/{name}.sock" if transport == "ipc" else "tcp://127.0.0.1:0"


def connect(g: gsp.Socket, n: pynng.Socket, transport: str, setup: str, ipc_dir: str,
            name: str = "s") -> None:
    """One pipe between ``g`` and ``n``, attached on the gsp side."""
    before = len(g.pipes)
    url = fresh_url(transport, ipc_dir, name)
    if setup == "gsp_listens":
        nng.run(n.dial, g.listen(url).url, block=True)
    else:
        g.dial(nng.bound_url(nng.run(n.listen, url), transport), fail_fast=True)
    wait_for(lambda: len(g.pipes) == before + 1, what="the gsp side of the pipe")


@contextmanager
def linked(gproto: str, nkind: str, transport: str, setup: str, ipc_dir: str,
           graw: bool = False, **nkw: Any) -> Iterator[tuple[gsp.Socket, pynng.Socket]]:
    g = gsp.socket(gproto, raw=graw, recv_timeout=T, send_timeout=T)
    n = nng.socket(nkind, **nkw)
    try:
        connect(g, n, transport, setup, ipc_dir)
        yield g, n
    finally:
        nng.run(n.close)
        g.close()


def nng_silent(n: pynng.Socket) -> bool:
    n.recv_timeout = 100
    try:
        nng.run(n.recv)
    except pynng.Timeout:
        return True
    return False


def gsp_silent(g: gsp.Socket) -> bool:
    g.recv_timeout = 0.1
    try:
        g.recv()
    except gsp.Timeout:
        return True
    return False


def sync_from_nng(g: gsp.Socket, n: pynng.Socket, token: bytes) -> None:
    """nng may not have attached its end yet and pub/bus drop when there is no pipe: send until
    one arrives. Leftover tokens may follow; callers skip them."""
    for _ in range(50):
        nng.run(n.send, token)
        g.recv_timeout = 0.1
        try:
            if g.recv() == token:
                return
        except gsp.Timeout:
            continue
    raise AssertionError("nng never delivered")


def from_nng(g: gsp.Socket, n: pynng.Socket, bodies: list[bytes], count: int,
             token: bytes = b"sync") -> list[gsp.Message]:
    """Once gsp hears nng (:func:`sync_from_nng` with ``token``), nng sends ``bodies``: the next
    ``count`` messages ``g`` receives of them."""
    sync_from_nng(g, n, token)
    for body in bodies:
        nng.run(n.send, body)
    return recv_msgs_skipping(g, token, count)


def recv_msgs_skipping(g: gsp.Socket, token: bytes, count: int) -> list[gsp.Message]:
    """The next ``count`` messages ``g`` receives whose body is not the sync ``token``."""
    g.recv_timeout = T
    got: list[gsp.Message] = []
    while len(got) < count:
        m = g.recv_msg()
        if m.body != token:
            got.append(m)
    return got


# -- pair1 ---------------------------------------------------------------------------------------

@matrix
def test_pair1_interop(transport, setup, ipc_dir):
    with linked("pair1", "pair1", transport, setup, ipc_dir) as (g, n):
        g.send(b"from gsp")
        assert nng.run(n.recv) == b"from gsp"
        nng.run(n.send, b"from nng")
        m = g.recv_msg()
        assert (m.header, m.body) == (b"", b"from nng")
        for i in range(20):  # a burst, in order, both ways
            g.send(b"g%d" % i)
            nng.run(n.send, b"n%d" % i)
        assert [nng.run(n.recv) for _ in range(20)] == [b"g%d" % i for i in range(20)]
        assert [g.recv() for _ in range(20)] == [b"n%d" % i for i in range(20)]


@matrix
def test_raw_pair1_interop_hop_count(transport, setup, ipc_dir):
    # nng's cooked send arrives with hop count 1; a gsp raw send of hop count 0 reaches nng.
    with linked("pair1", "pair1", transport, setup, ipc_dir, graw=True) as (g, n):
        nng.run(n.send, b"x")
        m = g.recv_msg()
        assert (m.header, m.body) == (hops(1), b"x")
        g.send_msg(gsp.Message(b"y", hops(0)))
        assert nng.run(n.recv) == b"y"
        g.send_msg(m)  # forwarding what arrived (hop 1 -> 2) is still within nng's ttl of 8
        assert nng.run(n.recv) == b"x"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pair1_polyamorous_gsp_hub_nng_peers(transport, ipc_dir):
    with ExitStack() as st:
        hub = st.enter_context(gsp.socket("pair1", polyamorous=True, recv_timeout=T))
        peers = [nng.socket("pair1") for _ in range(3)]
        for p in peers:
            st.callback(nng.run, p.close)
        for i, p in enumerate(peers):
            connect(hub, p, transport, "gsp_listens", ipc_dir, name=f"hub{i}")
        for i, p in enumerate(peers):
            nng.run(p.send, b"peer %d" % i)
        for _ in peers:
            m = hub.recv_msg()
            hub.send_msg(gsp.Message(b"re: " + m.body, pipe=m.pipe))
        for i, p in enumerate(peers):
            assert nng.run(p.recv) == b"re: peer %d" % i


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pair1_polyamorous_nng_hub_gsp_peers(transport, ipc_dir):
    hub = nng.socket("pair1", polyamorous=True)
    with ExitStack() as st:
        st.callback(nng.run, hub.close)
        url = nng.bound_url(nng.run(hub.listen, fresh_url(transport, ipc_dir)), transport)
        peers = [st.enter_context(gsp.socket("pair1", recv_timeout=T)) for _ in range(3)]
        for p in peers:
            p.dial(url, fail_fast=True)
        wait_for(lambda: all(p.pipes for p in peers), what="every peer")
        for i, p in enumerate(peers):
            p.send(b"peer %d" % i)
        for _ in peers:
            m = nng.run(hub.recv_msg)
            nng.run(m.pipe.send, b"re: " + m.bytes)
        for i, p in enumerate(peers):
            assert p.recv() == b"re: peer %d" % i


# -- pub/sub -------------------------------------------------------------------------------------

@matrix
def test_gsp_pub_nng_sub(transport, setup, ipc_dir):
    with linked("pub", "sub", transport, setup, ipc_dir) as (g, n):
        n.subscribe(b"t")
        for m in (b"x-skip", b"t-1", b"", b"t-2", b"u"):
            g.send(m)
        assert [nng.run(n.recv), nng.run(n.recv)] == [b"t-1", b"t-2"]
        assert nng_silent(n)


@matrix
def test_nng_pub_gsp_sub(transport, setup, ipc_dir):
    with linked("sub", "pub", transport, setup, ipc_dir) as (g, n):
        g.subscribe(b"t")
        got = from_nng(g, n, [b"x-skip", b"t-1", b"", b"t-2", b"u"], 2, token=b"t-sync")
        assert [m.body for m in got] == [b"t-1", b"t-2"]
        assert gsp_silent(g)


@matrix
def test_nng_pub_gsp_raw_sub(transport, setup, ipc_dir):
    with linked("sub", "pub", transport, setup, ipc_dir, graw=True) as (g, n):
        assert [m.body for m in from_nng(g, n, [b"anything"], 1)] == [b"anything"]


# -- bus -----------------------------------------------------------------------------------------

@matrix
def test_bus_interop(transport, setup, ipc_dir):
    with linked("bus", "bus", transport, setup, ipc_dir) as (g, n):
        ten = [b"n%d" % i for i in range(10)]
        assert [m.body for m in from_nng(g, n, ten, 10)] == ten
        g.send(b"from gsp")
        assert nng.run(n.recv) == b"from gsp"
        assert nng_silent(n)


@matrix
def test_raw_bus_interop(transport, setup, ipc_dir):
    # gsp raw bus with nng: the pipe id header stays local; nng sees only bodies.
    with linked("bus", "bus", transport, setup, ipc_dir, graw=True) as (g, n):
        [m] = from_nng(g, n, [b"x"], 1)
        assert (m.body, m.header) == (b"x", m.pipe.id.to_bytes(4, "big"))
        g.send_msg(gsp.Message(b"to nng", (12345).to_bytes(4, "big")))
        assert nng.run(n.recv) == b"to nng"
        g.send_msg(m)  # back to its own pipe: skipped
        assert nng_silent(n)
