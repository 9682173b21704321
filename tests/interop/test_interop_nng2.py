"""Interop matrix against nng 2.0 (the ``nng-ssl`` package's bundled nng 2.0.0 snapshot).

Every transport gsp and nng 2.0 share (tcp, ipc, abstract, ws, tls+tcp, wss) x every protocol
pair, both ways round (gsp listens and nng dials; nng listens and gsp dials), each case carrying
a 0-byte message, one of every byte value, the 64 KiB edge (65,535, 65,536 and 65,537 bytes:
the ws length forms change there) and a 150,000-byte one, in order. The nng peer runs in this
process: its blocking calls go to gevent's threadpool (``tests/support/nng2.py``).
"""

from __future__ import annotations

import os
import ssl
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import nng
import pytest

import gsp
from gsp.testing import wait_for
from gsp.transport import tls_context
from tests.support import nng2
from tests.support.certs import PKI

pytestmark = pytest.mark.interop("nng")

T = 10.0
TRANSPORTS = ["tcp", "ipc", "abstract", "ws", "tls+tcp", "wss"]
SETUPS = ["gsp_listens", "nng_listens"]
#: (gsp protocol, nng protocol): both sides of every pair, gsp playing each role
LINKS = [("pair", "pair"), ("pair1", "pair1"), ("push", "pull"), ("pull", "push"),
         ("req", "rep"), ("rep", "req"), ("pub", "sub"), ("sub", "pub"),
         ("surveyor", "respondent"), ("respondent", "surveyor"), ("bus", "bus")]
SYNC = b"\xfe-sync-token"


def messages() -> list[bytes]:
    return [b"", bytes(range(256)), os.urandom(65535), os.urandom(65536), os.urandom(65537),
            os.urandom(150_000)]


def fresh_url(transport: str, ipc_dir: str) -> str:
    if transport == "ipc":
        return f"ipc://{ipc_dir}/nng2.sock"
    if transport == "abstract":
        return f"abstract://gsp-nng2-{os.getpid()}-{os.urandom(4).hex()}"
    path = "/sp" if transport in ("ws", "wss") else ""
    return f"{transport}://127.0.0.1:0{path}"


def tls_of(transport: str) -> bool:
    return transport in ("tls+tcp", "wss")


@contextmanager
def linked(gproto: str, nkind: str, transport: str, setup: str, ipc_dir: str,
           pki: PKI) -> Iterator[tuple[gsp.Socket, nng.Socket]]:
    """A gsp socket and an nng 2.0 socket with one pipe between them, up on both sides."""
    g = gsp.socket(gproto, recv_timeout=T, send_timeout=T)
    n = nng2.socket(nkind, int(T * 1000))
    secure = tls_of(transport)
    try:
        url = fresh_url(transport, ipc_dir)
        if setup == "gsp_listens":
            url = g.listen(url, **(pki.listen_options() if secure else {})).url
            nng2.dial(n, url, nng2.client_tls(pki) if secure else None)
        else:
            url = nng2.listen(n, url, nng2.server_tls(pki) if secure else None)
            g.dial(url, fail_fast=True, **(pki.dial_options() if secure else {}))
        wait_for(lambda: len(g.pipes) == 1 and nng2.active_pipes(n) == 1, T,
                 what="the pipe on both sides")
        yield g, n
    finally:
        # nng first: closed second, while its TLS pipe was being dropped by gsp, this nng 2.0
        # snapshot's close hung for good once in some 300-900 pub/sub exchanges over tls+tcp
        # (tests/support/nng2.py: CloseHung); closed first, none in 2,400. tcp, and req/rep over
        # tls+tcp, hung in neither order.
        try:
            nng2.close(n)
        finally:
            g.close()


def same(got: list[bytes], want: list[bytes]) -> None:
    """Equal lists of messages, with a short failure message (no 150 KB diffs)."""
    assert len(got) == len(want), f"{len(got)} messages arrived, {len(want)} sent"
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            at = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            pytest.fail(f"message {i}: got {len(a)} bytes, want {len(b)}; first diff at {at}")


def gsp_to_nng(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    rx = nng2.spawn(nng2.recv_many, n, len(msgs))
    for m in msgs:
        g.send(m)
    same(rx.get(timeout=T * 3), msgs)


def nng_to_gsp(n: nng.Socket, g: gsp.Socket, msgs: list[bytes]) -> None:
    tx = nng2.spawn(nng2.send_many, n, msgs)
    got = [g.recv() for _ in msgs]
    tx.get(timeout=T)
    same(got, msgs)


def sync(send: Callable[[bytes], Any], recv: Callable[[], bytes], set_timeout: Callable[[float],
         Any]) -> None:
    """Broadcast protocols drop what finds no pipe: send SYNC until one arrives."""
    set_timeout(0.2)
    try:
        for _ in range(50):
            send(SYNC)
            try:
                if recv() == SYNC:
                    return
            except (gsp.Timeout, nng.NngTimeout):
                continue
        pytest.fail("no synchronising message arrived")
    finally:
        set_timeout(T)


def recv_skipping(recv: Callable[[], bytes], count: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < count:
        m = recv()
        if m != SYNC:
            got.append(m)
    return got


def nng_timeout(n: nng.Socket) -> Callable[[float], None]:
    def set_to(seconds: float) -> None:
        n.recv_timeout = int(seconds * 1000)
    return set_to


def gsp_timeout(g: gsp.Socket) -> Callable[[float], None]:
    def set_to(seconds: float) -> None:
        g.recv_timeout = seconds
    return set_to


def gsp_asks(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    for m in msgs:
        g.send(m)
        assert nng2.run(nng2.recv, n) == m
        nng2.run(n.send, m[::-1])
        assert g.recv() == m[::-1]


def nng_asks(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    for m in msgs:
        nng2.run(n.send, m)
        assert g.recv() == m
        g.send(m[::-1])
        assert nng2.run(nng2.recv, n) == m[::-1]


def broadcast_to_nng(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    sync(g.send, lambda: nng2.run(nng2.recv, n), nng_timeout(n))
    rx = nng2.spawn(recv_skipping, lambda: nng2.recv(n), len(msgs))
    for m in msgs:
        g.send(m)
    same(rx.get(timeout=T * 3), msgs)


def broadcast_to_gsp(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    sync(lambda m: nng2.run(n.send, m), g.recv, gsp_timeout(g))
    tx = nng2.spawn(nng2.send_many, n, msgs)
    got = recv_skipping(g.recv, len(msgs))
    tx.get(timeout=T)
    same(got, msgs)


def pub(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    n.subscribe(b"")
    broadcast_to_nng(g, n, msgs)


def sub(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    g.subscribe(b"")
    broadcast_to_gsp(g, n, msgs)


def both_ways(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    gsp_to_nng(g, n, msgs)
    nng_to_gsp(n, g, [m[::-1] for m in msgs])


def bus(g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    broadcast_to_nng(g, n, msgs)
    broadcast_to_gsp(g, n, [m[::-1] for m in msgs])


#: gsp's protocol -> how it and its nng peer exchange a list of messages
EXCHANGES: dict[str, Callable[[gsp.Socket, nng.Socket, list[bytes]], None]] = {
    "pair": both_ways, "pair1": both_ways,
    "push": gsp_to_nng, "pull": lambda g, n, msgs: nng_to_gsp(n, g, msgs),
    "req": gsp_asks, "surveyor": gsp_asks, "rep": nng_asks, "respondent": nng_asks,
    "pub": pub, "sub": sub, "bus": bus,
}


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("gproto,nkind", LINKS, ids=[f"gsp_{a}-nng_{b}" for a, b in LINKS])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_matrix(transport: str, gproto: str, nkind: str, setup: str, ipc_dir: str,
                pki: PKI) -> None:
    with linked(gproto, nkind, transport, setup, ipc_dir, pki) as (g, n):
        EXCHANGES[gproto](g, n, messages())


# -- the TLS 1.3 session-ticket fix -----------------------------------------------------------

def test_server_context_sends_no_session_tickets(pki: PKI) -> None:
    """nng 2.0 on Mbed TLS 4 fails a connection whose server sends a TLS 1.3 NewSessionTicket:
    Mbed TLS 4's mbedtls_ssl_read returns MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET for it
    (3.x had it opt-in) and nng's Mbed TLS engine turns every error of a read but WANT_READ and
    WANT_WRITE into NNG_ECRYPTO. gsp's server contexts send none (gsp never resumes sessions)."""
    options = {o.name: o.default for o in gsp.transport.TLS_OPTIONS.values()}
    ctx = tls_context({**options, **pki.listen_options()}, server=True, what="test")
    assert ctx.num_tickets == 0
    client = tls_context({**options, **pki.dial_options()}, server=False, what="test")
    assert client.num_tickets == 2  # a client context's setting means nothing; left alone
    assert ssl.HAS_TLSv1_3


@pytest.mark.parametrize("transport", ["tls+tcp", "wss"])
def test_nng2_dials_gsp_tls_listener(transport: str, ipc_dir: str, pki: PKI) -> None:
    """The failure as a user met it: an nng 2.0 client could not dial a gsp TLS listener
    (``NngCryptoError: [NNG-26] Cryptographic error``), whatever the protocol."""
    with linked("rep", "req", transport, "gsp_listens", ipc_dir, pki) as (g, n):
        nng2.run(n.send, b"ping")
        assert g.recv() == b"ping"
        g.send(b"pong")
        assert nng2.run(nng2.recv, n) == b"pong"
