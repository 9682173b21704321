"""The conformance suites: classes whose ``test_*`` methods pytest collects in a subclass.

Every check uses only gsp's public socket API and the transport plugin interface, so it holds
for any transport or protocol plugin. Each test is bounded in time (every wait has a limit of
:data:`WAIT` seconds) and runs under the ``gsp_leak_check`` fixture.
"""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Sequence

import gevent
import pytest
from gevent.event import Event

import gsp

from ._helpers import WAIT, connected, ping_pong, registry, wait_for

__all__ = ["TransportSuite", "ProtocolSuite", "read_to_eof"]

MiB = 1 << 20
#: Message sizes of :meth:`TransportSuite.test_message_sizes` at the default ``recv_max_size``
#: (1 MiB): the edges of 1-byte, 8-byte, 64 KiB, 256 KiB and 1 MiB buffers.
SIZES = (0, 1, 2, 7, 8, 9, 100, 1023, 1024, 4096, 65535, 65536, 65537, 262143, 262144,
         262145, 1 << 19, MiB - 1, MiB)
BIG = os.urandom(65536)  # fills buffers fast, on transports that compress too


def read_to_eof(sock: Any, timeout: float = WAIT) -> bytes:
    """Everything a plain (gevent) socket receives until the peer closes; a reset counts as a
    close. Fails if the peer has not closed within ``timeout`` seconds."""
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


def _caught(fn: Callable[..., Any], *args: Any) -> BaseException | None:
    """Run ``fn``; return what it raised (None if it returned). Spawned, this keeps expected
    errors out of gevent's "greenlet failed" reports."""
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None


def _outcome(g: gevent.Greenlet, what: str) -> BaseException | None:
    """What a finished :func:`_caught` greenlet caught."""
    assert g.ready(), f"{what} is still running"
    result: BaseException | None = g.get()
    return result


def _detached(ev: gsp.PipeEvent, pipe: gsp.Pipe, into: list[gsp.Pipe]) -> None:
    if ev is gsp.PipeEvent.DETACHED:
        into.append(pipe)


class _Kit:
    """Fixture plumbing shared by both suites."""

    _make: Callable[..., gsp.Socket]
    _free_url: Callable[[str], str]
    _spawn: Callable[..., gevent.Greenlet]

    @pytest.fixture(autouse=True)
    def _gsp_kit(self, gsp_leak_check: None, gsp_socket: Callable[..., gsp.Socket],
                 gsp_free_url: Callable[[str], str],
                 gsp_spawn: Callable[..., gevent.Greenlet]) -> None:
        self._make = gsp_socket
        self._free_url = gsp_free_url
        self._spawn = gsp_spawn
        self._check_description()

    def _check_description(self) -> None:
        """Fail early, and clearly, on a subclass that leaves out what the suite needs."""

    def socket(self, protocol: str, *, raw: bool = False, **options: Any) -> gsp.Socket:
        """A socket closed at teardown (before the leak check)."""
        return self._make(protocol, raw=raw, **options)

    def spawn(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
        """A greenlet killed at teardown if still running."""
        return self._spawn(fn, *args, **kwargs)


# ================================ transports ====================================================

class TransportSuite(_Kit):
    """Conformance checks for a transport (URL scheme). Subclass it in a test module::

        from gsp.testing import TransportSuite

        class TestZlibTransport(TransportSuite):
            scheme = "tcp+zlib"
            bad_urls = ("tcp+zlib://nohost",)
            options = {"zlib_level": (9, 10)}

            def listen_url(self) -> str:
                return "tcp+zlib://127.0.0.1:0"

            anonymous_url = listen_url

    Only :attr:`scheme` is required when ``gsp_free_url(scheme)`` can make URLs for it (tcp,
    tls+tcp, ipc, inproc, or a transport with a ``free_url(scheme, directory)`` method).
    """

    #: The URL scheme under test.
    scheme: ClassVar[str] = ""
    #: URLs of this scheme that ``listen`` and ``dial`` must refuse with :class:`gsp.InvalidAddress`
    #: (a few scheme-independent ones are always tried too).
    bad_urls: ClassVar[tuple[Any, ...]] = ()
    #: The transport's own options: name -> (a good value, a bad value).
    options: ClassVar[dict[str, tuple[Any, Any]]] = {}
    #: What dialing a listener of a protocol that is not the dialer's peer raises.
    wrong_protocol_error: ClassVar[type[BaseException]] = gsp.WrongProtocol
    #: How many dialers :meth:`test_many_pipes` connects to one listener.
    many_pipes: ClassVar[int] = 50
    #: Largest message :meth:`test_message_sizes` sends with ``recv_max_size=0`` (no limit).
    unlimited_size: ClassVar[int] = 2 * MiB + 1

    def _check_description(self) -> None:
        assert self.scheme, f"{type(self).__name__} must set scheme, the URL scheme under test"

    # -- what a subclass may override ------------------------------------------------------------
    def listen_url(self) -> str:
        """A fresh URL to listen on (default: ``gsp_free_url(scheme)``)."""
        return self._free_url(self.scheme)

    def anonymous_url(self) -> str | None:
        """A URL that binds a new address on every listen (like port 0), or None if the
        transport has no such thing."""
        return None

    def listen_options(self) -> dict[str, Any]:
        """Options every listen of the suite gets (e.g. a TLS certificate)."""
        return {}

    def dial_options(self) -> dict[str, Any]:
        """Options every dial of the suite gets (e.g. a CA to trust)."""
        return {}

    def raw_connect(self, url: str) -> Any:
        """For a transport that puts SP's 8-byte header straight on a byte stream: a plain
        connected socket to ``url`` (with ``recv``/``sendall``/``close``), used to send garbage
        headers. None (the default) leaves that part of :meth:`test_wrong_protocol_refused` out."""
        return None

    def unused_url(self) -> str:
        """A dialable URL nothing listens on, which may be listened on later (default: a URL a
        listener bound and released)."""
        probe = self.socket("pair")
        try:
            return self.listen(probe).url
        finally:
            probe.close()

    # -- helpers for the checks ------------------------------------------------------------------
    def listen(self, sock: gsp.Socket, url: str | None = None, **options: Any) -> gsp.Listener:
        return sock.listen(self.listen_url() if url is None else url,
                           **{**self.listen_options(), **options})

    def dial(self, sock: gsp.Socket, url: str, **options: Any) -> gsp.Dialer:
        return sock.dial(url, **{**self.dial_options(), **options})

    def connect(self, listener_sock: gsp.Socket, url: str, dialer_sock: gsp.Socket,
                **options: Any) -> gsp.Dialer:
        """Dial and wait until both ends have the pipe."""
        return connected(listener_sock, url, dialer_sock, **{**self.dial_options(), **options})

    def transport_options(self, protocol: str, extra: dict[str, Any]) -> dict[str, Any]:
        """The option mapping the core would hand the transport for an endpoint of a
        ``protocol`` socket with ``extra`` set (read from a socket's option snapshot)."""
        probe = gsp.socket(protocol, **extra)
        try:
            return dict(probe.options)
        finally:
            probe.close()

    # -- the checks --------------------------------------------------------------------------------
    def test_scheme_is_installed(self) -> None:
        assert self.scheme in gsp.transports()
        s = self.socket("pair")
        lst = self.listen(s)
        assert lst.url.startswith(f"{self.scheme}://")
        assert s.listeners == [lst]

    def test_listen_dial_close(self) -> None:
        srv = self.socket("pull")
        clients = [self.socket("push") for _ in range(3)]
        lst = self.listen(srv)
        dialers = [self.connect(srv, lst.url, c) for c in clients]
        wait_for(lambda: len(srv.pipes) == 3, what="three accepted pipes")
        assert all(p.listener is lst and p.dialer is None for p in srv.pipes)
        for c, d in zip(clients, dialers):
            assert [p.dialer for p in c.pipes] == [d]
            assert c.dialers == [d] and d.pipe is c.pipes[0]
        dialers[0].close()  # a dialer's close ends its pipe at both ends
        assert clients[0].dialers == [] and clients[0].pipes == []
        wait_for(lambda: len(srv.pipes) == 2, what="the listener to see the dialer go")
        clients[1].close()  # and so does its socket's close
        wait_for(lambda: len(srv.pipes) == 1, what="the listener to see the socket go")
        srv.close()  # and the listening socket's
        wait_for(lambda: not clients[2].pipes, what="the dialer to see the listener go")

    def test_send_recv(self) -> None:
        opts: dict[str, Any] = {"recv_timeout": WAIT, "send_timeout": WAIT}
        a, b = self.socket("pair", **opts), self.socket("pair", **opts)
        lst = self.listen(a)
        self.connect(a, lst.url, b)
        ping_pong(a, b)

    def _sizes_both_ways(self, sizes: Sequence[int], **opts: Any) -> None:
        msgs = [os.urandom(n) for n in sizes]
        a = self.socket("pair", recv_timeout=WAIT, send_timeout=WAIT, **opts)
        b = self.socket("pair", recv_timeout=WAIT, send_timeout=WAIT, **opts)
        lst = self.listen(a)
        self.connect(a, lst.url, b)
        for m in msgs:  # one at a time, both ways
            b.send(m)
            got = a.recv()
            assert got == m, f"a {len(m)}-byte message came back as {len(got)} bytes"
            a.send(got)
            assert b.recv() == m
        for m in msgs:  # back to back: frames split and joined arbitrarily by a stream
            b.send(m)
        for m in msgs:
            assert a.recv() == m
        a.close()
        b.close()

    def test_message_sizes(self) -> None:
        self._sizes_both_ways(SIZES)  # up to exactly the default limit, 1 MiB
        self._sizes_both_ways([MiB + 1, self.unlimited_size], recv_max_size=0)

    def test_oversize_message_closes_only_its_pipe(self) -> None:
        detached: list[gsp.Pipe] = []
        fast: dict[str, Any] = {"reconnect_time": 0.05, "send_timeout": WAIT}
        srv = self.socket("pull", recv_timeout=WAIT)
        a, b = self.socket("push", **fast), self.socket("push", **fast)
        srv.on_pipe_event(lambda ev, p: _detached(ev, p, detached))
        lst = self.listen(srv, recv_max_size=1000)
        da = self.connect(srv, lst.url, a)
        self.connect(srv, lst.url, b)
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

    def test_oversize_message_at_the_dialer(self) -> None:
        detached: list[gsp.Pipe] = []
        push = self.socket("push", send_timeout=WAIT)
        pull = self.socket("pull", recv_timeout=WAIT, reconnect_time=5)
        pull.on_pipe_event(lambda ev, p: _detached(ev, p, detached))
        lst = self.listen(push)
        self.connect(push, lst.url, pull, recv_max_size=10)
        push.send(b"x" * 10)
        assert pull.recv() == b"x" * 10
        push.send(b"x" * 11)
        wait_for(lambda: detached, what="the dialer's pipe to close")
        assert isinstance(detached[0].error, gsp.MessageTooLarge) and detached[0].dialer

    def test_many_pipes(self) -> None:
        n = self.many_pipes
        srv = self.socket("pull", recv_timeout=WAIT)
        lst = self.listen(srv)
        clients = [self.socket("push", send_timeout=WAIT) for _ in range(n)]
        dials = [self.spawn(self.dial, c, lst.url, block=True) for c in clients]
        gevent.joinall(dials, timeout=WAIT, raise_error=True)
        assert all(g.successful() for g in dials)
        wait_for(lambda: len(srv.pipes) == n and all(c.pipes for c in clients),
                 what=f"{n} pipes")
        assert len({p.id for p in srv.pipes}) == n
        for i, c in enumerate(clients):
            c.send(b"%d" % i)
        assert sorted(int(srv.recv()) for _ in clients) == list(range(n))
        for c in clients:
            c.close()
        wait_for(lambda: not srv.pipes, what="every pipe to go")

    def _stalled_connection(self, url: str) -> Any:
        """A connection made with the transport's own dialer that never handshakes."""
        transport = registry().transport_for(url)
        td = transport.dialer(url, self.transport_options("push", self.dial_options()))
        try:
            with gevent.Timeout(WAIT, AssertionError(f"the transport's dial of {url} hung")):
                return td.dial()
        finally:
            td.close()

    def test_handshake_timeout(self) -> None:
        hto = 0.25
        srv = self.socket("pull", recv_timeout=WAIT)
        lst = self.listen(srv, handshake_timeout=hto)
        stalled = self._stalled_connection(lst.url)
        try:
            good = self.socket("push", send_timeout=WAIT)
            self.connect(srv, lst.url, good)  # a stalled peer delays nobody
            good.send(b"past the stalled peer")
            assert srv.recv() == b"past the stalled peer"
            assert len(srv.pipes) == 1
            gevent.sleep(3 * hto)  # the listener's handshake limit passes for the stalled one
            # It was dropped: a handshake begun now fails, or leaves a connection at its end.
            spec = registry().protocol("push")
            msgs: Any = None
            try:
                with gevent.Timeout(WAIT, AssertionError(
                        "a connection past its handshake_timeout neither closed nor answered")):
                    stalled.handshake(spec, None)
                    msgs = stalled.recv_messages()
            except gsp.GspError:
                pass
            assert msgs is None, f"the listener kept a connection that missed its handshake " \
                                 f"limit, and delivered {msgs!r} on it"
            assert len(srv.pipes) == 1
        finally:
            stalled.close()

    def test_handshake_timeout_at_the_dialer(self) -> None:
        url = self.listen_url()
        transport = registry().transport_for(url)
        tl = transport.listener(url, self.transport_options("pull", self.listen_options()))
        tl.bind()
        accepted: list[Any] = []

        def accept_and_stall() -> None:
            while True:
                accepted.append(tl.accept())

        g = self.spawn(accept_and_stall)
        try:
            push = self.socket("push", handshake_timeout=0.25, reconnect_time=5)
            with pytest.raises(gsp.Timeout):
                self.dial(push, tl.url, block=True)
            assert push.dialers == [] and push.pipes == []
        finally:
            g.kill()
            tl.close()
            for conn in accepted:
                conn.close()

    def test_wrong_protocol_refused(self) -> None:
        events: list[gsp.PipeEvent] = []
        srv = self.socket("pull", recv_timeout=WAIT)
        push, pair = self.socket("push", send_timeout=WAIT), self.socket("pair")
        srv.on_pipe_event(lambda ev, p: events.append(ev))
        lst = self.listen(srv)
        pull_header = b"\x00SP\x00" + registry().protocol("pull").number.to_bytes(2, "big") + \
            b"\x00\x00"
        garbage = [b"GARBAGE!", b"\x00SP\x01\x00\x50\x00\x00", b"\x00SP\x00\x00\x50\x00\x01",
                   b"\x00SP\x00\x00\x10\x00\x00"]  # bad magic, version, reserved, protocol (pair)
        for data in garbage:
            raw = self.raw_connect(lst.url)
            if raw is None:
                break
            try:
                raw.sendall(data)
                got = read_to_eof(raw)
            finally:
                raw.close()
            assert got in (b"", pull_header), got  # at most its own header, then closed
        with pytest.raises(self.wrong_protocol_error):
            self.dial(pair, lst.url, block=True)
        assert issubclass(self.wrong_protocol_error, gsp.HandshakeError)
        assert events == [] and srv.pipes == [] and pair.pipes == [] and pair.dialers == []
        self.connect(srv, lst.url, push)  # and the listener still serves good peers
        push.send(b"after the wrong peers")
        assert srv.recv() == b"after the wrong peers"

    def test_close_while_blocked(self) -> None:
        # A receive blocked on a socket with a live pipe: close wakes it with Closed.
        a, b = self.socket("pair"), self.socket("pair")
        self.connect(a, self.listen(a).url, b)
        recv = self.spawn(_caught, a.recv)
        gevent.sleep(0.05)
        assert not recv.ready(), "recv returned with nothing sent"
        a.close()
        recv.join(WAIT)
        assert isinstance(_outcome(recv, "the blocked recv"), gsp.Closed)
        wait_for(lambda: not b.pipes, what="the peer to see the pipe go")
        # A send blocked by back-pressure (the peer never reads): close wakes it with Closed.
        c = self.socket("pair", recv_buffer=1, linger=0)
        d = self.socket("pair", send_buffer=1, send_timeout=0.05, linger=0)
        self.connect(c, self.listen(c).url, d)
        for _ in range(5000):
            try:
                d.send(BIG)
            except gsp.Timeout:
                break
        else:
            raise AssertionError("5000 sends of 64 KiB to a peer that never reads never blocked")
        d.send_timeout = None
        send = self.spawn(_caught, d.send, BIG)
        gevent.sleep(0.05)
        assert not send.ready(), "a send past back-pressure returned"
        d.close()
        send.join(WAIT)
        assert isinstance(_outcome(send, "the blocked send"), gsp.Closed)
        c.recv_timeout = 0.1

        def drained_and_gone() -> bool:
            try:
                c.recv()
            except gsp.Timeout:
                pass
            return not c.pipes

        wait_for(drained_and_gone, what="the reader to drain the pipe and see it go")

    def test_address_in_use(self) -> None:
        a, b = self.socket("pair"), self.socket("pair")
        lst = self.listen(a)
        with pytest.raises(gsp.AddressInUse):
            self.listen(b, lst.url)
        with pytest.raises(gsp.AddressInUse):
            self.listen(a, lst.url)
        assert b.listeners == [] and a.listeners == [lst]
        lst.close()
        lst.close()  # idempotent
        assert a.listeners == []
        self.listen(b, lst.url)  # the address was released

    def test_bound_url(self) -> None:
        anon = self.anonymous_url()
        a = self.socket("pair", recv_timeout=WAIT)
        b = self.socket("pair", send_timeout=WAIT)
        if anon is None:  # a named address is bound as named
            url = self.listen_url()
            lst = self.listen(a, url)
            assert lst.url == url
        else:  # an anonymous one becomes a new concrete address on each listen
            l1, l2 = self.listen(a, anon), self.listen(b, anon)
            assert l1.url != anon and l2.url != anon and l1.url != l2.url
            l2.close()
            lst = l1
        self.connect(a, lst.url, b)
        b.send(b"bound")
        assert a.recv() == b"bound"

    def test_connection_refused(self) -> None:
        url = self.unused_url()
        s = self.socket("pair", reconnect_time=5.0)
        with pytest.raises(gsp.ConnectionRefused):
            self.dial(s, url, block=True)
        assert s.dialers == []
        d = self.dial(s, url)  # block=None: the failure is kept, redialing goes on in background
        assert isinstance(d.last_error, gsp.ConnectionRefused)
        assert s.dialers == [d] and s.pipes == []

    @pytest.mark.parametrize("block", [None, False])
    def test_dial_before_listen(self, block: bool | None) -> None:
        url = self.unused_url()
        fast: dict[str, Any] = {"reconnect_time": 0.05, "reconnect_time_max": 0.2}
        push = self.socket("push", send_timeout=WAIT, **fast)
        pull = self.socket("pull", recv_timeout=WAIT)
        d = self.dial(push, url, block=block)
        gevent.sleep(0.3)
        if block is None:
            assert isinstance(d.last_error, gsp.ConnectionRefused)
        assert push.pipes == []
        self.listen(pull, url)
        wait_for(lambda: push.pipes, what="the early dialer to connect")
        push.send(b"late")
        assert pull.recv() == b"late"

    def test_bad_urls(self) -> None:
        common = ("", self.scheme, f"{self.scheme}:", "://x", "not a url", "nosuch://x", 42, None)
        s = self.socket("pair")
        for url in (*self.bad_urls, *common):
            with pytest.raises(gsp.InvalidAddress):
                s.listen(url, **self.listen_options())
            with pytest.raises(gsp.InvalidAddress):
                s.dial(url, **self.dial_options())
        assert s.listeners == [] and s.dialers == []
        with pytest.raises(gsp.InvalidAddress) as info:
            s.dial("nosuch://x")
        for name in gsp.transports():
            assert name in str(info.value)

    def test_bad_options(self) -> None:
        url = self.listen_url()
        own = set(registry().transport_for(url).options)
        foreign = {n for t in registry().transports.values() for n in t.options} - own
        bad_common = {"recv_max_size": -1, "reconnect_time": 0, "reconnect_time_max": -1,
                      "handshake_timeout": 0}
        socket_only = ("recv_timeout", "send_timeout", "linger", "send_buffer")
        a, b = self.socket("pair"), self.socket("pair")
        for name, value in bad_common.items():
            with pytest.raises(gsp.BadOption):
                self.listen(a, url, **{name: value})
            with pytest.raises(gsp.BadOption):
                self.dial(a, url, **{name: value})
        for name in (*socket_only, *sorted(foreign), "no_such_option"):
            with pytest.raises(gsp.BadOption):
                self.listen(a, url, **{name: 1})
            with pytest.raises(gsp.BadOption):
                self.dial(a, url, **{name: 1})
        for name, (good, bad) in self.options.items():
            assert name in own, f"{name} is not an option of the {self.scheme} transport"
            with pytest.raises(gsp.BadOption):
                self.listen(a, url, **{name: bad})
            with pytest.raises(gsp.BadOption):
                self.dial(a, url, **{name: bad})
            with pytest.raises(gsp.BadOption):
                gsp.socket("pair", **{name: bad})
            a.set_option(name, good)
            with pytest.raises(gsp.BadOption):
                a.set_option(name, bad)
            assert a.get_option(name) == good
        assert a.listeners == [] and a.dialers == []
        good_values = {n: g for n, (g, _) in self.options.items()}
        lst = self.listen(a, url, recv_max_size=10, **good_values)  # nothing was bound before
        self.connect(a, lst.url, b, reconnect_time=0.5, **good_values)

    def test_listener_close(self) -> None:
        opts: dict[str, Any] = {"recv_timeout": WAIT, "send_timeout": WAIT}
        a, b, c = self.socket("pair", **opts), self.socket("pair", **opts), self.socket("pair")
        lst = self.listen(a)
        self.connect(a, lst.url, b)
        lst.close()
        assert a.listeners == []
        with pytest.raises(gsp.ConnectionRefused):
            self.dial(c, lst.url, block=True)
        b.send(b"still up")  # the pipe made before the close carries on
        assert a.recv() == b"still up"
        a.send(b"both ways")
        assert b.recv() == b"both ways"

    def test_pipe_addresses(self) -> None:
        a, b = self.socket("pair"), self.socket("pair")
        lst = self.listen(a)
        self.connect(a, lst.url, b)
        lp, dp = a.pipes[0], b.pipes[0]
        for addr in (lp.local_address, lp.remote_address, dp.local_address, dp.remote_address):
            assert isinstance(addr, str) and addr.startswith(f"{self.scheme}://"), addr
        assert lp.remote_address == dp.local_address
        assert lp.local_address == dp.remote_address
        # The listener's address is its URL (which may add a path to it).
        assert lst.url == lp.local_address or lst.url.startswith(lp.local_address + "/")


# ================================ protocols =====================================================

COMMON_GOOD: dict[str, Any] = {"recv_timeout": 0.5, "send_timeout": 0.25, "recv_buffer": 7, "send_buffer": 3,
               "best_effort": True}
COMMON_BAD: dict[str, list[Any]] = {"recv_timeout": [-1, "1", float("nan")], "send_timeout": [-0.5, True],
              "recv_buffer": [0, -1, 1.5], "send_buffer": [0, "2"], "best_effort": [1, "yes"]}
_STATE = (gsp.ProtocolStateError, gsp.NotSupported)


class ProtocolSuite(_Kit):
    """Conformance checks for a protocol, cooked and raw. Subclass it in a test module::

        from gsp.testing import ProtocolSuite

        class TestStarProtocol(ProtocolSuite):
            protocol = "star"
            peer = "star"
            raw_header = bytes(4)          # a hop count
            options = {"ttl": (8, [1, 255], [0, 256, "8"])}

    The class attributes describe what the protocol does; every check follows from them.
    """

    #: The protocol under test, and the protocol its peers speak.
    protocol: ClassVar[str] = ""
    peer: ClassVar[str] = ""
    #: The wire numbers, checked when given.
    number: ClassVar[int | None] = None
    peer_number: ClassVar[int | None] = None
    #: Whether the protocol sends / receives at all (else NotSupported).
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
    #: A cooked socket sends only in reply to what it received (rep, respondent).
    replies: ClassVar[bool] = False
    #: A cooked socket receives only answers to what it sent: a receive before any send raises
    #: ProtocolStateError (req, surveyor).
    asks: ClassVar[bool] = False
    #: With no peer, a send waits for ``send_timeout`` (True), returns at once (False), or
    #: either (None: not checked). Raw sends are checked too, with :attr:`raw_header`.
    send_blocks: ClassVar[bool | None] = None
    #: Cooked sockets offer ``open_context`` (raw ones never do).
    contexts: ClassVar[bool] = False
    #: The header a raw socket puts on a message it starts itself (not a reply).
    raw_header: ClassVar[bytes] = b""
    #: The protocol's own options: name -> (default, good values, bad values).
    options: ClassVar[dict[str, tuple[Any, Sequence[Any], Sequence[Any]]]] = {}

    def _check_description(self) -> None:
        assert self.protocol and self.peer, \
            f"{type(self).__name__} must set protocol and peer (the protocol names)"

    # -- what a subclass may override ------------------------------------------------------------
    def url(self) -> str:
        """A URL to listen on for checks that need a peer (default: tcp on 127.0.0.1)."""
        return "tcp://127.0.0.1:0"

    def prepare(self, sock: gsp.Socket) -> None:
        """Make a new cooked or raw socket of either protocol ready to receive (default: a
        cooked ``sub`` subscribes to everything)."""
        if sock.protocol == "sub" and not sock.raw:
            sock.subscribe(b"")

    # -- helpers -----------------------------------------------------------------------------------
    def open(self, protocol: str, *, raw: bool = False, **options: Any) -> gsp.Socket:
        s = self.socket(protocol, raw=raw, **options)
        self.prepare(s)
        return s

    def linked(self, this_raw: bool = False, this_listens: bool = True,
               **options: Any) -> tuple[gsp.Socket, gsp.Socket]:
        """A socket of the protocol and a cooked peer with one pipe between them."""
        opts = {"recv_timeout": WAIT, "send_timeout": WAIT, **options}
        this = self.open(self.protocol, raw=this_raw, **opts)
        peer = self.open(self.peer, **opts)
        if this_listens:
            connected(this, this.listen(self.url()).url, peer)
        else:
            connected(peer, peer.listen(self.url()).url, this)
        return this, peer

    def exchange(self, this: gsp.Socket, peer: gsp.Socket, tag: bytes = b"") -> None:
        """Messages cross the pipe in every direction the protocol allows."""
        if this.raw:
            self._raw_exchange(this, peer, tag)
        elif self.replies:
            peer.send(b"request" + tag)
            assert this.recv() == b"request" + tag
            this.send(b"reply" + tag)
            assert peer.recv() == b"reply" + tag
        elif self.can_send:
            this.send(b"ping" + tag)
            assert peer.recv() == b"ping" + tag
            if self.can_recv:
                peer.send(b"pong" + tag)
                assert this.recv() == b"pong" + tag
        else:
            peer.send(b"ping" + tag)
            assert this.recv() == b"ping" + tag

    def _raw_exchange(self, this: gsp.Socket, peer: gsp.Socket, tag: bytes) -> None:
        if self.replies:
            peer.send(b"request" + tag)
            m = this.recv_msg()
            assert m.body == b"request" + tag and m.pipe in this.pipes
            this.send_msg(gsp.Message(b"reply" + tag, m.header))
            assert peer.recv() == b"reply" + tag
        elif self.can_send:
            this.send_msg(gsp.Message(b"ping" + tag, self.raw_header))
            assert peer.recv() == b"ping" + tag
            if self.can_recv:
                peer.send(b"pong" + tag)
                m = this.recv_msg()
                assert m.body == b"pong" + tag and m.pipe in this.pipes
        else:
            peer.send(b"ping" + tag)
            m = this.recv_msg()
            assert m.body == b"ping" + tag and m.pipe in this.pipes

    def _send_any(self, s: Any) -> None:
        if getattr(s, "raw", False):
            s.send_msg(gsp.Message(b"x", self.raw_header))
        else:
            s.send(b"x")

    # -- the checks --------------------------------------------------------------------------------
    @pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
    def test_identity(self, raw: bool) -> None:
        assert self.protocol in gsp.protocols(), f"{self.protocol} is not installed"
        assert self.peer in gsp.protocols(), f"its peer {self.peer} is not installed"
        s = self.socket(self.protocol, raw=raw)
        assert (s.protocol, s.raw) == (self.protocol, raw)
        assert s.spec.peer_name == self.peer
        peer = registry().protocol(self.peer)
        assert (peer.name, peer.number, peer.peer_name) == (self.peer, s.spec.peer_number,
                                                            self.protocol)
        assert peer.peer_number == s.spec.number
        if self.number is not None:
            assert s.spec.number == self.number
        if self.peer_number is not None:
            assert s.spec.peer_number == self.peer_number

    @pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
    def test_operations_not_offered(self, raw: bool) -> None:
        s = self.socket(self.protocol, raw=raw)
        if not self.can_send:
            with pytest.raises(gsp.NotSupported):
                s.send(b"x")
            with pytest.raises(gsp.NotSupported):
                s.send_msg(gsp.Message(b"x"))
        if not self.can_recv:
            with pytest.raises(gsp.NotSupported):
                s.recv()
            with pytest.raises(gsp.NotSupported):
                s.recv_msg()
        if self.contexts and not raw:
            ctx = s.open_context()
            assert not ctx.closed
            ctx.close()
            assert ctx.closed
        else:
            with pytest.raises(gsp.NotSupported):
                s.open_context()
        with pytest.raises(TypeError):
            s.send_msg(b"not a message")  # type: ignore[arg-type]

    @pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
    def test_closed(self, raw: bool) -> None:
        """Close wakes calls blocked on the socket (and its contexts) with Closed; after close,
        everything raises Closed; close is idempotent."""
        s = self.socket(self.protocol, raw=raw)
        ctx = s.open_context() if self.contexts and not raw else None
        blocked: list[tuple[str, gevent.Greenlet]] = []
        if self.can_recv:
            blocked.append(("recv", self.spawn(_caught, s.recv_msg if raw else s.recv)))
            if ctx is not None:
                blocked.append(("context recv", self.spawn(_caught, ctx.recv)))
        if self.can_send:
            blocked.append(("send", self.spawn(_caught, self._send_any, s)))
            if ctx is not None:
                blocked.append(("context send", self.spawn(_caught, ctx.send, b"x")))
        gevent.sleep(0.05)
        done_before = {what: g.ready() for what, g in blocked}
        for what, g in blocked:  # what could not block returned, or failed on protocol state
            if g.ready():
                exc = _outcome(g, what)
                assert exc is None or isinstance(exc, _STATE), (what, exc)
        s.close()
        s.close()
        assert s.closed
        for what, g in blocked:
            g.join(WAIT)
            if not done_before[what]:
                exc = _outcome(g, what)
                assert isinstance(exc, gsp.Closed), (what, exc)
        ops: list[tuple[str, Callable[[], Any]]] = [
            ("send", lambda: s.send(b"x")), ("recv", s.recv),
            ("send_msg", lambda: s.send_msg(gsp.Message(b"x", self.raw_header))),
            ("recv_msg", s.recv_msg), ("listen", lambda: s.listen(self.url())),
            ("dial", lambda: s.dial("inproc://gsp-testing-closed")),
            ("open_context", s.open_context), ("subscribe", lambda: s.subscribe(b"")),
            ("unsubscribe", lambda: s.unsubscribe(b"")),
        ]
        if ctx is not None:
            ops += [("context send", lambda: ctx.send(b"x")), ("context recv", ctx.recv)]
        for what, op in ops:
            try:
                op()
            except gsp.Closed:
                continue
            except Exception as exc:
                raise AssertionError(f"{what} on a closed socket raised {exc!r}, not Closed") \
                    from exc
            raise AssertionError(f"{what} on a closed socket did not raise Closed")
        assert s.pipes == [] and s.listeners == [] and s.dialers == []

    def test_context_close(self) -> None:
        """Closing one context (idempotent) wakes only its blocked calls with Closed; after
        it every call on it raises Closed, and the socket and its other contexts carry on."""
        if not self.contexts:
            return  # nothing to close: test_operations_not_offered checks open_context fails
        this, peer = self.linked()
        ctx, other = this.open_context(), this.open_context()
        calls: list[tuple[str, Callable[..., Any]]] = []
        if self.can_recv:
            calls.append(("recv", ctx.recv))
        if self.can_send and not self.replies:
            calls.append(("send", lambda: ctx.send(b"x")))
        blocked = [(what, self.spawn(_caught, call)) for what, call in calls[:1]]
        # A recv that waits (one that asks first fails at once, so it proves nothing here).
        waits = self.can_recv and not self.asks
        bystander = self.spawn(_caught, other.recv) if waits else None
        gevent.sleep(0.05)
        with ctx:  # leaving the block closes it ...
            pass
        ctx.close()  # ... and closing again is harmless
        assert ctx.closed and not other.closed and not this.closed
        for what, g in blocked:
            g.join(WAIT)
            exc = _outcome(g, f"the context's blocked {what}")
            assert exc is None or isinstance(exc, (gsp.Closed, *_STATE)), (what, exc)
        for what, call in calls + [("send_msg", lambda: ctx.send_msg(gsp.Message(b"x"))),
                                   ("recv_msg", ctx.recv_msg)]:
            try:
                call()
            except gsp.Closed:
                continue
            raise AssertionError(f"{what} on a closed context did not raise Closed")
        if bystander is not None:
            gevent.sleep(0.05)
            assert not bystander.ready(), "closing one context woke another's recv"
            other.close()
            bystander.join(WAIT)
            assert isinstance(_outcome(bystander, "the other context's recv"), gsp.Closed)
        self.exchange(this, peer, b" after a context closed")

    @pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
    def test_timeouts_without_peers(self, raw: bool) -> None:
        s = self.socket(self.protocol, raw=raw, recv_timeout=0.02, send_timeout=0.02)
        guard = AssertionError(f"a call with a 0.02 s timeout still ran after {WAIT} s")
        if self.can_recv:
            with gevent.Timeout(WAIT, guard):
                with pytest.raises(gsp.ProtocolStateError if self.asks and not raw
                                   else gsp.Timeout):
                    s.recv_msg() if raw else s.recv()
        if self.can_send and self.send_blocks is not None and not (self.replies and not raw):
            with gevent.Timeout(WAIT, guard):
                if self.send_blocks:
                    with pytest.raises(gsp.Timeout):
                        self._send_any(s)
                else:
                    for _ in range(100):  # dropped, never waits
                        self._send_any(s)

    @pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
    def test_options(self, raw: bool) -> None:
        s = self.socket(self.protocol, raw=raw)
        with pytest.raises(gsp.BadOption):
            s.set_option("no_such_option", 1)
        with pytest.raises(gsp.BadOption):
            s.get_option("no_such_option")
        with pytest.raises(gsp.BadOption):
            gsp.socket(self.protocol, raw=raw, no_such_option=1)
        with pytest.raises(AttributeError):
            _ = s.no_such_option
        with pytest.raises(gsp.BadOption):
            s.recv_timeot = 1  # a typo must not silently become a plain attribute
        assert s.recv_timeout is None
        mine = registry().protocol(self.protocol).options
        for name, (default, _, _) in self.options.items():
            assert name in mine, f"{name} is not an option of {self.protocol}"
            assert s.get_option(name) == default and s.options[name] == default
        # Another protocol's option is not this one's.
        general = set(s.options) - set(mine)
        for spec in registry().protocols.values():
            for name, opt in spec.options.items():
                if name in mine or name in general:
                    continue
                with pytest.raises(gsp.BadOption):
                    s.set_option(name, opt.default)
                with pytest.raises(gsp.BadOption):
                    gsp.socket(self.protocol, raw=raw, **{name: opt.default})
        goods: dict[str, list[Any]] = {n: [v] for n, v in COMMON_GOOD.items()}
        goods.update({n: list(g) for n, (_, g, _) in self.options.items()})
        bads: dict[str, list[Any]] = {**COMMON_BAD,
                                      **{n: list(b) for n, (_, _, b) in self.options.items()}}
        for name, values in goods.items():
            for v in values:
                s.set_option(name, v)
                assert s.get_option(name) == v and getattr(s, name) == v, (name, v)
                with gsp.socket(self.protocol, raw=raw, **{name: v}) as t:
                    assert t.get_option(name) == v and t.options[name] == v, (name, v)
        for name, values in bads.items():
            before = s.get_option(name)
            for v in values:
                with pytest.raises(gsp.BadOption):
                    s.set_option(name, v)
                with pytest.raises(gsp.BadOption):
                    setattr(s, name, v)
                with pytest.raises(gsp.BadOption):
                    gsp.socket(self.protocol, raw=raw, **{name: v})
            assert s.get_option(name) == before, name

    @pytest.mark.parametrize("this_listens", [True, False], ids=["listens", "dials"])
    def test_exchange(self, this_listens: bool) -> None:
        this, peer = self.linked(this_listens=this_listens)
        for i in range(3):
            self.exchange(this, peer, b" %d" % i)

    @pytest.mark.parametrize("this_listens", [True, False], ids=["listens", "dials"])
    def test_raw_exchange(self, this_listens: bool) -> None:
        this, peer = self.linked(this_raw=True, this_listens=this_listens)
        for i in range(3):
            self.exchange(this, peer, b" %d" % i)

    def test_pipe_churn(self) -> None:
        """Pipes come and go (from either end, some before they finish attaching) while
        greenlets send and receive: the socket ends with no pipes and still works."""
        this = self.open(self.protocol, recv_timeout=0.01, send_timeout=0.01, linger=0)
        url = this.listen(self.url()).url
        failures: list[BaseException] = []
        stop = Event()
        ops = ([lambda: this.send(b"churn")] if self.can_send else []) + \
            ([this.recv] if self.can_recv else [])

        def work() -> None:
            try:
                while not stop.is_set():
                    for op in ops:
                        try:
                            op()
                        except (gsp.Timeout, gsp.ProtocolStateError):
                            pass
                    gevent.sleep(0)
            except BaseException as exc:
                failures.append(exc)
                raise

        workers = [self.spawn(work) for _ in range(3)]
        for rnd in range(8):
            peers = [self.open(self.peer, reconnect_time=0.01, linger=0, send_timeout=0.01)
                     for _ in range(5)]
            for p in peers:
                p.dial(url, block=False)
            for _ in range(rnd % 3):
                gevent.sleep(0)
            peers[0].close()  # likely before it attached
            wait_for(lambda: this.pipes, what="a peer to attach")
            for pipe in this.pipes[::2]:  # some closed from this end
                pipe.close()
            for p in peers[1:]:
                if self.can_recv:  # the peer can send
                    try:
                        p.send(b"from a peer")
                    except (gsp.Timeout, gsp.ProtocolStateError, gsp.NotSupported):
                        pass
                p.close()
        wait_for(lambda: not this.pipes, what="every churned pipe to go")
        stop.set()
        gevent.joinall(workers, timeout=WAIT)
        assert failures == [] and all(g.successful() for g in workers), \
            (failures, [g.exception for g in workers])
        this.recv_timeout = this.send_timeout = WAIT
        peer = self.open(self.peer, recv_timeout=WAIT, send_timeout=WAIT)
        connected(this, url, peer)
        if self.can_recv:  # drain what the churn left queued
            this.recv_timeout = 0.05
            try:
                while True:
                    this.recv()
            except (gsp.Timeout, gsp.ProtocolStateError):
                pass
            this.recv_timeout = WAIT
        self.exchange(this, peer, b" after the churn")

    @pytest.mark.parametrize("close", ["pipe", "socket"])
    def test_close_while_a_peer_floods(self, close: str) -> None:
        """A peer sends as fast as it can into a small receive queue; closing the pipe (or the
        whole socket) mid-flood ends everything cleanly: no error, nothing left running."""
        if not self.can_recv:
            return
        this, peer = self.linked(this_raw=True, recv_buffer=4, reconnect_time=5.0)
        peer.send_timeout = 0.05  # a flood that finds no room gives up soon, not after WAIT
        stop = Event()

        def flood() -> None:
            while not stop.is_set():
                try:
                    peer.send(b"x" * 100)
                except (gsp.Timeout, gsp.ProtocolStateError):
                    pass  # no room, or a protocol whose peer speaks only when spoken to
                gevent.sleep(0)

        g = self.spawn(flood)
        gevent.sleep(0.02)
        if close == "pipe":
            this.pipes[0].close()
            wait_for(lambda: not this.pipes and not peer.pipes, what="the pipe to go")
        this.close()
        gevent.sleep(0.02)
        stop.set()
        g.join(WAIT)
        assert g.successful(), g.exception
        with pytest.raises(gsp.Closed):
            this.recv_msg()

    def test_close_while_pipes_attach(self) -> None:
        this = self.open(self.protocol)
        url = this.listen(self.url()).url
        peers = [self.open(self.peer, reconnect_time=0.01) for _ in range(10)]
        for p in peers:
            p.dial(url, block=False)
        gevent.sleep(0)  # some mid-handshake, some attached
        this.close()
        assert this.pipes == []
        wait_for(lambda: not any(p.pipes for p in peers), what="the peers to lose their pipes")
        dialer_side = self.open(self.protocol)
        for p in peers:
            dialer_side.dial(p.listen(self.url()).url, block=False)
        gevent.sleep(0)
        dialer_side.close()
        assert dialer_side.pipes == []
