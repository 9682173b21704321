"""Helpers the ws:// and wss:// tests share (test_ws.py, test_ws_frames.py, test_ws_hostile.py):
a bare WebSocket client to poke at a gsp listener, and the port of a listener's URL; and what
the WSGI apps of the mount's tests share (tests/support/browser_support.py, tests/apps/): the loops
their mounted sockets run and a plain HTTP answer."""

from __future__ import annotations

from typing import Any, Callable

import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, RejectConnection, Request

import gsp


def port_of(url: str) -> int:
    """The port of a ws:// or wss:// URL (``ws://127.0.0.1:PORT/path``)."""
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


class RawClient:
    """A bare WebSocket client (wsproto over a gevent socket) to poke at a listener; with
    ``tls`` (a client SSLContext), over TLS (wss), strict about its end: a TCP end without TLS's
    close_notify is an ``ssl.SSLEOFError``, not an empty read."""

    def __init__(self, port: int, path: str = "/sp", protocols: tuple[str, ...] = (
            "pair.sp.nanomsg.org",), headers: dict[str, str] | None = None,
            tls: Any = None) -> None:
        self.sock = gsocket.create_connection(("127.0.0.1", port), timeout=5)
        if tls is not None:
            self.sock = gssl.SSLSocket(sock=self.sock, server_hostname="localhost", _context=tls,
                                       suppress_ragged_eofs=False)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.closed_by_peer: CloseConnection | None = None
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        self.sock.sendall(self.ws.send(Request(host=f"127.0.0.1:{port}", target=path,
                                               subprotocols=list(protocols), extra_headers=extra)))
        self.answer = self.next_event((AcceptConnection, RejectConnection))

    @property
    def status(self) -> int:
        return 101 if isinstance(self.answer, AcceptConnection) else self.answer.status_code

    def next_event(self, kinds: Any) -> Any:
        while True:
            for ev in self.ws.events():
                if isinstance(ev, kinds):
                    return ev
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.ws.receive_data(data)

    def send(self, event: Any) -> None:
        self.sock.sendall(self.ws.send(event))

    def eof(self) -> bool:
        """True once the server closed TCP (after whatever it sent)."""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return True
            if not data:
                return True

    def close(self) -> None:
        self.sock.close()


def close_from_gsp(raw: RawClient, pipe: Any) -> None:
    """gsp closes ``pipe``: the client gets a 1000 close frame and answers it, the close
    returns, and the server ends the TCP connection."""
    closer = gevent.spawn(pipe.close)
    ev = raw.next_event(CloseConnection)
    assert ev.code == 1000, ev
    raw.send(ev.response())
    closer.join(5)
    assert closer.successful() and pipe.closed, closer.exception
    assert raw.eof()


def serve(sock: Any, handle: Callable[[bytes], bytes | None]) -> None:
    """Hand each message ``sock`` receives to ``handle`` and send back what it returns (a
    reply; None: nothing), until ``sock`` closes."""
    while True:
        try:
            reply = handle(sock.recv())
            if reply is not None:
                sock.send(reply)
        except gsp.Closed:
            return


def echo(sock: Any) -> None:
    """Answer every request with its own body until ``sock`` closes."""
    serve(sock, lambda body: body)


def respond(start_response: Callable[..., Any], body: bytes, kind: str = "text/plain",
            status: str = "200 OK") -> list[bytes]:
    """A WSGI app's whole answer: ``body`` as ``kind``."""
    start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body)))])
    return [body]


def not_found(start_response: Callable[..., Any]) -> list[bytes]:
    return respond(start_response, b"no!\n", status="404 Not Found")
