"""The ws SP mount (gsp_ws.wsgi) under real gevent WSGI servers, each a process of its own:
gunicorn -k gevent, gunicorn -k gevent_pywsgi, uWSGI --gevent and gevent.pywsgi. Each serves
tests/apps/ws_app.py (a REP echo at /sp, a PULL at /pull, a REP behind ws_authorize at
/private, /health beside them), reached by a gsp dialer and by pynng (nng)."""

from __future__ import annotations

import contextlib
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import gevent
import pynng
import pytest
from gevent import socket as gsocket
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection as WSProto
from wsproto.events import BytesMessage, Request

import gsp
import gsp_ws
from gsp.testing import free_port, wait_for
from gsp_ws.wsgi import SPWebSocketApp
from tests.support import http_get, nng, servers
from tests.support.nng_process import NngProcess

ROOT = str(Path(__file__).resolve().parents[3])
APP = "tests.apps.ws_app:application"
MiB = 1 << 20


class PyWSGIServer:
    """gevent.pywsgi.WSGIServer serving the app in a subprocess (as tests/support/servers.py's)."""

    def __init__(self, port: int) -> None:
        code = ("import signal, gevent; from gevent.pywsgi import WSGIServer; "
                "from tests.apps.ws_app import application as a; "
                f"s = WSGIServer(('127.0.0.1', {port}), a); "
                "gevent.signal_handler(signal.SIGTERM, lambda: gevent.spawn(s.stop, 5)); "
                "s.serve_forever()")
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)

        def healthy() -> bool:
            assert self.proc.poll() is None, self.output()
            with contextlib.suppress(OSError):
                return http_get(port, "/health")[0] == 200
            return False

        wait_for(healthy, 30, what="the server's /health")

    def output(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode("utf-8", "replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


@contextlib.contextmanager
def pywsgi() -> Iterator[PyWSGIServer]:
    srv = PyWSGIServer(free_port())
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
        srv.proc.wait(5)
        assert srv.proc.stdout is not None
        srv.proc.stdout.close()


SERVERS: dict[str, Callable[[], ContextManager[Any]]] = {
    "gunicorn-gevent": lambda: servers.gunicorn(APP, pythonpath=ROOT, workers=1),
    "gunicorn-gevent_pywsgi": lambda: servers.gunicorn(
        APP, pythonpath=ROOT, worker_class="gevent_pywsgi", workers=1),
    "uwsgi-gevent": lambda: servers.uwsgi(APP, pythonpath=ROOT, processes=1, lazy_apps=True),
    "pywsgi": pywsgi,
}


def port_of(srv: Any) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def ws_url(srv: Any, path: str = "/sp") -> str:
    return srv.url.replace("http://", "ws://") + path


def pulled(port: int, count: int) -> list[int]:
    """The sizes the app's PULL socket received, once there are ``count`` of them."""
    with gevent.Timeout(10):
        while True:
            status, body = http_get(port, "/pulled")
            assert status == 200
            sizes = [int(x) for x in body.split()]
            if len(sizes) >= count:
                return sizes
            gevent.sleep(0.05)


def assert_peer_is(port: int, dialer: gsp.Socket) -> None:
    """The server side names the dialer's end of the connection as its pipe's remote address."""
    status, body = http_get(port, "/peers")
    assert status == 200 and body.split() == [dialer.pipes[0].local_address.encode()]


def assert_clean(srv: Any) -> None:
    code = srv.stop(timeout=20)
    out = srv.output()
    assert "Traceback" not in out and "[ERROR]" not in out, out
    assert code == 0, out


@pytest.mark.interop
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(SERVERS))
def test_gsp_and_nng_reach_the_mount_beside_the_app(
        gsp_socket: Callable[..., gsp.Socket], name: str) -> None:
    with SERVERS[name]() as srv:
        port = port_of(srv)
        status, body = http_get(port, "/health")
        assert status == 200 and body.startswith(b"ok ")
        req = gsp_socket("req", max_recv_size=0, recv_timeout=10)
        req.dial(ws_url(srv), fail_fast=True)
        for msg in [b"one", b"", b"x" * MiB + b"!", bytes(range(256)) * 12_000, b"last"]:
            req.send(msg)
            assert req.recv() == msg
        assert http_get(port, "/health") == (status, body)  # the app serves on meanwhile
        assert_peer_is(port, req)
        req.close()
        n = nng.socket("req", recv_max_size=0)
        try:
            nng.run(n.dial, ws_url(srv), block=True)
            for msg in [b"from nng", b"y" * (MiB + 7), b"again"]:
                nng.run(n.send, msg)
                assert nng.run(n.recv) == msg
        finally:
            nng.run(n.close)
        push = gsp_socket("push")
        push.dial(ws_url(srv, "/pull"), fail_fast=True)
        for size in (10, 2 * MiB, 0):
            push.send(b"p" * size)
        assert pulled(port, 3) == [10, 2 * MiB, 0]
        push.close()
        assert_clean(srv)


@pytest.mark.interop
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(SERVERS))
def test_refused_upgrades_carry_the_http_status(
        gsp_socket: Callable[..., gsp.Socket], name: str) -> None:
    with SERVERS[name]() as srv:
        port = port_of(srv)
        push = gsp_socket("push")  # offers pull.sp.nanomsg.org to the REP endpoint
        with pytest.raises(gsp.UpgradeRefused) as info:
            push.dial(ws_url(srv), fail_fast=True)
        push.close()
        assert info.value.status == 400 and "rep.sp.nanomsg.org" in info.value.reason
        assert isinstance(info.value, gsp.HandshakeError)
        req = gsp_socket("req")
        with pytest.raises(gsp.UpgradeRefused) as info:
            req.dial(ws_url(srv, "/elsewhere"), fail_fast=True)  # the app's own 404
        req.close()
        assert info.value.status == 404 and gsp_ws.UpgradeRefused is gsp.UpgradeRefused
        copy = pickle.loads(pickle.dumps(info.value))  # e.g. from a multiprocessing worker
        assert (copy.status, copy.reason, str(copy)) == (404, "no!", str(info.value))
        assert http_get(port, "/sp")[0] == 426  # a plain GET at the SP path
        n = nng.socket("push")
        try:
            assert nng.raises(pynng.NNGException, n.dial, ws_url(srv), block=True) is not None
        finally:
            nng.run(n.close)
        assert http_get(port, "/health")[0] == 200
        assert_clean(srv)


@pytest.mark.interop
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(SERVERS))
def test_ws_authorize_refuses_before_the_upgrade(
        gsp_socket: Callable[..., gsp.Socket], name: str) -> None:
    with SERVERS[name]() as srv:
        url = ws_url(srv, "/private")
        req = gsp_socket("req", recv_timeout=10)
        with pytest.raises(gsp.UpgradeRefused) as info:
            req.dial(url, fail_fast=True)
        assert (info.value.status, info.value.reason) == (401, "no entry without the token")
        n = nng.socket("req")
        try:
            assert nng.raises(pynng.NNGException, n.dial, url, block=True) is not None
        finally:
            nng.run(n.close)
        req.dial(url, fail_fast=True, ws_request_headers={"Authorization": "Bearer t0ken"})
        req.send(b"who am I?")
        assert req.recv() == b"Bearer t0ken"  # the header, from the pipe's properties
        req.close()
        assert_clean(srv)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["gunicorn-preload", "uwsgi-default"])
def test_a_mount_made_before_the_fork_serves_in_every_worker(name: str) -> None:
    """The app (and its mounted sockets) loaded in the master, then forked into 3 workers."""
    start = (servers.gunicorn(APP, pythonpath=ROOT, preload=True) if name == "gunicorn-preload"
             else servers.uwsgi(APP, pythonpath=ROOT))
    with start as srv:
        reqs = [gsp.socket("req", recv_timeout=10) for _ in range(12)]
        try:
            for req in reqs:
                req.dial(ws_url(srv, "/who"), fail_fast=True)
            pids = set()
            for _ in range(3):
                for req in reqs:
                    req.send(b"who?")
                    pids.add(int(req.recv()))
        finally:
            for req in reqs:
                req.close()
        assert srv.proc.pid not in pids and 1 <= len(pids) <= 3
        assert_clean(srv)


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_wss_through_gunicorn_with_tls(gsp_socket: Callable[..., gsp.Socket], pki: Any) -> None:
    with servers.gunicorn(APP, pythonpath=ROOT, workers=1, extra=(
            "--certfile", pki.server_cert_file, "--keyfile", pki.server_key_file)) as srv:
        url = srv.url.replace("https://", "wss://") + "/sp"
        req = gsp_socket("req", max_recv_size=0, recv_timeout=10)
        req.dial(url, fail_fast=True, **pki.dial_options())
        for msg in [b"over tls", b"t" * (MiB + 3)]:
            req.send(msg)
            assert req.recv() == msg
        assert req.pipes[0].properties["tls_version"].startswith("TLS")
        req.close()
        # nng in a process of its own: its close can abort its process after a wss exchange
        # with gsp (tests/support/nng_process.py).
        with NngProcess("req", tls=pki.nng_client_args()) as n:
            nng.run(n.dial, url.replace("127.0.0.1", "localhost"), block=True)
            nng.run(n.send, b"nng over tls")
            assert nng.run(n.recv) == b"nng over tls"
        assert_clean(srv)


def eager_upgrade(port: int, path: str, protocol: str, payload: bytes) -> gsocket.socket:
    """An upgrade request with a WebSocket frame in the same write (a client that does not
    wait for the 101), as a server's parser then has it buffered past the request head."""
    c = gsocket.create_connection(("127.0.0.1", port), timeout=10)
    head = WSConnection(ConnectionType.CLIENT).send(
        Request(host="127.0.0.1", target=path, subprotocols=[protocol]))
    frame = WSProto(ConnectionType.CLIENT).send(BytesMessage(data=payload))
    c.sendall(head + frame)
    assert c.recv(12) == b"HTTP/1.1 101"
    return c


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", [s for s in SERVERS if not s.startswith("uwsgi")])
def test_frames_sent_with_the_upgrade_request_are_kept(name: str) -> None:
    # Not under uWSGI: what its parser read past the head stays in uWSGI's request buffer, out
    # of reach (RFC 6455 has clients wait for the 101, as nng, gsp and browsers do).
    with SERVERS[name]() as srv:
        c = eager_upgrade(port_of(srv), "/pull", "pull.sp.nanomsg.org", b"eager")
        try:
            assert pulled(port_of(srv), 1) == [5]
        finally:
            c.close()


@pytest.mark.timeout(60)
def test_uwsgi_without_gevent_is_refused_at_start_up() -> None:
    uwsgi = str(Path(sys.executable).with_name("uwsgi"))
    done = subprocess.run(
        [uwsgi, "--http-socket", f"127.0.0.1:{free_port()}", "--processes", "1",
         "--virtualenv", sys.prefix, "--pythonpath", ROOT, "--module", APP, "--need-app"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode != 0 and "gsp.errors.NotSupported" in out, out
    assert "the ws mount needs uWSGI's gevent loop (--gevent N, e.g. --gevent 100)" in out


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_uwsgi_http_router_with_websockets(gsp_socket: Callable[..., gsp.Socket]) -> None:
    """uWSGI's --http router in front of the workers (uwsgi protocol between them) passes the
    upgraded connection on with --http-websockets."""
    router, backend = free_port(), f"127.0.0.1:{free_port()}"
    with servers.uwsgi(APP, pythonpath=ROOT, processes=1, extra=(
            "--socket", backend, "--http", f"127.0.0.1:{router}", "--http-to", backend,
            "--http-websockets")) as srv:
        url = f"ws://127.0.0.1:{router}/sp"
        req = gsp_socket("req", max_recv_size=0, recv_timeout=10)
        req.dial(url, fail_fast=True)
        for msg in [b"via the router", b"r" * (2 * MiB)]:
            req.send(msg)
            assert req.recv() == msg
        req.close()
        n = nng.socket("req", recv_max_size=0)
        try:
            nng.run(n.dial, url, block=True)
            nng.run(n.send, b"nng via the router")
            assert nng.run(n.recv) == b"nng via the router"
        finally:
            nng.run(n.close)
        assert_clean(srv)


@pytest.mark.timeout(60)
def test_uwsgi_http_router_without_websockets_is_refused_at_start_up() -> None:
    router, backend = free_port(), f"127.0.0.1:{free_port()}"
    with pytest.raises(RuntimeError) as info:
        with servers.uwsgi(APP, pythonpath=ROOT, processes=1, extra=(
                "--socket", backend, "--http", f"127.0.0.1:{router}", "--http-to", backend)):
            pass
    assert "passes WebSocket frames on only with --http-websockets" in str(info.value)


@pytest.mark.timeout(60)
def test_uwsgi_https_socket_is_refused_at_start_up(pki: Any) -> None:
    tls = f"127.0.0.1:{free_port()},{pki.server_cert_file},{pki.server_key_file}"
    with pytest.raises(RuntimeError) as info:
        with servers.uwsgi(APP, pythonpath=ROOT, processes=1, extra=("--https-socket", tls)):
            pass
    assert "uWSGI keeps the TLS of --https-socket connections to itself" in str(info.value)


@pytest.mark.timeout(60)
def test_gunicorn_sync_worker_is_refused_at_start_up() -> None:
    with pytest.raises(RuntimeError) as info:
        with servers.gunicorn(APP, pythonpath=ROOT, worker_class="sync", workers=1):
            pass
    assert "a worker that is not gevent's; run it with -k gevent" in str(info.value)
    assert "gsp.errors.NotSupported" in str(info.value)


def test_an_unknown_server_is_named_once_and_gets_500(
        gsp_socket: Callable[..., gsp.Socket], caplog: pytest.LogCaptureFixture) -> None:
    """A server no adapter knows (here wsgiref's, in-process): the upgrade gets a 500 naming
    the servers that work, and one ERROR line says so however many upgrades come."""
    from wsgiref.util import setup_testing_defaults

    sock = gsp_socket("pair")
    app = SPWebSocketApp()
    app.mount(sock, "/sp")
    statuses = []
    for _ in range(2):
        environ: dict[str, Any] = {
            "PATH_INFO": "/sp", "HTTP_UPGRADE": "websocket", "HTTP_CONNECTION": "Upgrade",
            "HTTP_SEC_WEBSOCKET_VERSION": "13", "HTTP_SEC_WEBSOCKET_KEY": "dGhlIHNhbXBsZQ==",
            "HTTP_SEC_WEBSOCKET_PROTOCOL": "pair.sp.nanomsg.org",
            "SERVER_SOFTWARE": "WSGIServer/0.2"}
        setup_testing_defaults(environ)
        body = b"".join(app(environ, lambda status, headers: statuses.append(status)))
    assert statuses == ["500 Internal Server Error"] * 2
    assert b"gunicorn -k gevent" in body and b"uWSGI --gevent" in body
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "WSGIServer/0.2" in errors[0].getMessage()
