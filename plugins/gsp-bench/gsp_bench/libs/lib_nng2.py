"""nng 2.0 through the ``nng`` package (0.2.0: Cython bindings bundling an nng 2.0.0 snapshot;
``nng-ssl`` is the same module built with Mbed TLS, which tls+tcp and wss need), on native
threads: a Python user's newest alternative to gsp.

A received :class:`nng.Message` goes back out as it is (an echo sends what it received, no copy);
a subscriber's is read as bytes (its first byte says what it is).
"""

from __future__ import annotations

from typing import Any

from .. import tls
from .base import NngBinding, Sock

#: SP protocol name -> the nng class
CLASSES = {"push": "PushSocket", "pull": "PullSocket", "req": "ReqSocket", "rep": "RepSocket",
           "pub": "PubSocket", "sub": "SubSocket"}


class _Sub:
    """A SUB socket whose recv gives bytes (the roles read a message's first byte)."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.send = sock.send

    def recv(self) -> bytes:
        m = self.sock.recv()
        data: bytes = m.to_bytes()
        return data

    def close(self) -> None:
        self.sock.close()


class Nng2(NngBinding):
    name = "nng2"
    module, timed_out = "nng", "NngTimeout"

    def _open(self, kind: str, timeout: float | None = None) -> Any:
        s = getattr(self.nng, CLASSES[kind])()
        if kind == "sub":
            s.subscribe(b"")
        ms = self.recv_ms(kind, timeout)
        if ms is not None:
            s.recv_timeout = ms
        return s

    def _tls(self, url: str, server: bool) -> Any:
        if not tls.secure(url):
            return None
        f, cfg = tls.files(), self.nng.TlsConfig
        if server:
            return cfg.for_server(cert_pem=f.read("cert"), key_pem=f.read("key"))
        return cfg.for_client(server_name=tls.SERVER_NAME, ca_file=f.ca)

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        s = self._open(kind)
        try:
            lst = s.add_listener(url, tls=self._tls(url, server=True))
            lst.start()
        except BaseException:
            s.close()
            raise
        if url.startswith("tcp://"):
            host = url[6:].rsplit(":", 1)[0]
            url = f"tcp://{host}:{lst.port}"
        return s, url

    def dial(self, kind: str, url: str, block: bool | None = None,
             timeout: float | None = None) -> Sock:
        s = self._open(kind, timeout)
        try:
            d = s.add_dialer(url, tls=self._tls(url, server=False), reconnect_min_ms=10,
                             reconnect_max_ms=200)
            d.start(block=bool(block) or block is None)
        except BaseException:
            s.close()
            raise
        sock: Sock = _Sub(s) if kind == "sub" else s
        return sock
