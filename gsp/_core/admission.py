"""Who becomes a pipe of a socket: the one decision, for its listeners and dialers.

A connection becomes a pipe when the socket has room for it (``max_pipes``: the socket's, and a
listener's own) and the ``admit`` rule (:mod:`gsp.admit`: the endpoint's own, else the
socket's) does not deny its peer. :class:`Admission` decides both for one endpoint, when it is
asked: as soon as the connection is there (a listener's accept, a dialer's connect: the address,
ipc credentials, a ws request and a wss certificate are known then) and, where the rule could
not tell yet, once more after the SP handshake, just before the pipe attaches (a tls+tcp
certificate comes with the handshake). It only decides; the endpoint acts on the answer (closes
the connection, counts and logs it). When a listener accepts (``listen(accept_gate=...)``) and
which stalled handshakes it sheds (``max_handshakes``, :mod:`gsp.transport.admission`) are not
about who, and stay with the listener.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from .. import admit
from ..transport.peer import peer_of

if TYPE_CHECKING:
    from ..options import Options
    from ..transport.interface import Connection
    from .pipe import Pipe

__all__ = ["Admission", "SourceCounts", "ADMIT", "FULL", "DENIED", "denial_text"]

#: What :meth:`Admission.on_arrival` and :meth:`Admission.before_attach` answer first: go on,
#: no room (``max_pipes``), or the ``admit`` rule denied the peer.
ADMIT, FULL, DENIED = 0, 1, 2

#: An answer: ``(ADMIT, None, again)``, ``again`` the rule to ask once more before the pipe
#: attaches (or None); ``(FULL, None, None)``; ``(DENIED, denial, rule)``.
Answer: TypeAlias = "tuple[int, admit.Denial | None, admit.Rule | None]"


class Room(Protocol):
    """A socket's room for pipes (:class:`gsp._core.endpoints.PipeSlots`)."""

    def full(self, listener: Any = None) -> bool: ...


class SourceCounts:
    """A socket's pipes by the source address of their peer (:func:`gsp.admit.source_of`),
    kept as pipes come and go (the socket calls :meth:`add` and :meth:`discard`): what the
    ``admit.per_address`` rule reads, in one look-up whatever the number of pipes."""

    __slots__ = ("_of", "_count")

    def __init__(self) -> None:
        self._of: dict[int, str] = {}  # pipe id -> its source
        self._count: dict[str, int] = {}

    def add(self, pipe: "Pipe") -> None:
        source = admit.source_of(pipe.remote_address)
        self._of[pipe.id] = source
        self._count[source] = self._count.get(source, 0) + 1

    def discard(self, pipe: "Pipe") -> None:
        source = self._of.pop(pipe.id, None)
        if source is None:
            return
        n = self._count[source] - 1
        if n:
            self._count[source] = n
        else:
            del self._count[source]

    def count(self, source: str) -> int:
        return self._count.get(source, 0)


class Admission:
    """Who may become a pipe through one endpoint (a listener, or a dialer: ``listener`` None):
    room under ``max_pipes``, then the ``admit`` rule of ``options`` (the endpoint's, which
    falls back to the socket's), on the peer's facts (:func:`gsp.transport.peer_of`)."""

    __slots__ = ("_options", "_slots", "_sources", "_listener")

    def __init__(self, options: "Options", slots: Room, sources: SourceCounts,
                 listener: object = None) -> None:
        self._options = options
        self._slots = slots
        self._sources = sources
        self._listener = listener

    def judge(self, rule: admit.Rule, conn: "Connection", final: bool
              ) -> "tuple[admit.Verdict, admit.Denial | None]":
        """``rule`` on ``conn``'s peer (:func:`gsp.admit.judge`)."""
        return admit.judge(rule, peer_of(conn.remote_address, conn.properties), final,
                           self._sources.count)

    def on_arrival(self, conn: "Connection") -> Answer:
        """As the connection arrives, before its handshake (no greenlet, no buffer yet): a
        listener's room first, then the rule on the facts known now. (A dialer waits for
        room before it dials.)"""
        if self._listener is not None and self._slots.full(self._listener):
            return FULL, None, None
        rule: admit.Rule | None = self._options["admit"]
        if rule is None:
            return ADMIT, None, None
        verdict, denial = self.judge(rule, conn, False)
        if denial is not None:
            return DENIED, denial, rule
        return ADMIT, None, (rule if verdict is None else None)

    def before_attach(self, conn: "Connection", again: admit.Rule | None) -> Answer:
        """After the handshake, every fact in: ``again`` (what :meth:`on_arrival` could not
        tell), then room (the socket may have filled up during the handshake)."""
        if again is not None:
            _, denial = self.judge(again, conn, True)
            if denial is not None:
                return DENIED, denial, again
        if self._slots.full(self._listener):
            return FULL, None, None
        return ADMIT, None, None


def denial_text(denial: admit.Denial, rule: admit.Rule) -> str:
    """Why a peer was denied, for the log and errors: the rule that denied it, the whole
    ``admit`` rule when it is more, and the error of a rule that raised."""
    text = f"not admitted by {denial.rule!r}"
    if denial.rule is not rule:
        text += f" (admit={rule!r})"
    if denial.error is not None:
        text += f": it raised {type(denial.error).__name__}: {denial.error}"
    return text
