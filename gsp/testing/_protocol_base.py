"""The protocol suite's description: what a subclass declares and may override, and the
helpers its checks use (the checks are in :mod:`gsp.testing._protocol`)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Sequence

import gevent
from gevent.event import Event

import gsp

from ._helpers import WAIT, connected, wait_for
from ._kit import _STATE, SuiteBase, _caught, _outcome


class ProtocolSuiteBase(SuiteBase):
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
            assert m.body == b"request" + tag and _from_one_of(m, this)
            this.send_msg(gsp.Message(b"reply" + tag, m.header))
            assert peer.recv() == b"reply" + tag
        elif self.can_send:
            this.send_msg(gsp.Message(b"ping" + tag, self.raw_header))
            assert peer.recv() == b"ping" + tag
            if self.can_recv:
                peer.send(b"pong" + tag)
                m = this.recv_msg()
                assert m.body == b"pong" + tag and _from_one_of(m, this)
        else:
            peer.send(b"ping" + tag)
            m = this.recv_msg()
            assert m.body == b"ping" + tag and _from_one_of(m, this)

    def _send_any(self, s: Any) -> None:
        if getattr(s, "raw", False):
            s.send_msg(gsp.Message(b"x", self.raw_header))
        else:
            s.send(b"x")

    # -- steps of test_closed ----------------------------------------------------------------------
    def _blocked_calls(self, s: gsp.Socket,
                       ctx: gsp.Context | None) -> list[tuple[str, gevent.Greenlet]]:
        """A greenlet a call that may block on ``s`` (and ``ctx``): a receive and a send, as the
        protocol offers them; each returns what it raised (:func:`_caught`)."""
        calls: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
        if self.can_recv:
            calls.append(("recv", s.recv_msg if s.raw else s.recv, ()))
            if ctx is not None:
                calls.append(("context recv", ctx.recv, ()))
        if self.can_send:
            calls.append(("send", self._send_any, (s,)))
            if ctx is not None:
                calls.append(("context send", ctx.send, (b"x",)))
        return [(what, self.spawn(_caught, fn, *args)) for what, fn, args in calls]

    def _still_blocked(self, calls: list[tuple[str, gevent.Greenlet]]
                       ) -> list[tuple[str, gevent.Greenlet]]:
        """The calls still blocked; those that could not block returned, or failed on the
        protocol's state (checked here)."""
        for what, g in calls:
            if g.ready():
                exc = _outcome(g, what)
                assert exc is None or isinstance(exc, _STATE), (what, exc)
        return [(what, g) for what, g in calls if not g.ready()]

    def _calls_on_closed(self, s: gsp.Socket,
                         ctx: gsp.Context | None) -> list[tuple[str, Callable[[], Any]]]:
        """Every call of a socket (and of its context) that must raise Closed once it closed."""
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("send", lambda: s.send(b"x")), ("recv", s.recv),
            ("send_msg", lambda: s.send_msg(gsp.Message(b"x", self.raw_header))),
            ("recv_msg", s.recv_msg), ("listen", lambda: s.listen(self.url())),
            ("dial", lambda: s.dial("inproc://gsp-testing-closed")),
            ("open_context", s.open_context), ("subscribe", lambda: s.subscribe(b"")),
            ("unsubscribe", lambda: s.unsubscribe(b"")),
        ]
        if ctx is not None:
            calls += [("context send", lambda: ctx.send(b"x")), ("context recv", ctx.recv)]
        return calls

    @staticmethod
    def _assert_each_raises_closed(calls: list[tuple[str, Callable[[], Any]]], on: str) -> None:
        """Each of ``calls`` raises Closed (``on``: what it was called on, for the message)."""
        for what, call in calls:
            try:
                call()
            except gsp.Closed:
                continue
            except Exception as exc:
                raise AssertionError(f"{what} on {on} raised {exc!r}, not Closed") from exc
            raise AssertionError(f"{what} on {on} did not raise Closed")

    # -- steps of test_pipe_churn ------------------------------------------------------------------
    def _churn_worker(self, this: gsp.Socket, stop: Event, failures: list[BaseException]) -> None:
        """Send and receive on ``this`` (as the protocol offers) until ``stop``; what fails is
        kept in ``failures``. Timeouts and the protocol's state errors are expected."""
        ops = ([lambda: this.send(b"churn")] if self.can_send else []) + \
            ([this.recv] if self.can_recv else [])
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

    def _churn_round(self, this: gsp.Socket, url: str, rnd: int) -> None:
        """Five peers dial ``url``: one closes at once (likely before it attached), ``this``
        closes every other pipe, the others send a message if they can, then close."""
        peers = [self.open(self.peer, reconnect_time=0.01, linger=0, send_timeout=0.01)
                 for _ in range(5)]
        for p in peers:
            p.dial(url, background=True)
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

    def _drain_churn(self, peer: gsp.Socket) -> None:
        """Receive (and drop) on ``peer`` what ``this`` still had to deliver from the churn: a
        message it had accepted, or a req's outstanding request, which it sends again on a new
        pipe. Anything else arriving fails the check."""
        if not self.can_send:
            return
        peer.recv_timeout = 0.05
        try:
            while True:
                got = peer.recv()
                assert got == b"churn", f"the new peer got {got!r} before any exchange"
        except (gsp.Timeout, gsp.ProtocolStateError):
            pass
        peer.recv_timeout = WAIT

    def _drain(self, this: gsp.Socket) -> None:
        """Receive (and drop) what ``this`` has queued, if it receives at all."""
        if not self.can_recv:
            return
        this.recv_timeout = 0.05
        try:
            while True:
                this.recv()
        except (gsp.Timeout, gsp.ProtocolStateError):
            pass
        this.recv_timeout = WAIT


def _from_one_of(msg: gsp.Message, sock: gsp.Socket) -> bool:
    """Whether ``msg`` came through one of ``sock``'s pipes."""
    return msg.pipe is not None and msg.pipe.id in {p.id for p in sock.pipes}
