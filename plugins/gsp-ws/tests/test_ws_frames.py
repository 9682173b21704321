"""ws:// (the gsp-ws plugin) frame by frame, against a bare WebSocket client (RawClient, from
ws_support.py): text frames, fragments with a ping between them, a message in the same segment as
the 101 and frames sent with the upgrade request, the close handshake both ways, and a message or
frame over the limits closing only that pipe."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import gevent
import pytest
from gevent import socket as gsocket
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection as WSProto
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    Request,
    TextMessage,
)

import gsp
from tests.support.ws_support import RawClient, close_from_gsp, port_of


@contextlib.contextmanager
def pair_and_raw_client(**listen_options: Any) -> Iterator[tuple[gsp.Socket, "RawClient", str]]:
    """A pair socket listening on ws:// and a bare WebSocket client connected to it."""
    with gsp.socket("pair", recv_timeout=5) as a:
        url = a.listen("ws://127.0.0.1:0/sp", **listen_options).url
        raw = RawClient(port_of(url))
        try:
            yield a, raw, url
        finally:
            raw.close()


@pytest.mark.parametrize("text_ok", [False, True])
def test_text_frames(text_ok):
    with pair_and_raw_client(ws_recv_text=text_ok) as (a, raw, url):
        raw.send(TextMessage(data="héllo"))
        if text_ok:
            assert a.recv() == "héllo".encode()
        else:
            ev = raw.next_event(CloseConnection)
            assert ev.code == 1003
            raw.send(ev.response())
            assert raw.eof()
            gevent.sleep(0.05)
            assert not a.pipes


def test_fragments_reassembled_ping_answered():
    with pair_and_raw_client() as (a, raw, url):
        raw.send(BytesMessage(data=b"one ", message_finished=False))
        raw.send(Ping(payload=b"are you there"))  # control frames may sit between fragments
        raw.send(BytesMessage(data=b"two ", message_finished=False))
        raw.send(BytesMessage(data=b"three", message_finished=True))
        assert raw.next_event(Pong).payload == b"are you there"
        assert a.recv() == b"one two three"
        gevent.sleep(0.05)
        a.send(b"x" * 200_000)  # gsp cuts it into 64 KiB frames like nng
        got = []
        while True:
            ev = raw.next_event(BytesMessage)
            got.append(ev.data)
            if ev.message_finished:
                break
        assert b"".join(got) == b"x" * 200_000 and len(got) >= 2


def test_message_in_the_same_segment_as_the_101(gsp_socket):
    """A server may send its first message right behind the 101; the dialer must not lose it."""
    srv = gsocket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def fake_server() -> None:
        conn, _ = srv.accept()
        try:
            ws = WSConnection(ConnectionType.SERVER)
            while not any(isinstance(ev, Request) for ev in ws.events()):
                ws.receive_data(conn.recv(65536))
            conn.sendall(ws.send(AcceptConnection(subprotocol="pair.sp.nanomsg.org"))
                         + ws.send(BytesMessage(data=b"early bird")))
            conn.recv(65536)  # until the dialer goes
        finally:
            conn.close()

    g = gevent.spawn(fake_server)
    try:
        s = gsp_socket("pair", recv_timeout=5)
        s.dial(f"ws://127.0.0.1:{srv.getsockname()[1]}/sp", fail_fast=True)
        assert s.recv() == b"early bird"
        s.close()
        g.get(timeout=5)
    finally:
        g.kill()
        srv.close()


def test_frames_sent_with_the_upgrade_request_are_kept(gsp_socket):
    """A client that does not wait for the 101 (against RFC 6455) still loses nothing."""
    pull = gsp_socket("pull", recv_timeout=5)
    url = pull.listen("ws://127.0.0.1:0/sp").url
    c = gsocket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
    try:
        head = WSConnection(ConnectionType.CLIENT).send(Request(
            host="127.0.0.1", target="/sp", subprotocols=["pull.sp.nanomsg.org"]))
        frame = WSProto(ConnectionType.CLIENT).send(BytesMessage(data=b"eager"))
        c.sendall(head + frame)
        assert pull.recv() == b"eager"
    finally:
        c.close()


def test_close_handshake_both_ways():
    # The client closes: gsp answers with a close frame, then closes TCP.
    with pair_and_raw_client() as (a, raw, url):
        with gevent.Timeout(5):
            while not a.pipes:
                gevent.sleep(0.01)
        raw.send(CloseConnection(code=1000, reason="bye"))
        assert raw.next_event(CloseConnection).code == 1000
        assert raw.eof()
        with gevent.Timeout(5):
            while a.pipes:
                gevent.sleep(0.01)
        raw = RawClient(port_of(url))
        try:  # gsp closes: the client gets a 1000 close frame and answers it
            with gevent.Timeout(5):
                while not a.pipes:
                    gevent.sleep(0.01)
            pipe = a.pipes[0]
            close_from_gsp(raw, pipe)
        finally:
            raw.close()


def test_over_the_limit_closes_only_that_pipe(gsp_socket):
    pull = gsp_socket("pull", recv_timeout=5)
    url = pull.listen("ws://127.0.0.1:0/sp", max_recv_size=1000,
                      ws_max_frame_size=600).url
    big = RawClient(port_of(url), protocols=("pull.sp.nanomsg.org",))
    frame = RawClient(port_of(url), protocols=("pull.sp.nanomsg.org",))
    good = RawClient(port_of(url), protocols=("pull.sp.nanomsg.org",))
    try:
        with gevent.Timeout(5):
            while len(pull.pipes) < 3:
                gevent.sleep(0.01)
        for i in range(3):  # 1500 bytes in frames of 500: over max_recv_size
            big.send(BytesMessage(data=b"b" * 500, message_finished=i == 2))
        assert big.next_event(CloseConnection).code == 1009
        frame.send(BytesMessage(data=b"f" * 800))  # one frame over ws_max_frame_size
        assert frame.next_event(CloseConnection).code == 1009
        for i in range(2):  # 1000 bytes in frames of 500: within both limits
            good.send(BytesMessage(data=b"g" * 500, message_finished=i == 1))
        assert pull.recv() == b"g" * 1000
        gevent.sleep(0.05)
        assert len(pull.pipes) == 1
        good.send(BytesMessage(data=b"still here"))
        assert pull.recv() == b"still here"
    finally:
        for c in (big, frame, good):
            c.close()


@pytest.mark.parametrize("scheme", ["ws", "wss"])
@pytest.mark.parametrize("frame_max", [0, 1000, 65536])
def test_big_messages_in_a_row_both_ways(pki, scheme, frame_max):
    """Big messages back to back each way (a dialer masks into its send buffer, a listener reads
    them into its message buffer; then the other way), cut into frames of every size, small ones
    between: every byte as sent, over ws and wss."""
    big_messages_both_ways(pki, scheme, frame_max)


@pytest.mark.parametrize("frame_max", [0, 65536])
def test_big_messages_without_the_compiled_mask(pki, monkeypatch, frame_max):
    """The same with gsp_ws._frames' fallback for gsp_ws._mask (a build without a C compiler):
    the dialer's send buffer masked from mid-frame (a frame across two writes: 0) and the
    listener's frames unmasked in place (frames of 64 KiB), every byte as sent."""
    from gsp_ws import _conn, _frames

    calls = {_conn: 0, _frames: 0}
    for module in calls:
        def fallback(*args: Any, module: Any = module) -> None:
            calls[module] += 1
            _frames._mask_into_py(*args)
        monkeypatch.setattr(module, "mask_into", fallback)
    big_messages_both_ways(pki, "ws", frame_max)
    assert calls[_conn] and (calls[_frames] or not frame_max), calls  # both ran the fallback


def big_messages_both_ways(pki: Any, scheme: str, frame_max: int) -> None:
    from gsp_ws._frames import DIRECT_MIN

    tls = scheme == "wss"
    sizes = [DIRECT_MIN - 1, DIRECT_MIN, 65535, 65536, 0, 65537, 5, 300_001, (1 << 20) + 3, 16]
    opts: dict[str, Any] = {"max_recv_size": 0, "ws_max_frame_size": 0,
                            "ws_max_send_frame_size": frame_max}
    with gsp.socket("pair", recv_timeout=20, send_timeout=20) as a, \
            gsp.socket("pair", recv_timeout=20, send_timeout=20) as b:
        url = a.listen(f"{scheme}://127.0.0.1:0/sp", **opts,
                       **(pki.listen_options() if tls else {})).url
        b.dial(url, fail_fast=True, **opts, **(pki.dial_options() if tls else {}))
        for sender, receiver in ((b, a), (a, b)):
            payloads = [os.urandom(n) for n in sizes]
            g = gevent.spawn(lambda s=sender, ps=payloads: [s.send(p) for p in ps])
            assert [receiver.recv() for _ in payloads] == payloads
            g.get(timeout=20)
