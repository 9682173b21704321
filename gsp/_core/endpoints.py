"""Listeners and dialers: the endpoints that turn addresses into pipes of a socket."""

from __future__ import annotations

import errno
import logging
import random
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import gevent
from gevent.event import Event

from .. import admit
from ..chan import select_channels
from ..errors import (
    BadOption,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    GspError,
    HandshakeError,
    Timeout,
)
from ..options import ENDPOINT_OPTIONS, SOCKET_OPTIONS, Options, renamed_options, warn_renamed
from ..protocol.waiting import ChangeNotice
from ..transport.admission import HandshakeRoom, source_of
from . import counters, log
from .admission import ADMIT, DENIED, FULL, Admission, SourceCounts, denial_text
from .log import dialer_log, listener_log
from .views import SocketView

if TYPE_CHECKING:
    from ..transport.interface import Connection, Transport, TransportDialer, TransportListener
    from .pipe import Pipe


#: What an accept fails with when the system is short of something (descriptors, buffers,
#: memory): the listener backs off before its next accept.
_SCARCE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_REJECTED = "the pipe was rejected (by the protocol or a hook; see gsp.socket)"


class PipeSlots:
    """A socket's room for pipes under ``max_pipes`` (a listener's own ``max_pipes`` too): what
    its listeners ask on accept and its dialers before they dial, never per message."""

    __slots__ = ("_pipes", "_options", "_freed")

    def __init__(self, pipes: "Mapping[int, Pipe]", options: Options) -> None:
        self._pipes = pipes  # the socket's live pipes (attaching, attached, closing)
        self._options = options  # the socket's
        self._freed = ChangeNotice()

    def limit(self, listener: "Listener | None" = None) -> int:
        """The bound a new pipe meets: the socket's ``max_pipes``, or ``listener``'s own when
        tighter (0: none)."""
        limit: int = self._options["max_pipes"]
        own: int = 0 if listener is None else listener.options["max_pipes"]
        return own if own and (not limit or own < limit) else limit

    def full(self, listener: "Listener | None" = None) -> bool:
        """Whether a new pipe would pass the socket's ``max_pipes`` (or ``listener``'s own)."""
        limit = self._options["max_pipes"]
        if limit and len(self._pipes) >= limit:
            return True
        own = 0 if listener is None else self.limit(listener)
        if own and own != limit:  # the listener's own, tighter bound: count its pipes
            return sum(p.listener is listener for p in list(self._pipes.values())) >= own
        return False

    def freed(self) -> None:
        """A pipe went, or the bound changed: wake the dialers waiting for room."""
        self._freed.fire()

    def wait(self) -> None:
        """Wait until the socket has room for a pipe (a dialer before it dials)."""
        while self.full():
            select_channels([self._freed.case()])


def endpoint_options(socket_options: Options, transport: "Transport", options: dict[str, Any],
                     kind: str) -> Options:
    """Check the options given to one ``listen``/``dial`` (``kind``): each must be one of the
    transport's or an endpoint option, and do something on that kind of endpoint."""
    allowed = dict(transport.options)
    allowed.update({n: SOCKET_OPTIONS[n] for n in ENDPOINT_OPTIONS})
    if any(name not in allowed for name in options):  # old names: their new ones, with a warning
        old = renamed_options(allowed)
        for name in options:
            if name in old:
                warn_renamed(name, old[name])
        options = {old.get(n, n): v for n, v in options.items()}
    for name in options:
        spec = allowed.get(name)
        if spec is None:
            known = ", ".join(sorted(allowed))
            raise BadOption(f"{name!r} is not an option of this endpoint; it takes: {known}")
        if spec.scope is not None and spec.scope != kind:
            other = {"dial": "dialers", "listen": "listeners"}[spec.scope]
            raise BadOption(f"{name} does nothing on a {kind}er: it is for {other} only "
                            f"(pass it to {spec.scope}(), or set it on the socket)")
    ep = Options(socket_options.specs, parent=socket_options)
    ep.update_checked(options)
    return ep


#: What ``Socket.listen(accept_gate=...)`` takes: called with the listener before each accept.
AcceptGate = Callable[["Listener"], object]


class EndpointHost:
    """What a socket gives its listeners and dialers, made once by the socket: a spawn of its
    greenlets, the call that makes a pipe of a handshaken connection, the call that tells it an
    endpoint closed, its tally (where refused connections count) and its pipes (read only: an
    endpoint's snapshot adds up its own)."""

    __slots__ = ("spawn", "attach", "gone", "tally", "pipes", "sources")

    def __init__(self, spawn: Callable[..., gevent.Greenlet],
                 attach: "Callable[..., Pipe | None]",
                 gone: "Callable[[Listener | Dialer], None]", tally: counters.Tally,
                 pipes: "Mapping[int, Pipe]") -> None:
        self.spawn = spawn
        self.attach = attach
        self.gone = gone
        self.tally = tally
        self.pipes = pipes
        #: The socket's pipes by source address (what ``admit.per_address`` counts).
        self.sources = SourceCounts()

    def pipes_of(self, ep: "Listener | Dialer") -> "list[Pipe]":
        return [p for p in list(self.pipes.values()) if p.dialer is ep or p.listener is ep]


def _peer_left(exc: GspError) -> bool:
    """Whether an accept failed for the connection's own sake (its peer reset it while it waited
    in the backlog, as a transport built on :class:`gsp.transport.SocketListener` reports it:
    a :class:`gsp.ConnectionBroken` caused by an ``OSError`` whose errno is not a shortage),
    not the listener's: then there is nothing to back off from."""
    cause = exc.__cause__
    return isinstance(exc, ConnectionBroken) and isinstance(cause, OSError) and \
        cause.errno not in _SCARCE


#: What a connection whose handshake has not started yet counts for (see Listener._progress).
_UNREAD = 1 << 62


class Listener:
    """An address a socket accepts connections on. ``url`` is the bound URL. Made by
    :meth:`gsp.Socket.listen` (no public constructor)."""

    #: Made by gsp only: its constructor is not the API (docs/api-guide.md, "Classes gsp makes").
    _no_public_constructor: ClassVar[bool] = True

    def __init__(self, socket: SocketView, host: EndpointHost, tl: TransportListener,
                 options: Options, slots: PipeSlots, accept_gate: AcceptGate | None = None) -> None:
        self.socket = socket
        self._host = host
        self._slots = slots
        self._tl = tl
        self._pace = accept_gate
        self._pace_errors = log.Repeats()  # an accept gate that raised
        self.url: str = tl.url
        self.options = options
        self._closed = False
        self._accepter: gevent.Greenlet | None = None
        #: Connections in their handshake, oldest first (at most ``max_handshakes``).
        self._pending: HandshakeRoom[Connection] = HandshakeRoom(self._progress)
        #: Connections whose handshake greenlet has not run yet (has read nothing yet): not to
        #: be shed for a lack of progress they had no chance to make.
        self._fresh: set[Connection] = set()
        self._repeats: dict[type[BaseException], log.Repeats] = {}  # failures, by error type
        self._refusals = log.Repeats()  # connections refused at max_pipes
        self._sheds = log.Repeats()  # handshakes shed at max_handshakes
        self._denials = log.Repeats()  # connections the admit rule refused
        self.id = counters.endpoint_id()
        self._tally = counters.listener_tally()
        #: Who of those accepted becomes a pipe (max_pipes, the admit rule).
        self._admission = Admission(options, slots, host.sources, self)

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of this listener's counters: connections accepted, handshake failures by
        kind, its pipes and their traffic (every key: docs/stats.md)."""
        out = counters.owner_stats(self._tally, self._host.pipes_of(self))
        out["handshakes"] = self.handshakes
        for reason, n in self._transport_sheds().items():  # (gsp-ws: upgrade requests)
            key = f"handshakes_shed_{reason}"
            if key in out:
                out[key] += n
                out["handshakes_shed"] += n
        return out

    @property
    def handshakes(self) -> int:
        """Connections in their SP handshake now (at most ``max_handshakes``)."""
        return len(self._pending)

    def _transport_sheds(self) -> dict[str, int]:
        """Connections the transport closed before handing them over, to make room (its
        optional ``handshakes_shed`` hook: gsp-ws's HTTP server), by reason."""
        try:
            return {str(k): int(n) for k, n in self._tl.handshakes_shed().items()}
        except Exception:
            return {}

    def _accept_loop(self) -> None:
        turns = 0
        while not self._closed:
            turns += 1
            if turns % 8 == 0:  # a full backlog accepts without waiting: let the loop poll
                gevent.sleep(0.0001)  # the pipes' sockets (sleep(0) would not: a callback)
            if self._pace is not None:
                self._pass_gate()
                if self._closed:
                    return
            try:
                conn = self._accept()
            except Closed:
                return
            if conn is None:
                continue
            # Who may become a pipe, before the handshake: no greenlet, no buffer yet. ``again``:
            # the rule to ask once more after the handshake, where it could not tell yet.
            answer, denial, again = self._admission.on_arrival(conn)
            if answer != ADMIT:
                self._turn_away(conn, answer, denial, again)
                continue
            if not self._handshake_now(conn, again):
                self._enter_handshake(conn, again)

    def _accept(self) -> Connection | None:
        """The next connection from the transport; None when the accept failed (counted and
        logged; after a failure for want of fds or memory, a short backoff). Raises
        :class:`gsp.Closed` once the listener is closed."""
        try:
            conn = self._tl.accept()
        except Closed:
            raise
        except GspError as exc:
            self._tally["accept_failures"] += 1
            scarce = not _peer_left(exc)
            self._failed("accept failed", exc, None, scarce)
            if scarce:  # e.g. out of fds: back off briefly, keep serving
                gevent.sleep(0.01)
            return None
        if listener_log.isEnabledFor(logging.DEBUG):
            listener_log.debug("%s %s: accepted a connection from %s", self.socket.protocol,
                               self.url, conn.remote_address,
                               extra=log.fields(self.socket, self.url,
                                                remote=conn.remote_address))
        self._tally["accepted"] += 1
        return conn

    def _handshake_now(self, conn: Connection, again: admit.Rule | None) -> bool:
        """The first read of ``conn``'s handshake, in the accept loop (its transport's
        ``handshake_nowait``): a peer that closed or sent no SP header is done with here, at
        the cost of that read and a close; one whose header had all come becomes a pipe here
        too (the pipe event hooks must not block, wherever they run). True if so; False for
        one to wait for (:meth:`_enter_handshake`)."""
        try:
            done = conn.handshake_nowait(self.socket.spec)
        except GspError as exc:
            self._handshake_failed(conn, exc)
            return True
        if done:
            self._attach(conn, again)
        return done

    def _enter_handshake(self, conn: Connection, again: admit.Rule | None = None) -> None:
        """Start ``conn``'s handshake. At ``max_handshakes`` connections in their handshake (or
        ``max_handshakes_per_address`` from its source) first close the one that has made the
        least progress (fewest bytes received, then the oldest): the listener keeps accepting,
        so a flood of stalled connections cannot hold the slots against a good peer, which sends
        its handshake at once and is gone from the room within a loop turn. fds stay bounded."""
        limit: int = self.options["max_handshakes"]
        per_address: int = self.options["max_handshakes_per_address"]
        room = self._pending
        if self._fresh and len(self._fresh) >= len(room) and \
                ((limit and len(room) >= limit) or (per_address and len(room) >= per_address)):
            # None has read yet (a tiny bound): let them read what has come before one is
            # chosen. (Otherwise those not started yet just count as the most advanced.)
            gevent.sleep(0)
            if self._closed:
                conn.close()
                return
        for victim, reason in room.admit(conn, source_of(conn.remote_address), limit,
                                         per_address):
            self._shed(victim, reason, limit if reason == "full" else per_address)
        self._fresh.add(conn)
        self._host.spawn(self._handshake, conn, again)

    def _shed(self, conn: Connection, reason: str, limit: int) -> None:
        """Close a connection in its handshake to make room (:meth:`_enter_handshake`), count it by
        ``reason`` and log it: WARNING at most once per ``log.REPEAT_INTERVAL``,
        DEBUG otherwise."""
        progress = self._progress(conn)
        conn.close()
        counters.handshake_shed(self._tally, reason)
        level, held = self._sheds.level()
        if listener_log.isEnabledFor(level):
            bound = "max_handshakes" if reason == "full" else "max_handshakes_per_address"
            listener_log.log(level, "%s %s: closed a connection in its handshake from %s to make "
                             "room: at %s (%d), it had sent the least (%d bytes)%s",
                             self.socket.protocol, self.url, conn.remote_address, bound, limit,
                             progress, log.held_note(held),
                             extra=log.fields(self.socket, self.url, remote=conn.remote_address,
                                              gsp_limit=limit, gsp_suppressed=held))

    def _turn_away(self, conn: Connection, answer: int, denial: admit.Denial | None,
                   rule: admit.Rule | None) -> None:
        """Act on :class:`Admission`'s no: refuse at ``max_pipes``, or deny by the rule."""
        if answer == FULL:
            self._refuse(conn)
        else:
            assert denial is not None and rule is not None
            self._deny(conn, denial, rule)

    def _deny(self, conn: Connection, refusal: admit.Denial, rule: admit.Rule) -> None:
        """Close a connection the ``admit`` rule refused, before any message; count it by the
        reason of the rule that refused it and log it: INFO at most once per
        ``log.REPEAT_INTERVAL``, DEBUG otherwise (a rule that raised: WARNING,
        with its traceback). The transport tells the peer where it has a way to (its optional
        ``Connection.deny``: ws answers 403)."""
        conn.deny(refusal.reason)
        counters.pipe_refused(self._host.tally, self._tally, refusal.reason)
        level, held = self._denials.level()
        if refusal.error is None and level == logging.WARNING:
            level = logging.INFO  # a rule doing its work: no warning
        if listener_log.isEnabledFor(level):
            listener_log.log(level, "%s %s: refused a connection from %s: %s%s",
                             self.socket.protocol, self.url, conn.remote_address,
                             denial_text(refusal, rule), log.held_note(held),
                             exc_info=refusal.error if level > logging.INFO else None,
                             extra=log.fields(self.socket, self.url, remote=conn.remote_address,
                                              gsp_reason=refusal.reason, gsp_rule=repr(refusal.rule),
                                              gsp_suppressed=held))

    def _pass_gate(self) -> None:
        """Call the accept gate (``Socket.listen(accept_gate=...)``), which returns when this
        listener may accept its next connection. A gate that raises lets the accept go ahead:
        the error is logged (WARNING, rate limited, with its traceback) and the listener serves
        on, as it does when a pipe event callback raises."""
        assert self._pace is not None
        try:
            self._pace(self)
        except Exception as exc:
            level, held = self._pace_errors.level()
            if listener_log.isEnabledFor(level):
                listener_log.log(level, "%s %s: the accept gate %r raised %s: accepting anyway%s",
                                 self.socket.protocol, self.url, self._pace,
                                 type(exc).__name__, log.held_note(held),
                                 exc_info=level > logging.DEBUG,
                                 extra=log.fields(self.socket, self.url, gsp_error=exc,
                                                  gsp_suppressed=held))

    def _refuse(self, conn: Connection) -> None:
        """Close a connection the socket has no room for (``max_pipes``), count it and log it:
        WARNING at most once per ``log.REPEAT_INTERVAL``, DEBUG otherwise."""
        conn.refuse(f"at max_pipes ({self._slots.limit(self)})")
        counters.pipe_refused(self._host.tally, self._tally)
        level, held = self._refusals.level()
        if listener_log.isEnabledFor(level):
            sock = self.socket
            limit = self._slots.limit(self)
            listener_log.log(level, "%s %s: refused a connection from %s: at max_pipes (%d)%s",
                             sock.protocol, self.url, conn.remote_address, limit,
                             log.held_note(held),
                             extra=log.fields(sock, self.url, remote=conn.remote_address,
                                              gsp_limit=limit, gsp_suppressed=held))

    def _progress(self, conn: Connection) -> int:
        """How far ``conn``'s handshake has come, in bytes (0 for a hook that fails); one whose
        greenlet has not run yet counts as the most advanced."""
        if conn in self._fresh:
            return _UNREAD
        try:
            return int(conn.handshake_progress())
        except Exception:
            return 0

    def _handshake(self, conn: Connection, again: admit.Rule | None) -> None:
        # Runs in its own greenlet so a stalled peer delays nobody else. Nothing yields between
        # leaving _fresh and the handshake's first read of what the peer sent. ``again``: the
        # admit rule that could not tell at accept, asked once more before the pipe attaches.
        self._fresh.discard(conn)
        try:
            conn.handshake(self.socket.spec, self.options["handshake_timeout"])
        except GspError as exc:
            self._handshake_failed(conn, exc)
            return
        finally:
            self._pending.discard(conn)
        self._attach(conn, again)

    def _handshake_failed(self, conn: Connection, exc: GspError) -> None:
        """Close ``conn``, whose handshake failed, count it and log it (rate limited)."""
        conn.close()
        if not self._closed:
            counters.handshake_failed(self._tally, exc)
        # A peer that hangs up at once (a port probe) or our own close is no warning.
        loud = isinstance(exc, (HandshakeError, Timeout)) and not self._closed
        self._failed(f"handshake with {conn.remote_address} failed", exc, conn.remote_address,
                     loud)

    def _attach(self, conn: Connection, again: admit.Rule | None) -> None:
        """Make a pipe of ``conn``, handshaken, unless refused now."""
        if self._closed:
            conn.close()
            return
        answer, denial, rule = self._admission.before_attach(conn, again)
        if answer != ADMIT:  # denied now every fact is in, or filled up during the handshake
            self._turn_away(conn, answer, denial, rule)
            return
        self._host.attach(conn, listener=self, tally=self._tally)

    def _failed(self, what: str, exc: GspError, remote: str | None, loud: bool) -> None:
        """Log a failed accept or handshake: WARNING when ``loud``, rate limited per error type
        (see :class:`gsp._core.log.Repeats`); DEBUG otherwise."""
        level, held = logging.DEBUG, 0
        if loud:
            repeats = self._repeats.get(type(exc))
            if repeats is None:
                repeats = self._repeats[type(exc)] = log.Repeats()
            level, held = repeats.level()
        if listener_log.isEnabledFor(level):
            listener_log.log(level, "%s %s: %s: %s%s", self.socket.protocol, self.url, what,
                             log.describe(exc, self.socket.spec), log.held_note(held),
                             extra=log.fields(self.socket, self.url, remote=remote,
                                              gsp_error=exc, gsp_suppressed=held))

    def adopt(self, fd: Any) -> None:
        """Make a pipe of an already-connected stream socket: ``fd`` is its descriptor (an int)
        or a socket object (stdlib or gevent), e.g. one end of ``socket.socketpair()``; for a
        ``socket://`` listener (nng's socket transport and ``NNG_OPT_SOCKET_FD``). The SP
        handshake runs in the background as for an accepted connection; the pipe then attaches
        (pipe events, ``listener.stats["accepted"]``). From then on the descriptor is gsp's: the
        pipe closing closes it (a socket object given is detached, so it closes nothing). On an
        error nothing is taken: :class:`gsp.BadOption` for a descriptor that is not open, not a
        stream socket, listening or not connected; :class:`gsp.NotSupported` on a listener of
        another scheme; :class:`gsp.Closed` once the listener or its socket is closed."""
        if self._closed or self.socket.closed:  # (a draining socket closed its listeners)
            raise Closed("listener closed")
        detach = getattr(fd, "detach", None)
        if isinstance(fd, int) and not isinstance(fd, bool):
            self._tl.adopt(fd)
            return
        if detach is None or not callable(getattr(fd, "fileno", None)):
            raise BadOption(f"adopt takes a file descriptor (an int) or a socket, not {fd!r}")
        self._tl.adopt(fd.fileno())
        detach()  # the descriptor is the listener's now: the object must not close it

    def reload(self) -> None:
        """Read the files the listener's options name again now (TLS: certificate, key, CA,
        CRL) for the connections it accepts from now on; pipes up keep theirs. Raises
        :class:`gsp.BadOption` when they do not load: the listener keeps the previous ones.
        (TLS listeners also notice changed files by themselves at each new handshake.)"""
        self._tl.reload()

    def close(self) -> None:
        """Stop accepting; connections already made stay up until the socket closes."""
        if self._closed:
            return
        self._closed = True
        if listener_log.isEnabledFor(logging.DEBUG):
            listener_log.debug("%s %s: listener closed", self.socket.protocol, self.url,
                               extra=log.fields(self.socket, self.url))
        self._tl.close()
        for conn in list(self._pending):
            conn.close()
        self._fresh.clear()
        g = self._accepter
        if g is not None and g is not gevent.getcurrent():
            g.kill(block=True)
        self._host.gone(self)

    # -- fork (Socket._after_fork: the functions at the end of this module) -------------------
    def _keeps_after_fork(self) -> bool:
        """Whether the listener accepts on in a forked child (its transport keeps it:
        ``TransportListener.keep_after_fork``) rather than staying the parent's."""
        try:
            return bool(self._tl.keep_after_fork())
        except Exception:  # a transport's bug must not break the fork: leave it to the parent
            return False

    def __repr__(self) -> str:
        return f"<gsp.Listener {self.url}>"


class Dialer:
    """Keeps one connection to ``url`` up, redialing with exponential backoff and jitter. Made
    by :meth:`gsp.Socket.dial` (no public constructor)."""

    #: Made by gsp only: its constructor is not the API (docs/api-guide.md, "Classes gsp makes").
    _no_public_constructor: ClassVar[bool] = True

    def __init__(self, socket: SocketView, host: EndpointHost, url: str, td: TransportDialer,
                 options: Options, slots: PipeSlots) -> None:
        self.socket = socket
        self._host = host
        self._slots = slots
        self.url = url
        self._td = td
        self.options = options
        self._closed = False
        self._loop_g: gevent.Greenlet | None = None
        self._wake = Event()
        #: The connection in its handshake now (dropped after a fork: forget_after_fork).
        self._handshaking: Connection | None = None
        self.pipe: Pipe | None = None
        #: The error of the most recent failed attempt, if any.
        self.last_error: GspError | None = None
        self._repeats = log.Repeats()  # failed attempts in a row, for the log
        self.id = counters.endpoint_id()
        self._tally = counters.dialer_tally()
        #: Whether the server it reached becomes a pipe (the admit rule; room, once more).
        self._admission = Admission(options, slots, host.sources)

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of this dialer's counters: dial attempts, failures by reason, handshake
        failures by kind, reconnects, its pipes and their traffic (docs/stats.md)."""
        out = counters.owner_stats(self._tally, self._host.pipes_of(self))
        out["reconnects"] = max(out["pipes_attached"] - 1, 0)
        return out

    def _connect_once(self) -> Pipe | None:
        limit = self.options["handshake_timeout"]
        t = self._tally
        t["dial_attempts"] += 1
        # The connect shares the handshake's limit: a black-holed address must not hang a dialer
        # for the OS connect timeout (minutes).
        try:
            with gevent.Timeout(limit, Timeout(f"dial {self.url}: no connection within {limit} s")):
                conn = self._td.dial()
        except GspError as exc:
            counters.dial_failed(t, counters.connect_reason(exc))
            raise
        # The server's address is known: judged before any handshake. ``again``: the rule to
        # ask once more after it (a certificate comes with it).
        answer, denial, again = self._admission.on_arrival(conn)
        if answer == DENIED:
            assert denial is not None and again is not None
            self._deny(conn, denial, again)
        self._handshaking = conn
        try:
            conn.handshake(self.socket.spec, limit)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, GspError) and not isinstance(exc, Closed):
                counters.dial_failed(t, "handshake")
                counters.handshake_failed(t, exc)
            raise
        finally:
            self._handshaking = None
        if self._closed:
            conn.close()
            return None
        answer, denial, rule = self._admission.before_attach(conn, again)
        if answer == DENIED:
            assert denial is not None and rule is not None
            self._deny(conn, denial, rule)
        if answer == FULL:  # the socket filled up meanwhile (a listener's pipes)
            conn.close()
            counters.pipe_refused(self._host.tally, self._tally)
            counters.dial_failed(self._tally, "rejected")
            raise ConnectionRefused(f"dial {self.url}: the socket filled up to max_pipes "
                                    f"({self._slots.limit()}) during the handshake")
        pipe = self._host.attach(conn, dialer=self, tally=self._tally)
        if pipe is None:
            counters.dial_failed(t, "rejected")
        self.pipe = pipe
        return pipe

    def _deny(self, conn: Connection, refusal: admit.Denial, rule: admit.Rule) -> None:
        """Close a connection to a server the ``admit`` rule refused, count it and raise: the
        redial loop logs it (rate limited) and backs off as after any failed attempt."""
        conn.close()
        counters.pipe_refused(self._host.tally, self._tally, refusal.reason)
        counters.dial_failed(self._tally, "rejected")
        raise ConnectionRefused(f"dial {self.url}: the server {conn.remote_address} is "
                                f"{denial_text(refusal, rule)}") from refusal.error

    def _start(self, block: bool | None) -> None:
        """See :func:`start_dialer`."""
        if dialer_log.isEnabledFor(logging.INFO):
            dialer_log.info("%s %s: dialing", self.socket.protocol, self.url,
                            extra=log.fields(self.socket, self.url))
        why: str | None = None  # why the first attempt failed
        if block and self._slots.full():
            raise ConnectionRefused(f"dial {self.url}: the socket is at max_pipes "
                                    f"({self._slots.limit()}); without fail_fast=True the dialer "
                                    f"dials once a pipe goes")
        if block is not False and not self._slots.full():
            try:
                if self._connect_once() is None:
                    if block and not self._closed:
                        raise ConnectionRefused(
                            f"dial {self.url}: the pipe was rejected (by the protocol or a hook)")
                    why = _REJECTED  # rejected at attach: wait a backoff step, too
            except GspError as exc:
                if block:
                    if dialer_log.isEnabledFor(logging.DEBUG):
                        dialer_log.debug("%s %s: dial failed: %s", self.socket.protocol, self.url,
                                         log.describe(exc, self.socket.spec),
                                         extra=log.fields(self.socket, self.url, gsp_error=exc))
                    raise
                self.last_error = exc
                why = log.describe(exc, self.socket.spec)  # wait a backoff step before the next try
        self._loop_g = self._host.spawn(self._redial_loop, why)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)

    def _attempt(self) -> str | None:
        """Dial once: ``None`` if a pipe attached, else why not (for the log)."""
        try:
            # A pipe rejected at attach (hook or protocol) backs off like a failed dial.
            if self._connect_once() is None:
                return _REJECTED
        except GspError as exc:
            self.last_error = exc
            return log.describe(exc, self.socket.spec)
        self.last_error = None
        failures = self._repeats.reset()
        if failures and dialer_log.isEnabledFor(logging.INFO):
            dialer_log.info("%s %s: connected after %d failed attempt%s", self.socket.protocol,
                            self.url, failures, "s" if failures > 1 else "",
                            extra=log.fields(self.socket, self.url, self.pipe,
                                             gsp_attempts=failures))
        return None

    def _redial_loop(self, why: str | None) -> None:
        base = self.options["reconnect_time"]
        backoff = base
        failed = why is not None
        while not self._closed:
            pipe = self.pipe
            if pipe is not None:
                pipe.wait_closed()
                self.pipe = None
                if self._closed:
                    return
                failed = True  # lost a connection: wait before redialing
                why = None
                backoff = base
            self._slots.wait()  # at max_pipes: no dial until a pipe goes
            if self._closed:
                return
            if failed:
                # Jitter keeps a crowd of dialers from redialing in lockstep.
                delay = backoff * random.uniform(0.5, 1.0)
                self._log_retry(why, delay)
                self._sleep(delay)
                cap = self.options["max_reconnect_time"]
                backoff = min(backoff * 2, cap) if cap > 0 else base
                if self._closed:
                    return
            why = self._attempt()
            failed = why is not None
            if not failed:
                backoff = base

    def _log_retry(self, why: str | None, delay: float) -> None:
        """Log the next redial: after a lost pipe at DEBUG (its detach was logged); after a failed
        attempt at WARNING, rate limited (:class:`gsp._core.log.Repeats`), else at DEBUG."""
        sock = self.socket
        if why is None:
            if dialer_log.isEnabledFor(logging.DEBUG):
                dialer_log.debug("%s %s: redialing in %.3g s", sock.protocol, self.url, delay,
                                 extra=log.fields(sock, self.url, gsp_delay=delay))
            return
        level, held = self._repeats.level()
        if dialer_log.isEnabledFor(level):
            n = self._repeats.count
            dialer_log.log(level, "%s %s: dial failed (%d in a row): %s; redialing in %.3g s%s",
                           sock.protocol, self.url, n, why, delay, log.held_note(held),
                           extra=log.fields(sock, self.url, gsp_error=self.last_error,
                                            gsp_delay=delay, gsp_attempts=n,
                                            gsp_suppressed=held))

    def reload(self) -> None:
        """As :meth:`Listener.reload`, for the dialer's next connections."""
        self._td.reload()

    def close(self, close_pipe: bool = True) -> None:
        """Stop redialing and close the dialer's pipe."""
        if self._closed:
            return
        self._closed = True
        if dialer_log.isEnabledFor(logging.DEBUG):
            dialer_log.debug("%s %s: dialer closed", self.socket.protocol, self.url,
                             extra=log.fields(self.socket, self.url))
        self._wake.set()
        self._td.close()
        g = self._loop_g
        if g is not None and g is not gevent.getcurrent():
            g.kill(block=True)
        if close_pipe and self.pipe is not None:
            self.pipe.close()
        self._host.gone(self)

    def __repr__(self) -> str:
        return f"<gsp.Dialer {self.url}>"


def start_listener(lst: "Listener") -> None:
    """Accept in the background (the socket calls this once, as it listens)."""
    if listener_log.isEnabledFor(logging.INFO):
        listener_log.info("%s %s: listening", lst.socket.protocol, lst.url,
                          extra=log.fields(lst.socket, lst.url))
    lst._accepter = lst._host.spawn(lst._accept_loop)


def start_dialer(dialer: "Dialer", block: bool | None) -> None:
    """Dial (the socket calls this once, as it dials): now and then in the background
    (``block`` None), now and raise if that fails (True: ``fail_fast``), or only in the
    background (False: ``background``)."""
    dialer._start(block)


# -- fork: what Socket._after_fork does to its endpoints (see gsp._core.fork) --------------
def forget_listener_after_fork(lst: "Listener") -> bool:
    """In a forked child: close the child's copies of the parent's descriptors (nothing
    sent): the connections in their handshake and, unless the listener keeps accepting in
    the child (``TransportListener.keep_after_fork``), the listening one, closing the listener here.
    Returns whether it keeps accepting."""
    keep = lst._keeps_after_fork()
    if not keep:
        lst._closed = True
        lst._tl.forget()
    for conn in list(lst._pending):
        conn.forget()
    lst._pending.clear()
    lst._fresh.clear()
    if not keep:
        lst._accepter = None
    return keep


def orphan_listener_after_fork(lst: "Listener") -> None:
    """In a forked child, for a socket of another OS thread: as :func:`forget_listener_after_fork`
    for a listener the child does not keep; one it keeps is left untouched."""
    if not lst._keeps_after_fork():
        forget_listener_after_fork(lst)


def accept_after_fork(lst: "Listener") -> None:
    """In a forked child, for a listener kept there: its accept loop (the parent's greenlet
    is gone) starts again."""
    if lst._accepter is not None:
        lst._accepter = lst._host.spawn(lst._accept_loop)


def forget_dialer_after_fork(dialer: "Dialer") -> None:
    """In a forked child: close the child's copies of the parent's descriptors (nothing
    sent): the transport's and the connection in its handshake."""
    dialer._td.forget()
    conn = dialer._handshaking
    if conn is not None:
        dialer._handshaking = None
        conn.forget()


def orphan_dialer_after_fork(dialer: "Dialer") -> None:
    """In a forked child, for a socket of another OS thread: as :func:`forget_dialer_after_fork`,
    and the dialer is closed."""
    dialer._closed = True
    forget_dialer_after_fork(dialer)


def redial_after_fork(dialer: "Dialer") -> None:
    """In a forked child: start over in the background (the parent's greenlets are gone)."""
    dialer.pipe = None
    dialer._wake = Event()
    if dialer._loop_g is not None:  # (else its first attempt is under way and starts the loop)
        dialer._loop_g = dialer._host.spawn(dialer._redial_loop, None)
