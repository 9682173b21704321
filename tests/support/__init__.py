"""Helpers gsp's own tests share. What a plugin author would want too lives in :mod:`gsp.testing`
(wait_for, connected, RawPeer, read_to_eof, free_url, the suites); fixtures come from gsp's
pytest plugin (gsp_socket, gsp_spawn, gsp_free_url, gsp_leak_check) or tests/conftest.py."""

from __future__ import annotations

import contextlib
import re
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote_to_bytes, urlsplit

import gevent
import pytest
from gevent import socket as gsocket
from hypothesis import HealthCheck, settings

import gsp
from gsp.protocol import ProtocolSpec
from gsp.testing import WAIT, connected, free_url, wait_for
from gsp.transport import StreamConnection, Transport, wire

TCP = "tcp://127.0.0.1:0"

#: The SP handshakes of a push (0x50) and a pull (0x51) socket, as raw peers send and expect them.
HDR_PUSH, HDR_PULL = b"\x00SP\x00\x00\x50\x00\x00", b"\x00SP\x00\x00\x51\x00\x00"
#: The SP handshake of a REQ socket (0x30): a wrong-protocol peer for most listeners.
HDR_REQ = b"\x00SP\x00\x00\x30\x00\x00"

#: Hypothesis settings of gsp.transport.wire's property tests (test_wire_handshake.py, test_wire_frames.py).
wire_settings = settings(max_examples=200, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextlib.contextmanager
def plugged(plugin: object) -> Iterator[None]:
    """Within the block, ``plugin`` (an object with ``@gsp.hookimpl`` methods) is registered as
    a third party's is, then removed."""
    gsp.register_plugin(plugin)
    try:
        yield
    finally:
        gsp.unregister_plugin(plugin)


def plugged_transports(*transports: Transport) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``transports`` are installed as a third party's plugin provides them
    (``gsp_transports``), then removed."""

    class Plugin:
        @gsp.hookimpl
        def gsp_transports(self) -> list[Transport]:
            return list(transports)

    return plugged(Plugin())


def plugged_protocols(*specs: ProtocolSpec) -> contextlib.AbstractContextManager[None]:
    """Within the block, the protocols of ``specs`` are installed as a third party's plugin
    provides them (``gsp_protocols``), then removed."""

    class Plugin:
        @gsp.hookimpl
        def gsp_protocols(self) -> list[ProtocolSpec]:
            return list(specs)

    return plugged(Plugin())


def u32(n: int) -> bytes:
    """A 32-bit big-endian word: a pipe id, request id or backtrace entry."""
    return n.to_bytes(4, "big")


#: A pair1/star hop-count header.
hops = u32

#: ttl values every protocol with a hop limit refuses (mangos' TTLZero, TTLNegative, TTLTooBig,
#: TTLNotInt), for ProtocolSuite.options.
BAD_TTL = (0, -1, 256, "8", 2.0, 8.0, None, True)


def raw_connect(url: str) -> Any:
    """A plain gevent socket connected to a tcp://, ipc://, unix:// or abstract:// listener
    (reads time out)."""
    scheme, _, rest = url.partition("://")
    if scheme in ("ipc", "unix", "abstract"):
        s = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        s.settimeout(WAIT)
        try:
            s.connect(b"\0" + unquote_to_bytes(rest) if scheme == "abstract" else rest)
        except BaseException:
            s.close()
            raise
        return s
    parts = urlsplit(url)
    return gsocket.create_connection((parts.hostname, parts.port), timeout=WAIT)


def connect(server: gsp.Socket, client: gsp.Socket, url: str = TCP) -> str:
    """``server`` listens on ``url``, ``client`` dials; returns the bound URL once both sides
    have the new pipe."""
    bound = server.listen(url).url
    connected(server, bound, client)
    return bound


def inproc_url() -> str:
    return free_url("inproc")


def silent(s: gsp.Socket, wait: float = 0.1) -> bool:
    """True if nothing arrives on ``s`` within ``wait`` seconds (sets its recv_timeout)."""
    s.recv_timeout = wait
    try:
        s.recv()
    except gsp.Timeout:
        return True
    return False


def recv_until_timeout(sock: Any) -> list[bytes]:
    """Every message ``sock`` receives until a recv times out (its recv_timeout, or a survey's
    end)."""
    out = []
    while True:
        try:
            out.append(sock.recv())
        except gsp.Timeout:
            return out


def echo_forever(sock: Any) -> None:
    """Reply to every request with its own body until the socket (or context) closes."""
    try:
        while True:
            m = sock.recv_msg()
            sock.send_msg(m)
    except gsp.Closed:
        pass


def backlog_pair(gsp_socket: Callable[..., gsp.Socket], proto: str, peer: str,
                 **opts: Any) -> tuple[gsp.Socket, gsp.Socket]:
    """A responder and a raw requester that never reads its replies, over inproc, so the
    responder's pipe queue fills up (back-pressure)."""
    s = gsp_socket(proto, send_buffer=1, recv_timeout=2, linger=0, **opts)
    p = gsp_socket(peer, raw=True, recv_buffer=1, linger=0)
    connect(s, p, inproc_url())
    return s, p


def close_wakes(sock: gsp.Socket, blocked: list[gevent.Greenlet]) -> None:
    """Every greenlet in ``blocked`` is still waiting; closing ``sock`` wakes each with Closed."""
    gevent.sleep(0.02)
    assert not any(g.ready() for g in blocked)
    sock.close()
    for g in blocked:
        with pytest.raises(gsp.Closed):
            g.get(timeout=2)


def recv_across_resize(rx: gsp.Socket, tx: gsp.Socket, size: int, body: bytes) -> None:
    """A receive posted before ``rx.recv_buffer`` is resized to ``size`` gets the ``body`` sent
    after the resize (nng's recv_qlen resize tests): the waiting receiver survives the swap."""
    g = gevent.spawn(rx.recv)
    gevent.sleep(0.02)
    rx.recv_buffer = size
    tx.send(body)
    assert g.get(timeout=WAIT) == body


def spawn_all(fn: Any, args: list[tuple[Any, ...]]) -> list[gevent.Greenlet]:
    return [gevent.spawn(fn, *a) for a in args]


def pub_sub(st: ExitStack, n_subs: int = 1, pub_opts: dict | None = None,
            sub_opts: dict | None = None, sub_raw: bool = False,
            pub_raw: bool = False) -> tuple[gsp.Socket, list[gsp.Socket]]:
    """A PUB listening on tcp and ``n_subs`` SUBs dialed in, every pipe attached."""
    pub = st.enter_context(gsp.socket("pub", raw=pub_raw, **(pub_opts or {})))
    url = pub.listen(TCP).url
    subs = []
    for _ in range(n_subs):
        opts = {"recv_timeout": WAIT} | (sub_opts or {})
        s = st.enter_context(gsp.socket("sub", raw=sub_raw, **opts))
        s.dial(url, fail_fast=True)
        subs.append(s)
    wait_for(lambda: len(pub.pipes) == n_subs, what="every subscriber attached")
    return pub, subs


def stop_server(proc: Any) -> int:
    """SIGTERM a server subprocess (if still running), wait up to 10 s (then kill it and fail),
    close its pipes; its exit status."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code: int = proc.wait(timeout=10)
    except Exception:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    return code


def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``path`` from 127.0.0.1:``port`` (HTTP/1.1, connection closed after): (status, body)."""
    s = gsocket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{extra}\r\n"
                  .encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


#: A REP in a process of its own: ``gsp.socket("rep", listen=argv[1], **json(argv[2]))``,
#: answering each request with its pid. It prints its listener's URL, then serves until its
#: stdin closes (see :func:`who_processes`).
WHO_SERVER = """
import json, os, sys, gevent, gsp
rep = gsp.socket("rep", listen=sys.argv[1], **json.loads(sys.argv[2]))
def serve():
    while True:
        rep.recv()
        rep.send(str(os.getpid()).encode())
gevent.spawn(serve)
print(rep.listeners[0].url, flush=True)
gevent.get_hub().threadpool.spawn(sys.stdin.read).get()
rep.close()
"""


@contextlib.contextmanager
def who_processes() -> Iterator[Callable[..., tuple[Any, str]]]:
    """``start(url, pass_fds=(), **options)`` runs a :data:`WHO_SERVER` and returns its process
    and its listener's URL; every one started is stopped (stdin closed, killed if need be)
    when the block ends."""
    import json
    import sys

    from gevent import subprocess

    procs: list[Any] = []

    def start(url: str, pass_fds: tuple[int, ...] = (), **options: Any) -> tuple[Any, str]:
        proc = subprocess.Popen([sys.executable, "-c", WHO_SERVER, url, json.dumps(options)],
                                pass_fds=pass_fds, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(proc)
        with gevent.Timeout(30, AssertionError("the server process did not start")):
            line = proc.stdout.readline().decode().strip()
        assert "://" in line, line
        return proc, line

    try:
        yield start
    finally:
        for proc in procs:
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=WAIT)
            proc.stdout.close()


def ask_who(url: str) -> bytes:
    """One request from a new REQ to ``url``: who answers (a :data:`WHO_SERVER`'s pid)."""
    with gsp.socket("req", dial=url, recv_timeout=WAIT, send_timeout=WAIT) as req:
        req.send(b"who")
        reply: bytes = req.recv()
    return reply


def until_answered_by(url: str, want: int) -> set[bytes]:
    """Ask ``url`` who answers, each time from a new REQ (the kernel picks a listener by a hash
    of the connection's addresses, or the first accept it wakes), until ``want`` different ones
    did; their answers."""
    seen: set[bytes] = set()
    with gevent.Timeout(WAIT * 3, AssertionError(f"only {seen} answered")):
        while len(seen) < want:
            seen.add(ask_who(url))
    return seen


def unused_fd() -> int:
    """A descriptor number nothing in this process has open (well above every open one: a number
    just closed may be taken again at once, by gevent's hub under monkey patching)."""
    import os

    return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 64


@contextlib.contextmanager
def handshaken(cls: type[StreamConnection]) -> Iterator[tuple[StreamConnection, StreamConnection]]:
    """A ``cls`` connection and a plain one over a socketpair, past the pair handshake."""
    spec = gsp.registry.protocol("pair")
    x, y = gsocket.socketpair()
    a = cls(x, wire.TCP, 0, "a", "b")
    b = StreamConnection(y, wire.TCP, 0, "b", "a")
    try:
        gevent.joinall([gevent.spawn(c.handshake, spec, WAIT) for c in (a, b)], raise_error=True)
        yield a, b
    finally:
        a.close()
        b.close()


class CountingRaw:
    """A socket (a plain one's non-blocking socket, or the gevent one), counting the recv calls
    made on it (``recvs``) and recording the size each asked for (``sizes``); anything else
    goes to the socket."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.sizes: list[int] = []

    @property
    def recvs(self) -> int:
        return len(self.sizes)

    def recv(self, n: int) -> bytes:
        self.sizes.append(n)
        data: bytes = self.raw.recv(n)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


#: A request id (high bit set: a backtrace's last word), for raw REQ peers' requests to a rep.
RID = (0x80000001).to_bytes(4, "big")


def counting_lent_reads(monkeypatch: pytest.MonkeyPatch, *socks: gsp.Socket) -> list[object]:
    """Record each lent read (a pipe handed to a waiting greenlet) of the pipes ``socks`` have
    now, from now on. A lent read is ``Pipe._read_lent``, which reads through the pipe's
    ``_recv_lent`` (once, or twice when it reads on) within one turn of the loop; so that each
    is counted once, a pipe read that way counts again only from the next turn. (The pipe's
    attribute, not ``Pipe._read_lent`` itself: the compiled build's ``Pipe`` is a class whose
    methods cannot be replaced.)"""
    lent: list[object] = []
    for pipe in [p for s in socks for p in s.pipes]:
        real = pipe._recv_lent
        counted: list[bool] = []

        def recv(wake: Callable[[], None], pipe: Any = pipe, real: Any = real,
                 counted: list[bool] = counted) -> Any:
            if not counted:  # the first read of this lent read
                lent.append(pipe)
                counted.append(True)
                gevent.get_hub().loop.run_callback(counted.clear)  # once this turn ends
            return real(wake)

        monkeypatch.setattr(pipe, "_recv_lent", recv)
    return lent


#: The repository's root (docs/, examples/, README.md).
ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/support/ is two below it)
TESTS = ROOT / "tests"
#: A marker line, then a fenced block: ``<!-- snippet: path -->`` or
#: ``<!-- snippet-exempt: why -->``
BLOCK = re.compile(r"(?:<!-- (snippet|snippet-exempt): ([^>]*?) -->\n)?```(\w*)\n(.*?)\n```", re.S)


_PACE: list[float] = []

#: The seconds :func:`pace`'s fixed piece of work takes on a quiet machine of the project's kind
#: (2 cores, CPython 3.11, nothing else running: 7.3-7.6 ms, rounded up).
PACE_QUIET = 0.008


def _work() -> float:
    t0 = time.perf_counter()
    n = 0
    for i in range(200_000):
        n += i & 7
    gevent.sleep(0)  # and one turn of the loop
    return time.perf_counter() - t0


def pace() -> float:
    """How much slower than a quiet machine this one runs now: at least 1.

    A fixed piece of Python work, timed now (the median of five): on a loaded machine, or beside
    a CPU hog, it takes longer, and so does everything a test waits for. Measured once per
    process, the first time it is asked for."""
    if not _PACE:
        samples = sorted(_work() for _ in range(5))
        _PACE.append(max(1.0, samples[2] / PACE_QUIET))
    return _PACE[0]


def scaled(seconds: float) -> float:
    """A time bound that holds on a quiet machine, scaled by how slow this one runs now
    (:func:`pace`). For an assertion on elapsed time that no documented promise backs."""
    return seconds * pace()
