"""The protocol suite's description: what a subclass declares and may override, and the
helpers its checks use (the checks are in :mod:`gsp.testing._protocol`)."""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import gsp

from ._helpers import WAIT, connected
from ._kit import _Kit


class ProtocolSuiteBase(_Kit):
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
