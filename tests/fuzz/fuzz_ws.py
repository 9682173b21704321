"""Fuzz target: gsp-ws, everything a WebSocket peer's bytes reach. As a listener: the shared
HTTP server reading the upgrade request (``_HTTPServer._serve``), the listener answering it
(``WSServerConnection.handshake``) and the framing of what follows (``recv_messages``). As a
dialer: reading the server's upgrade response (``WSClientConnection.handshake``), then frames.

Input layout: byte 0 holds flags: bit 0 listener/dialer, bit 1 ``ws_recv_text``, bit 2 small
limits (``max_recv_size`` 64, ``ws_max_frame_size`` 32), bit 3 an origin allow-list, bit 4 close
locally after the first messages (and go on reading: a closing side still reads the peer's
answer), bits 5-7 the local protocol; byte 1 seeds how the bytes are cut into chunks; the rest is
what the peer sends. The dialer's nonce is fixed (``dGhlIHNhbXBsZSBub25jZQ==``, RFC 6455's
example) so an input can carry a valid ``Sec-WebSocket-Accept``.

A finding is: the HTTP server letting an exception escape its per-connection guard, or answering
with anything but an HTTP/1.1 response; a connection raising anything but a :class:`gsp.GspError`
from ``handshake`` or ``recv_messages``; a message over ``max_recv_size``; a read loop that does
not end when the bytes do. A hang is caught by libFuzzer's ``-timeout``.
"""

from __future__ import annotations

from typing import Any

import atheris
import harness

with atheris.instrument_imports(include=list(harness.INSTRUMENTED)):
    import wsproto.handshake

    import gsp
    from gsp.options import SOCKET_OPTIONS, Options
    from gsp_ws._conn import WSClientConnection, WSConnection
    from gsp_ws._http import WS_OPTIONS
    from gsp_ws.auth import UpgradeGate
    from gsp_ws.transport import _HTTPServer, _Upgrade

NONCE = b"dGhlIHNhbXBsZSBub25jZQ=="
wsproto.handshake.generate_nonce = lambda: NONCE  # type: ignore[attr-defined]
PROTOCOLS = ("pull", "push", "pair", "rep", "req", "sub", "pub", "bus")
LOCAL, REMOTE = "ws://127.0.0.1:5555", "ws://127.0.0.1:40000"
#: Issue 14 item 3, being fixed in gsp_ws/_conn.py (reproducer: findings/ws-pong-while-closing):
#: a Ping read after the local side sent its close is answered in state LOCAL_CLOSING.
#: Found here, in gsp_ws/transport.py and _conn.py (reproducers: findings/ws-non-ascii-header,
#: ws-non-ascii-response-header): a non-ASCII byte in a comma-separated header of the upgrade
#: request (Sec-WebSocket-Protocol, Connection, Upgrade) or response makes wsproto raise
#: UnicodeDecodeError (a ValueError, not its ProtocolError). _serve's guard does not catch it
#: (no 400 answer; the request greenlet dies with a printed traceback, the server carries on),
#: and WSClientConnection.handshake lets it out instead of a gsp error.
KNOWN: list[harness.Known] = []  # the three found so far are fixed (tests/project/test_fuzz.py FIXED)


class Route:
    """Stands for a ws listener: the HTTP server hands it the upgraded connection."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.gate = UpgradeGate(options, "ws://127.0.0.1:5555/sp")  # no ws_authorize check set
        self.delivered: list[WSConnection] = []

    def deliver(self, conn: WSConnection) -> None:
        self.delivered.append(conn)


def options(flags: int) -> Options:
    opts = Options({**SOCKET_OPTIONS, **WS_OPTIONS})
    opts["ws_recv_text"] = bool(flags & 2)
    if flags & 4:
        opts.update_checked({"max_recv_size": 64, "ws_max_frame_size": 32})
    if flags & 8:
        opts["ws_origins"] = {"http://good.example"}
    return opts


def server_side(sock: harness.FakeSocket, opts: Options) -> WSConnection | None:
    srv = _HTTPServer("ws", "127.0.0.1", 5555, None, None)
    route = Route(opts)
    srv.routes["/sp"] = route  # type: ignore[assignment]
    # The connection as the server's accept loop hands it over (its admission record).
    srv._serve(_Upgrade(sock))  # catches what it expects; anything else escapes: a finding
    sent = bytes(sock.sent)
    harness.expect(not sent or sent.startswith(b"HTTP/1.1 "), f"answered {sent[:40]!r}")
    harness.expect(len(route.delivered) <= 1, "one request delivered twice")
    return route.delivered[0] if route.delivered else None


def read_all(conn: WSConnection, opts: Options, close_after_first: bool, budget: int) -> None:
    limit = opts["max_recv_size"]
    for _ in range(budget):
        msgs: list[Any] = conn.recv_messages()
        harness.expect(bool(msgs), "recv_messages returned nothing")
        for m in msgs:
            harness.expect(not limit or len(m) <= limit, f"a {len(m)}-byte message over {limit}")
        if close_after_first:
            close_after_first = False
            conn.close()
    raise harness.Finding("recv_messages did not end at the end of the bytes")


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    flags, stream = data[0], data[2:]
    spec = gsp.registry.protocol(PROTOCOLS[flags >> 5])
    opts = options(flags)
    sock = harness.FakeSocket(harness.chunks(stream, data[1], largest=256))
    conn: WSConnection | None
    if flags & 1:
        conn = WSClientConnection(sock, opts, LOCAL, REMOTE, url=LOCAL + "/sp",
                                  host_header="127.0.0.1:5555", path="/sp", tls=None,
                                  server_hostname=None)
    else:
        conn = server_side(sock, opts)
        if conn is None:
            return
    try:
        conn.handshake(spec, None)
        read_all(conn, opts, bool(flags & 16), len(stream) + 2)
    except gsp.GspError:
        pass  # refused or ended: what a pipe closes on
    finally:
        conn.close()


if __name__ == "__main__":
    harness.main(one_input, KNOWN)
