"""tls+tcp: the transport conformance kit, then verification, mutual TLS, options and pynng
interop."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any, Callable
from urllib.parse import urlsplit

import pytest
from gevent import socket as gsocket
from gevent import ssl as gssl

import gsp
from gsp import TLSHandshakeError
from gsp.testing import TransportSuite, wait_for
from gsp.transport import parse_host_port
from tests.support import HDR_PULL, HDR_PUSH, nng
from tests.support.certs import PAIRS, PKI, interop

LOCAL = "tls+tcp://127.0.0.1:0"


class TestTLSTransport(TransportSuite):
    """Every check runs with the test CA: listeners present its server certificate, dialers
    trust it (the handshake-timeout checks stall before TLS begins)."""

    scheme = "tls+tcp"
    bad_urls = ("tls+tcp://", "tls+tcp://127.0.0.1", "tls+tcp://127.0.0.1:99999",
                "tls+tcp://127.0.0.1:5?q=1", "tls+tcp://[::1:5")
    options = {"tcp_nodelay": (False, "yes"), "tls_verify": (False, "yes"),
               "tls_client_auth": ("none", "sometimes"), "tls_server_name": ("localhost", "")}

    @pytest.fixture(autouse=True)
    def _certificates(self, pki: PKI) -> None:
        self.pki = pki

    def listen_url(self) -> str:
        return LOCAL

    def anonymous_url(self) -> str:
        return LOCAL

    def raw_connect(self, url: str) -> Any:
        """A TLS client socket, handshake done: the SP header travels inside TLS."""
        ctx = ssl.create_default_context(cafile=self.pki.ca_file)
        sock = gsocket.create_connection(parse_host_port(url, listening=False))
        tls = gssl.SSLSocket(sock=sock, server_hostname="localhost", _context=ctx)
        tls.do_handshake()
        return tls

    def listen_options(self) -> dict[str, Any]:
        return self.pki.listen_options()

    def dial_options(self) -> dict[str, Any]:
        return self.pki.dial_options()


def _pair(pki: PKI, listen: dict, dial: dict) -> tuple[gsp.Socket, gsp.Socket]:
    a = gsp.socket("pair", recv_timeout=5, send_timeout=5)
    b = gsp.socket("pair", recv_timeout=5, send_timeout=5)
    try:
        url = a.listen(LOCAL, **listen).url
        b.dial(url, fail_fast=True, **dial)
    except BaseException:
        a.close()
        b.close()
        raise
    return a, b


def _roundtrip(a: gsp.Socket, b: gsp.Socket) -> None:
    b.send(b"ping")
    assert a.recv() == b"ping"
    a.send(b"pong")
    assert b.recv() == b"pong"


def test_roundtrip_and_peer_identity_with_mutual_tls(pki):
    listen = pki.listen_options(tls_client_auth="required", tls_ca_file=pki.ca_file)
    dial = pki.dial_options(tls_cert_file=pki.client_cert_file, tls_key_file=pki.client_key_file)
    a, b = _pair(pki, listen, dial)
    try:
        _roundtrip(a, b)
        server_side = a.pipes[0].properties
        assert server_side["peer_subject"]["commonName"] == "gsp-test-client"
        assert server_side["peer_certificate"]["subject"]
        client_side = b.pipes[0].properties
        assert ("IP Address", "127.0.0.1") in client_side["peer_certificate"]["subjectAltName"]
        assert client_side["tls_version"].startswith("TLS")
    finally:
        a.close()
        b.close()


def _push_peer(pki: PKI, pull: gsp.Socket, strict: bool) -> Any:
    """A bare TLS client (gevent's ssl) that dialed a tls+tcp listener of ``pull`` and spoke
    the SP header as a push, once the pull's pipe is up; with ``strict``, a TCP end without
    close_notify is an ``ssl.SSLEOFError`` to it, not an empty read."""
    parts = urlsplit(pull.listen(LOCAL, **pki.listen_options()).url)
    raw = gsocket.create_connection((parts.hostname, parts.port), timeout=5)
    context = gssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.ca_file)
    peer = context.wrap_socket(raw, server_hostname="127.0.0.1",
                               suppress_ragged_eofs=not strict)
    peer.sendall(HDR_PUSH)
    got = b""
    while len(got) < len(HDR_PULL):
        got += peer.recv(len(HDR_PULL) - len(got))
    assert got == HDR_PULL
    wait_for(lambda: pull.pipes, what="the pipe")
    return peer


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "reset"])
def test_a_peer_gone_without_close_notify_closed_the_connection(
        pki: PKI, gsp_socket: Callable[..., gsp.Socket], reset: bool) -> None:
    """A TCP stream that ends without TLS's close_notify (a FIN, or a reset) is the peer closing
    the connection, not a timeout: OpenSSL reports both like the kernel giving up on an
    unanswering peer, which TCP_INFO tells apart (tests/transports/test_tcp_blackhole.py has that case)."""
    pull = gsp_socket("pull")
    peer = _push_peer(pki, pull, strict=False)
    (pipe,) = pull.pipes
    if reset:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # no close_notify: the TCP connection just ends
    wait_for(lambda: pipe.closed, what="the pipe to end")
    assert isinstance(pipe.error, gsp.ConnectionBroken)
    assert str(pipe.error) == f"{pipe.remote_address} closed the connection"


def test_untrusted_certificate_is_refused_clearly(gsp_socket, pki):
    a = gsp_socket("pair")
    b = gsp_socket("pair")
    url = a.listen(LOCAL, **pki.listen_options()).url
    with pytest.raises(TLSHandshakeError, match="certificate verification failed"):
        b.dial(url, fail_fast=True, tls_ca_file=pki.rogue_ca_file)
    with pytest.raises(gsp.HandshakeError, match="certificate verification failed"):
        b.dial(url, fail_fast=True)  # system CAs do not know the test CA either
    # A trusted certificate for another name fails too (host name checking is on).
    with pytest.raises(TLSHandshakeError, match="certificate verification failed"):
        b.dial(url, fail_fast=True, tls_ca_file=pki.ca_file, tls_server_name="other.example")
    assert not a.pipes and not b.pipes


def test_verification_off_explicitly_works(pki):
    a, b = _pair(pki, pki.listen_options(), {"tls_verify": False, "tls_ca_file": pki.rogue_ca_file})
    try:
        _roundtrip(a, b)
        assert b.pipes[0].properties["peer_certificate"] is None  # not verified: no identity
        assert b.pipes[0].properties["peer_certificate_der"]
    finally:
        a.close()
        b.close()


def test_mutual_tls_listener_refuses_dialer_without_client_cert(gsp_socket, pki):
    listen = pki.listen_options(tls_client_auth="required", tls_ca_file=pki.ca_file)
    a = gsp_socket("pair")
    b = gsp_socket("pair")
    url = a.listen(LOCAL, **listen).url
    with pytest.raises(TLSHandshakeError):
        b.dial(url, fail_fast=True, **pki.dial_options())
    with pytest.raises(TLSHandshakeError):  # a certificate from a CA the listener distrusts
        b.dial(url, fail_fast=True, **pki.dial_options(
            tls_cert_file=pki.rogue_cert_file, tls_key_file=pki.rogue_key_file))
    wait_for(lambda: a.listeners[0].stats["handshake_failures_tls"] == 2,
             what="the listener's two failed handshakes")
    assert not a.pipes and not b.pipes


def test_ssl_context_options(pki):
    client = ssl.create_default_context(cafile=pki.ca_file)
    a, b = _pair(pki, {"ssl_context": pki.server_context()}, {"ssl_context": client})
    try:
        _roundtrip(a, b)
    finally:
        a.close()
        b.close()


def test_bad_tls_options_are_bad_option(gsp_socket, pki, tmp_path):
    s = gsp_socket("pair")
    with pytest.raises(gsp.BadOption, match="needs a certificate"):
        s.listen(LOCAL)
    with pytest.raises(gsp.BadOption, match="cannot load"):
        s.listen(LOCAL, tls_cert_file=str(tmp_path / "missing.pem"))
    with pytest.raises(gsp.BadOption, match="cannot load"):
        s.dial("tls+tcp://127.0.0.1:1", tls_ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(gsp.BadOption):
        s.listen(LOCAL, ssl_context="not a context")
    with pytest.raises(gsp.BadOption):
        s.listen(LOCAL, tls_client_auth="sometimes", **pki.listen_options())
    assert not s.listeners and not s.dialers


@pytest.mark.parametrize("gsp_listens", [True, False], ids=["gsp-listens", "nng-listens"])
@pytest.mark.parametrize("gsp_role", [0, 1], ids=["gsp-first", "gsp-second"])
@pytest.mark.parametrize("pair", list(PAIRS))
def test_interop_nng(pki, pair, gsp_role, gsp_listens):
    interop(pair, gsp_role, gsp_listens, "tls+tcp",
            gsp_listen_options=pki.listen_options(), gsp_dial_options=pki.dial_options(),
            nng_server=pki.nng_server_args(), nng_client=pki.nng_client_args())


@pytest.mark.interop
def test_interop_nng_client_certificate(gsp_socket, pki):
    """An nng dialer presents a client certificate to a gsp mutual-TLS listener."""
    listen = pki.listen_options(tls_client_auth="required", tls_ca_file=pki.ca_file)
    g = gsp_socket("pull", recv_timeout=5)
    url = g.listen(LOCAL, **listen).url
    n = nng.socket("push", tls_config=pki.nng_client(with_cert=True))
    try:
        nng.run(n.dial, url, block=True)
        nng.run(n.send, b"signed")
        assert g.recv() == b"signed"
        assert g.pipes[0].properties["peer_subject"]["commonName"] == "gsp-test-client"
    finally:
        n.close()


@pytest.mark.interop
def test_interop_nng_mutual_tls_listener_refuses_gsp_without_cert(gsp_socket, pki):
    n = nng.socket("pull", tls_config=pki.nng_server(require_client_cert=True))
    try:
        lst = nng.run(n.listen, LOCAL)
        g = gsp_socket("push")
        with pytest.raises(gsp.GspError):
            g.dial(nng.bound_url(lst, "tls+tcp"), fail_fast=True, **pki.dial_options())
        g.close()
    finally:
        n.close()


def test_closing_ends_tls_with_close_notify(pki: PKI,
                                            gsp_socket: Callable[..., gsp.Socket]) -> None:
    """gsp ends a TLS connection it closes with close_notify (RFC 8446, 6.1), so a peer strict
    about it (Python's ssl with suppress_ragged_eofs off; Go's crypto/tls) reads a clean end,
    where a bare TCP end is an SSLEOFError."""
    pull = gsp_socket("pull")
    peer = _push_peer(pki, pull, strict=True)
    try:
        pull.pipes[0].close()
        assert peer.recv(1) == b""  # ssl.SSLEOFError without close_notify
    finally:
        peer.close()


def test_a_tls_handshake_on_a_socket_closed_under_it_is_closed_not_an_attribute_error(pki):
    """A listener that sheds a connection closes its socket from another greenlet; the one
    that was to run its TLS handshake then met gevent's SSLSocket without its TLS object and
    died on an AttributeError (a traceback a slowloris run over wss printed 4 times)."""
    from gsp.transport.tls import tls_handshake, tls_wrap
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki.server_cert_file, pki.server_key_file)
    a, b = gsocket.socketpair()
    try:
        sslsock = tls_wrap(a, ctx, server_side=True)
        sslsock.close()
        with pytest.raises(gsp.Closed, match="closed before its TLS handshake finished"):
            tls_handshake(sslsock, "wss from test")
    finally:
        a.close()
        b.close()

