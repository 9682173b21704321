"""Behavioural acceptance tests of the socket core's endpoints: a dialer redials a listener process
that was killed, its backoff capped at max_reconnect_time; listeners and dialers facing hostile
peers (stalled handshakes, a peer that never handshakes, a 2 GiB frame announced) time them out or
close only that pipe, delaying nobody else. One of the core suites (see test_core.py)."""

from __future__ import annotations

import os
import struct
import sys
import textwrap
import time
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket
from gevent import subprocess

import gsp
from gsp.testing import WAIT, connected, free_port, read_to_eof, wait_for
from tests.support import HDR_PULL, HDR_PUSH, TCP, raw_connect, scaled, spawn_all


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- dialing ---------------------------------------------------------------------------------------

ECHO_CHILD = textwrap.dedent("""
    import sys, gsp
    s = gsp.socket("pair", listen=sys.argv[1])
    print("ready", flush=True)
    while True:
        s.send(s.recv())
""")


def _start_echo(url: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", ECHO_CHILD, url], stdout=subprocess.PIPE)
    try:
        with gevent.Timeout(30, AssertionError("the listener process did not start")):
            assert proc.stdout.readline() == b"ready\n"
    except BaseException:
        _stop(proc)
        raise
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT)
    proc.stdout.close()


def test_dialer_reconnects_after_listener_process_is_killed(gsp_socket):
    url = f"tcp://127.0.0.1:{free_port()}"
    rmax = 0.25
    opts = {"recv_timeout": WAIT, "send_timeout": WAIT, "reconnect_time": 0.05,
            "max_reconnect_time": rmax}
    s = gsp_socket("pair", **opts)
    d = s.dial(url)
    proc = _start_echo(url)
    try:
        wait_for(lambda: s.pipes, what="the first connection")
        s.send(b"one")
        assert s.recv() == b"one"
        proc.kill()
        wait_for(lambda: not s.pipes, what="the pipe to the killed process to go")
        # While the listener is away, the dialer redials: capped at rmax, nine refused
        # redials take about 9 x rmax (2.25 s); doubling from 0.05 s without the cap, they
        # would take about 25 s.
        refused = d.stats["dial_failures_refused"]
        wait_for(lambda: d.stats["dial_failures_refused"] - refused >= 9, timeout=15,
                 what="nine refused redials, the backoff capped at max_reconnect_time")
        assert d.stats["dial_failures"] == d.stats["dial_failures_refused"]
        assert isinstance(d.last_error, gsp.ConnectionRefused)
        _stop(proc)
        proc = _start_echo(url)
        t0 = time.monotonic()
        wait_for(lambda: s.pipes, timeout=rmax + 5, what="the redial")
        assert time.monotonic() - t0 < rmax + scaled(1.0)
        s.send(b"two")
        assert s.recv() == b"two"
    finally:
        _stop(proc)


# -- hostile peers ---------------------------------------------------------------------------------

def test_stalled_handshakes_do_not_delay_good_peers_and_time_out(gsp_socket):
    # The good peer must be served inside the stalled ones' handshake timeout, which starts as
    # they are accepted: 200 connects and a dial take longer on a loaded machine.
    hto = scaled(1.0)
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    lst = pull.listen(TCP, handshake_timeout=hto)
    raws: list[tuple[Any, float]] = []
    try:
        for _ in range(200):
            r = raw_connect(lst.url)
            r.sendall(HDR_PUSH[:4])  # half a handshake, then silence
            raws.append((r, time.monotonic()))
        push.dial(lst.url, fail_fast=True)
        push.send(b"good")
        assert pull.recv() == b"good"
        # Served before any stalled handshake timed out (hto after it began).
        assert lst.stats["handshake_failures_timeout"] == 0
        assert len(pull.pipes) == 1

        def eof_after(r: Any, since: float) -> tuple[bytes, float]:
            data = read_to_eof(r, hto + WAIT)
            return data, time.monotonic() - since

        results = [g.get() for g in spawn_all(eof_after, raws)]
    finally:
        for r, _ in raws:
            r.close()
    assert all(data == HDR_PULL for data, _ in results)
    waited = [t for _, t in results]
    assert min(waited) >= hto * 0.95 and max(waited) < hto + scaled(3.0), (min(waited), max(waited))


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_dial_to_a_peer_that_never_handshakes_times_out(gsp_socket, kind, ipc_url):
    srv = gsocket.socket(gsocket.AF_INET if kind == "tcp" else gsocket.AF_UNIX)
    try:
        srv.bind(("127.0.0.1", 0) if kind == "tcp" else ipc_url[len("ipc://"):])
        srv.listen(1)  # the kernel completes the connect; nobody ever answers
        url = f"tcp://127.0.0.1:{srv.getsockname()[1]}" if kind == "tcp" else ipc_url
        push = gsp_socket("push", handshake_timeout=0.3, reconnect_time=5)
        t0 = time.monotonic()
        with pytest.raises(gsp.Timeout):
            push.dial(url, fail_fast=True)
        assert 0.25 <= time.monotonic() - t0 < scaled(2.0)
        d = push.dial(url)
        assert isinstance(d.last_error, gsp.Timeout)
    finally:
        srv.close()


@pytest.mark.parametrize("kind", ["tcp", "ipc"])
def test_2gib_frame_closes_only_that_pipe(gsp_socket, kind, ipc_url):
    events: list[tuple[gsp.PipeEvent, gsp.Pipe]] = []
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    pull.on_pipe_event(lambda ev, p: events.append((ev, p)))
    lst = pull.listen(TCP if kind == "tcp" else ipc_url)
    connected(pull, lst.url, push)
    good = pull.pipes[0]
    before = rss()
    for _ in range(3):
        raw = raw_connect(lst.url)
        try:
            raw.sendall(HDR_PUSH)
            prefix = struct.pack(">Q", 2 << 30)
            raw.sendall((b"\x01" + prefix if kind == "ipc" else prefix) + b"x" * 100)
            assert read_to_eof(raw) == HDR_PULL
        finally:
            raw.close()
    wait_for(lambda: sum(ev is gsp.PipeEvent.DETACHED for ev, _ in events) == 3,
             what="the three oversize pipes to detach")
    gone = [p for ev, p in events if ev is gsp.PipeEvent.DETACHED]
    assert good not in gone and all(isinstance(p.error, gsp.MessageTooLarge) for p in gone)
    assert pull.pipes == [good]
    push.send(b"still fine")
    assert pull.recv() == b"still fine"
    assert rss() - before < 32 << 20
