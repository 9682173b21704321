"""The transport conformance suite: every check of :class:`TransportSuite`."""

from __future__ import annotations

import os
from typing import Any, Sequence

import gevent
import pytest

import gsp

from ._helpers import WAIT, ping_pong, registry, wait_for
from ._kit import BIG, SIZES, MiB, _caught, _detached, _outcome, read_to_eof
from ._transport_base import TransportSuiteBase
from ._watchdog import check_connection, check_socket

__all__ = ["TransportSuite"]


class TransportSuite(TransportSuiteBase):
    __doc__ = TransportSuiteBase.__doc__

    # -- the checks --------------------------------------------------------------------------------
    def test_scheme_is_installed(self) -> None:
        assert self.scheme in gsp.transport_schemes()
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
        self._sizes_both_ways([MiB + 1, self.unlimited_size], max_recv_size=0)

    def test_oversize_message_closes_only_its_pipe(self) -> None:
        detached: list[gsp.Pipe] = []
        fast: dict[str, Any] = {"reconnect_time": 0.05, "send_timeout": WAIT}
        srv = self.socket("pull", recv_timeout=WAIT)
        a, b = self.socket("push", **fast), self.socket("push", **fast)
        srv.on_pipe_event(lambda ev, p: _detached(ev, p, detached))
        lst = self.listen(srv, max_recv_size=1000)
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
        self.connect(push, lst.url, pull, max_recv_size=10)
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
        dials = [self.spawn(self.dial, c, lst.url, fail_fast=True) for c in clients]
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
                conn = td.dial()
            try:
                check_connection(conn, f"the {self.scheme} transport's dialer's dial()")
            except AssertionError:
                getattr(conn, "close", lambda: None)()
                raise
            return conn
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
                self.dial(push, tl.url, fail_fast=True)
            assert push.dialers == [] and push.pipes == []
        finally:
            g.kill()
            tl.close()
            for conn in accepted:
                conn.close()

    def test_garbage_headers_refused(self) -> None:
        """Needs :meth:`raw_connect`: connections sending a bad SP header (magic, version,
        reserved bytes, or a protocol that is not the listener's peer) get at most the
        listener's own header, are closed, make no pipe event, and the listener serves the next
        good peer."""
        events: list[gsp.PipeEvent] = []
        srv = self.socket("pull", recv_timeout=WAIT)
        push = self.socket("push", send_timeout=WAIT)
        srv.on_pipe_event(lambda ev, p: events.append(ev))
        lst = self.listen(srv)
        pull_header = b"\x00SP\x00" + registry().protocol("pull").number.to_bytes(2, "big") + \
            b"\x00\x00"
        garbage = [b"GARBAGE!", b"\x00SP\x01\x00\x50\x00\x00", b"\x00SP\x00\x00\x50\x00\x01",
                   b"\x00SP\x00\x00\x10\x00\x00"]  # bad magic, version, reserved, protocol (pair)
        for data in garbage:
            raw = self.raw_connect(lst.url)
            if raw is None:
                self._cannot_run("test_garbage_headers_refused")
                return
            try:
                self._check_applies("test_garbage_headers_refused")
                check_socket(raw, f"{type(self).__name__}.raw_connect({lst.url!r})")
                raw.sendall(data)
                got = read_to_eof(raw)
            finally:
                raw.close()
            assert got in (b"", pull_header), got  # at most its own header, then closed
        assert events == [] and srv.pipes == []
        self.connect(srv, lst.url, push)  # and the listener still serves good peers
        push.send(b"after the garbage")
        assert srv.recv() == b"after the garbage"

    def test_wrong_protocol_refused(self) -> None:
        events: list[gsp.PipeEvent] = []
        srv = self.socket("pull", recv_timeout=WAIT)
        push, pair = self.socket("push", send_timeout=WAIT), self.socket("pair")
        srv.on_pipe_event(lambda ev, p: events.append(ev))
        lst = self.listen(srv)
        with pytest.raises(self.wrong_protocol_error):
            self.dial(pair, lst.url, fail_fast=True)
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
            self.dial(s, url, fail_fast=True)
        assert s.dialers == []
        d = self.dial(s, url)  # the default: the failure is kept, redialing goes on in background
        assert isinstance(d.last_error, gsp.ConnectionRefused)
        assert s.dialers == [d] and s.pipes == []

    @pytest.mark.parametrize("background", [False, True])
    def test_dial_before_listen(self, background: bool) -> None:
        url = self.unused_url()
        fast: dict[str, Any] = {"reconnect_time": 0.05, "max_reconnect_time": 0.2}
        push = self.socket("push", send_timeout=WAIT, **fast)
        pull = self.socket("pull", recv_timeout=WAIT)
        d = self.dial(push, url, background=background)
        gevent.sleep(0.3)
        if not background:
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
        for name in gsp.transport_schemes():
            assert name in str(info.value)

    def test_bad_options(self) -> None:
        url = self.listen_url()
        own = set(registry().transport_for(url).options)
        foreign = {n for t in registry().transports.values() for n in t.options} - own
        bad_common = {"max_recv_size": -1, "reconnect_time": 0, "max_reconnect_time": -1,
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
        # An option that acts on one kind of endpoint only (Option.scope) is refused by the other.
        specs = registry().transport_for(url).options
        for name, spec in specs.items():
            if spec.scope is not None:
                wrong = self.dial if spec.scope == "listen" else self.listen
                with pytest.raises(gsp.BadOption, match=f"^{name} does nothing on a "):
                    wrong(a, url, **{name: spec.default})
        assert a.listeners == [] and a.dialers == []
        good = {n: g for n, (g, _) in self.options.items()}
        lst = self.listen(a, url, max_recv_size=10,  # nothing was bound before
                          **{n: v for n, v in good.items() if specs[n].scope != "dial"})
        self.connect(a, lst.url, b, reconnect_time=0.5,
                     **{n: v for n, v in good.items() if specs[n].scope != "listen"})

    def test_listener_close(self) -> None:
        opts: dict[str, Any] = {"recv_timeout": WAIT, "send_timeout": WAIT}
        a, b, c = self.socket("pair", **opts), self.socket("pair", **opts), self.socket("pair")
        lst = self.listen(a)
        self.connect(a, lst.url, b)
        lst.close()
        assert a.listeners == []
        with pytest.raises(gsp.ConnectionRefused):
            self.dial(c, lst.url, fail_fast=True)
        b.send(b"still up")  # the pipe made before the close carries on
        assert a.recv() == b"still up"
        a.send(b"both ways")
        assert b.recv() == b"both ways"

    def test_parking_reader(self) -> None:
        """The promises of :class:`gsp.transport.ParkingConnection`, held on each end of a
        connection pair: nothing arrived, a read parks (the watcher armed, no wake yet); bytes
        wake it, and so do bytes that come after a read that did not wait (the watcher is
        level-triggered, left armed by such reads); :meth:`park` arms it without a read after a
        whole message; a read that may wait stops it; the peer's close wakes a parked reader,
        whose read then raises :class:`gsp.ConnectionBroken`; and a closed connection is never
        armed, its close reaching the peer. A connection that cannot park (TLS) returns an empty
        list from ``recv_nowait`` and False from ``park``, and reads as ``recv_messages``."""
        from gsp.transport import ParkingConnection

        dialed, accepted, tl = self.connection_pair()
        try:
            # (By the MRO, which is what "built on" means: isinstance goes through ABCMeta's
            # caches, which for the mypyc-compiled ParkingConnection have answered True for a
            # connection that does not derive from it.)
            if not (ParkingConnection in type(dialed).__mro__
                    and ParkingConnection in type(accepted).__mro__):
                self._cannot_run("test_parking_reader")
                return
            self._check_applies("test_parking_reader")
            for reader, writer in ((accepted, dialed), (dialed, accepted)):
                _check_parks(reader, writer)
            # The peer's close wakes a parked reader. (Parked anew: a watcher still armed keeps
            # the wake it was armed with, and recv_or_park stops it first.)
            woke: list[int] = []
            if dialed.parked and dialed.recv_or_park(lambda: woke.append(1)) is None:
                closing = self.spawn(accepted.close)  # (ws's close waits a moment for an answer)
                wait_for(lambda: woke, what="a parked reader's wake at the peer's close")
                with pytest.raises(gsp.ConnectionBroken):
                    _read_to_the_end(dialed)
                closing.join(WAIT)
        finally:
            dialed.close()
            accepted.close()
            tl.close()
        # A closed connection is never armed, and its close reaches the peer.
        dialed, accepted, tl = self.connection_pair()
        try:
            woke = []
            parks = dialed.recv_nowait(lambda: woke.append(1)) is None
            assert dialed.parked is parks
            dialed.close()
            assert not dialed.parked, "close left the read watcher armed"
            assert not dialed.park(lambda: woke.append(2)), "a closed connection parked"
            try:
                assert dialed.recv_nowait(lambda: woke.append(3)) == [], \
                    "recv_nowait parked (or read) on a closed connection"
            except gsp.Closed:
                pass  # (the read met the close)
            assert not dialed.parked, "a closed connection's read watcher was armed"
            with pytest.raises((gsp.ConnectionBroken, gsp.Closed)):
                _read_to_the_end(accepted)  # the close reached the peer
            assert woke == [], "a closed connection's wake was called"
        finally:
            dialed.close()
            accepted.close()
            tl.close()

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


def _read_woken(reader: Any, wake: Any, woke: list[int]) -> list[bytes]:
    """What a parked ``reader`` reads once woken, as the core reads it: ``recv_nowait`` after
    each wake (it may park again: a read before took all there was), ``recv_or_park`` for the
    rest of a message."""
    with gevent.Timeout(WAIT, AssertionError("a parked reader was not woken by what came")):
        while True:
            wait_for(lambda: woke, what="the wake")
            woke.clear()
            msgs = reader.recv_nowait(wake)
            if msgs is None:
                continue  # parked again, without a read: the watcher wakes it
            if not msgs:
                msgs = reader.recv_or_park(wake)  # part of a message: waits for the rest
                assert msgs is not None, "recv_or_park parked with part of a message held"
            return list(msgs)


def _read_to_the_end(conn: Any) -> None:
    """Read ``conn`` as the core does (parked between reads) until it raises, which it must
    within :data:`WAIT` seconds."""
    woke: list[int] = []
    with gevent.Timeout(WAIT, AssertionError("the connection's end did not reach its reader")):
        while True:
            if conn.recv_or_park(lambda: woke.append(1)) is None:
                wait_for(lambda: woke, what="the wake")
                woke.clear()


def _check_parks(reader: Any, writer: Any) -> None:
    """``reader``'s parking, ``writer`` its peer (see ``test_parking_reader``)."""
    woke: list[int] = []

    def wake() -> None:
        woke.append(1)

    first = reader.recv_nowait(wake)
    if first is not None:  # it cannot park here (TLS): it reads as recv_messages does
        assert first == [], f"recv_nowait returned {first!r} with nothing sent"
        assert not reader.park(wake) and not reader.parked
        writer.send_messages([b"unparked"])
        with gevent.Timeout(WAIT, AssertionError("recv_or_park did not read what came")):
            assert reader.recv_or_park(wake) == [b"unparked"]
        return
    assert reader.parked, "recv_nowait returned None (parked) with no read watcher armed"
    gevent.sleep(0.01)
    assert woke == [], "a parked reader was woken with nothing sent"
    writer.send_messages([b"one"])
    assert _read_woken(reader, wake, woke) == [b"one"]
    # Bytes that come after a read that did not wait wake it too (level-triggered).
    writer.send_messages([b"two"])
    assert _read_woken(reader, wake, woke) == [b"two"]
    # After a whole message, park arms without a read; the next message wakes it.
    assert reader.park(wake) and reader.parked
    writer.send_messages([b"three"])
    assert _read_woken(reader, wake, woke) == [b"three"]
    # A read that may wait (a reader greenlet's) stops the watcher first.
    assert reader.park(wake)
    writer.send_messages([b"four"])
    wait_for(lambda: woke, what="the wake")
    got = reader.recv_or_park(wake)
    if got is None:  # (parked again: what woke it was not all there yet)
        got = _read_woken(reader, wake, woke)
    else:
        assert not reader.parked, "recv_or_park read on with the read watcher armed"
    assert got == [b"four"]
    assert reader.recv_or_park(wake) is None and reader.parked  # nothing more: parks again


# ================================ protocols =====================================================
