"""Helpers the ws:// and wss:// tests share (test_ws.py, test_ws_frames.py, test_ws_hostile.py):
a bare WebSocket client to poke at a gsp listener, and the port of a listener's URL."""

from __future__ import annotations

from typing import Any

from gevent import socket as gsocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, RejectConnection, Request


def port_of(url: str) -> int:
    """The port of a ws:// or wss:// URL (``ws://127.0.0.1:PORT/path``)."""
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


class RawClient:
    """A bare WebSocket client (wsproto over a gevent socket) to poke at a listener."""

    def __init__(self, port: int, path: str = "/sp", protocols: tuple[str, ...] = (
            "pair.sp.nanomsg.org",), headers: dict[str, str] | None = None) -> None:
        self.sock = gsocket.create_connection(("127.0.0.1", port), timeout=5)
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
