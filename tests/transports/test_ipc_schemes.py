"""ipc's other schemes and what every ipc pipe carries: ``unix://`` (nng's alias of ``ipc://``),
``abstract://`` (Linux's abstract namespace), the peer's credentials, and the socket file's
mode, owner and group. The conformance kit runs on each scheme in tests/transports/test_transports.py;
nngcat's interop in tests/interop/test_interop_nngcat.py."""

from __future__ import annotations

import os
import socket as stdsocket
import stat
import sys
from typing import Callable

import pytest

import gsp
from gsp.testing import WAIT, connected, wait_for

Mk = Callable[..., gsp.Socket]

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="abstract:// and SO_PEERCRED are Linux's")


def abstract_url() -> str:
    return f"abstract://gsp-test-{os.getpid()}-{os.urandom(4).hex()}"


def own_credentials() -> dict[str, int]:
    return {"peer_pid": os.getpid(), "peer_uid": os.getuid(), "peer_gid": os.getgid()}


# -- unix:// --------------------------------------------------------------------------------------
def test_unix_is_ipc_under_another_name(gsp_socket: Mk, ipc_dir: str) -> None:
    path = f"{ipc_dir}/alias.sock"
    a, b = gsp_socket("pull", recv_timeout=WAIT), gsp_socket("push", send_timeout=WAIT)
    lst = a.listen(f"unix://{path}")
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    connected(a, f"ipc://{path}", b)  # the same file, by either name
    b.send(b"alias")
    assert a.recv() == b"alias"
    assert a.pipes[0].local_address == f"unix://{path}"
    assert b.pipes[0].remote_address == f"ipc://{path}"
    lst.close()
    assert not os.path.exists(path)


# -- abstract:// ------------------------------------------------------------------------------------
@linux_only
def test_abstract_leaves_no_file_and_frees_its_name_on_close(gsp_socket: Mk, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = abstract_url()
    a, b = gsp_socket("pull", recv_timeout=WAIT), gsp_socket("push", send_timeout=WAIT)
    lst = a.listen(url)
    assert lst.url == url
    connected(a, url, b)
    b.send(b"no file")
    assert a.recv() == b"no file"
    assert a.pipes[0].local_address == url and b.pipes[0].remote_address == url
    lst.close()
    a.listen(url)  # the kernel freed the name with the socket
    a.close()
    b.close()
    assert os.listdir(tmp_path) == []


@linux_only
def test_abstract_name_in_use_is_address_in_use(gsp_socket: Mk) -> None:
    url = abstract_url()
    a, b = gsp_socket("pair"), gsp_socket("pair")
    a.listen(url)
    with pytest.raises(gsp.AddressInUse):
        b.listen(url)
    a.close()
    b.close()
    plain = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:  # a name another program holds
        plain.bind(b"\0" + url[len("abstract://"):].encode())
        plain.listen(1)
        c = gsp_socket("pair")
        with pytest.raises(gsp.AddressInUse):
            c.listen(url)
    finally:
        plain.close()


@linux_only
def test_abstract_names_are_percent_decoded_as_in_nng(gsp_socket: Mk) -> None:
    """``abstract://a%00b`` is the name a, NUL, b: the kernel's address is NUL a NUL b."""
    tag = os.urandom(4).hex()
    a = gsp_socket("pull", recv_timeout=WAIT)
    a.listen(f"abstract://gsp-{tag}%00b%2Fc")
    plain = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        plain.settimeout(WAIT)
        plain.connect(b"\0gsp-" + tag.encode() + b"\0b/c")
        plain.sendall(b"\x00SP\x00\x00\x50\x00\x00" + b"\x01" + (2).to_bytes(8, "big") + b"ok")
        assert a.recv() == b"ok"
        assert a.pipes[0].local_address == f"abstract://gsp-{tag}%00b/c"
    finally:
        plain.close()


@linux_only
def test_abstract_without_a_name_lets_the_kernel_choose(gsp_socket: Mk) -> None:
    a, b = gsp_socket("pair", recv_timeout=WAIT), gsp_socket("pair", send_timeout=WAIT)
    url = a.listen("abstract://").url
    assert url.startswith("abstract://") and url != "abstract://"
    connected(a, url, b)
    b.send(b"autobind")
    assert a.recv() == b"autobind"
    with pytest.raises(gsp.InvalidAddress):
        b.dial("abstract://")  # a dialer needs a name


# -- peer credentials ----------------------------------------------------------------------------
@linux_only
@pytest.mark.parametrize("scheme", ["ipc", "unix", "abstract"])
def test_every_pipe_carries_the_peers_credentials(gsp_socket: Mk, scheme: str, ipc_dir: str) -> None:
    url = abstract_url() if scheme == "abstract" else f"{scheme}://{ipc_dir}/cred.sock"
    a, b = gsp_socket("pair"), gsp_socket("pair")
    connected(a, a.listen(url).url, b)
    wait_for(lambda: a.pipes and b.pipes, what="both pipes")
    for pipe in (a.pipes[0], b.pipes[0]):  # listener's side and dialer's side
        assert {k: pipe.properties[k] for k in own_credentials()} == own_credentials()


@linux_only
def test_a_listener_refuses_peers_by_their_credentials(gsp_socket: Mk) -> None:
    """docs/ipc.md's gate: a pipe-event callback closes, at ATTACHING, a peer whose uid is not
    the one allowed; the pipe never attaches and the refusal is counted."""
    allowed = {"uid": os.getuid() + 1}

    def gate(event: gsp.PipeEvent, pipe: gsp.Pipe) -> None:
        if event is gsp.PipeEvent.ATTACHING and pipe.properties.get("peer_uid") != allowed["uid"]:
            pipe.close()

    a, b = gsp_socket("pull", recv_timeout=WAIT), gsp_socket("push", send_timeout=WAIT, reconnect_time=0.05)
    a.on_pipe_event(gate)
    b.dial(a.listen(abstract_url()).url)
    wait_for(lambda: a.stats["pipes_rejected"] >= 1, what="a refusal")
    assert a.stats["pipes_attached"] == 0
    allowed["uid"] = os.getuid()  # now the dialer's next try is let in
    wait_for(lambda: a.pipes, what="the allowed peer")
    b.send(b"let in")
    assert a.recv() == b"let in"


# -- the socket file's mode, owner and group ---------------------------------------------------------
def test_ipc_file_owner_and_group(gsp_socket: Mk, ipc_dir: str) -> None:
    path = f"{ipc_dir}/owned.sock"
    uid, gid = os.getuid(), os.getgid()
    a = gsp_socket("pair")
    a.listen(f"ipc://{path}", ipc_file_owner=uid, ipc_file_group=gid, ipc_file_mode=0o660)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, gid, 0o660)


def test_ipc_file_given_away_or_refused(gsp_socket: Mk, ipc_dir: str) -> None:
    """Giving the file to another user takes the privilege to: root may, anyone else gets
    gsp.BadOption and no file is left behind."""
    path = f"{ipc_dir}/other.sock"
    other = 4242 if os.getuid() != 4242 else 4243
    a = gsp_socket("pair")
    if os.geteuid() == 0:
        a.listen(f"ipc://{path}", ipc_file_owner=other, ipc_file_group=other)
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == (other, other)
    else:
        with pytest.raises(gsp.BadOption, match="ipc_file_owner"):
            a.listen(f"ipc://{path}", ipc_file_owner=other)
        assert not os.path.exists(path) and a.listeners == []


@pytest.mark.parametrize("name,bad", [
    ("ipc_file_owner", -1), ("ipc_file_owner", "root"), ("ipc_file_owner", True),
    ("ipc_file_owner", 2**32 - 1), ("ipc_file_group", -2), ("ipc_file_group", 1.0),
    ("ipc_file_mode", 0o10000), ("ipc_file_mode", -1),
])
def test_bad_file_options_are_refused(name: str, bad: object) -> None:
    with pytest.raises(gsp.BadOption, match=name):
        gsp.socket("pair", **{name: bad})


def test_file_options_are_for_listeners(gsp_socket: Mk, ipc_dir: str) -> None:
    a = gsp_socket("pair")
    with pytest.raises(gsp.BadOption, match="ipc_file_owner"):
        a.dial(f"ipc://{ipc_dir}/x.sock", background=True, ipc_file_owner=os.getuid())
