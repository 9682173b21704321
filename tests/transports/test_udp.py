"""udp:// (experimental): against nng 2.0 both ways, the datagram limit, keep-alives, and
resilience through a relay that loses, delays, duplicates and reorders (tests/support/udp_relay.py)."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator

import gevent
import nng
import pytest

import gsp
from gsp.testing import wait_for
from tests.support import nng2
from tests.support.udp_relay import UDPRelay

T = 10.0
LINKS = [("pair1", "pair1"), ("push", "pull"), ("pull", "push"), ("req", "rep"), ("rep", "req"),
         ("pub", "sub"), ("sub", "pub"), ("bus", "bus")]


def messages() -> list[bytes]:
    # One near-limit datagram per burst: loopback's default socket buffer (208 KiB) holds three.
    return [b"", bytes(range(256)), os.urandom(1400), os.urandom(60_000)]


def one(send: Callable[[bytes], Any], recv: Callable[[], bytes], m: bytes) -> None:
    """Send ``m`` with the receive already waiting, and check it arrives. nng 2.0's UDP
    receiver (the snapshot in nng-ssl 0.2.0, and nng's master) hands a pipe's queued message to
    its protocol only when a further datagram comes: one that arrived while the protocol had
    no receive pending waits for the next (udp_pipe_recv does not look at the queue), so a
    message sent before nng's receive is posted arrives one datagram late. That is nng's
    receiver, not the wire; gsp's has no such lag."""
    rx = gevent.spawn(recv)
    gevent.sleep(0.05)  # let the receive reach nng (a thread of gevent's pool)
    send(m)
    assert rx.get(timeout=T * 2) == m


def udp_exchange(gproto: str, g: gsp.Socket, n: nng.Socket, msgs: list[bytes]) -> None:
    """Every message one at a time, each way the pair allows (the pipe is up on both sides,
    so broadcasts need no synchronising first)."""
    def from_nng() -> bytes:
        return nng2.run(nng2.recv, n)

    def nng_send(m: bytes) -> None:
        nng2.run(n.send, m)

    if gproto == "sub":
        g.subscribe(b"")
    if gproto == "pub":
        n.subscribe(b"")
    for m in msgs:
        if gproto in ("pair1", "push", "pub", "bus", "req"):
            one(g.send, from_nng, m)
        if gproto == "req":
            one(nng_send, g.recv, m[::-1])
        if gproto in ("pair1", "pull", "sub", "bus", "rep"):
            one(nng_send, g.recv, m[::-1])
        if gproto == "rep":
            one(g.send, from_nng, m)


@pytest.mark.interop("nng")
@pytest.mark.parametrize("setup", ["gsp_listens", "nng_listens"])
@pytest.mark.parametrize("gproto,nkind", LINKS, ids=[f"gsp_{a}-nng_{b}" for a, b in LINKS])
def test_interop_nng2(gproto: str, nkind: str, setup: str) -> None:
    g = gsp.socket(gproto, recv_timeout=T, send_timeout=T)
    n = nng2.socket(nkind, int(T * 1000))
    try:
        if setup == "gsp_listens":
            nng2.dial(n, g.listen("udp://127.0.0.1:0").url)
        else:
            g.dial(nng2.listen(n, "udp://127.0.0.1:0"), fail_fast=True)
        wait_for(lambda: len(g.pipes) == 1 and nng2.active_pipes(n) == 1, T,
                 what="the pipe on both sides")
        pipe = g.pipes[0]
        assert pipe.remote_address.startswith("udp://127.0.0.1:")
        udp_exchange(gproto, g, n, messages())
    finally:
        g.close()
        nng2.close(n)


def test_gsp_to_gsp_and_wrong_protocol(gsp_socket: Callable[..., gsp.Socket]) -> None:
    a = gsp_socket("pair", recv_timeout=T, send_timeout=T)
    b = gsp_socket("pair", recv_timeout=T, send_timeout=T)
    wrong = gsp_socket("push", send_timeout=T)
    url = a.listen("udp://127.0.0.1:0").url
    b.dial(url, fail_fast=True)
    b.send(b"ping")
    assert a.recv() == b"ping"
    a.send(b"")
    assert b.recv() == b""
    with pytest.raises(gsp.WrongProtocol):
        wrong.dial(url, fail_fast=True)
    assert len(a.pipes) == 1


@pytest.mark.interop("nng")
def test_nng2_wrong_protocol_refused(gsp_socket: Callable[..., gsp.Socket]) -> None:
    g = gsp_socket("push", send_timeout=T)
    url = g.listen("udp://127.0.0.1:0").url
    n = nng2.socket("push", 500)
    try:
        n.add_dialer(url, reconnect_min_ms=50).start(block=False)
        wait_for(lambda: g.listeners[0].stats["handshake_failures_wrong_protocol"] == 1, T,
                 what="nng's request refused")
        assert g.pipes == [] and nng2.active_pipes(n) == 0
    finally:
        nng2.close(n)


@pytest.mark.interop("nng")
def test_over_the_datagram_limit_raises_at_send(
        gsp_socket: Callable[..., gsp.Socket], caplog: pytest.LogCaptureFixture) -> None:
    """A message over 65,000 bytes (nng 2.0's limit: one datagram) raises at send, naming the
    limit; one whose SP header takes it over the peer's limit is dropped by the transport (the
    peer would disconnect), logged with the limit; the pipe carries on either way."""
    n = nng2.socket("rep", int(T * 1000))
    try:
        g = gsp_socket("req", send_timeout=T, recv_timeout=T)
        g.dial(nng2.listen(n, "udp://127.0.0.1:0"), fail_fast=True)
        wait_for(lambda: nng2.active_pipes(n) == 1, T)
        with pytest.raises(gsp.MessageTooLarge, match="65001-byte message is over the "
                                                      "65000-byte limit") as err:
            g.send(os.urandom(65_001))
        assert (err.value.size, err.value.limit) == (65_001, 65_000)
        with pytest.raises(gsp.MessageTooLarge, match="65000-byte limit"):
            g.send_msg(gsp.Message(os.urandom(64_999), b"12"))
        g.send(os.urandom(65_000))  # within the limit, but REQ's 4-byte header is not
        # a new request (REQ drops the one before), with nng's receive already waiting
        one(g.send, lambda: nng2.run(nng2.recv, n), b"after")
        assert "65004-byte message" in caplog.text and "65000 bytes" in caplog.text
        nng2.run(n.send, b"answer")
        assert g.recv() == b"answer"
        g.close()
    finally:
        nng2.close(n)


def test_tcp_socket_has_no_datagram_limit(gsp_socket: Callable[..., gsp.Socket]) -> None:
    rx = gsp_socket("pull", recv_timeout=T)
    tx = gsp_socket("push", send_timeout=T)
    tx.dial(rx.listen("tcp://127.0.0.1:0").url)
    tx.send(b"x" * 70_000)
    assert len(rx.recv()) == 70_000


@pytest.mark.parametrize("tcp_first", [False, True])
def test_push_measures_every_send_once_a_datagram_endpoint_is_added(
        gsp_socket: Callable[..., gsp.Socket], tcp_first: bool) -> None:
    # One pipe lets push queue a send straight onto it (no call into the protocol); a socket
    # with a datagram endpoint must still measure every send, whether that pipe is the udp one
    # or a tcp pipe that came first.
    rx = gsp_socket("pull", recv_timeout=T)
    tx = gsp_socket("push", send_timeout=T)
    if tcp_first:
        tx.dial(rx.listen("tcp://127.0.0.1:0").url, fail_fast=True)
        tx.send(b"x" * 70_000)  # no datagram endpoint yet: no limit
        assert len(rx.recv()) == 70_000
    urx = gsp_socket("pull", recv_timeout=T)
    tx.dial(urx.listen("udp://127.0.0.1:0").url, fail_fast=True)
    with pytest.raises(gsp.MessageTooLarge, match="65001-byte message"):
        tx.send(b"x" * 65_001)
    tx.send(b"small")  # and one within the limit goes (to either pull)
    got: list[bytes] = []

    def take() -> bool:
        for pull in (rx, urx):
            try:
                got.append(pull.recv(block=False))
            except gsp.WouldBlock:
                pass
        return bool(got)
    wait_for(take, T)
    assert got == [b"small"]


def test_peer_recv_limit_is_honoured(gsp_socket: Callable[..., gsp.Socket]) -> None:
    """The limit each side offers (max_recv_size, at most 65,000) is the one the other sends to."""
    rx = gsp_socket("pull", recv_timeout=T, max_recv_size=1000)
    tx = gsp_socket("push", send_timeout=T)
    tx.dial(rx.listen("udp://127.0.0.1:0").url, fail_fast=True)
    wait_for(lambda: len(rx.pipes) == 1, T)
    tx.send(b"x" * 1001)  # over rx's limit: never sent
    tx.send(b"y" * 1000)
    assert rx.recv() == b"y" * 1000
    assert len(rx.pipes) == 1


def test_silent_peer_is_dropped_after_five_refresh_intervals(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """A dialer offers a 1 s refresh: the listener drops it 5 s after the last datagram."""
    g = gsp_socket("pull", recv_timeout=T)
    url = g.listen("udp://127.0.0.1:0").url
    host, port = url[len("udp://"):].rsplit(":", 1)
    with UDPRelay((host, int(port))) as relay:
        tx = gsp_socket("push", send_timeout=T, dial=relay.url)
        wait_for(lambda: len(g.pipes) == 1, T)
        tx.send(b"one")
        assert g.recv() == b"one"
        passed = relay.counts["passed"]
        wait_for(lambda: relay.counts["passed"] >= passed + 4, T,
                 what="keep-alives crossing the relay")
        assert len(g.pipes) == 1  # with nothing else sent: still connected
        pipe = g.pipes[0]
        relay.loss = 1.0  # the network goes dark
        assert pipe.wait_closed(8.0), "the silent peer was kept"
        assert isinstance(pipe.error, gsp.ConnectionBroken)
        relay.loss = 0.0  # and comes back: the dialer connects again
        wait_for(lambda: len(g.pipes) == 1, T, what="the dialer back")


# -- through loss, delay, duplication and reordering --------------------------------------------

IMPAIRED = dict(loss=0.05, delay=0.05, jitter=0.02, dup=0.02)


@pytest.fixture
def rep_nng2() -> Iterator[tuple[nng.Socket, str]]:
    n = nng2.socket("rep", int(T * 1000))
    try:
        yield n, nng2.listen(n, "udp://127.0.0.1:0")
    finally:
        nng2.close(n)


def _hostport(url: str) -> tuple[str, int]:
    host, port = url[len("udp://"):].rsplit(":", 1)
    return host, int(port)


@pytest.mark.interop("nng")
def test_gsp_req_through_impaired_relay_to_nng2_rep(
        gsp_socket: Callable[..., gsp.Socket], rep_nng2: tuple[nng.Socket, str]) -> None:
    n, url = rep_nng2
    requests = 50

    def serve() -> None:
        for _ in range(requests * 3):  # resends and duplicates answered too
            try:
                m = n.recv()
            except nng.NngTimeout:
                return
            n.send(m.to_bytes()[::-1])

    n.recv_timeout = 3000
    server = nng2.spawn(serve)
    with UDPRelay(_hostport(url), seed=44, **IMPAIRED) as relay:
        g = gsp_socket("req", recv_timeout=T, send_timeout=T, resend_time=0.3)
        g.dial(relay.url, fail_fast=True)
        for i in range(requests):
            q = b"request %d" % i
            g.send(q)
            assert g.recv() == q[::-1]
        g.close()
        assert relay.counts["lost"] > 0
    server.get(timeout=T * 2)


@pytest.mark.interop("nng")
def test_nng2_req_through_impaired_relay_to_gsp_rep(gsp_socket: Callable[..., gsp.Socket]) -> None:
    requests = 50
    g = gsp_socket("rep", recv_timeout=T, send_timeout=T)
    url = g.listen("udp://127.0.0.1:0").url

    def serve() -> None:
        while True:
            g.send(g.recv()[::-1])

    server = gevent.spawn(serve)
    n = nng2.socket("req", int(T * 1000))
    n.resend_time = 300
    try:
        with UDPRelay(_hostport(url), seed=45, **IMPAIRED) as relay:
            nng2.dial(n, relay.url)
            for i in range(requests):
                q = b"request %d" % i
                nng2.run(n.send, q)
                assert nng2.run(nng2.recv, n) == q[::-1]
            assert relay.counts["lost"] > 0, relay.counts
    finally:
        server.kill()
        nng2.close(n)


@pytest.mark.parametrize("gproto,peer", [("push", "pull"), ("pub", "sub"), ("bus", "bus"),
                                         ("pair1", "pair1")])
def test_gsp_to_gsp_through_impaired_relay(
        gsp_socket: Callable[..., gsp.Socket], gproto: str, peer: str) -> None:
    """Loss, delay, duplication and reordering: what arrives is what was sent (some lost, some
    twice, not always in order), nothing crashes, and both sockets close promptly."""
    rx = gsp_socket(peer, recv_timeout=0.5)
    if peer == "sub":
        rx.subscribe(b"")
    url = rx.listen("udp://127.0.0.1:0").url
    with UDPRelay(_hostport(url), seed=46, **IMPAIRED) as relay:
        tx = gsp_socket(gproto, send_timeout=T, dial=relay.url)
        wait_for(lambda: len(rx.pipes) == 1 and len(tx.pipes) == 1, T)
        sent = {b"m%d" % i for i in range(200)}
        for m in sorted(sent):
            tx.send(m)
        got: list[bytes] = []
        try:
            while True:
                got.append(rx.recv())
        except gsp.Timeout:
            pass
        assert set(got) <= sent
        assert len(set(got)) >= 150, relay.counts  # about 90 % of 200 cross both ways


@pytest.mark.interop("nng")
@pytest.mark.parametrize("url", ["udp://[::1]:0", "udp6://[::1]:0", "udp4://127.0.0.1:0"])
def test_address_families_with_nng2(gsp_socket: Callable[..., gsp.Socket], url: str) -> None:
    g = gsp_socket("pair1", recv_timeout=T, send_timeout=T)
    bound = g.listen(url).url
    assert bound.startswith(url.split(":0")[0] + ":") and not bound.endswith(":0")
    n = nng2.socket("pair1", int(T * 1000))
    try:
        nng2.dial(n, bound)
        wait_for(lambda: len(g.pipes) == 1 and nng2.active_pipes(n) == 1, T)
        one(g.send, lambda: nng2.run(nng2.recv, n), b"to nng")
        nng2.run(n.send, b"to gsp")
        assert g.recv() == b"to gsp"
        assert g.pipes[0].peer.ip is not None
        assert g.pipes[0].peer.ip.version == (4 if url.startswith("udp4") else 6)
    finally:
        nng2.close(n)


def test_an_ipv6_literal_in_any_form_dials_and_a_family_mismatch_is_refused(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    """The reader finds a dialer's connection by the address datagrams come from, which the
    kernel gives in canonical form: a URL's literal in another form (``[0:0:0:0:0:0:0:1]``)
    reaches the same peer. udp4:// and udp6:// refuse a literal of the other family at once."""
    a = gsp_socket("pair", recv_timeout=T, send_timeout=T)
    b = gsp_socket("pair", recv_timeout=T, send_timeout=T)
    port = a.listen("udp6://[::1]:0").url.rsplit(":", 1)[1]
    b.dial(f"udp://[0:0:0:0:0:0:0:1]:{port}", fail_fast=True)
    b.send(b"long form")
    assert a.recv() == b"long form"
    for url in ("udp6://127.0.0.1:5555", "udp4://[::1]:5555"):
        with pytest.raises(gsp.InvalidAddress, match="is not an IPv"):
            a.dial(url)
        with pytest.raises(gsp.InvalidAddress, match="is not an IPv"):
            a.listen(url)
