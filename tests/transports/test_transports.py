"""tcp, ipc and inproc through the transport conformance kit (gsp.testing.TransportSuite),
plus what is particular to each."""

from __future__ import annotations

import os
import pathlib
import socket as stdsocket
import stat
from datetime import timedelta
from typing import Any

import pytest

import gsp
from gsp.testing import (
    WAIT,
    TransportSuite,
    connected,
    ping_pong,
    read_to_eof,
    socket_fds,
    wait_for,
)
from gsp.transport import parse_host_port
from tests.support import TCP, raw_connect


class TestTCPTransport(TransportSuite):
    scheme = "tcp"
    bad_urls = ("tcp://", "tcp://127.0.0.1", "tcp://127.0.0.1:", "tcp://127.0.0.1:99999",
                "tcp://127.0.0.1:x", "tcp://127.0.0.1:5?q=1", "tcp://127.0.0.1:5#frag",
                "tcp://u:p@127.0.0.1:5", "tcp://[::1:5", "tcp://a b:5", "tcp:/127.0.0.1:5")
    options = {"tcp_nodelay": (False, "yes"), "tcp_keepalive": (False, 1), "tcp_reuseport": (True, 1)}

    def listen_url(self) -> str:
        return "tcp://127.0.0.1:0"

    def anonymous_url(self) -> str:
        return "tcp://127.0.0.1:0"

    def raw_connect(self, url: str) -> Any:
        return raw_connect(url)


class TestIPCTransport(TransportSuite):
    scheme = "ipc"
    bad_urls = ("ipc://", "ipc:///" + "x" * 120, "ipc:///tmp/a\x00b")
    options = {"ipc_file_mode": (0o600, 0o10000), "ipc_send_buffer_size": (1 << 20, -1)}

    def raw_connect(self, url: str) -> Any:
        return raw_connect(url)


class TestUnixTransport(TransportSuite):
    """unix://, nng's alias of ipc:// (a socket file)."""

    scheme = "unix"
    bad_urls = ("unix://", "unix:///" + "x" * 120, "unix:///tmp/a\x00b")
    options = {"ipc_file_owner": (os.getuid(), -1), "ipc_file_group": (os.getgid(), "0")}

    def raw_connect(self, url: str) -> Any:
        return raw_connect(url)


class TestAbstractTransport(TransportSuite):
    """abstract://, Linux's abstract namespace (no file); the name %-decoded as in nng."""

    scheme = "abstract"
    bad_urls = ("abstract://a%zz", "abstract://%4", "abstract://" + "x" * 108)
    options = {"ipc_send_buffer_size": (1 << 20, "big")}

    def raw_connect(self, url: str) -> Any:
        return raw_connect(url)


class TestInprocTransport(TransportSuite):
    scheme = "inproc"
    bad_urls = ("inproc://",)
    not_applicable = {"test_garbage_headers_refused":
                      "inproc hands messages over in process: no byte stream, no SP header"}


# -- tcp extras ------------------------------------------------------------------------------------
def _ipv6_loopback() -> bool:
    if not stdsocket.has_ipv6:
        return False
    s = stdsocket.socket(stdsocket.AF_INET6, stdsocket.SOCK_STREAM)
    try:
        s.bind(("::1", 0))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_tcp_ipv6_literal(gsp_socket):
    opts = {"recv_timeout": WAIT, "send_timeout": WAIT}
    a, b = gsp_socket("pair", **opts), gsp_socket("pair", **opts)
    if not _ipv6_loopback():  # no IPv6 here: the literal must still be parsed, then refused
        with pytest.raises(gsp.InvalidAddress):
            a.listen("tcp://[::1]:0")
        return
    lst = a.listen("tcp://[::1]:0")
    assert lst.url.startswith("tcp://[::1]:") and not lst.url.endswith(":0")
    connected(a, lst.url, b)
    assert a.pipes[0].local_address == lst.url
    assert b.pipes[0].remote_address == lst.url
    ping_pong(a, b)
    # Garbage headers and a wrong protocol over IPv6 too; the listener keeps serving.
    srv, push, pair = gsp_socket("pull", recv_timeout=WAIT), gsp_socket("push"), gsp_socket("pair")
    events: list[gsp.PipeEvent] = []
    srv.on_pipe_event(lambda ev, p: events.append(ev))
    lst = srv.listen("tcp://[::1]:0")
    for data in (b"GARBAGE!", b"\x00SP\x01\x00\x50\x00\x00", b"\x00SP\x00\x00\x50\x00\x01",
                 b"\x00SP\x00\x00\x10\x00\x00"):
        raw = raw_connect(lst.url)
        try:
            raw.sendall(data)
            assert read_to_eof(raw) in (b"", b"\x00SP\x00\x00\x51\x00\x00")
        finally:
            raw.close()
    with pytest.raises(gsp.WrongProtocol):
        pair.dial(lst.url, fail_fast=True)
    assert events == [] and srv.pipes == []
    connected(srv, lst.url, push)
    push.send(b"after garbage")
    assert srv.recv() == b"after garbage"


def test_tcp_listen_on_an_address_not_local_is_invalid(gsp_socket):
    s = gsp_socket("pair")
    with pytest.raises(gsp.InvalidAddress):
        s.listen("tcp://192.0.2.1:0")  # TEST-NET-1: never a local address; nothing is sent
    assert s.listeners == []


def _sockopt(pipe: gsp.Pipe, level: int, opt: int) -> int:
    """An option of the kernel socket under a tcp or ipc ``pipe``: the one of this process's
    sockets whose own and peer's addresses are the pipe's."""
    def addr(url: str) -> Any:
        scheme, _, rest = url.partition("://")
        if scheme == "ipc":
            return rest
        host, port = parse_host_port(url, listening=False)
        return (host, port)

    local, remote = addr(pipe.local_address), addr(pipe.remote_address)
    if isinstance(local, str):  # unix: only the listening side's end has a name
        local, remote = (local, "") if pipe.listener is not None else ("", remote)
    for fd, _ in socket_fds():
        with stdsocket.socket(fileno=os.dup(fd)) as sock:
            try:
                if (sock.getsockname(), sock.getpeername()) == (local, remote):
                    return int(sock.getsockopt(level, opt))
            except OSError:  # a listener, or not a connection of ours
                continue
    raise AssertionError(f"no socket of this process is {pipe.local_address} -> "
                         f"{pipe.remote_address}")


def test_tcp_nodelay_and_keepalive_default_on(gsp_socket):
    a, b, c, d = gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair", tcp_nodelay=False), gsp_socket("pair")
    lst = a.listen(TCP)
    connected(a, lst.url, b)
    for p in (a.pipes[0], b.pipes[0]):
        assert _sockopt(p, stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) != 0
        assert _sockopt(p, stdsocket.SOL_SOCKET, stdsocket.SO_KEEPALIVE) != 0
    lst2 = c.listen(TCP)  # inherits tcp_nodelay=False from its socket
    connected(c, lst2.url, d, tcp_nodelay=False, tcp_keepalive=False)
    assert _sockopt(c.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) == 0
    assert _sockopt(d.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) == 0
    assert _sockopt(d.pipes[0], stdsocket.SOL_SOCKET, stdsocket.SO_KEEPALIVE) == 0


def test_tcp_keepalive_timing_notices_a_dead_peer_in_a_minute_or_as_configured(gsp_socket):
    """Keepalive probes start after tcp_keepalive_idle s and give up after tcp_keepalive_count
    unanswered ones, tcp_keepalive_interval s apart (defaults: 30 + 3 x 10 s)."""
    a, b, c, d = gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair")
    connected(a, a.listen(TCP).url, b)
    for p in (a.pipes[0], b.pipes[0]):
        assert _sockopt(p, stdsocket.IPPROTO_TCP, stdsocket.TCP_KEEPIDLE) == 30
        assert _sockopt(p, stdsocket.IPPROTO_TCP, stdsocket.TCP_KEEPINTVL) == 10
        assert _sockopt(p, stdsocket.IPPROTO_TCP, stdsocket.TCP_KEEPCNT) == 3
    c.tcp_keepalive_idle = 5
    connected(c, c.listen(TCP).url, d, tcp_keepalive_interval=2, tcp_keepalive_count=4)
    assert _sockopt(c.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_KEEPIDLE) == 5
    assert [_sockopt(d.pipes[0], stdsocket.IPPROTO_TCP, o) for o in (
        stdsocket.TCP_KEEPIDLE, stdsocket.TCP_KEEPINTVL, stdsocket.TCP_KEEPCNT)] == [30, 2, 4]
    with pytest.raises(gsp.BadOption, match="tcp_keepalive_idle"):
        gsp.socket("pair", tcp_keepalive_idle=0)


def test_tcp_keepalive_times_take_any_duration_and_round_a_fraction_up(gsp_socket):
    """The kernel counts keepalive times in whole seconds: a float or a timedelta is taken as
    every duration is, a fraction rounded up (never down to 0, which the kernel refuses)."""
    s = gsp_socket("pair", tcp_keepalive_idle=30.0, tcp_keepalive_interval=timedelta(seconds=2))
    assert (s.tcp_keepalive_idle, s.tcp_keepalive_interval) == (30, 2)
    s.tcp_keepalive_idle = 0.2
    s.tcp_keepalive_interval = timedelta(milliseconds=1500)
    assert (s.tcp_keepalive_idle, s.tcp_keepalive_interval) == (1, 2)
    t = gsp_socket("pair")
    connected(s, s.listen(TCP).url, t)
    assert [_sockopt(s.pipes[0], stdsocket.IPPROTO_TCP, o) for o in (
        stdsocket.TCP_KEEPIDLE, stdsocket.TCP_KEEPINTVL)] == [1, 2]
    for bad in (-1, 32768, "30", None):
        with pytest.raises(gsp.BadOption, match="tcp_keepalive_interval"):
            s.tcp_keepalive_interval = bad


def test_tcp_user_timeout_is_off_by_default_and_set_in_milliseconds_on_both_ends(gsp_socket):
    """tcp_user_timeout (s) becomes TCP_USER_TIMEOUT (ms) on each end's socket; unset, the
    kernel's own (0: its retransmission limit). tests/transports/test_netfaults.py shows what it does."""
    a, b, c, d = gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair")
    connected(a, a.listen(TCP).url, b)
    assert [_sockopt(p, stdsocket.IPPROTO_TCP, stdsocket.TCP_USER_TIMEOUT)
            for p in (a.pipes[0], b.pipes[0])] == [0, 0]
    c.tcp_user_timeout = 1.5
    connected(c, c.listen(TCP).url, d, tcp_user_timeout=0.25)
    assert _sockopt(c.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_USER_TIMEOUT) == 1500
    assert _sockopt(d.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_USER_TIMEOUT) == 250
    with pytest.raises(gsp.BadOption, match="tcp_user_timeout"):
        gsp.socket("pair", tcp_user_timeout=0)


# -- ipc extras ------------------------------------------------------------------------------------
def test_ipc_stale_socket_file_is_reclaimed(gsp_socket, ipc_url):
    path = ipc_url[len("ipc://"):]
    dead = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    dead.bind(path)
    dead.listen(1)
    dead.close()  # a listener that died without unlinking its file
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    a, b = gsp_socket("pair", recv_timeout=WAIT), gsp_socket("pair")
    lst = a.listen(ipc_url)
    connected(a, lst.url, b)
    b.send(b"reclaimed")
    assert a.recv() == b"reclaimed"


def test_ipc_live_listener_is_address_in_use(gsp_socket, ipc_url, ipc_dir):
    path = ipc_url[len("ipc://"):]
    a, b, c = gsp_socket("pair"), gsp_socket("pair", recv_timeout=WAIT), gsp_socket("pair")
    a.listen(ipc_url)
    with pytest.raises(gsp.AddressInUse):
        b.listen(ipc_url)
    assert os.path.exists(path)  # the refused listen did not unlink the live one's file
    connected(a, ipc_url, c)
    c.send(b"first owner")
    a.recv_timeout = WAIT
    assert a.recv() == b"first owner"
    # A live non-gsp listener counts too, and so does a file that is not a socket.
    other = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        other.bind(f"{ipc_dir}/foreign.sock")
        other.listen(1)
        with pytest.raises(gsp.AddressInUse):
            b.listen(f"ipc://{ipc_dir}/foreign.sock")
    finally:
        other.close()
    with open(f"{ipc_dir}/plain", "w"):
        pass
    with pytest.raises(gsp.AddressInUse):
        b.listen(f"ipc://{ipc_dir}/plain")
    assert os.path.isfile(f"{ipc_dir}/plain")


def test_ipc_listen_in_a_missing_directory_is_invalid(gsp_socket, ipc_dir):
    s = gsp_socket("pair")
    with pytest.raises(gsp.InvalidAddress):
        s.listen(f"ipc://{ipc_dir}/no/such/dir.sock")
    assert s.listeners == []


def test_ipc_file_mode(gsp_socket, ipc_dir):
    a, b = gsp_socket("pair"), gsp_socket("pair", ipc_file_mode=0o640)
    a.listen(f"ipc://{ipc_dir}/m600.sock", ipc_file_mode=0o600)
    b.listen(f"ipc://{ipc_dir}/m640.sock")  # inherited from the socket
    assert stat.S_IMODE(os.stat(f"{ipc_dir}/m600.sock").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(f"{ipc_dir}/m640.sock").st_mode) == 0o640


def test_ipc_send_buffer_is_asked_of_the_kernel_for_each_connection(gsp_socket, ipc_dir):
    """A big message fits in flight (the sender does not wait for the receiver in its middle):
    each ipc connection asks for ipc_send_buffer_size; 0 leaves the kernel's default."""
    wmem_max = int(pathlib.Path("/proc/sys/net/core/wmem_max").read_text())
    wmem_default = int(pathlib.Path("/proc/sys/net/core/wmem_default").read_text())

    def sndbuf(s: gsp.Socket) -> int:
        wait_for(lambda: s.pipes, what="the pipe")
        return _sockopt(s.pipes[0], stdsocket.SOL_SOCKET, stdsocket.SO_SNDBUF)

    a, b, c, d = gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair"), gsp_socket("pair")
    url = a.listen(f"ipc://{ipc_dir}/sndbuf.sock", ipc_send_buffer_size=300_000).url
    b.dial(url, fail_fast=True)  # the option's default, 512 KiB
    assert sndbuf(a) == 2 * min(300_000, wmem_max)  # Linux grants twice what it allows
    assert sndbuf(b) == 2 * min(512 * 1024, wmem_max)
    url = c.listen(f"ipc://{ipc_dir}/sndbuf0.sock", ipc_send_buffer_size=0).url
    d.dial(url, fail_fast=True, ipc_send_buffer_size=0)
    assert sndbuf(c) == sndbuf(d) == wmem_default


def test_ipc_socket_file_removed_on_close(gsp_socket, ipc_dir):
    p1, p2 = f"{ipc_dir}/one.sock", f"{ipc_dir}/two.sock"
    a = gsp_socket("pair")
    lst = a.listen(f"ipc://{p1}")
    a.listen(f"ipc://{p2}")
    assert os.path.exists(p1) and os.path.exists(p2)
    lst.close()
    assert not os.path.exists(p1) and os.path.exists(p2)
    a.close()
    assert not os.path.exists(p2)  # socket close removes the rest
