"""device(): forward messages between two raw sockets (or reflect on one), headers included."""

from __future__ import annotations

import gevent

from ..errors import BadOption, Closed, NotSupported, Timeout, WouldBlock
from ..message import Message
from .socket import Socket, can


class Device:
    """Handle of a running device: greenlets forwarding ``recv_msg`` → ``send_msg``, one per
    direction. They end when either socket closes (the device never closes the sockets) or on
    :meth:`stop`; :meth:`join` waits for that. ``forwarded`` counts messages passed on.
    """

    def __init__(self, s1: Socket, s2: Socket) -> None:
        self.sockets = (s1, s2)
        self.forwarded = 0
        pairs = [(s1, s2)] if s1 is s2 else [(s1, s2), (s2, s1)]
        pairs = [(a, b) for a, b in pairs if can(a, "recv") and can(b, "send")]
        if not pairs:
            raise NotSupported(f"nothing can flow between {s1.protocol} and {s2.protocol}")
        self._greenlets = [gevent.spawn(self._forward, a, b) for a, b in pairs]

    def _forward(self, src: Socket, dst: Socket) -> None:
        try:
            while True:
                try:
                    m = src.recv_msg()
                except (Timeout, WouldBlock):
                    continue  # the socket has a recv_timeout; a device waits forever
                try:
                    # A fresh Message: the pipe of the other socket means nothing here.
                    dst.send_msg(Message(m.body, m.header))
                except (Timeout, WouldBlock):
                    continue  # no peer took it in time: dropped, like any best-effort hop
                self.forwarded += 1
        except (Closed, NotSupported):
            pass
        finally:
            # One direction alone is no device: stop the other as well.
            me = gevent.getcurrent()
            for g in self._greenlets:
                if g is not me:
                    g.kill(block=False)

    @property
    def running(self) -> bool:
        return any(not g.dead for g in self._greenlets)

    def stop(self) -> None:
        """Stop forwarding (a message in flight may be lost) and wait for the greenlets."""
        gevent.killall(self._greenlets, block=True)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until forwarding ended; True if it did within ``timeout``."""
        gevent.joinall(self._greenlets, timeout=timeout)
        return not self.running

    def __repr__(self) -> str:
        a, b = self.sockets
        state = "running" if self.running else "stopped"
        return f"<gsp.Device {a.protocol}<->{b.protocol} {state} forwarded={self.forwarded}>"


def device(s1: Socket, s2: Socket | None = None) -> Device:
    """Forward between two raw sockets of peer protocols (req↔rep, surveyor↔respondent, pair↔pair,
    bus↔bus, push→pull, pub→sub) in the background; with one socket, reflect its messages back
    into it (the protocol must be its own peer, e.g. bus or pair).

    Returns a :class:`Device` handle; raises :class:`gsp.BadOption` for cooked or mismatched
    sockets and :class:`gsp.Closed` if one is closed.
    """
    if s2 is None:
        s2 = s1
    for s in (s1, s2):
        if not isinstance(s, Socket):
            raise TypeError(f"device takes gsp sockets, not {type(s).__name__}")
        if s.closed:
            raise Closed("socket is closed")
        if not s.raw:
            raise BadOption(f"device needs raw sockets; open the {s.protocol} socket with raw=True")
    if s1.spec.peer_number != s2.spec.number or s2.spec.peer_number != s1.spec.number:
        if s1 is s2:
            raise BadOption(f"a {s1.protocol} socket is not its own peer, so it cannot reflect")
        raise BadOption(f"{s1.protocol} and {s2.protocol} are not peer protocols")
    return Device(s1, s2)
