"""listen_fd: a tcp:// or ipc:// listener on an inherited listening socket (systemd socket
activation, a pre-fork server's shared listener), as nng 2.0's NNG_OPT_LISTEN_FD."""

from __future__ import annotations

import os
import socket as stdsocket
from typing import Any, Iterator

import gevent
import pytest

import gsp
from gsp.testing import WAIT
from tests.support import ask_who, until_answered_by, unused_fd, who_processes


def _listening(family: int = stdsocket.AF_INET, address: Any = ("127.0.0.1", 0)) -> Any:
    s = stdsocket.socket(family, stdsocket.SOCK_STREAM)
    s.bind(address)
    s.listen(16)
    return s


@pytest.fixture
def tcp_fd() -> Iterator[Any]:
    s = _listening()
    yield s
    s.close()


@pytest.fixture
def unix_fd(ipc_dir: str) -> Iterator[Any]:
    s = _listening(stdsocket.AF_UNIX, f"{ipc_dir}/given.sock")
    yield s
    s.close()


def _serve(rep: gsp.Socket) -> gevent.Greenlet:
    def loop() -> None:
        while True:
            rep.recv()
            rep.send(b"here")
    return gevent.spawn(loop)


@pytest.mark.parametrize("scheme", ["tcp", "ipc"])
def test_a_child_process_given_the_fd_serves_a_dialer_of_the_parent(
        scheme: str, tcp_fd: Any, unix_fd: Any) -> None:
    given = tcp_fd if scheme == "tcp" else unix_fd
    url = "tcp://" if scheme == "tcp" else f"ipc://{given.getsockname()}"
    fd = given.fileno()
    with who_processes() as start:
        proc, bound = start(url, pass_fds=(fd,), listen_fd=fd)
        if scheme == "tcp":
            assert bound == "tcp://127.0.0.1:%d" % given.getsockname()[1]
        else:
            assert bound == url
        given.close()  # the parent's copy: the child's own serves on alone
        assert ask_who(bound) == str(proc.pid).encode()
        assert ask_who(bound) == str(proc.pid).encode()


def test_two_processes_given_one_listening_socket_both_serve_it(tcp_fd: Any) -> None:
    """A pre-fork server's shared listener: every worker accepts on the same socket (whichever
    worker's accept the kernel wakes first takes a connection)."""
    fd = tcp_fd.fileno()
    with who_processes() as start:
        (one, url), (two, again) = start("tcp://", (fd,), listen_fd=fd), \
            start("tcp://", (fd,), listen_fd=fd)
        assert again == url
        tcp_fd.close()
        assert until_answered_by(url, 2) == {str(p.pid).encode() for p in (one, two)}


def test_in_one_process_the_listener_takes_a_duplicate_and_names_the_address(
        gsp_socket: Any, tcp_fd: Any, unix_fd: Any) -> None:
    rep = gsp_socket("rep", recv_timeout=WAIT, send_timeout=WAIT)
    port = tcp_fd.getsockname()[1]
    lst = rep.listen("tcp://", listen_fd=tcp_fd.fileno())
    assert lst.url == f"tcp://127.0.0.1:{port}"
    assert lst.options["listen_fd"] == tcp_fd.fileno()
    # The URL may name the address too; a port it names must be the socket's.
    also = rep.listen(f"tcp://127.0.0.1:{port}", listen_fd=tcp_fd.fileno())
    path = unix_fd.getsockname()
    on_ipc = rep.listen(f"ipc://{path}", listen_fd=unix_fd.fileno())
    server = _serve(rep)
    try:
        assert ask_who(lst.url) == b"here"
        assert ask_who(on_ipc.url) == b"here"
        lst.close()
        also.close()
        on_ipc.close()
    finally:
        server.kill()
    # Closing the listeners closed their duplicates only: the given sockets still listen, and
    # the ipc listener did not unlink a path it did not make.
    assert tcp_fd.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_ACCEPTCONN) == 1
    assert os.path.exists(path)
    probe = stdsocket.create_connection(("127.0.0.1", port), timeout=WAIT)
    probe.close()


def test_tls_listens_on_a_given_socket_too(gsp_socket: Any, tcp_fd: Any, pki: Any) -> None:
    pull = gsp_socket("pull", recv_timeout=WAIT)
    lst = pull.listen("tls+tcp://", listen_fd=tcp_fd.fileno(), **pki.listen_options())
    assert lst.url == "tls+tcp://127.0.0.1:%d" % tcp_fd.getsockname()[1]
    push = gsp_socket("push", send_timeout=WAIT)
    push.dial(lst.url, fail_fast=True, **pki.dial_options())
    push.send(b"over tls")
    assert pull.recv() == b"over tls"


def test_unusable_descriptors_are_refused_with_what_is_wrong(
        gsp_socket: Any, tcp_fd: Any, unix_fd: Any, tmp_path: Any) -> None:
    s = gsp_socket("pull")
    port = tcp_fd.getsockname()[1]
    closed = unused_fd()
    with pytest.raises(gsp.BadOption, match=f"file descriptor {closed} is not open"):
        s.listen("tcp://", listen_fd=closed)
    with open(tmp_path / "f", "w") as f:
        with pytest.raises(gsp.BadOption, match="is not a socket"):
            s.listen("tcp://", listen_fd=f.fileno())
    with stdsocket.socket(stdsocket.AF_INET, stdsocket.SOCK_DGRAM) as udp:
        with pytest.raises(gsp.BadOption, match=r"not a stream socket \(SOCK_STREAM\)"):
            s.listen("tcp://", listen_fd=udp.fileno())
    with stdsocket.socket() as fresh:
        with pytest.raises(gsp.BadOption, match="is not listening"):
            s.listen("tcp://", listen_fd=fresh.fileno())
    with pytest.raises(gsp.InvalidAddress, match="is an AF_UNIX socket; this scheme listens on "
                                                 "AF_INET or AF_INET6"):
        s.listen("tcp://", listen_fd=unix_fd.fileno())
    with pytest.raises(gsp.InvalidAddress, match="is an AF_INET socket; this scheme listens on "
                                                 "AF_UNIX"):
        s.listen(f"ipc://{unix_fd.getsockname()}", listen_fd=tcp_fd.fileno())
    with pytest.raises(gsp.InvalidAddress, match=f"listens on port {port}, not 1"):
        s.listen("tcp://127.0.0.1:1", listen_fd=tcp_fd.fileno())
    for bad in (-1, "3", 3.0, True):
        with pytest.raises(gsp.BadOption, match="listen_fd must be a file descriptor"):
            s.listen("tcp://", listen_fd=bad)
    with pytest.raises(gsp.BadOption, match="listen_fd does nothing on a dialer"):
        s.dial(f"tcp://127.0.0.1:{port}", listen_fd=tcp_fd.fileno(), background=True)
    with pytest.raises(gsp.BadOption, match="not an option of this endpoint"):
        s.listen("inproc://x", listen_fd=tcp_fd.fileno())
    with pytest.raises(gsp.InvalidAddress):
        s.listen("tcp://")  # without listen_fd a tcp listener needs a port
    assert s.listeners == []
    # Nothing of the caller's was closed by the refusals.
    assert tcp_fd.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_ACCEPTCONN) == 1
    assert unix_fd.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_ACCEPTCONN) == 1
