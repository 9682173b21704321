"""A mangos-style transport conformance suite.

Describe a transport once as a :class:`Tran` (how to make a URL to listen on, a dialable URL
nothing listens on, how to open a plain socket to a listener, which URLs are garbage and which
options it owns); then each check below is one line per transport::

    def test_tcp_send_recv(tcp): conformance.send_recv(tcp)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket as stdsocket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import gevent
import pytest
from gevent import socket as gsocket

import gsp

WAIT = 5.0  #: the longest any single wait in a check may take before the check fails


# -- helpers shared with the core tests ---------------------------------------------------------

def wait_for(pred: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> None:
    """Poll ``pred`` (yielding to other greenlets) until it is true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        gevent.sleep(0.005)


def read_to_eof(sock: Any, timeout: float = WAIT) -> bytes:
    """Everything a plain socket receives until the peer closes (a reset counts as closed)."""
    got = bytearray()
    with gevent.Timeout(timeout, AssertionError(f"peer did not close within {timeout} s")):
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return bytes(got)
            if not chunk:
                return bytes(got)
            got += chunk


def raw_connect(url: str) -> Any:
    """A plain gevent socket connected to a tcp:// or ipc:// listener (reads time out)."""
    if url.startswith("ipc://"):
        s = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        s.settimeout(WAIT)
        try:
            s.connect(url[len("ipc://"):])
        except BaseException:
            s.close()
            raise
        return s
    parts = urlsplit(url)
    return gsocket.create_connection((parts.hostname, parts.port), timeout=WAIT)


@contextlib.contextmanager
def sockets(*specs: tuple[str, dict[str, Any]]) -> Iterator[list[gsp.Socket]]:
    """Open several gsp sockets, closing every one afterwards whatever happens."""
    socks: list[gsp.Socket] = []
    try:
        for proto, opts in specs:
            socks.append(gsp.socket(proto, **opts))
        yield socks
    finally:
        for s in socks:
            s.close()


def connected(listener_sock: gsp.Socket, url: str, dialer_sock: gsp.Socket, **dial_opts: Any
              ) -> gsp.Dialer:
    """Dial ``url`` and wait until both sides have the pipe attached."""
    n_l, n_d = len(listener_sock.pipes), len(dialer_sock.pipes)
    d = dialer_sock.dial(url, block=True, **dial_opts)
    wait_for(lambda: len(listener_sock.pipes) > n_l and len(dialer_sock.pipes) > n_d,
             what="both ends of the new pipe to attach")
    return d


# -- transport descriptions ---------------------------------------------------------------------

@dataclass
class Tran:
    scheme: str
    #: A fresh URL to listen on.
    url: Callable[[], str]
    #: A context manager giving a dialable URL on which nothing listens.
    dead_url: Callable[[], contextlib.AbstractContextManager[str]]
    #: Stream transports: open a plain (gevent) socket to a bound listener URL.
    connect_raw: Callable[[str], Any] | None = None
    #: URLs of this scheme that listen() and dial() must refuse with gsp.InvalidAddress.
    bad_urls: tuple[Any, ...] = ()
    #: This transport's own options: name -> (a good value, a bad value).
    options: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def tcp(host: str = "127.0.0.1") -> Tran:
    family = stdsocket.AF_INET6 if ":" in host else stdsocket.AF_INET
    h = f"[{host}]" if ":" in host else host

    @contextlib.contextmanager
    def dead_url() -> Iterator[str]:
        s = stdsocket.socket(family, stdsocket.SOCK_STREAM)
        try:  # bound but never listening: connects are refused, and nobody else takes the port
            s.bind((host, 0))
            yield f"tcp://{h}:{s.getsockname()[1]}"
        finally:
            s.close()

    return Tran(
        "tcp", lambda: f"tcp://{h}:0", dead_url, raw_connect,
        bad_urls=("tcp://", f"tcp://{h}", f"tcp://{h}:", f"tcp://{h}:99999", f"tcp://{h}:x",
                  f"tcp://{h}:5?q=1", f"tcp://{h}:5#frag", "tcp://u:p@127.0.0.1:5",
                  "tcp://[::1:5", "tcp://a b:5", "tcp:/127.0.0.1:5"),
        options={"tcp_nodelay": (False, "yes"), "tcp_keepalive": (False, 1)},
    )


def ipc(directory: str) -> Tran:
    n = itertools.count()

    def url() -> str:
        return f"ipc://{directory}/c{next(n)}.sock"

    return Tran(
        "ipc", url, lambda: contextlib.nullcontext(url()), raw_connect,
        bad_urls=("ipc://", "ipc:///" + "x" * 120, "ipc:///tmp/a\x00b"),
        options={"ipc_file_mode": (0o600, 0o10000)},
    )


_inproc_names = itertools.count()


def inproc() -> Tran:
    def url() -> str:
        return f"inproc://conformance-{os.getpid()}-{next(_inproc_names)}"

    return Tran("inproc", url, lambda: contextlib.nullcontext(url()), None,
                bad_urls=("inproc://",))


# -- the checks ----------------------------------------------------------------------------------

def scheme(t: Tran) -> None:
    assert t.scheme in gsp.transports()
    with sockets(("pair", {})) as [s]:
        lst = s.listen(t.url())
        assert lst.url.startswith(f"{t.scheme}://")
        assert s.listeners == [lst]


def listen_and_accept(t: Tran) -> None:
    with sockets(("pull", {}), ("push", {}), ("push", {}), ("push", {})) as [srv, *clients]:
        lst = srv.listen(t.url())
        dialers = [connected(srv, lst.url, c) for c in clients]
        wait_for(lambda: len(srv.pipes) == 3, what="three accepted pipes")
        assert all(p.listener is lst and p.dialer is None for p in srv.pipes)
        for c, d in zip(clients, dialers):
            assert [p.dialer for p in c.pipes] == [d]
            assert c.dialers == [d] and d.pipe is c.pipes[0]


def duplicate_listen(t: Tran) -> None:
    with sockets(("pair", {}), ("pair", {})) as [a, b]:
        lst = a.listen(t.url())
        with pytest.raises(gsp.AddressInUse):
            b.listen(lst.url)
        with pytest.raises(gsp.AddressInUse):
            a.listen(lst.url)
        assert b.listeners == [] and a.listeners == [lst]
        lst.close()
        lst.close()  # idempotent
        assert a.listeners == []
        b.listen(lst.url)  # the address was released


def connection_refused(t: Tran) -> None:
    with sockets(("pair", {"reconnect_time": 5.0})) as [s], t.dead_url() as url:
        with pytest.raises(gsp.ConnectionRefused):
            s.dial(url, block=True)
        assert s.dialers == []
        d = s.dial(url)  # block=None: the failure is kept and redialing continues in background
        assert isinstance(d.last_error, gsp.ConnectionRefused)
        assert s.dialers == [d] and s.pipes == []


def bad_handshake(t: Tran) -> None:
    garbage = [b"GARBAGE!", b"\x00SP\x01\x00\x50\x00\x00", b"\x00SP\x00\x00\x50\x00\x01",
               b"\x00SP\x00\x00\x10\x00\x00"]  # bad magic, version, reserved, protocol (pair)
    events: list[gsp.PipeEvent] = []
    with sockets(("pull", {}), ("push", {}), ("pair", {})) as [srv, push, pair]:
        srv.on_pipe_event(lambda ev, p: events.append(ev))
        lst = srv.listen(t.url())
        if t.connect_raw is not None:
            for g in garbage:
                raw = t.connect_raw(lst.url)
                try:
                    raw.sendall(g)
                    got = read_to_eof(raw)
                finally:
                    raw.close()
                assert got in (b"", b"\x00SP\x00\x00\x51\x00\x00"), got  # at most its own header
        with pytest.raises(gsp.WrongProtocol):
            pair.dial(lst.url, block=True)
        assert events == [] and srv.pipes == []
        connected(srv, lst.url, push)  # and the listener still serves good peers
        push.send(b"after garbage")
        srv.recv_timeout = WAIT
        assert srv.recv() == b"after garbage"


def send_recv(t: Tran) -> None:
    with sockets(("pair", {"recv_timeout": WAIT, "send_timeout": WAIT}),
                 ("pair", {"recv_timeout": WAIT, "send_timeout": WAIT})) as [a, b]:
        lst = a.listen(t.url())
        connected(a, lst.url, b)
        for i in range(50):
            b.send(b"ping %d" % i)
            assert a.recv() == b"ping %d" % i
            a.send(b"pong %d" % i)
            assert b.recv() == b"pong %d" % i
        a.send(bytearray(b"ba"))
        b.send(memoryview(b"xmv")[1:])
        assert (b.recv(), a.recv()) == (b"ba", b"mv")


def anonymous_port(t: Tran) -> None:
    url = t.url()
    assert url.endswith(":0")
    with sockets(("pair", {"recv_timeout": WAIT}), ("pair", {})) as [a, b]:
        l1, l2 = a.listen(url), b.listen(url)
        p1, p2 = urlsplit(l1.url).port, urlsplit(l2.url).port
        assert p1 and p2 and p1 != p2
        l2.close()
        connected(a, l1.url, b)
        b.send(b"anon")
        assert a.recv() == b"anon"


def max_recv_size(t: Tran) -> None:
    detached: list[gsp.Pipe] = []
    fast = {"reconnect_time": 0.05, "send_timeout": WAIT}
    with sockets(("pull", {"recv_timeout": WAIT}), ("push", fast), ("push", fast)) as socks:
        srv, a, b = socks
        srv.on_pipe_event(lambda ev, p: ev is gsp.PipeEvent.DETACHED and detached.append(p))
        lst = srv.listen(t.url(), recv_max_size=1000)
        da = connected(srv, lst.url, a)
        connected(srv, lst.url, b)
        a.send(b"a" * 1000)  # exactly the limit is fine
        assert srv.recv() == b"a" * 1000
        a.send(b"A" * 1001)
        wait_for(lambda: detached, what="the oversize pipe to detach")
        assert len(detached) == 1 and isinstance(detached[0].error, gsp.MessageTooLarge)
        assert detached[0] not in srv.pipes
        b.send(b"b" * 1000)  # the other pipe is unaffected
        assert srv.recv() == b"b" * 1000
        wait_for(lambda: da.pipe is not None and len(srv.pipes) == 2, what="a to redial")
        a.send(b"again")
        assert srv.recv() == b"again"
        assert len(detached) == 1


SIZES = [0, 1, 2, 7, 8, 9, 100, 1023, 1024, 4096, 65535, 65536, 65537, 262143, 262144,
         262145, 1 << 19, (1 << 20) - 1, 1 << 20]


def message_sizes(t: Tran) -> None:
    msgs = [os.urandom(n) for n in SIZES]
    with sockets(("pair", {"recv_timeout": WAIT, "send_timeout": WAIT}),
                 ("pair", {"recv_timeout": WAIT, "send_timeout": WAIT})) as [a, b]:
        lst = a.listen(t.url())
        connected(a, lst.url, b)
        for m in msgs:  # one at a time, both ways
            b.send(m)
            got = a.recv()
            assert got == m, f"{len(m)}-byte message came back as {len(got)} bytes"
            a.send(got)
            assert b.recv() == m
        for m in msgs:  # back to back: frames split and joined arbitrarily by the stream
            b.send(m)
        for m in msgs:
            assert a.recv() == m


def pipe_addresses(t: Tran) -> None:
    with sockets(("pair", {}), ("pair", {})) as [a, b]:
        lst = a.listen(t.url())
        connected(a, lst.url, b)
        lp, dp = a.pipes[0], b.pipes[0]
        for addr in (lp.local_address, lp.remote_address, dp.local_address, dp.remote_address):
            assert isinstance(addr, str) and addr.startswith(f"{t.scheme}://"), addr
        assert lp.local_address == dp.remote_address == lst.url
        assert lp.remote_address == dp.local_address


def listener_closed(t: Tran) -> None:
    opts = {"recv_timeout": WAIT, "send_timeout": WAIT}
    with sockets(("pair", opts), ("pair", opts), ("pair", {})) as [a, b, c]:
        lst = a.listen(t.url())
        connected(a, lst.url, b)
        lst.close()
        assert a.listeners == []
        with pytest.raises(gsp.ConnectionRefused):
            c.dial(lst.url, block=True)
        b.send(b"still up")  # the pipe made before the close carries on
        assert a.recv() == b"still up"
        a.send(b"both ways")
        assert b.recv() == b"both ways"


def bad_urls(t: Tran) -> None:
    common = ("", t.scheme, f"{t.scheme}:", "://x", "not a url", "nosuch://x", 42, None)
    with sockets(("pair", {})) as [s]:
        for url in t.bad_urls + common:
            for op in (s.listen, s.dial):
                with pytest.raises(gsp.InvalidAddress):
                    op(url)
        assert s.listeners == [] and s.dialers == []
        with pytest.raises(gsp.InvalidAddress) as info:
            s.dial("nosuch://x")
        for name in gsp.transports():
            assert name in str(info.value)


def bad_options(t: Tran) -> None:
    foreign = {n for tr in gsp.registry.transports.values() for n in tr.options} - set(t.options)
    bad_common = {"recv_max_size": -1, "reconnect_time": 0, "reconnect_time_max": -1,
                  "handshake_timeout": 0}
    socket_only = ("recv_timeout", "send_timeout", "linger", "send_buffer")
    with sockets(("pair", {}), ("pair", {})) as [a, b]:
        url = t.url()
        for name, value in bad_common.items():
            with pytest.raises(gsp.BadOption):
                a.listen(url, **{name: value})
            with pytest.raises(gsp.BadOption):
                a.dial(url, **{name: value})
        for name in (*socket_only, *sorted(foreign), "no_such_option"):
            with pytest.raises(gsp.BadOption):
                a.listen(url, **{name: 1})
            with pytest.raises(gsp.BadOption):
                a.dial(url, **{name: 1})
        for name, (good, bad) in t.options.items():
            with pytest.raises(gsp.BadOption):
                a.listen(url, **{name: bad})
            with pytest.raises(gsp.BadOption):
                gsp.socket("pair", **{name: bad})
            a.set_option(name, good)
            with pytest.raises(gsp.BadOption):
                a.set_option(name, bad)
            assert a.get_option(name) == good
        assert a.listeners == [] and a.dialers == []
        good = {n: g for n, (g, _) in t.options.items()}
        lst = a.listen(url, recv_max_size=10, **good)  # nothing was bound by the failures
        connected(a, lst.url, b, reconnect_time=0.5, **good)
