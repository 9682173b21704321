"""The transport conformance suite (tests/conformance.py) for tcp, ipc and inproc, plus extras."""

from __future__ import annotations

import os
import socket as stdsocket
import stat

import pytest

import gsp
from tests import conformance as C
from tests.conformance import WAIT, connected, sockets


@pytest.fixture
def tcp() -> C.Tran:
    return C.tcp()


@pytest.fixture
def ipc(ipc_dir: str) -> C.Tran:
    return C.ipc(ipc_dir)


@pytest.fixture
def inproc() -> C.Tran:
    return C.inproc()


# -- tcp -------------------------------------------------------------------------------------------
def test_tcp_scheme(tcp): C.scheme(tcp)
def test_tcp_listen_and_accept(tcp): C.listen_and_accept(tcp)
def test_tcp_duplicate_listen(tcp): C.duplicate_listen(tcp)
def test_tcp_connection_refused(tcp): C.connection_refused(tcp)
def test_tcp_bad_handshake(tcp): C.bad_handshake(tcp)
def test_tcp_send_recv(tcp): C.send_recv(tcp)
def test_tcp_anonymous_port(tcp): C.anonymous_port(tcp)
def test_tcp_max_recv_size(tcp): C.max_recv_size(tcp)
def test_tcp_message_sizes(tcp): C.message_sizes(tcp)
def test_tcp_pipe_addresses(tcp): C.pipe_addresses(tcp)
def test_tcp_listener_closed(tcp): C.listener_closed(tcp)
def test_tcp_bad_urls(tcp): C.bad_urls(tcp)
def test_tcp_bad_options(tcp): C.bad_options(tcp)


# -- ipc -------------------------------------------------------------------------------------------
def test_ipc_scheme(ipc): C.scheme(ipc)
def test_ipc_listen_and_accept(ipc): C.listen_and_accept(ipc)
def test_ipc_duplicate_listen(ipc): C.duplicate_listen(ipc)
def test_ipc_connection_refused(ipc): C.connection_refused(ipc)
def test_ipc_bad_handshake(ipc): C.bad_handshake(ipc)
def test_ipc_send_recv(ipc): C.send_recv(ipc)
def test_ipc_max_recv_size(ipc): C.max_recv_size(ipc)
def test_ipc_message_sizes(ipc): C.message_sizes(ipc)
def test_ipc_pipe_addresses(ipc): C.pipe_addresses(ipc)
def test_ipc_listener_closed(ipc): C.listener_closed(ipc)
def test_ipc_bad_urls(ipc): C.bad_urls(ipc)
def test_ipc_bad_options(ipc): C.bad_options(ipc)


# -- inproc ----------------------------------------------------------------------------------------
def test_inproc_scheme(inproc): C.scheme(inproc)
def test_inproc_listen_and_accept(inproc): C.listen_and_accept(inproc)
def test_inproc_duplicate_listen(inproc): C.duplicate_listen(inproc)
def test_inproc_connection_refused(inproc): C.connection_refused(inproc)
def test_inproc_bad_handshake(inproc): C.bad_handshake(inproc)
def test_inproc_send_recv(inproc): C.send_recv(inproc)
def test_inproc_max_recv_size(inproc): C.max_recv_size(inproc)
def test_inproc_message_sizes(inproc): C.message_sizes(inproc)
def test_inproc_pipe_addresses(inproc): C.pipe_addresses(inproc)
def test_inproc_listener_closed(inproc): C.listener_closed(inproc)
def test_inproc_bad_urls(inproc): C.bad_urls(inproc)
def test_inproc_bad_options(inproc): C.bad_options(inproc)


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


def test_tcp_ipv6_literal():
    with sockets(("pair", {"recv_timeout": WAIT}), ("pair", {})) as [a, b]:
        if not _ipv6_loopback():  # no IPv6 here: the literal must still be parsed, then refused
            with pytest.raises(gsp.InvalidAddress):
                a.listen("tcp://[::1]:0")
            return
        lst = a.listen("tcp://[::1]:0")
        assert lst.url.startswith("tcp://[::1]:") and not lst.url.endswith(":0")
        connected(a, lst.url, b)
        assert a.pipes[0].local_address == lst.url
        assert b.pipes[0].remote_address == lst.url
        b.send(b"v6")
        assert a.recv() == b"v6"
    C.send_recv(C.tcp("::1"))
    C.bad_handshake(C.tcp("::1"))


def test_tcp_listen_on_an_address_not_local_is_invalid():
    with sockets(("pair", {})) as [s]:
        with pytest.raises(gsp.InvalidAddress):
            s.listen("tcp://192.0.2.1:0")  # TEST-NET-1: never a local address; nothing is sent
        assert s.listeners == []


def _sockopt(pipe: gsp.Pipe, level: int, opt: int) -> int:
    return pipe._conn.sock.getsockopt(level, opt)  # type: ignore[attr-defined]


def test_tcp_nodelay_and_keepalive_default_on(tcp):
    with sockets(("pair", {}), ("pair", {}), ("pair", {"tcp_nodelay": False}),
                 ("pair", {})) as [a, b, c, d]:
        lst = a.listen(tcp.url())
        connected(a, lst.url, b)
        for p in (a.pipes[0], b.pipes[0]):
            assert _sockopt(p, stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) != 0
            assert _sockopt(p, stdsocket.SOL_SOCKET, stdsocket.SO_KEEPALIVE) != 0
        lst2 = c.listen(tcp.url())  # inherits tcp_nodelay=False from its socket
        connected(c, lst2.url, d, tcp_nodelay=False, tcp_keepalive=False)
        assert _sockopt(c.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) == 0
        assert _sockopt(d.pipes[0], stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) == 0
        assert _sockopt(d.pipes[0], stdsocket.SOL_SOCKET, stdsocket.SO_KEEPALIVE) == 0


# -- ipc extras ------------------------------------------------------------------------------------
def test_ipc_stale_socket_file_is_reclaimed(ipc_url):
    path = ipc_url[len("ipc://"):]
    dead = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    dead.bind(path)
    dead.listen(1)
    dead.close()  # a listener that died without unlinking its file
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    with sockets(("pair", {"recv_timeout": WAIT}), ("pair", {})) as [a, b]:
        lst = a.listen(ipc_url)
        connected(a, lst.url, b)
        b.send(b"reclaimed")
        assert a.recv() == b"reclaimed"


def test_ipc_live_listener_is_address_in_use(ipc_url, ipc_dir):
    path = ipc_url[len("ipc://"):]
    with sockets(("pair", {}), ("pair", {"recv_timeout": WAIT}), ("pair", {})) as [a, b, c]:
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


def test_ipc_listen_in_a_missing_directory_is_invalid(ipc_dir):
    with sockets(("pair", {})) as [s]:
        with pytest.raises(gsp.InvalidAddress):
            s.listen(f"ipc://{ipc_dir}/no/such/dir.sock")
        assert s.listeners == []


def test_ipc_file_mode(ipc_dir):
    with sockets(("pair", {}), ("pair", {"ipc_file_mode": 0o640})) as [a, b]:
        a.listen(f"ipc://{ipc_dir}/m600.sock", ipc_file_mode=0o600)
        b.listen(f"ipc://{ipc_dir}/m640.sock")  # inherited from the socket
        assert stat.S_IMODE(os.stat(f"{ipc_dir}/m600.sock").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(f"{ipc_dir}/m640.sock").st_mode) == 0o640


def test_ipc_socket_file_removed_on_close(ipc_dir):
    p1, p2 = f"{ipc_dir}/one.sock", f"{ipc_dir}/two.sock"
    with sockets(("pair", {})) as [a]:
        lst = a.listen(f"ipc://{p1}")
        a.listen(f"ipc://{p2}")
        assert os.path.exists(p1) and os.path.exists(p2)
        lst.close()
        assert not os.path.exists(p1) and os.path.exists(p2)
    assert not os.path.exists(p2)  # socket close removes the rest
