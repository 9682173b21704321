"""ws_authorize (gsp_ws.auth): a check of the HTTP upgrade request before the 101, on ws/wss
listeners and on a WSGI mount under gevent.pywsgi. Refusals (401/403 with their reason) as a gsp
dialer, pynng and a bare HTTP client see them; what the check sees (path, query, headers,
cookies, peer, TLS); a failing check answers 500 and the listener serves on; bad values."""

from __future__ import annotations

import logging
from typing import Any, Iterator

import gevent
import pynng
import pytest
from gevent import socket as gsocket
from gevent.pywsgi import WSGIServer

import gsp
import gsp_ws
from gsp.testing import wait_for
from gsp.transport import Headers, WSRequest
from gsp_ws import Refusal, UpgradeRefused
from gsp_ws.wsgi import mount
from tests.support import nng
from tests.support.certs import PKI

TOKEN = "s3cret"
TOKENS = {"s3cret": "alice"}  # token -> user


def check_token(request: gsp.transport.WSRequest) -> gsp_ws.Refusal | None:
    """Let in a peer with a known bearer token (or, from a browser, session cookie)."""
    auth = request.headers.get("Authorization", "")
    token = auth[7:] if auth.startswith("Bearer ") else request.cookies.get("session")
    if token is None:
        return gsp_ws.Refusal(401, "a bearer token is needed",
                              headers={"WWW-Authenticate": "Bearer"})
    if token not in TOKENS:
        return gsp_ws.Refusal(403, "that token opens nothing here")
    return None


class Gate:
    """check_token, recording what it saw; its 403 raised rather than returned."""

    def __init__(self) -> None:
        self.seen: list[WSRequest] = []

    def __call__(self, request: WSRequest) -> Refusal | None:
        self.seen.append(request)
        answer = check_token(request)
        if answer is not None and answer.status == 403:
            raise answer
        return answer


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def raw_upgrade(port: int, target: str, headers: dict[str, str],
                protocol: str = "pull.sp.nanomsg.org") -> tuple[int, dict[str, str], bytes]:
    """Send an upgrade request by hand; the status, headers (lower-case names) and body."""
    lines = [f"GET {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
             "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Protocol: {protocol}",
             *(f"{k}: {v}" for k, v in headers.items())]
    s = gsocket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"closed after {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *rest = head.decode("latin-1").split("\r\n")
        got = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}
        if int(status_line.split()[1]) != 101:
            while len(body) < int(got.get("content-length", 0)):
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
        return int(status_line.split()[1]), got, body
    finally:
        s.close()


@pytest.fixture
def pull() -> Iterator[gsp.Socket]:
    with gsp.socket("pull", recv_timeout=5) as s:
        yield s


def listen(sock: gsp.Socket, scheme: str, pki: PKI, **options: Any) -> tuple[str, dict[str, Any]]:
    """Listen on ``scheme``; the URL and the dial options a gsp dialer needs."""
    tls = scheme == "wss"
    lst = sock.listen(f"{scheme}://127.0.0.1:0/sp", **(pki.listen_options() if tls else {}),
                      **options)
    return lst.url, (pki.dial_options() if tls else {})


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_gsp_dialer_sees_401_and_403_then_a_good_token_gets_in(pull, pki, scheme, caplog):
    gate = Gate()
    url, dial = listen(pull, scheme, pki, ws_authorize=gate)
    with gsp.socket("push", send_timeout=5) as push, caplog.at_level(logging.WARNING, "gsp"):
        with pytest.raises(UpgradeRefused) as info:
            push.dial(url, fail_fast=True, **dial)
        assert info.value.status == 401 and info.value.reason == "a bearer token is needed"
        assert "HTTP 401: a bearer token is needed" in str(info.value)
        with pytest.raises(UpgradeRefused) as info:
            push.dial(url, fail_fast=True, ws_request_headers={"Authorization": "Bearer nope"},
                      **dial)
        assert info.value.status == 403 and info.value.reason == "that token opens nothing here"
        assert push.pipes == [] and pull.pipes == []

        push.dial(url, fail_fast=True, ws_request_headers={
            "Authorization": f"Bearer {TOKEN}", "Cookie": 'session=abc; theme="dark"'}, **dial)
        push.send(b"let in")
        msg = pull.recv_msg()
    assert msg.body == b"let in"
    headers = dict(msg.pipe.properties["ws_request_headers"])  # every header, names lower case
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["host"] == f"127.0.0.1:{port_of(url)}"
    assert headers["sec-websocket-protocol"] == "pull.sp.nanomsg.org"

    req = gate.seen[-1]
    assert req is msg.pipe.peer.ws_request  # one request: the check's and the pipe's
    assert (req.method, req.path, req.query) == ("GET", "/sp", "")
    assert req.cookies == {"session": "abc", "theme": "dark"}
    assert req.peer == ("127.0.0.1", int(msg.pipe.remote_address.rsplit(":", 1)[1]))
    assert req.remote_address == msg.pipe.remote_address
    if scheme == "wss":
        assert req.tls is not None and req.tls["tls_version"].startswith("TLS")
    else:
        assert req.tls is None

    st = pull.listeners[0].stats
    assert st["handshake_failures"] == st["handshake_failures_refused"] == 2
    assert st["pipes_attached"] == 1
    refused = [r.getMessage() for r in caplog.records if r.name == "gsp.listener"]
    assert any("HTTP 401: a bearer token is needed" in m for m in refused), refused


@pytest.mark.interop
def test_pynng_is_refused(pull, caplog):
    gate = Gate()
    url = pull.listen("ws://127.0.0.1:0/sp", ws_authorize=gate).url
    n = nng.socket("push")
    try:
        with caplog.at_level(logging.WARNING, "gsp"):
            assert nng.raises(pynng.NNGException, n.dial, url, block=True) is not None
            wait_for(lambda: pull.listeners[0].stats["handshake_failures_refused"] == 1,
                     what="the refusal counted")
        assert pull.pipes == [] and len(gate.seen) == 1
        assert gate.seen[0].headers.get("authorization") is None
        assert any(r.name == "gsp.listener" and "HTTP 401" in r.getMessage()
                   for r in caplog.records)
    finally:
        nng.run(n.close)


def test_what_a_bare_client_gets_and_what_the_check_sees(pull):
    gate = Gate()
    port = port_of(pull.listen("ws://127.0.0.1:0/sp", ws_authorize=gate).url)
    status, headers, body = raw_upgrade(port, "/sp?room=7&room=8&x=", {"Cookie": "a=1"})
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert body == b"a bearer token is needed\n"
    req = gate.seen[-1]
    assert req.path == "/sp" and req.query == "room=7&room=8&x="
    assert req.query_params == {"room": ["7", "8"], "x": [""]}
    assert req.cookies == {"a": "1"} and req.headers["COOKIE"] == "a=1"
    status, _, body = raw_upgrade(port, "/sp", {"Authorization": "Bearer x"})
    assert (status, body) == (403, b"that token opens nothing here\n")
    status, _, _ = raw_upgrade(port, "/sp", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 101
    assert raw_upgrade(port, "/sp", {"Cookie": f"theme=dark; session={TOKEN}"})[0] == 101
    assert raw_upgrade(port, "/sp", {"Cookie": "session=stale"})[0] == 403
    # The protocol and origin checks come first: a wrong subprotocol never reaches the check.
    calls = len(gate.seen)
    assert raw_upgrade(port, "/sp", {}, protocol="push.sp.nanomsg.org")[0] == 400
    assert len(gate.seen) == calls


def broken(request: WSRequest) -> Refusal | None:
    if request.headers.get("x-mode") == "raise":
        raise RuntimeError("the token store is down")
    if request.headers.get("x-mode") == "true":
        return True  # type: ignore[return-value]  # a common mistake: not None, not a Refusal
    return None


def test_a_failing_check_answers_500_and_the_listener_serves_on(pull, caplog):
    url = pull.listen("ws://127.0.0.1:0/sp", ws_authorize=broken).url
    with gsp.socket("push", send_timeout=5) as push, caplog.at_level(logging.DEBUG, "gsp"):
        for mode in ("raise", "true", "raise"):
            with pytest.raises(UpgradeRefused) as info:
                push.dial(url, fail_fast=True, ws_request_headers={"X-Mode": mode})
            assert info.value.status == 500
            assert "token store" not in info.value.reason  # no detail for the client
        push.dial(url, fail_fast=True)  # the next good peer
        push.send(b"still serving")
        assert pull.recv() == b"still serving"
    errors = [r for r in caplog.records if r.name == "gsp.listener" and r.levelno >= logging.ERROR]
    assert len(errors) == 1  # rate limited: the next two at DEBUG
    assert errors[0].exc_info is not None and "token store" in str(errors[0].exc_info[1])
    assert (errors[0].gsp_protocol, errors[0].gsp_url) == ("pull", url)
    assert errors[0].getMessage().startswith(f"pull {url}: ws_authorize failed on ")
    debug = [r.getMessage() for r in caplog.records
             if r.name == "gsp.listener" and r.levelno == logging.DEBUG]
    assert any("returned True" in m for m in debug) and any("token store" in m for m in debug)
    assert pull.listeners[0].stats["handshake_failures"] == 3


def test_bad_values_are_refused(pull):
    for bad in (42, "Bearer x", True):
        with pytest.raises(gsp.BadOption, match="ws_authorize must be a callable"):
            pull.listen("ws://127.0.0.1:0/sp", ws_authorize=bad)
        with pytest.raises(gsp.BadOption):
            mount(pull, None, "/sp", ws_authorize=bad)
        with pytest.raises(gsp.BadOption):
            pull.set_option("ws_authorize", bad)
    with pytest.raises(gsp.BadOption, match="listen"):  # a dialer has nothing to authorize
        pull.dial("ws://127.0.0.1:1/sp", background=True, ws_authorize=Gate())
    assert pull.listeners == [] and pull.dialers == []
    for status in (200, 302, 600, "401", True):
        with pytest.raises(ValueError):
            Refusal(status)  # type: ignore[arg-type]
    for name, value in (("X-Bad\n", "1"), ("X-A", "1\r\nX-B: 2"), ("X:A", "1"), ("X-A", "ŝ")):
        with pytest.raises(ValueError):
            Refusal(401, headers={name: value})
    assert Refusal(401, "  two\n lines ").reason == "two lines"  # one line of text


def test_request_and_headers_are_read_only_and_case_insensitive():
    h = Headers([("X-A", "1"), ("x-a", "2"), ("Cookie", "k=v; k=w; bare")])
    assert h["X-A"] == "1, 2" and h.get_all("x-A") == ["1", "2"] and "COOKIE" in h
    assert sorted(h) == ["cookie", "x-a"] and len(h) == 2 and h.get("missing") is None
    req = WSRequest(method="GET", target="/p?q=1", headers=h.raw,
                         remote_address="ws://127.0.0.1:5", local_address="ws://127.0.0.1:6",
                         peer=("127.0.0.1", 5), tls=None)
    assert req.cookies == {"k": "v"} and req.query_params == {"q": ["1"]}
    with pytest.raises(AttributeError):
        req.path = "/other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        req.cookies["k"] = "x"  # type: ignore[index]
    assert req.path == "/p" and req.target == "/p?q=1" and req.headers == h
    assert repr(req) == "<WSRequest GET /p from ws://127.0.0.1:5>"


def test_the_old_names_of_the_request_types_work_and_warn():
    for old, new in (("UpgradeRequest", WSRequest), ("Headers", Headers)):
        with pytest.warns(DeprecationWarning, match=rf"gsp_ws\.{old} is deprecated: use "
                                                    rf"gsp\.transport\.{new.__name__}"):
            assert getattr(gsp_ws, old) is new
    with pytest.raises(AttributeError):
        gsp_ws.Nothing  # noqa: B018


# -- the WSGI mount ---------------------------------------------------------------------------

def app404(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("404 Not Found", [("Content-Length", "0")])
    return []


@pytest.mark.interop
def test_wsgi_mount_under_pywsgi(gsp_socket, caplog):
    gate = Gate()
    sock = gsp.socket("pull", recv_timeout=5)
    server = WSGIServer(("127.0.0.1", 0), mount(sock, app404, "/sp", ws_authorize=gate),
                        log=None)
    server.start()
    url = f"ws://127.0.0.1:{server.server_port}/sp"
    n = nng.socket("push")
    try:
        push = gsp_socket("push", send_timeout=5)
        with pytest.raises(UpgradeRefused) as info:
            push.dial(url, fail_fast=True)
        assert (info.value.status, info.value.reason) == (401, "a bearer token is needed")
        with pytest.raises(UpgradeRefused) as info:
            push.dial(url, fail_fast=True, ws_request_headers={"Authorization": "Bearer no"})
        assert (info.value.status, info.value.reason) == (403, "that token opens nothing here")
        assert nng.raises(pynng.NNGException, n.dial, url, block=True) is not None
        status, headers, body = raw_upgrade(server.server_port, "/sp?t=1",
                                            {"Cookie": "theme=dark"})
        assert (status, headers["www-authenticate"], body) == (
            401, "Bearer", b"a bearer token is needed\n")
        req = gate.seen[-1]
        assert (req.path, req.query_params, req.cookies) == ("/sp", {"t": ["1"]},
                                                             {"theme": "dark"})
        assert req.peer is not None and req.peer[0] == "127.0.0.1" and req.tls is None
        assert sock.pipes == []

        push.dial(url, fail_fast=True, ws_request_headers={"Authorization": f"Bearer {TOKEN}"})
        push.send(b"through the mount")
        msg = sock.recv_msg()
        assert msg.body == b"through the mount"
        assert ("authorization", f"Bearer {TOKEN}") in msg.pipe.properties["ws_request_headers"]
        assert gate.seen[-1].remote_address == msg.pipe.remote_address
        push.close()

        # A check that fails: 500, logged once; the mount serves on.
        sock.listeners[0].options["ws_authorize"] = broken
        with caplog.at_level(logging.ERROR, "gsp"):
            assert raw_upgrade(server.server_port, "/sp", {"X-Mode": "raise"})[0] == 500
        assert [r.levelno for r in caplog.records if r.name == "gsp.listener"] == [logging.ERROR]
        assert raw_upgrade(server.server_port, "/sp", {})[0] == 101
    finally:
        nng.run(n.close)
        sock.close()
        server.stop(timeout=5)


def test_wsgi_mount_over_https_shows_tls(gsp_socket, pki):
    seen: list[WSRequest] = []
    sock = gsp.socket("pull", recv_timeout=5)
    server = WSGIServer(("127.0.0.1", 0), mount(sock, app404, "/sp", ws_authorize=seen.append),
                        log=None, ssl_context=pki.server_context(cooperative=True))
    server.start()
    try:
        push = gsp_socket("push", send_timeout=5)
        push.dial(f"wss://127.0.0.1:{server.server_port}/sp", fail_fast=True,
                  **pki.dial_options())
        push.send(b"tls")
        assert sock.recv() == b"tls"
        push.close()
        tls = seen[0].tls
        assert tls is not None and tls["tls_version"].startswith("TLS")
        assert seen[0].remote_address.startswith("wss://127.0.0.1:")
    finally:
        sock.close()
        server.stop(timeout=5)
        gevent.sleep(0)


def test_a_background_dialer_counts_its_refusals(gsp_socket, pull):
    url = pull.listen("ws://127.0.0.1:0/sp", ws_authorize=check_token).url
    push = gsp_socket("push", reconnect_time=0.05, max_reconnect_time=0.1)
    d = push.dial(url, background=True)
    wait_for(lambda: d.stats["handshake_failures_refused"] >= 2, what="refused redials")
    assert d.stats["dial_failures_handshake"] >= 2 and push.pipes == []


# -- which web pages may connect: ws_origins ------------------------------------------------------

@pytest.fixture(params=["listener", "mount"])
def endpoint(request, gsp_socket) -> Iterator[Any]:
    """``endpoint(**options)``: a PULL on a ws listener, or mounted in a WSGI app under
    gevent.pywsgi; returns its port and its socket."""
    servers: list[WSGIServer] = []

    def make(**options: Any) -> tuple[int, gsp.Socket]:
        sock = gsp_socket("pull", recv_timeout=5)
        if request.param == "listener":
            return port_of(sock.listen("ws://127.0.0.1:0/sp", **options).url), sock
        server = WSGIServer(("127.0.0.1", 0), mount(sock, app404, "/sp", **options), log=None)
        server.start()
        servers.append(server)
        return server.server_port, sock
    yield make
    for server in servers:
        server.stop(timeout=5)


def test_a_page_of_another_site_is_refused_by_default_and_told_how_to_allow_it(endpoint, caplog):
    port, _ = endpoint()
    mine = f"http://127.0.0.1:{port}"
    with caplog.at_level(logging.DEBUG, "gsp.listener"):
        assert raw_upgrade(port, "/sp", {})[0] == 101  # no Origin: not a browser
        assert raw_upgrade(port, "/sp", {"Origin": mine})[0] == 101  # the endpoint's own page
        assert raw_upgrade(port, "/sp", {"Origin": mine.upper()})[0] == 101
        status, _, body = raw_upgrade(port, "/sp", {"Origin": "http://127.0.0.1:1"})
        assert status == 403
        assert b"pass ws_origins={'http://127.0.0.1:1'} to mount() or listen()" in body
        for other in ("http://localhost:%d" % port, "null", "http://127.0.0.1",
                      f"http://127.0.0.1:{port}/x", "not a url"):
            assert raw_upgrade(port, "/sp", {"Origin": other})[0] == 403, other
    said = [r for r in caplog.records if "refused a WebSocket upgrade from a page" in
            r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING] + [logging.DEBUG] * 5  # (for 10 s)
    text = said[0].getMessage()
    assert "refused a WebSocket upgrade from a page of http://127.0.0.1:1" in text
    assert "pass ws_origins={'http://127.0.0.1:1'}" in text and "ws_origins='*'" in text


def test_ws_origins_names_the_other_sites_allowed_or_any(endpoint):
    port, _ = endpoint(ws_origins={"HTTPS://App.Example/"})
    assert raw_upgrade(port, "/sp", {"Origin": "https://app.example"})[0] == 101
    assert raw_upgrade(port, "/sp", {"Origin": f"http://127.0.0.1:{port}"})[0] == 101
    assert raw_upgrade(port, "/sp", {"Origin": "https://evil.example"})[0] == 403
    port, _ = endpoint(ws_origins="*")
    assert raw_upgrade(port, "/sp", {"Origin": "https://evil.example"})[0] == 101


def test_the_default_port_of_the_origins_scheme_counts():
    from gsp_ws.auth import same_origin

    assert same_origin("http://example.com", "example.com:80")
    assert same_origin("http://example.com:80", "EXAMPLE.com")
    assert same_origin("https://example.com", "example.com:443")
    assert same_origin("http://[::1]:8080", "[::1]:8080")
    assert not same_origin("https://example.com", "example.com:80")
    assert not same_origin("http://example.com", None)
    assert not same_origin("ws://example.com", "example.com")
    assert not same_origin("http://example.com:99999", "example.com:99999")


@pytest.mark.parametrize("value", ["https://one.example", 5, [5], ("a", 5)])
def test_bad_ws_origins_values(pull, value):
    with pytest.raises(gsp.BadOption, match=r"ws_origins takes the origins of the other sites"
                                            r".*or '\*' for any site"):
        pull.listen("ws://127.0.0.1:0/sp", ws_origins=value)
