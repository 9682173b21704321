"""ws/wss notice a dead peer: after ws_ping_interval s of silence the peer gets
a WebSocket Ping; if nothing arrives ws_ping_timeout s later the pipe ends, and the dialer
redials. A live but idle peer answers the Pings and its pipe stays."""

from __future__ import annotations

import time
from typing import Any, Callable
from urllib.parse import urlsplit

import gevent
import pytest

import gsp
from gsp.testing import FaultProxy, wait_for

Mk = Callable[..., gsp.Socket]
FAST = {"ws_ping_interval": 0.2, "ws_ping_timeout": 0.3}


def through_proxy(gsp_socket: Mk, **dial_options: Any) -> tuple[gsp.Socket, gsp.Socket, FaultProxy]:
    pull = gsp_socket("pull", recv_timeout=5)
    url = pull.listen("ws://127.0.0.1:0/live").url
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    proxy = FaultProxy((parts.hostname, parts.port))
    push = gsp_socket("push", send_timeout=5, reconnect_time=0.05, max_reconnect_time=0.2,
              handshake_timeout=1)
    push.dial(f"ws://127.0.0.1:{proxy.address[1]}/live", fail_fast=True, **dial_options)
    wait_for(lambda: pull.pipes and push.pipes, what="the ws pipe")
    return pull, push, proxy


def test_a_black_holed_ws_peer_is_noticed_and_redialed(gsp_socket: Mk) -> None:
    pull, push, proxy = through_proxy(gsp_socket, **FAST)
    try:
        (pipe,) = push.pipes
        t0 = time.monotonic()
        proxy.blackhole()  # no FIN, no RST: the bytes just stop
        wait_for(lambda: pipe.closed, what="the silent pipe to end")
        assert time.monotonic() - t0 < 2  # ~ interval + timeout, not TCP's hours
        assert isinstance(pipe.error, gsp.ConnectionBroken)
        assert "sent nothing for 0.2 s (ws_ping_interval) and did not answer a Ping within " \
               "0.3 s (ws_ping_timeout)" in str(pipe.error)
        proxy.heal()
        wait_for(lambda: push.pipes and not push.pipes[0].closed, what="the redial")
        push.send(b"back")
        assert pull.recv() == b"back"
    finally:
        proxy.close()


def test_an_idle_live_ws_peer_answers_pings_and_stays(gsp_socket: Mk) -> None:
    pull, push, proxy = through_proxy(gsp_socket, **FAST)
    try:
        (pipe,) = push.pipes
        gevent.sleep(1.5)  # several ping rounds with nothing else on the wire
        assert not pipe.closed and push.pipes == [pipe]
        push.send(b"still here")
        assert pull.recv() == b"still here"
    finally:
        proxy.close()


def test_ping_options_are_checked(gsp_socket: Callable[..., gsp.Socket]) -> None:
    with pytest.raises(gsp.BadOption, match="ws_ping_interval"):
        gsp.socket("pair", ws_ping_interval=0)
    with pytest.raises(gsp.BadOption, match="ws_ping_timeout"):
        gsp.socket("pair", ws_ping_timeout=None)
    s = gsp_socket("pair", ws_ping_interval=None)  # None turns the Pings off
    assert s.ws_ping_interval is None
