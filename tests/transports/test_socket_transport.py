"""socket://: an already-connected stream socket (one end of a socketpair) becomes a pipe, as nng's
socket transport (NNG_OPT_SOCKET_FD on a socket:// listener); gsp's form is
``sock.listen("socket://").adopt(fd)``."""

from __future__ import annotations

import os
import socket as stdsocket
from typing import Any, Iterator

import gevent
import pynng
import pytest
from gevent import socket as gsocket

import gsp
from gsp.testing import WAIT, wait_for
from tests.support import HDR_PULL, nng, unused_fd


@pytest.fixture
def pair_of_ends() -> Iterator[list[Any]]:
    """Both ends of a Unix socketpair; whatever gsp did not take is closed at the end."""
    ends = list(stdsocket.socketpair())
    yield ends
    for end in ends:
        end.close()


def _tcp_pair() -> list[Any]:
    """Both ends of a connected tcp connection on 127.0.0.1."""
    with stdsocket.create_server(("127.0.0.1", 0)) as server:
        client = stdsocket.create_connection(server.getsockname(), timeout=WAIT)
        accepted, _ = server.accept()
    return [client, accepted]


def _round_trip(req: gsp.Socket, rep: gsp.Socket) -> None:
    answer = gevent.spawn(lambda: rep.send(rep.recv() + b" back"))
    req.send(b"there")
    assert req.recv() == b"there back"
    answer.get(timeout=WAIT)


@pytest.mark.parametrize("req_end", [0, 1], ids=["req-adopts-first", "req-adopts-second"])
@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_req_rep_over_a_connected_pair(gsp_socket: Any, req_end: int, kind: str) -> None:
    ends = list(stdsocket.socketpair()) if kind == "unix" else _tcp_pair()
    try:
        req = gsp_socket("req", recv_timeout=WAIT, send_timeout=WAIT)
        rep = gsp_socket("rep", recv_timeout=WAIT, send_timeout=WAIT)
        at_req = req.listen("socket://")
        at_rep = rep.listen("socket://")
        assert at_req.url == at_rep.url == "socket://"
        # One end as a socket object (detached once taken), the other as a bare descriptor.
        at_req.adopt(ends[req_end])
        at_rep.adopt(ends[1 - req_end].detach())
        assert ends[req_end].fileno() == -1
        _round_trip(req, rep)
        _round_trip(req, rep)
        pipe = req.pipes[0]
        assert pipe.listener is at_req and at_req.stats["accepted"] == 1
        assert pipe.local_address == "socket://"
        assert pipe.remote_address.startswith("socket://")
        if kind == "tcp":
            assert pipe.remote_address.startswith("socket://127.0.0.1:")
    finally:
        for end in ends:
            end.close()


def test_one_listener_adopts_many_connections(gsp_socket: Any) -> None:
    push = gsp_socket("push", send_timeout=WAIT)
    pulls = [gsp_socket("pull", recv_timeout=WAIT) for _ in range(3)]
    lst = push.listen("socket://")
    for pull in pulls:
        mine, theirs = stdsocket.socketpair()
        lst.adopt(mine)
        pull.listen("socket://").adopt(theirs)
    wait_for(lambda: len(push.pipes) == 3)
    for i in range(6):
        push.send(b"%d" % i)
    got = sorted(m for pull in pulls for m in (pull.recv(), pull.recv()))
    assert got == [b"%d" % i for i in range(6)]


def test_the_connection_is_gsps_once_adopted(gsp_socket: Any, pair_of_ends: list[Any]) -> None:
    """Closing the socket closes the adopted descriptor (the peer sees the end); the peer's end
    closing closes the pipe (a listener does not redial)."""
    mine, theirs = pair_of_ends
    fd = mine.detach()
    pull = gsp_socket("pull")
    pull.listen("socket://").adopt(fd)
    peer = gsocket.socket(fileno=theirs.detach())  # a raw peer that waits cooperatively
    try:
        peer.settimeout(WAIT)
        assert peer.recv(8) == HDR_PULL  # gsp's side of the handshake
        pull.close()
        with pytest.raises(OSError):
            os.fstat(fd)
        assert peer.recv(100) == b""
    finally:
        peer.close()

    a, b = stdsocket.socketpair()
    one, two = gsp_socket("pair", recv_timeout=WAIT), gsp_socket("pair", recv_timeout=WAIT)
    one.listen("socket://").adopt(a)
    two.listen("socket://").adopt(b)
    wait_for(lambda: len(one.pipes) == 1 and len(two.pipes) == 1)
    two.close()
    wait_for(lambda: one.pipes == [])


def _nng_adopt(sock: pynng.Socket, fd: int) -> None:
    """nng's side: a socket:// listener, and NNG_OPT_SOCKET_FD ("socket:fd") set to ``fd``."""
    lib, ffi = pynng.lib, pynng.ffi
    lst = ffi.new("nng_listener *")
    assert lib.nng_listener_create(lst, sock.socket, b"socket://") == 0
    assert lib.nng_listener_start(lst[0], 0) == 0
    assert lib.nng_listener_set_int(lst[0], b"socket:fd", fd) == 0


@pytest.mark.interop
@pytest.mark.parametrize("gsp_asks", [True, False], ids=["gsp-req-nng-rep", "nng-req-gsp-rep"])
def test_interop_with_nngs_socket_transport(gsp_socket: Any, pair_of_ends: list[Any],
                                            gsp_asks: bool) -> None:
    mine, theirs = pair_of_ends
    g = gsp_socket("req" if gsp_asks else "rep", recv_timeout=WAIT, send_timeout=WAIT)
    n = nng.socket("rep" if gsp_asks else "req")
    try:
        g.listen("socket://").adopt(mine)
        _nng_adopt(n, theirs.detach())
        for i in range(3):
            if gsp_asks:
                answer = nng.spawn(lambda: n.send(n.recv() + b" back"))
                g.send(b"q%d" % i)
                assert g.recv() == b"q%d back" % i
            else:
                answer = nng.spawn(lambda i=i: (n.send(b"q%d" % i), n.recv())[1])
                g.send(g.recv() + b" back")
                assert answer.get(timeout=WAIT) == b"q%d back" % i
            answer.get(timeout=WAIT)
    finally:
        n.close()


def test_unusable_descriptors_are_refused_and_left_to_the_caller(
        gsp_socket: Any, pair_of_ends: list[Any], tmp_path: Any) -> None:
    s = gsp_socket("pair")
    lst = s.listen("socket://")
    end = pair_of_ends[0]
    gone = unused_fd()
    with pytest.raises(gsp.BadOption, match=f"file descriptor {gone} is not open"):
        lst.adopt(gone)
    closed = stdsocket.socket()
    closed.close()
    with pytest.raises(gsp.BadOption, match="file descriptor -1 is not open"):
        lst.adopt(closed)
    with open(tmp_path / "f", "w") as f:
        with pytest.raises(gsp.BadOption, match="is not a socket"):
            lst.adopt(f.fileno())
    with stdsocket.socket(stdsocket.AF_INET, stdsocket.SOCK_DGRAM) as udp:
        with pytest.raises(gsp.BadOption, match="not a stream socket"):
            lst.adopt(udp)
        assert udp.fileno() >= 0  # refused: not taken, not detached
    with stdsocket.create_server(("127.0.0.1", 0)) as server:
        with pytest.raises(gsp.BadOption, match="is a listening socket, not a connection"):
            lst.adopt(server)
        assert server.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_ACCEPTCONN) == 1
    with stdsocket.socket() as fresh:
        with pytest.raises(gsp.BadOption, match="is not connected"):
            lst.adopt(fresh.fileno())
    for bad in ("3", 3.0, True, None):
        with pytest.raises(gsp.BadOption, match="adopt takes a file descriptor"):
            lst.adopt(bad)
    assert s.pipes == [] and lst.stats["accepted"] == 0
    # Other schemes adopt nothing; socket:// dials nothing and names nothing more.
    tcp = s.listen("tcp://127.0.0.1:0")
    with pytest.raises(gsp.NotSupported, match="listen on socket:// and adopt there"):
        tcp.adopt(end)
    with pytest.raises(gsp.NotSupported, match="socket:// is listen-only"):
        s.dial("socket://")
    for url in ("socket://x", "socket:///tmp/a", "socket://3"):
        with pytest.raises(gsp.InvalidAddress, match="socket:// alone"):
            s.listen(url)
    lst.close()
    with pytest.raises(gsp.Closed):
        lst.adopt(end)
    assert end.fileno() >= 0
    end.send(b"still the caller's")
    assert pair_of_ends[1].recv(100) == b"still the caller's"
