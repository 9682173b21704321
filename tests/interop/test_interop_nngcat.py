"""Interop with nng 1.5.2's own ``nngcat`` (Debian's nng-utils) over ``abstract://`` and
``unix://``, both ways, for push/pull and req/rep; each pipe carries the nngcat process's pid,
uid and gid (SO_PEERCRED).

nngcat is a real process: each test starts it with bounded waits and kills it in a finally.
Reads of its output go through gevent's subprocess pipes, so the hub keeps serving gsp.
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

import gevent
import pytest
from gevent import subprocess

import gsp
from gsp.testing import wait_for

T = 10.0  # generous bound on any one wait, seconds

pytestmark = [pytest.mark.interop("nngcat"), pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="abstract:// and SO_PEERCRED are Linux's")]


def nngcat_path() -> str:
    path = shutil.which("nngcat")
    if path is None:
        pytest.fail("nngcat not found: install nng-utils (apt-get install nng-utils; .ci/run does)")
    return path


def fresh_url(scheme: str, ipc_dir: str) -> str:
    """A new address; an abstract name with an escaped NUL in it, as in nng's documentation."""
    if scheme == "abstract":
        return f"abstract://gsp-nngcat-{os.getpid()}-{os.urandom(4).hex()}%00end"
    return f"unix://{ipc_dir}/nngcat.sock"


@contextmanager
def nngcat(*args: str) -> Iterator[subprocess.Popen]:
    """nngcat with ``args``, killed (and reaped) at the end whatever happens."""
    proc = subprocess.Popen([nngcat_path(), *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=T)


def lines(proc: subprocess.Popen, count: int) -> list[bytes]:
    """The next ``count`` lines nngcat printed (-Q: one quoted message a line)."""
    assert proc.stdout is not None
    got: list[bytes] = []
    with gevent.Timeout(T, AssertionError(f"nngcat printed {got} in {T} s, not {count} lines")):
        while len(got) < count:
            line = proc.stdout.readline()
            assert line, f"nngcat ended: {proc.wait()} {proc.stderr.read() if proc.stderr else ''}"
            got.append(line.rstrip(b"\n"))
    return got


def assert_credentials(sock: gsp.Socket, proc: subprocess.Popen) -> None:
    wait_for(lambda: len(sock.pipes) == 1, T, what="nngcat's pipe")
    props = sock.pipes[0].properties
    assert (props["peer_pid"], props["peer_uid"], props["peer_gid"]) == (
        proc.pid, os.getuid(), os.getgid())


SCHEMES = ["abstract", "unix"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_gsp_push_dials_nngcat_pull(scheme: str, ipc_dir: str) -> None:
    url = fresh_url(scheme, ipc_dir)
    with nngcat("--pull0", "--listen", url, "--quoted") as proc, \
            gsp.socket("push", dial=url, send_timeout=T, reconnect_time=0.05) as push:
        assert_credentials(push, proc)
        for body in (b"one", b"two", b"three"):
            push.send(body)
        assert lines(proc, 3) == [b'"one"', b'"two"', b'"three"']


@pytest.mark.parametrize("scheme", SCHEMES)
def test_nngcat_push_dials_gsp_pull(
        gsp_socket: Callable[..., gsp.Socket], scheme: str, ipc_dir: str) -> None:
    pull = gsp_socket("pull", recv_timeout=T)
    url = pull.listen(fresh_url(scheme, ipc_dir)).url
    # Every second until killed: nngcat exits right after its last send, which could cut a
    # message short; killing it after two arrived cannot.
    with nngcat("--push0", "--dial", url, "--data", "hello", "--interval", "1") as proc:
        assert [pull.recv(), pull.recv()] == [b"hello", b"hello"]
        assert_credentials(pull, proc)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_gsp_req_dials_nngcat_rep(scheme: str, ipc_dir: str) -> None:
    url = fresh_url(scheme, ipc_dir)
    with nngcat("--rep0", "--listen", url, "--data", "pong", "--quoted") as proc, \
            gsp.socket("req", dial=url, send_timeout=T, recv_timeout=T,
                       reconnect_time=0.05) as req:
        for body in (b"ping", b"again"):
            req.send(body)
            assert req.recv() == b"pong"
        assert lines(proc, 2) == [b'"ping"', b'"again"']
        assert_credentials(req, proc)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_nngcat_req_dials_gsp_rep(
        gsp_socket: Callable[..., gsp.Socket], scheme: str, ipc_dir: str) -> None:
    rep = gsp_socket("rep", recv_timeout=T, send_timeout=T)
    url = rep.listen(fresh_url(scheme, ipc_dir)).url
    # One request: nngcat 1.5.2's --count with req fails now and then on its own timer.
    with nngcat("--req0", "--dial", url, "--data", "ping", "--quoted") as proc:
        msg = rep.recv_msg()
        assert msg.body == b"ping"
        assert msg.pipe is not None
        assert msg.pipe.properties["peer_pid"] == proc.pid
        rep.send(b"pong")
        assert lines(proc, 1) == [b'"pong"']
        assert_credentials(rep, proc)


def test_nngcat_dials_a_name_the_kernel_chose(gsp_socket: Callable[..., gsp.Socket]) -> None:
    """``abstract://`` with no name: the kernel picks one (autobind), the listener's url says
    which, and nngcat reaches it there."""
    pull = gsp_socket("pull", listen="abstract://", recv_timeout=T)
    url = pull.listeners[0].url
    assert url.startswith("abstract://") and len(url) > len("abstract://")
    with nngcat("--push0", "--dial", url, "--data", "auto", "--interval", "1"):
        assert pull.recv() == b"auto"


def test_an_abstract_name_nngcat_holds_is_in_use(gsp_socket: Callable[..., gsp.Socket]) -> None:
    url = fresh_url("abstract", "")
    with nngcat("--pull0", "--listen", url) as proc, gsp.socket("pull") as pull:
        probe = gsp_socket("push", dial=url, reconnect_time=0.05)
        wait_for(lambda: probe.pipes, T, what="nngcat listening")
        probe.close()
        with pytest.raises(gsp.AddressInUse):
            pull.listen(url)
        assert proc.poll() is None
