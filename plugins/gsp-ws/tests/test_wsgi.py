"""SP over WebSocket at a path of a WSGI app (gsp_ws.wsgi) served by gevent.pywsgi."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket
from gevent import subprocess
from gevent.pywsgi import WSGIServer
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection as WSProto
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    RejectConnection,
    Request,
)

import gsp
from gsp_ws.wsgi import SPWebSocketApp, mount
from tests.support import http_get, nng, stop_server
from tests.support.nng_process import NngProcess

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "wsgi_app.py"


def server_protocol() -> tuple[str, str]:
    """REP behind the app once gsp has it; PAIR until then. Returns (gsp side, nng side)."""
    return ("rep", "req") if "rep" in gsp.protocol_names() else ("pair", "pair")


def health_app(environ: dict, start_response: Any) -> list[bytes]:
    if environ["PATH_INFO"] == "/health":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
        return [b"ok\n"]
    start_response("404 Not Found", [("Content-Length", "0")])
    return []




def upgrade_status(port: int, path: str, protocols: list[str],
                   headers: dict[str, str] | None = None) -> int:
    s = gsocket.create_connection(("127.0.0.1", port), timeout=5)
    ws = WSConnection(ConnectionType.CLIENT)
    try:
        s.sendall(ws.send(Request(host="127.0.0.1", target=path, subprotocols=protocols,
                                  extra_headers=[(k.encode(), v.encode())
                                                 for k, v in (headers or {}).items()])))
        while True:
            ws.receive_data(s.recv(65536))
            for ev in ws.events():
                if isinstance(ev, AcceptConnection):
                    return 101
                if isinstance(ev, RejectConnection):
                    return ev.status_code
    finally:
        s.close()


def exchange_with_nng(n: Any, count: int) -> None:
    for i in range(count):
        nng.run(n.send, b"hi %d" % i)
        assert nng.run(n.recv) == b"echo: hi %d" % i


def echo(sock: gsp.Socket) -> None:
    while True:
        try:
            sock.send(b"echo: " + sock.recv())
        except gsp.Closed:
            return


def hammer_health(port: int, count: int) -> int:
    ok = 0
    for _ in range(count):
        status, body = http_get(port, "/health")
        ok += status == 200 and body == b"ok\n"
    return ok


@pytest.mark.interop
def test_health_and_sp_share_one_port():
    kind, peer = server_protocol()
    sock = gsp.socket(kind)
    server = WSGIServer(("127.0.0.1", 0), mount(sock, health_app, "/sp"), log=None)
    server.start()
    worker = gevent.spawn(echo, sock)
    n = nng.socket(peer)
    try:
        port = server.server_port
        nng.run(n.dial, f"ws://127.0.0.1:{port}/sp", block=True)
        http = [gevent.spawn(hammer_health, port, 20) for _ in range(3)]
        exchange_with_nng(n, 20)  # while the HTTP requests run
        assert [g.get(timeout=10) for g in http] == [20, 20, 20]
        assert http_get(port, "/elsewhere")[0] == 404  # the app's own answer
        props = sock.pipes[0].properties
        assert props["ws_path"] == "/sp" and props["ws_subprotocol"] == f"{kind}.sp.nanomsg.org"
        assert sock.listeners[0].url.startswith("ws+wsgi://")
    finally:
        n.close()
        sock.close()
        worker.join(5)
        server.stop(timeout=5)


def test_refusals_and_gsp_dialer(gsp_socket):
    sock = gsp.socket("pair", recv_timeout=5)
    app = SPWebSocketApp(health_app)
    app.mount(sock, "/sp", ws_origins={"https://good.example"},
              ws_response_headers={"X-App": "1"})
    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    try:
        port = server.server_port
        assert upgrade_status(port, "/sp", ["pair.sp.nanomsg.org"]) == 101
        assert upgrade_status(port, "/sp", ["push.sp.nanomsg.org"]) == 400
        assert upgrade_status(port, "/sp", []) == 400
        assert upgrade_status(port, "/sp", ["pair.sp.nanomsg.org"],
                              {"Origin": "https://evil.example"}) == 403
        assert http_get(port, "/sp")[0] == 426  # a plain GET at the SP path
        assert http_get(port, "/health") == (200, b"ok\n")
        with gevent.Timeout(5):
            while sock.pipes:  # the accepted raw upgrade went away with its client
                gevent.sleep(0.01)
        peer = gsp_socket("pair", recv_timeout=5)
        peer.dial(f"ws://127.0.0.1:{port}/sp", fail_fast=True)
        peer.send(b"via wsgi")
        assert sock.recv() == b"via wsgi"
        sock.send(b"and back")
        assert peer.recv() == b"and back"
        peer.close()
        with pytest.raises(gsp.AddressInUse):
            app.mount(sock, "/sp")
        sock.listeners[0].close()  # unmount: the path goes back to the app
        assert http_get(port, "/sp")[0] == 404
    finally:
        sock.close()
        server.stop(timeout=5)


def test_the_socket_comes_first_and_the_old_order_works_with_a_warning(gsp_socket):
    sock, old = gsp_socket("pair"), gsp_socket("pair")
    app = SPWebSocketApp(health_app)
    lst = app.mount(sock, "/sp")
    assert isinstance(lst, gsp.Listener) and lst in sock.listeners
    with pytest.warns(DeprecationWarning, match=r"takes the socket first now: "
                                                r"app.mount\('/old', sock\) is "
                                                r"app.mount\(sock, '/old'\)"):
        was = app.mount("/old", old)
    assert was in old.listeners and was.url.endswith("/old")
    served = mount(gsp_socket("pair"), app, "/other")
    assert served is app


@pytest.mark.parametrize("call, names", [
    (lambda s, app: mount(app, s, "/sp"), "takes the gsp socket first"),
    (lambda s, app: mount("/sp", s, app), "takes the gsp socket first"),
    (lambda s, app: mount(s, "/sp", app), "takes the mount path third"),
    (lambda s, app: mount(s, "/sp", "/sp"), "takes the WSGI app second"),
    (lambda s, app: app.mount(app, "/sp"), "takes the gsp socket first"),
    (lambda s, app: app.mount("/sp", "/sp"), "takes the gsp socket first"),
])
def test_arguments_in_the_wrong_place_are_a_type_error_naming_the_calls(gsp_socket, call, names):
    sock = gsp_socket("pair")
    with pytest.raises(TypeError, match=names) as caught:
        call(sock, SPWebSocketApp(health_app))
    assert "mount(sock, app, '/sp')" in str(caught.value)
    assert "app.mount(sock, '/sp')" in str(caught.value)
    assert sock.listeners == []


def test_an_app_is_kept_while_a_socket_is_mounted_on_it_and_freed_after(gsp_socket):
    import gc
    import weakref

    from gsp_ws.wsgi import find_app

    sock = gsp_socket("pair")
    app = SPWebSocketApp(health_app)
    name, ref = app.name, weakref.ref(app)
    lst = app.mount(sock, "/sp")
    del app
    gc.collect()
    assert ref() is not None and find_app(name) is ref()  # the listener's route holds it
    lst.close()  # unmounted: nothing of gsp's holds the app any more
    gc.collect()
    assert ref() is None and find_app(name) is None
    unmounted = SPWebSocketApp()
    name, ref = unmounted.name, weakref.ref(unmounted)
    del unmounted
    assert ref() is None and find_app(name) is None  # (no cycle: freed at once)


def test_full_mount_closes_with_try_again_later(gsp_socket):
    """At max_pipes a mounted path (whose server has answered 101 already) ends the WebSocket
    with close code 1013, Try Again Later; the pipe already up keeps working."""
    sock = gsp.socket("pair", max_pipes=1, recv_timeout=5, send_timeout=5)
    server = WSGIServer(("127.0.0.1", 0), mount(sock, health_app, "/sp"), log=None)
    server.start()
    c = gsocket.create_connection(("127.0.0.1", server.server_port), timeout=5)
    try:
        first = gsp_socket("pair", recv_timeout=5, send_timeout=5)
        first.dial(f"ws://127.0.0.1:{server.server_port}/sp", fail_fast=True)
        ws = WSConnection(ConnectionType.CLIENT)
        c.sendall(ws.send(Request(host="127.0.0.1", target="/sp",
                                  subprotocols=["pair.sp.nanomsg.org"])))
        events: list[Any] = []
        while not any(isinstance(ev, CloseConnection) for ev in events):
            data = c.recv(65536)
            assert data, f"closed without a close frame after {events}"
            ws.receive_data(data)
            events += list(ws.events())
        assert isinstance(events[0], AcceptConnection)
        close = next(ev for ev in events if isinstance(ev, CloseConnection))
        assert close.code == 1013 and "max_pipes" in close.reason
        assert sock.stats["pipes_refused_full"] == 1
        first.send(b"still here")
        assert sock.recv() == b"still here"
        first.close()
    finally:
        c.close()
        sock.close()
        server.stop(timeout=5)


def test_frames_sent_with_the_upgrade_request_are_kept():
    """A client that does not wait for the 101 (against RFC 6455) still loses nothing."""
    sock = gsp.socket("pull", recv_timeout=5)
    server = WSGIServer(("127.0.0.1", 0), mount(sock, health_app, "/sp"), log=None)
    server.start()
    c = gsocket.create_connection(("127.0.0.1", server.server_port), timeout=5)
    try:
        ws = WSConnection(ConnectionType.CLIENT)
        head = ws.send(Request(host="127.0.0.1", target="/sp",
                               subprotocols=["pull.sp.nanomsg.org"]))
        # wsproto frames only after the handshake, so build the client's frame by hand.
        frame = WSProto(ConnectionType.CLIENT).send(BytesMessage(data=b"eager"))
        c.sendall(head + frame)
        assert sock.recv() == b"eager"
    finally:
        c.close()
        sock.close()
        server.stop(timeout=5)


@pytest.mark.interop
def test_wss_through_an_https_wsgi_server(pki):
    sock = gsp.socket("pull", recv_timeout=5)
    server = WSGIServer(("127.0.0.1", 0), mount(sock, health_app, "/sp"), log=None,
                        ssl_context=pki.server_context(cooperative=True))
    server.start()
    try:
        # nng in a process of its own: nng 1.x's close aborts its process about once in 25
        # runs after a wss exchange with gsp (tests/support/nng_process.py). Its calls run on a native
        # thread, as every blocking nng call here: the hub serves the TLS handshake meanwhile.
        with NngProcess("push", tls=pki.nng_client_args()) as n:
            nng.run(n.dial, f"wss://127.0.0.1:{server.server_port}/sp", block=True)
            nng.run(n.send, b"over https")
            assert sock.recv() == b"over https"
            assert sock.pipes[0].properties["tls_version"].startswith("TLS")
    finally:
        sock.close()
        server.stop(timeout=5)


@pytest.mark.interop
@pytest.mark.parametrize("monkey", [False, True], ids=["plain", "monkey-patched"])
def test_example_app(monkey):
    kind, peer = server_protocol()
    args = [sys.executable, str(EXAMPLE), "--port", "0", "--protocol", kind]
    proc = subprocess.Popen(args + (["--monkey"] if monkey else []), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    n = nng.socket(peer)
    try:
        with gevent.Timeout(30, AssertionError("the example did not start")):
            line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), (line, proc.stderr.read())
        port = int(line.split("/health")[0].rsplit(":", 1)[1])
        nng.run(n.dial, f"ws://127.0.0.1:{port}/sp", block=True)
        http = gevent.spawn(hammer_health, port, 20)
        exchange_with_nng(n, 20)
        assert http.get(timeout=10) == 20
    finally:
        n.close()
        code = stop_server(proc)
    assert code == 0
