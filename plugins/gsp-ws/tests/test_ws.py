"""ws:// and wss:// (the gsp-ws plugin): the transport conformance kit, then the upgrade rules
(request and response headers, paths sharing one port, 404 / 400 / 403 answers, a stalled HTTP
client), wss's TLS options and identity, pynng interop and the plugin's entry point. Framing,
limits and the close handshake are in test_ws_frames.py; the bare WebSocket client (RawClient) and
port_of they share are in ws_support.py."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from typing import Any

import gevent
import pynng
import pytest
from gevent import socket as gsocket
from wsproto.events import CloseConnection

import gsp
from gsp import TLSHandshakeError
from gsp.testing import TransportSuite, wait_for
from gsp_ws import UpgradeRefused
from tests.support import nng
from tests.support.certs import PAIRS, PKI, interop
from tests.support.nng_process import NngProcess
from tests.support.ws_support import RawClient, port_of

MiB = 1 << 20


def accept_all(request: Any) -> None:
    """A ``ws_authorize`` check that lets every peer in (the kit's good value)."""


class TestWSTransport(TransportSuite):
    scheme = "ws"
    wrong_protocol_error = UpgradeRefused  # an HTTP 400: the subprotocol is not the listener's peer
    # (a dialer's URL may have a query, sent in its upgrade request: a listener's may not)
    bad_urls = ("ws://127.0.0.1:99999/sp", "ws://127.0.0.1:x/sp", "ws://127.0.0.1:5/sp#q=1",
                "ws://u:p@127.0.0.1:5/sp", "ws://[::1:5/sp", "ws://a b:5/sp")
    options = {"ws_recv_text": (True, "yes"), "ws_max_frame_size": (0, -1),
               "ws_max_send_frame_size": (1 << 15, 1.5),
               "ws_request_headers": ((("X-Kit", "1"),), {"X-Bad\n": "1"}),
               "ws_origins": (frozenset({"https://good.example"}), "https://good.example"),
               "ws_authorize": (accept_all, "Bearer token")}

    not_applicable = {"test_garbage_headers_refused":
                      "SP over WebSocket has no 8-byte SP header: the protocol is the "
                      "subprotocol of the HTTP upgrade (test_wrong_protocol_refused checks it)"}

    def listen_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:0/sp"

    def anonymous_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:0/sp"


class TestWSSTransport(TestWSTransport):
    scheme = "wss"
    bad_urls = ("wss://127.0.0.1:99999/sp", "wss://127.0.0.1:5/sp#frag")

    @pytest.fixture(autouse=True)
    def _certificates(self, pki: PKI) -> None:
        self.pki = pki

    def listen_options(self) -> dict[str, Any]:
        return self.pki.listen_options()

    def dial_options(self) -> dict[str, Any]:
        return self.pki.dial_options()


def _pair_sockets(**listen: Any) -> tuple[gsp.Socket, gsp.Socket, str]:
    a = gsp.socket("pair", recv_timeout=5, send_timeout=5)
    b = gsp.socket("pair", recv_timeout=5, send_timeout=5)
    url = a.listen("ws://127.0.0.1:0/sp", **listen).url
    return a, b, url


def test_roundtrip_headers_and_properties():
    a, b, url = _pair_sockets(ws_response_headers={"X-Served-By": "gsp"})
    try:
        b.dial(url, fail_fast=True, ws_request_headers={"X-Token": "t1"})
        b.send(b"ping")
        assert a.recv() == b"ping"
        a.send(b"")  # empty messages are messages too
        assert b.recv() == b""
        props = a.pipes[0].properties
        assert ("x-token", "t1") in props["ws_request_headers"]
        assert props["ws_subprotocol"] == "pair.sp.nanomsg.org" and props["ws_path"] == "/sp"
        raw = RawClient(port_of(url), "/sp")  # pair takes one peer; the upgrade still answers
        try:
            assert raw.status == 101
            assert (b"x-served-by", b"gsp") in raw.answer.extra_headers
        finally:
            raw.close()
    finally:
        a.close()
        b.close()


def test_paths_share_one_port_unknown_path_is_404(gsp_socket):
    p1 = gsp_socket("pull", recv_timeout=5)
    p2 = gsp_socket("pull", recv_timeout=5)
    s1 = gsp_socket("push", send_timeout=5)
    s2 = gsp_socket("push", send_timeout=5)
    url1 = p1.listen("ws://127.0.0.1:0/one").url
    port = port_of(url1)
    url2 = p2.listen(f"ws://127.0.0.1:{port}/two").url
    assert url2 == f"ws://127.0.0.1:{port}/two"
    with pytest.raises(gsp.AddressInUse):
        p2.listen(f"ws://127.0.0.1:{port}/one")
    s1.dial(url1, fail_fast=True)
    s2.dial(url2, fail_fast=True)
    s1.send(b"to one")
    s2.send(b"to two")
    assert p1.recv() == b"to one" and p2.recv() == b"to two"
    raw = RawClient(port, "/three", protocols=("push.sp.nanomsg.org",))
    try:
        assert raw.status == 404
    finally:
        raw.close()
    p1.listeners[0].close()  # the other path keeps being served
    s2.send(b"still two")
    assert p2.recv() == b"still two"
    raw = RawClient(port, "/one", protocols=("pull.sp.nanomsg.org",))
    try:
        assert raw.status == 404
    finally:
        raw.close()


@pytest.mark.interop
def test_wrong_or_missing_protocol_is_400(gsp_socket):
    lst_sock = gsp_socket("push")
    wrong = gsp_socket("push")
    url = lst_sock.listen("ws://127.0.0.1:0/sp").url
    with pytest.raises(UpgradeRefused) as info:
        wrong.dial(url, fail_fast=True)  # offers pull.sp.nanomsg.org to a push listener
    assert info.value.status == 400 and "push.sp.nanomsg.org" in str(info.value)
    assert isinstance(info.value, gsp.HandshakeError)
    for offered in ((), ("pair.sp.nanomsg.org",)):
        raw = RawClient(port_of(url), "/sp", protocols=offered)
        try:
            assert raw.status == 400
        finally:
            raw.close()
    n = nng.socket("push")  # nng offers pull.sp.nanomsg.org too
    try:
        with pytest.raises(pynng.NNGException):
            nng.run(n.dial, url, block=True)
    finally:
        n.close()
    assert not lst_sock.pipes


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_full_listener_answers_503(gsp_socket, pki, scheme):
    """At max_pipes the listener answers the next upgrade ``503`` with ``Retry-After`` (the
    transport's ``refuse`` hook) instead of just hanging up; a gsp dialer waits it out."""
    lst = gsp_socket("pair", max_pipes=1, **pki.listen_options())
    first = gsp_socket("pair", recv_timeout=5, send_timeout=5, **pki.dial_options())
    second = gsp_socket("pair", recv_timeout=5, send_timeout=5, reconnect_time=0.05,
                        **pki.dial_options())
    url = lst.listen(f"{scheme}://127.0.0.1:0/sp").url
    first.dial(url, fail_fast=True)
    if scheme == "ws":  # a bare HTTP client reads the answer itself
        raw = RawClient(port_of(url))
        try:
            assert raw.status == 503
            headers = dict(raw.answer.headers)
            assert headers[b"retry-after"] == b"1"
            assert raw.eof()
        finally:
            raw.close()
    with pytest.raises(UpgradeRefused) as info:
        second.dial(url, fail_fast=True)
    assert info.value.status == 503 and "max_pipes" in info.value.reason
    assert lst.listeners[0].stats["pipes_refused_full"] >= 1
    second.dial(url)  # in the background: it gets in once the first leaves
    first.close()
    lst.send(b"to the second")
    assert second.recv() == b"to the second"


def test_origin_allow_list_is_403(gsp_socket):
    a = gsp_socket("pair")
    b = gsp_socket("pair")
    url = a.listen("ws://127.0.0.1:0/sp", ws_origins=["https://good.example"]).url
    with pytest.raises(UpgradeRefused) as info:
        b.dial(url, fail_fast=True, ws_request_headers={"Origin": "https://evil.example"})
    assert info.value.status == 403
    port = port_of(url)
    for origin, status in (("https://evil.example", 403), ("https://good.example", 101)):
        raw = RawClient(port, "/sp", headers={"Origin": origin})
        try:
            assert raw.status == status
        finally:
            raw.close()
    b.dial(url, fail_fast=True)  # no Origin (a non-browser client, like nng): allowed
    assert len(b.pipes) == 1


@pytest.mark.interop
@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_one_mib_messages_with_nng(pki, scheme):
    """1 MiB each way between gsp and nng (gsp to gsp: TestWSTransport.test_message_sizes).
    nng runs in a process of its own: its close can abort its process after a wss exchange with
    gsp (tests/support/nng_process.py); its calls run on a native thread, as the hub serves gsp's end."""
    tls_listen = pki.listen_options() if scheme == "wss" else {}
    limit = {"max_recv_size": 2 * MiB}
    payload = os.urandom(MiB)
    with gsp.socket("pair", recv_timeout=10, send_timeout=10, **limit) as g, \
            NngProcess("pair", recv_timeout=10000, recv_max_size=2 * MiB,
                       tls=pki.nng_client_args() if scheme == "wss" else None) as n:
        url = g.listen(f"{scheme}://127.0.0.1:0/big", **tls_listen).url
        nng.run(n.dial, url, block=True)
        nng.run(n.send, payload)
        assert g.recv() == payload
        g.send(payload[::-1])
        assert nng.run(n.recv) == payload[::-1]


def test_stalled_http_client_delays_nobody(gsp_socket):
    a = gsp_socket("pair", recv_timeout=5, handshake_timeout=0.5)
    b = gsp_socket("pair", recv_timeout=5)
    url = a.listen("ws://127.0.0.1:0/sp").url
    stalled = gsocket.create_connection(("127.0.0.1", port_of(url)))
    try:
        stalled.sendall(b"GET /sp HTTP/1.1\r\nHost: x\r\n")  # and never finishes
        b.dial(url, fail_fast=True)
        b.send(b"through")
        assert a.recv() == b"through"
        stalled.settimeout(3)
        assert stalled.recv(100) == b""  # dropped at handshake_timeout
    finally:
        stalled.close()


def test_wss_tls_options_and_identity(gsp_socket, pki):
    a = gsp_socket("pair", recv_timeout=5)
    b = gsp_socket("pair", recv_timeout=5)
    with pytest.raises(gsp.BadOption, match="needs a certificate"):
        a.listen("wss://127.0.0.1:0/sp")
    url = a.listen("wss://127.0.0.1:0/sp", tls_client_auth="required",
                   **pki.listen_options(tls_ca_file=pki.ca_file)).url
    with pytest.raises(TLSHandshakeError, match="certificate verification failed"):
        b.dial(url, fail_fast=True, tls_ca_file=pki.rogue_ca_file)
    # No client certificate for a mutual-TLS listener: a TLS refusal, as on tls+tcp (the
    # alert arrives while the dialer reads the upgrade's answer).
    with pytest.raises(TLSHandshakeError, match="failed: .*CERTIFICATE"):
        b.dial(url, fail_fast=True, **pki.dial_options())
    with pytest.raises(TLSHandshakeError):  # a certificate from a CA the listener distrusts
        b.dial(url, fail_fast=True, **pki.dial_options(
            tls_cert_file=pki.rogue_cert_file, tls_key_file=pki.rogue_key_file))
    b.dial(url, fail_fast=True, **pki.dial_options(
        tls_cert_file=pki.client_cert_file, tls_key_file=pki.client_key_file))
    b.send(b"secure")
    assert a.recv() == b"secure"
    assert a.pipes[0].properties["peer_subject"]["commonName"] == "gsp-test-client"
    assert b.pipes[0].properties["peer_certificate"] is not None


def test_wss_ends_tls_with_close_notify(pki, gsp_socket):
    """gsp closing a wss pipe ends the WebSocket (close frame, answer) and then TLS with its
    close_notify (RFC 8446, 6.1), before the TCP end: a client strict about it reads a clean
    end, where a bare TCP end is an SSLEOFError."""
    import ssl
    server = gsp_socket("pair")
    url = server.listen("wss://127.0.0.1:0/sp", **pki.listen_options()).url
    raw = RawClient(port_of(url), tls=ssl.create_default_context(cafile=pki.ca_file))
    try:
        assert raw.status == 101
        wait_for(lambda: server.pipes, what="the pipe")
        (pipe,) = server.pipes
        closer = gevent.spawn(pipe.close)
        ev = raw.next_event(CloseConnection)
        raw.send(ev.response())
        closer.join(5)
        assert closer.successful() and pipe.closed, closer.exception
        assert raw.sock.recv(1) == b""  # ssl.SSLEOFError without close_notify
    finally:
        raw.close()


@pytest.mark.interop
def test_nng_listener_refuses_the_wrong_protocol(gsp_socket):
    n = nng.socket("push")
    try:
        lst = nng.run(n.listen, "ws://127.0.0.1:0/sp")
        g = gsp_socket("push")
        with pytest.raises(UpgradeRefused):
            g.dial(nng.bound_url(lst, "ws") + "/sp", fail_fast=True)
        g.close()
    finally:
        n.close()


@pytest.mark.parametrize("gsp_listens", [True, False], ids=["gsp-listens", "nng-listens"])
@pytest.mark.parametrize("gsp_role", [0, 1], ids=["gsp-first", "gsp-second"])
@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_interop_nng(pki, scheme, pair, gsp_role, gsp_listens):
    tls = scheme == "wss"
    interop(pair, gsp_role, gsp_listens, scheme, path="/sp",
            gsp_listen_options=pki.listen_options() if tls else None,
            gsp_dial_options=pki.dial_options() if tls else None,
            nng_server=pki.nng_server_args() if tls else None,
            nng_client=pki.nng_client_args() if tls else None)


def test_plugin_is_found_only_through_entry_points():
    eps = [ep for ep in importlib.metadata.entry_points(group="gsp") if ep.value == "gsp_ws.transport"]
    assert len(eps) == 1 and eps[0].dist is not None and eps[0].dist.name == "gevent-sp-ws"
    assert {"ws", "wss", "ws+wsgi"} <= set(gsp.transport_schemes())
    code = "import gsp, sys; print(','.join(gsp.transport_schemes())); print('gsp_ws' in sys.modules)"
    env = dict(os.environ, GSP_DISABLE_PLUGIN_AUTOLOAD="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert "ws" not in out[0].split(",") and out[1] == "False"  # not built in: no entry point, no ws
    env.pop("GSP_DISABLE_PLUGIN_AUTOLOAD")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert "ws" in out[0].split(",") and out[1] == "True"


def test_ws_suites_declare_only_the_garbage_header_check_not_applicable() -> None:
    """The kit runs every check on ws and wss but the one a WebSocket transport cannot take: a
    raw SP header with no HTTP upgrade before it."""
    suites = [TestWSTransport, TestWSSTransport]
    assert {s.scheme: sorted(s.not_applicable) for s in suites} == {
        "ws": ["test_garbage_headers_refused"], "wss": ["test_garbage_headers_refused"]}


@pytest.mark.parametrize(("old", "new"), [("ws_recv_frame_max", "ws_max_frame_size"),
                                           ("ws_send_frame_max", "ws_max_send_frame_size")])
def test_the_old_frame_limit_names_work_and_warn(old: str, new: str) -> None:
    """``ws_recv_frame_max`` is ``ws_max_frame_size`` now, ``ws_send_frame_max``
    ``ws_max_send_frame_size``; an old name warns and still works."""
    with pytest.warns(DeprecationWarning, match=f"'{old}' is renamed '{new}'") as caught:
        s = gsp.socket("pull", **{old: 4096})
    try:
        assert caught[0].filename == __file__ and getattr(s, new) == 4096
        with pytest.warns(DeprecationWarning, match=new):
            lst = s.listen("ws://127.0.0.1:0/old", **{old: 512})
        assert lst.options[new] == 512
    finally:
        s.close()
