"""The protocol conformance suite: every check of :class:`ProtocolSuite`."""

from __future__ import annotations

from typing import Any, Callable

import gevent
import pytest
from gevent.event import Event

import gsp

from ._helpers import WAIT, connected, registry, wait_for
from ._kit import _STATE, _caught, _outcome
from ._protocol_base import ProtocolSuiteBase

__all__ = ["ProtocolSuite"]

#: Socket options every protocol has, with a good value and bad ones, for test_options.
COMMON_GOOD: dict[str, Any] = {"recv_timeout": 0.5, "send_timeout": 0.25, "recv_buffer": 7, "send_buffer": 3,
               "best_effort": True}
COMMON_BAD: dict[str, list[Any]] = {"recv_timeout": [-1, "1", float("nan")], "send_timeout": [-0.5, True],
              "recv_buffer": [0, -1, 1.5], "send_buffer": [0, "2"], "best_effort": [1, "yes"]}


class ProtocolSuite(ProtocolSuiteBase):
    __doc__ = ProtocolSuiteBase.__doc__

    # -- the checks --------------------------------------------------------------------------------
    @pytest.mark.parametrize("raw", [False, True], ids=["cooked", "raw"])
    def test_identity(self, raw: bool) -> None:
        assert self.protocol in gsp.protocol_names(), f"{self.protocol} is not installed"
        assert self.peer in gsp.protocol_names(), f"its peer {self.peer} is not installed"
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
        blocked = self._blocked_calls(s, ctx)
        gevent.sleep(0.05)
        waiting = self._still_blocked(blocked)
        s.close()
        s.close()
        assert s.closed
        for what, g in waiting:
            g.join(WAIT)
            exc = _outcome(g, what)
            assert isinstance(exc, gsp.Closed), (what, exc)
        self._assert_each_raises_closed(self._calls_on_closed(s, ctx), "a closed socket")
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
        self._assert_each_raises_closed(
            calls + [("send_msg", lambda: ctx.send_msg(gsp.Message(b"x"))),
                     ("recv_msg", ctx.recv_msg)], "a closed context")
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
        workers = [self.spawn(self._churn_worker, this, stop, failures) for _ in range(3)]
        for rnd in range(8):
            self._churn_round(this, url, rnd)
        wait_for(lambda: not this.pipes, what="every churned pipe to go")
        stop.set()
        gevent.joinall(workers, timeout=WAIT)
        assert failures == [] and all(g.successful() for g in workers), \
            (failures, [g.exception for g in workers])
        this.recv_timeout = this.send_timeout = WAIT
        peer = self.open(self.peer, recv_timeout=WAIT, send_timeout=WAIT)
        connected(this, url, peer)
        self._drain(this)  # what the churn left queued
        self._drain_churn(peer)  # and what this still had to deliver (a req's request, again)
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
            p.dial(url, background=True)
        gevent.sleep(0)  # some mid-handshake, some attached
        this.close()
        assert this.pipes == []
        wait_for(lambda: not any(p.pipes for p in peers), what="the peers to lose their pipes")
        dialer_side = self.open(self.protocol)
        for p in peers:
            dialer_side.dial(p.listen(self.url()).url, background=True)
        gevent.sleep(0)
        dialer_side.close()
        assert dialer_side.pipes == []
