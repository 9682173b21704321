"""Helpers of the kit: waiting, connecting, free URLs, a hand-driven SP peer, leak snapshots."""

from __future__ import annotations

import gc
import itertools
import os
import socket as _stdsocket
import stat
import time
import weakref
from collections import deque
from types import ModuleType
from typing import Any, Callable
from urllib.parse import urlsplit

import gevent
from gevent import socket as gsocket

import gsp
from gsp.transport import wire

__all__ = [
    "WAIT", "wait_for", "connected", "ping_pong", "free_url", "free_port", "RawPeer",
    "live_greenlets", "socket_fds", "LeakSnapshot",
]

#: The longest any single wait in the kit (and in gsp's own tests) may take before a check fails.
WAIT = 5.0


def wait_for(pred: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> None:
    """Poll ``pred`` (yielding to other greenlets) until it is true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        gevent.sleep(0.005)


def connected(listener_sock: gsp.Socket, url: str, dialer_sock: gsp.Socket,
              **dial_options: Any) -> gsp.Dialer:
    """``dialer_sock`` dials ``url`` (``fail_fast=True``); returns once both ends have the new pipe."""
    n_l, n_d = len(listener_sock.pipes), len(dialer_sock.pipes)
    d = dialer_sock.dial(url, fail_fast=True, **dial_options)
    wait_for(lambda: len(listener_sock.pipes) > n_l and len(dialer_sock.pipes) > n_d,
             what="both ends of the new pipe to attach")
    return d


def ping_pong(a: gsp.Socket, b: gsp.Socket, rounds: int = 50) -> None:
    """Messages cross a connected pair of pair sockets both ways, ``rounds`` times, then a
    ``bytearray`` and a ``memoryview`` slice (any buffer is sent as its bytes)."""
    for i in range(rounds):
        b.send(b"ping %d" % i)
        assert a.recv() == b"ping %d" % i
        a.send(b"pong %d" % i)
        assert b.recv() == b"pong %d" % i
    a.send(bytearray(b"ba"))
    b.send(memoryview(b"xmv")[1:])
    assert (b.recv(), a.recv()) == (b"ba", b"mv")


def registry() -> Any:
    """gsp's plugin registry, ``gsp.registry`` (reached through the module object: it is not
    in ``gsp.__all__``)."""
    module: ModuleType = gsp
    return module.registry


# -- free URLs ------------------------------------------------------------------------------------

_inproc_names = itertools.count()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it; another process could take it
    before you do, so prefer port 0 where you can)."""
    family = _stdsocket.AF_INET6 if ":" in host else _stdsocket.AF_INET
    s = _stdsocket.socket(family, _stdsocket.SOCK_STREAM)
    try:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
    finally:
        s.close()


def free_url(scheme: str, directory: str | None = None) -> str:
    """A URL of ``scheme`` nothing listens on yet, fixed in advance (dialable before a listener).

    tcp and tls+tcp: ``127.0.0.1`` and a free port; ipc: a new socket file name in
    ``directory`` (which the caller removes afterwards; the ``gsp_free_url`` fixture does);
    inproc: a name unique in this process. Any other scheme is asked of its transport, which
    may offer a ``free_url(scheme, directory)`` method; without one this raises LookupError.
    """
    if scheme in ("tcp", "tls+tcp"):
        return f"{scheme}://127.0.0.1:{free_port()}"
    if scheme == "inproc":
        return f"inproc://gsp-testing-{os.getpid()}-{next(_inproc_names)}"
    if scheme == "ipc":
        if directory is None:
            raise ValueError("free_url('ipc') needs a directory for the socket file "
                             "(the gsp_free_url fixture makes and removes one)")
        return f"ipc://{directory}/s{next(_inproc_names)}.sock"
    transport = registry().transport_for(f"{scheme}://")
    url = transport.free_url(scheme, directory)
    if url is None:
        raise LookupError(
            f"gsp.testing cannot make a free {scheme}:// URL: it knows tcp, tls+tcp, ipc and "
            f"inproc, and the {type(transport).__name__} transport's free_url() gives none")
    if not isinstance(url, str) or not url.startswith(f"{scheme}://"):
        raise LookupError(f"{type(transport).__name__}.free_url gave {url!r} for {scheme}://")
    return url


# -- a hand-driven SP peer ------------------------------------------------------------------------

class RawPeer:
    """A plain tcp:// or ipc:// connection to a gsp listener that handshakes as protocol number
    ``protocol`` and then trades raw frames (header and body as one ``bytes``), so a test sees
    and forges exactly what is on the wire."""

    def __init__(self, url: str, protocol: int, timeout: float = WAIT) -> None:
        if url.startswith("ipc://"):
            self.framing = wire.IPC
            self.sock = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(url[len("ipc://"):])
            except BaseException:
                self.sock.close()
                raise
        elif url.startswith("tcp://"):
            self.framing = wire.TCP
            parts = urlsplit(url)
            self.sock = gsocket.create_connection((parts.hostname, parts.port), timeout=timeout)
        else:
            raise ValueError(f"RawPeer speaks tcp:// and ipc:// only, not {url!r}")
        self._decoder = wire.FrameDecoder(self.framing)
        self._frames: deque[bytes] = deque()
        try:
            self.sock.sendall(wire.handshake(protocol))
            hs = b""
            while len(hs) < wire.HANDSHAKE_SIZE:  # exactly the handshake, not a frame behind it
                chunk = self.sock.recv(wire.HANDSHAKE_SIZE - len(hs))
                if not chunk:
                    raise EOFError("gsp closed before its handshake")
                hs += chunk
            #: The protocol number the listener announced.
            self.peer_protocol = wire.parse_handshake(hs)
        except BaseException:
            self.sock.close()
            raise

    def send(self, *frames: bytes) -> None:
        """Send each of ``frames`` as one SP message (header and body together)."""
        self.sock.sendall(b"".join(wire.encode_frames(self.framing, [(b"", f) for f in frames])))

    def recv(self, timeout: float = WAIT) -> bytes:
        """The next message gsp sent (header and body together); TimeoutError after ``timeout``."""
        self.sock.settimeout(timeout)
        while not self._frames:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("gsp closed the connection")
            self._frames.extend(self._decoder.feed(chunk))
        return self._frames.popleft()

    def assert_silent(self, wait: float = 0.2) -> None:
        """Fail if gsp sends anything within ``wait`` seconds."""
        try:
            frame = self.recv(wait)
        except TimeoutError:
            return
        raise AssertionError(f"expected nothing, got frame {frame!r}")

    def wait_closed(self, timeout: float = WAIT) -> None:
        """Read (and discard) until gsp closes the connection; TimeoutError after ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- leaks ----------------------------------------------------------------------------------------

def live_greenlets() -> list[gevent.Greenlet]:
    """gevent Greenlets that are scheduled or running (found through gc, independently of gsp)."""
    return [o for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead]


def socket_fds() -> set[tuple[int, int]]:
    """``(fd, inode)`` of every socket this process has open (Linux /proc or /dev/fd)."""
    base = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    out = set()
    for name in os.listdir(base):
        try:
            st = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        if stat.S_ISSOCK(st.st_mode):
            out.add((int(name), st.st_ino))
    return out


class LeakSnapshot:
    """What was alive when made; :meth:`check` fails on greenlets or socket fds added since.

    ``check`` waits up to ``grace`` seconds for stragglers first (closing is asynchronous in
    places, e.g. native threads of another library)."""

    def __init__(self) -> None:
        self.greenlets: weakref.WeakSet[gevent.Greenlet] = weakref.WeakSet(live_greenlets())
        self.fds = socket_fds()

    def leaks(self) -> tuple[list[gevent.Greenlet], set[tuple[int, int]]]:
        glets = [g for g in live_greenlets() if g not in self.greenlets]
        return glets, socket_fds() - self.fds

    def check(self, grace: float = 3.0) -> None:
        deadline = time.monotonic() + grace
        while True:
            gevent.sleep(0.01)
            glets, fds = self.leaks()
            if not glets and not fds or time.monotonic() > deadline:
                break
        problems = ([f"greenlets left running: {glets}"] if glets else []) + \
            ([f"socket fds left open: {sorted(fds)}"] if fds else [])
        assert not problems, "; ".join(problems)
