"""Big bodies over ipc: a Unix socket's readiness ignores SO_RCVLOWAT, so a big body comes in
pieces, and the stream connection gathers them in one reused buffer
(``StreamConnection._gather_body``). The body arrives whole and intact however it is split, a
read interrupted while gathering loses nothing, the buffer goes once messages are small again,
and none is made for a body the peer has sent less than half of."""

from __future__ import annotations

import fcntl
import os
import socket as stdsocket
import sys
import termios
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import gevent
import pytest

import gsp
from gsp.testing import WAIT, RawPeer, wait_for
from gsp.transport import wire
from tests.support import RID, CountingRaw, counting_lent_reads, handshaken

pytestmark = pytest.mark.core

KiB = 1024
PUSH, REQ = 0x50, 0x30


def frame(peer: RawPeer, body: bytes) -> bytes:
    return b"".join(wire.encode_frames(peer.framing, [(b"", body)]))


# The internals this file reads, in one place: a pipe's connection and its gather buffer.
def conn_of(pipe: gsp.Pipe) -> Any:
    """The pipe's stream connection."""
    return pipe._conn


def gathered(conn: Any) -> tuple[int | None, int]:
    """The size of the connection's gather buffer (None: it has none), and the bytes of the
    body under way gathered in it."""
    buf = conn._body_buf
    return (None if buf is None else len(buf)), conn._body_got


def roomy(peer: RawPeer) -> RawPeer:
    """Let the peer put ~400 KiB in flight at once (so a test's first piece lands whole)."""
    peer.sock.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_SNDBUF, 1 << 20)
    return peer


@contextmanager
def pull_after_a_big_message(gsp_socket: Callable[..., gsp.Socket], ipc_dir: str, name: str,
                             size: int) -> Iterator[tuple[gsp.Socket, RawPeer, Any]]:
    """A pull over ipc, a raw push peer, and the pull's connection, after one ``size``-byte
    message (read as it came: a first big message makes the reader take the next one's prefix
    alone, and then its body)."""
    pull = gsp_socket("pull", recv_timeout=WAIT)
    url = pull.listen(f"ipc://{ipc_dir}/{name}.sock").url
    with roomy(RawPeer(url, PUSH)) as peer:
        wait_for(lambda: pull.pipes, what="the pipe")
        first = os.urandom(size)
        peer.sock.sendall(frame(peer, first))
        assert pull.recv() == first
        yield pull, peer, conn_of(pull.pipes[0])


def test_a_big_body_in_pieces_arrives_whole_and_the_buffer_goes_with_small_messages(
        gsp_socket: Callable[..., gsp.Socket], ipc_dir: str) -> None:
    with pull_after_a_big_message(gsp_socket, ipc_dir, "gather", 300 * KiB) as (pull, peer,
                                                                                 conn):
        for size in (300 * KiB, 200 * KiB, 320 * KiB):
            body = os.urandom(size)
            data = frame(peer, body)
            cut = len(data) * 3 // 5
            peer.sock.sendall(data[:cut])  # a first piece of more than half of it
            gevent.spawn_later(0.05, peer.sock.sendall, data[cut:])
            assert pull.recv() == body
            buf, _ = gathered(conn)
            assert buf is not None and buf >= size  # gathered
        peer.send(b"small")
        assert pull.recv() == b"small"
        assert gathered(conn) == (None, 0)


def test_a_lent_read_interrupted_while_gathering_loses_nothing(
        gsp_socket: Callable[..., gsp.Socket],
        ipc_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = gsp_socket("rep", recv_timeout=WAIT)
    url = rep.listen(f"ipc://{ipc_dir}/gather-lent.sock").url
    with roomy(RawPeer(url, REQ)) as peer:
        wait_for(lambda: rep.pipes and rep.pipes[0]._reader is None, what="the pipe, parked")
        conn = conn_of(rep.pipes[0])
        first = RID + os.urandom(300 * KiB)
        peer.sock.sendall(frame(peer, first))
        assert rep.recv() == first[4:]
        rep.send(b"ok")
        assert peer.recv() == RID + b"ok"
        lent = counting_lent_reads(monkeypatch, rep)
        request = RID + os.urandom(300 * KiB)
        data = frame(peer, request)
        cut = len(data) * 3 // 5

        def pieces() -> None:
            peer.sock.sendall(data[:cut])  # read by the greenlet waiting in rep.recv,
            # which gives up after one loop turn: a reader goes on gathering
            wait_for(lambda: gathered(conn)[1] > 0, what="part of the body gathered")
            assert gathered(conn)[1] < len(request)
            peer.sock.sendall(data[cut:])

        g = gevent.spawn_later(0.05, pieces)
        try:
            assert rep.recv() == request[4:]
            g.get(timeout=WAIT)
        finally:
            g.kill()
        assert lent  # the waiting greenlet did start the read
        rep.send(b"done")
        assert peer.recv() == RID + b"done"


def test_no_buffer_for_a_body_the_peer_sent_less_than_half_of(
        gsp_socket: Callable[..., gsp.Socket], ipc_dir: str) -> None:
    with pull_after_a_big_message(gsp_socket, ipc_dir, "gather-half", 64 * KiB) as (pull, peer,
                                                                                    conn):
        data = frame(peer, os.urandom(1 << 20))  # announces 1 MiB, sends 30 % of it
        peer.sock.sendall(data[:len(data) * 3 // 10])
        wait_for(lambda: conn.decoder.buffered >= len(data) * 3 // 10, what="what came")
        assert gathered(conn) == (None, 0)  # held: what came, no more


def test_big_bodies_in_the_kernel_are_read_whole_with_one_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Big messages back to back: the end of one that came with another's start is read alone,
    so that from then on each read takes a prefix, then a whole body (the message itself, no
    join); one FIONREAD count serves every body it covers (what was read since is taken off)."""
    from gsp.transport import stream

    # FIONREAD counts, seen at fcntl.ioctl: stream._readable itself is called directly in the
    # compiled build, where replacing the module's function changes nothing
    counts: list[int] = []
    real = fcntl.ioctl

    def ioctl(fd: int, request: int, arg: Any = 0, mutate: bool = True) -> Any:
        got = real(fd, request, arg, mutate)
        if request == termios.FIONREAD:
            counts.append(int.from_bytes(got, sys.byteorder))
        return got

    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    with handshaken(stream.StreamConnection) as (a, b):
        for s in (a.sock, b.sock):
            s.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_SNDBUF, 1 << 20)
            s.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_RCVBUF, 1 << 20)
        bodies = [os.urandom(64 * KiB) for _ in range(5)]
        a.sock.sendall(b"".join(wire.encode_frames(wire.TCP, [(b"", body) for body in bodies])))
        sock = b.sock = CountingRaw(b.sock)
        got = [m for _ in bodies for m in b.recv_messages()]
        assert got == bodies
        assert sock.sizes == [64 * KiB, 64 * KiB, 16] + [8, 64 * KiB] * 3
        assert len(counts) == 1
