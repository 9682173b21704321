"""ws:// and wss:// against hostile or awkward peers: a frame announcing a big message
costs what arrived, a message that stops arriving closes its pipe with FrameStalled, and a peer
pinging while gsp closes gets no Pong after gsp's Close (wsproto would refuse to write one)."""

from __future__ import annotations

import ssl
import struct
import tracemalloc
from contextlib import ExitStack
from typing import Any

import gevent
import pytest
from gevent import ssl as gssl
from wsproto.events import BytesMessage, CloseConnection, Pong

import gsp
from gsp.testing import WAIT, wait_for
from tests.support import ws_support
from tests.support.ws_support import RawClient, port_of

MIB = 1 << 20


def masked_header(size: int, opcode: int = 0x2, fin: bool = True) -> bytes:
    """A client frame header announcing ``size`` payload bytes (mask key 0: payload as is)."""
    return bytes([(0x80 if fin else 0) | opcode, 0xFF]) + struct.pack(">Q", size) + bytes(4)


def raw_client(url: str, pki: Any) -> RawClient:
    """A bare WebSocket client (RawClient), over TLS for wss://."""
    bus = ("bus.sp.nanomsg.org",)
    if not url.startswith("wss"):
        return RawClient(port_of(url), protocols=bus)
    plain = ws_support.gsocket.create_connection
    ctx = ssl.create_default_context(cafile=pki.ca_file)

    def tls_connection(addr: Any, timeout: float = WAIT) -> Any:
        tls = gssl.SSLSocket(sock=plain(addr, timeout=timeout), server_hostname="localhost",
                             _context=ctx)
        tls.do_handshake()
        return tls

    with pytest.MonkeyPatch.context() as mp:  # RawClient connects through it
        mp.setattr(ws_support.gsocket, "create_connection", tls_connection)
        return RawClient(port_of(url), protocols=bus)


def listen(sock: gsp.Socket, scheme: str, pki: Any) -> str:
    opts = pki.listen_options() if scheme == "wss" else {}
    return sock.listen(f"{scheme}://127.0.0.1:0/sp", **opts).url


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_frames_announcing_recv_max_size_cost_what_arrived(scheme, pki):
    n = 30
    tracemalloc.start()
    try:
        with ExitStack() as st:
            bus = st.enter_context(gsp.socket("bus"))  # takes every client (pair: only one)
            url = listen(bus, scheme, pki)
            clients = []
            for _ in range(n):
                clients.append(raw_client(url, pki))
                st.callback(clients[-1].close)
            wait_for(lambda: len(bus.pipes) == n, what="every client attached")
            idle = tracemalloc.get_traced_memory()[0]
            for c in clients:
                c.sock.sendall(masked_header(bus.max_recv_size) + b"z")
            gevent.sleep(0.2)
            assert len(bus.pipes) == n
            assert tracemalloc.get_traced_memory()[0] - idle < n * 16 * 1024
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_a_stalled_ws_message_closes_its_pipe(scheme, pki):
    gone: list[gsp.Pipe] = []
    with ExitStack() as st:
        bus = st.enter_context(gsp.socket("bus", recv_timeout=WAIT, recv_partial_timeout=0.3))
        bus.on_pipe_event(lambda ev, p: gone.append(p) if ev is gsp.PipeEvent.DETACHED else None)
        url = listen(bus, scheme, pki)
        bad = raw_client(url, pki)
        st.callback(bad.close)
        bad.send(BytesMessage(data=b"the first half", message_finished=False))
        good = raw_client(url, pki)
        st.callback(good.close)
        for i in range(5):
            good.send(BytesMessage(data=b"%d" % i))
            assert bus.recv() == b"%d" % i
            gevent.sleep(0.05)
        wait_for(lambda: gone, what="the stalled pipe closed")
        (pipe,) = gone
        assert isinstance(pipe.error, gsp.FrameStalled)
        assert "sent nothing more of a message for 0.3 s (recv_partial_timeout); 14 bytes of " \
               "it had arrived" in str(pipe.error)
        assert bad.eof()
        good.send(BytesMessage(data=b"still here"))
        assert bus.recv() == b"still here"


def test_a_ping_while_gsp_closes_gets_no_pong():
    """The peer pings after gsp sent its Close: wsproto refuses to write a Pong then
    (LocalProtocolError: Pong cannot be sent in state LOCAL_CLOSING); the reader must not try."""
    transport = gsp.registry.transport_for("ws://127.0.0.1:0/sp")
    probe = gsp.socket("pair")
    options = dict(probe.options)
    probe.close()
    tl = transport.listener("ws://127.0.0.1:0/sp", options)
    tl.bind()
    try:
        connecting = gevent.spawn(RawClient, port_of(tl.url))  # waits for the 101
        conn = tl.accept()
        conn.handshake(gsp.registry.protocol("pair"), WAIT)
        raw = connecting.get(timeout=WAIT)
        reader = gevent.spawn(conn.recv_messages)
        closer = gevent.spawn(conn.close)
        closing = raw.next_event(CloseConnection)  # gsp's Close: it is LOCAL_CLOSING now
        raw.sock.sendall(bytes([0x89, 0x80]) + bytes(4))  # a Ping (wsproto's client won't now)
        gevent.sleep(0.05)  # the reader handles the Ping
        raw.send(closing.response())
        closer.join(WAIT)
        reader.join(WAIT)
        assert isinstance(reader.exception, gsp.Closed), reader.exception
        assert not any(isinstance(ev, Pong) for ev in raw.ws.events())
        raw.close()
    finally:
        tl.close()
