"""pipe.peer: the same facts in the same shape on every transport, read against real peers
(nng 2.0 in this process, and gsp)."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from typing import Iterator

import nng
import pytest

import gsp
from gsp.testing import wait_for
from tests.support import nng2
from tests.support.certs import PKI, cert_der

T = 10.0


@pytest.fixture
def nng_pair() -> Iterator[nng.Socket]:
    n = nng2.socket("pair1", int(T * 1000))
    yield n
    nng2.close(n)


def _nng_local_port(n: nng.Socket) -> int:
    wait_for(lambda: nng2.active_pipes(n) == 1, T)
    return int(n.pipes[0].get_self_addr().port)


@pytest.mark.interop("nng")
@pytest.mark.parametrize("scheme", ["tcp", "udp", "ws"])
def test_ip_transports_give_the_peer_address(scheme: str, nng_pair: nng.Socket) -> None:
    path = "/sp" if scheme == "ws" else ""
    with gsp.socket("pair1") as g:
        nng2.dial(nng_pair, g.listen(f"{scheme}://127.0.0.1:0{path}").url)
        wait_for(lambda: len(g.pipes) == 1, T)
        peer = g.pipes[0].peer
        port = _nng_local_port(nng_pair)
        if scheme == "udp":  # nng reports its udp dialer's own address as bound: port 0
            assert port == 0 and peer.port
            port = peer.port
        assert peer.ip == ipaddress.ip_address("127.0.0.1") and peer.port == port
        assert peer.address.startswith(f"{scheme}://127.0.0.1:{port}")
        assert (peer.pid, peer.uid, peer.gid, peer.certificate) == (None, None, None, None)
        if scheme == "ws":
            req = peer.ws_request
            assert req is not None and req.request_line == "GET /sp HTTP/1.1"
            assert req.header("Sec-WebSocket-Protocol") == "pair1.sp.nanomsg.org"
            assert req.header("host") is not None
        else:
            assert peer.ws_request is None


@pytest.mark.interop("nng")
@pytest.mark.parametrize("scheme", ["ipc", "abstract"])
def test_local_transports_give_the_peer_process(scheme: str, ipc_dir: str,
                                                nng_pair: nng.Socket) -> None:
    url = f"ipc://{ipc_dir}/peer.sock" if scheme == "ipc" else \
        f"abstract://gsp-peer-{os.getpid()}-{os.urandom(4).hex()}"
    with gsp.socket("pair1") as g:
        nng2.dial(nng_pair, g.listen(url).url)
        wait_for(lambda: len(g.pipes) == 1, T)
        peer = g.pipes[0].peer
        assert (peer.pid, peer.uid, peer.gid) == (os.getpid(), os.getuid(), os.getgid())
        assert peer.ip is None and peer.port is None and peer.certificate is None


@pytest.mark.parametrize("scheme", ["tls+tcp", "wss"])
def test_tls_gives_the_peer_certificate_both_ways(scheme: str, pki: PKI) -> None:
    path = "/sp" if scheme == "wss" else ""
    with gsp.socket("pair") as server, gsp.socket("pair") as client:
        url = server.listen(f"{scheme}://127.0.0.1:0{path}", tls_client_auth="required",
                            tls_ca_file=pki.ca_file, **pki.listen_options()).url
        client.dial(url, fail_fast=True, tls_cert_file=pki.client_cert_file,
                    tls_key_file=pki.client_key_file, **pki.dial_options())
        wait_for(lambda: len(server.pipes) == 1, T)
        theirs = server.pipes[0].peer.certificate  # the client's, seen by the server
        assert theirs is not None and theirs.verified
        assert theirs.der == cert_der(pki.client_cert_file)
        assert theirs.fingerprint == hashlib.sha256(theirs.der).hexdigest()
        assert theirs.common_name == "gsp-test-client"
        assert ("DNS", "client.example") in theirs.sans
        assert theirs.issuer and theirs.issuer != theirs.subject
        now = datetime.datetime.now(datetime.timezone.utc)
        assert theirs.not_before is not None and theirs.not_after is not None
        assert theirs.not_before <= now <= theirs.not_after
        ours = client.pipes[0].peer.certificate  # the server's, seen by the client
        assert ours is not None and ours.der == cert_der(pki.server_cert_file)
        assert ("IP Address", "127.0.0.1") in ours.sans and ("DNS", "localhost") in ours.sans
        assert client.pipes[0].peer.ws_request is None  # a dialer made the request itself
        if scheme == "wss":
            assert server.pipes[0].peer.ws_request is not None


def test_unverified_certificate_has_der_and_fingerprint_only(pki: PKI) -> None:
    with gsp.socket("pair") as server, gsp.socket("pair") as client:
        url = server.listen("tls+tcp://127.0.0.1:0", **pki.listen_options()).url
        client.dial(url, fail_fast=True, tls_verify=False)
        cert = client.pipes[0].peer.certificate
        assert cert is not None and not cert.verified
        assert cert.der == cert_der(pki.server_cert_file)
        assert cert.subject == {} and cert.not_after is None
        wait_for(lambda: len(server.pipes) == 1, T)
        assert server.pipes[0].peer.certificate is None  # no client certificate was asked for


@pytest.mark.interop("nng")
def test_nng2_client_certificate(pki: PKI) -> None:
    """An nng 2.0 client's certificate, as gsp's listener sees it."""
    from pathlib import Path

    n = nng2.socket("pair1", int(T * 1000))
    try:
        with gsp.socket("pair1") as g:
            url = g.listen("tls+tcp://127.0.0.1:0", tls_client_auth="required",
                           tls_ca_file=pki.ca_file, **pki.listen_options()).url
            tls = nng.TlsConfig.for_client(server_name="localhost", ca_file=pki.ca_file,
                                           cert_pem=Path(pki.client_cert_file).read_text(),
                                           key_pem=Path(pki.client_key_file).read_text())
            nng2.dial(n, url, tls)
            wait_for(lambda: len(g.pipes) == 1, T)
            cert = g.pipes[0].peer.certificate
            assert cert is not None and cert.common_name == "gsp-test-client"
            # and nng 2.0's view of gsp's certificate is the same certificate
            wait_for(lambda: nng2.active_pipes(n) == 1, T)
            theirs = n.pipes[0].get_peer_cert()
            assert theirs is not None and theirs.to_der() == cert_der(pki.server_cert_file)
    finally:
        nng2.close(n)
