"""req/rep (request/reply), nng 1.9 semantics, with contexts and raw (device) modes.

REQ stamps each request with an id (u32 BE, high bit set), keeps it until the matching reply
arrives, resends it every ``resend_time`` and at once on another pipe when the pipe carrying it
dies. REP is the responder of :mod:`gsp.protocol.replies` (respondent is the same state machine).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from time import perf_counter
from typing import Any

import gevent

from ..chan import Recv, select_channels
from ..errors import (
    Canceled,
    Closed,
    ConnectionBroken,
    GspError,
    NoPeers,
    ProtocolStateError,
    Timeout,
    WouldBlock,
)
from ..hookspecs import hookimpl
from ..message import Message
from ..options import Option, duration
from ..protocol import (
    Alarm,
    ChangeNotice,
    ContextHost,
    ContextOption,
    Deadline,
    DrainingContext,
    Histogram,
    IdMap,
    Op,
    PipeHandle,
    ProtocolContext,
    ProtocolSpec,
    Requester,
    RoundRobin,
    SocketHandle,
    Wakeup,
    reply,
    request_reply,
    send_wake_cases,
)

_check_resend = duration()
RESEND_TIME = Option("resend_time", 60.0, _check_resend,
                     "seconds before req resends an unanswered request; 0 or None never")
_clock = perf_counter
_bucket = bisect_left
#: What req counts, per context and per socket (docs/stats.md).
REQ_COUNTERS = ("requests_resent", "requests_timed_out", "requests_canceled")


class XReq(Requester, RoundRobin):
    """Raw req: sends header+body as given to one pipe (round robin, waiting for room); replies
    arrive with their backtrace (up to the first high-bit word) parsed into the header.
    (``changed`` also fires when the cooked send queue changes.)"""


class ReqContext(ProtocolContext):
    """One outstanding request at a time: ``send`` a request, then ``recv`` its reply.

    A new ``send`` cancels the outstanding request (a late reply to it is discarded and a ``recv``
    still waiting for it raises :class:`gsp.Canceled`, a :class:`gsp.ProtocolStateError`). A ``recv`` that times out also
    cancels it, as in nng, so each request gets at most one ``recv``.
    """

    #: Seconds before an unanswered request is sent again; 0 or None never resends. The default
    #: context follows the socket's ``resend_time``; an opened one starts with its value then.
    resend_time = ContextOption(_check_resend)

    __slots__ = ("_proto", "_id", "_msg", "_pipe", "_reply", "_reply_pipe", "_queued", "_sent_id",
                 "_broken", "_receiving", "_resend_at", "_changed", "_wakeup", "_sent_at", "_rtt",
                 "_counts")

    def __init__(self, proto: "Req") -> None:
        super().__init__(proto.handle)
        self._proto = proto
        self._id: int | None = None  # outstanding request id (registered in proto._ids)
        # The request as sent, kept for resends: one bytes (id and body) if it is small, so
        # that it is written without a Message or a join; else a Message (no copy of the body).
        self._msg: Message | bytes | None = None
        self._pipe: PipeHandle | None = None  # the pipe carrying it, None while queued
        self._reply: bytes | None = None  # the reply's body, once it came (on _reply_pipe)
        self._reply_pipe: PipeHandle | None = None
        self._queued = False  # in proto._pending, waiting for a pipe with room
        self._sent_id: int | None = None  # last request handed to a pipe (a blocked send waits)
        # Why the next recv fails at once: its pipe died with resend disabled
        # (ConnectionBroken), or with fail_no_peers and no other pipe (NoPeers).
        self._broken: GspError | None = None
        self._receiving = False
        self._resend_at: float | None = None  # loop time the request goes again (None: never)
        self._changed = ChangeNotice()  # for selects and a blocked send
        # For the one recv that may wait (no select, no channel); no reply's delivery blocks.
        self._wakeup = Wakeup(proto.handle, batches=True)
        self._sent_at = 0.0  # perf_counter() when the user sent the outstanding request
        self._rtt = Histogram()  # round trips: the user's send to the reply's arrival
        self._counts = dict.fromkeys(REQ_COUNTERS, 0)

    # -- user side -------------------------------------------------------------------------------
    def do_send(self, msg: Message, timeout: float | None) -> None:
        self.do_send_body(msg.body, timeout)

    def do_send_body(self, body: bytes, timeout: float | None) -> None:
        proto = self._proto
        if self._id is not None or self._reply is not None or self._broken:
            self._cancel(canceled=True)  # (nothing to cancel or wake in the usual turn)
        rid = proto._ids.alloc(self)
        self._id = rid
        self._sent_at = _clock()
        self._msg = out = reply(rid.to_bytes(4, "big"), body)
        if not proto._pending:  # fast path; otherwise queue behind earlier requests
            pipes = proto.pipes
            if len(pipes) == 1:  # the usual case: one pipe takes no turn (try_next's, inline)
                pipe = pipes[0] if pipes[0].try_send(out) else None
            else:
                pipe = proto.try_next(out)
            if pipe is not None:
                # (_dispatched inline, for the usual request: sent by this greenlet, so nobody
                # waits to know; a resend due; the pipe alive)
                self._pipe = pipe
                self._sent_id = rid
                own = self._own  # an opened context has its own resend_time
                t = own["resend_time"] if "resend_time" in own else proto._resend_time
                if t:  # (the pipe took it just now: open, and remove_pipe will find us on it)
                    self._resend_at = proto._resends.arm_in(t)
                    return
                self._dispatched(pipe, False)
                return
        self._send_queued(rid, timeout)

    def _send_queued(self, rid: int, timeout: float | None) -> None:
        """Request ``rid`` found no pipe with room: queue it (``Req._flush`` hands it to one) and
        wait up to ``timeout`` until it went. With ``best_effort`` return at once (it stays
        queued: sent when a pipe has room, as mangos' RetryLateConnect)."""
        proto = self._proto
        if not proto.pipes:
            self._no_peers("send")  # NoPeers with fail_no_peers (the request is canceled)
        proto._queue(self)
        if proto.best_effort:
            return
        deadline = Deadline(timeout)
        while True:
            if self._closed:
                raise Closed(f"{self.noun} closed")
            if self._sent_id == rid:  # before the id check: the reply may already be in
                return
            if self._id != rid:
                raise self._ended_error()
            try:
                select_channels([self._changed.case()], deadline.remaining())
            except (Timeout, WouldBlock):
                self._timed_out()
                raise

    def _ended_error(self) -> GspError:
        """Why the request a call waits for ended: its pipe died for good or the last pipe went
        (the error ``_pipe_lost``/``_lost_peers`` left, taken), else a newer request."""
        broken = self._broken
        if broken is not None:
            self._broken = None
            return broken
        return Canceled(f"request canceled by a newer request on this {self.noun}")

    def do_recv(self, timeout: float | None) -> Message:
        body = self.do_recv_body(timeout)
        return Message(body, b"", self._reply_pipe)

    def do_recv_body(self, timeout: float | None) -> bytes:
        if self._receiving or self._id is None and self._reply is None:
            raise self._recv_refused()
        rid = self._id
        deadline: Deadline | None = None
        self._receiving = True
        try:
            while True:
                reply = self._reply
                if reply is not None:
                    self._reply = None
                    return reply
                if self._closed or self._broken is not None or self._id != rid \
                        or self._pipe is None and not self._proto.pipes:
                    self._check_wait(rid)  # (one test on the usual path: nothing is wrong)
                if timeout is None:  # (no Deadline to make for the usual wait)
                    left = None
                else:
                    if deadline is None:
                        deadline = Deadline(timeout)
                    try:
                        left = deadline.remaining()
                    except (Timeout, WouldBlock):
                        self._timed_out()  # nng: a failed recv ends the request
                        raise
                self._wakeup.wait(left)
        finally:
            self._receiving = False

    def _recv_refused(self) -> GspError:
        """Why a recv cannot start: another recv waits, or no request is out (its pipe died:
        the error left by ``_pipe_lost``/``_lost_peers``, taken)."""
        if self._receiving:
            return ProtocolStateError(f"another recv is already waiting on this {self.noun}")
        broken = self._broken
        if broken is not None:
            self._broken = None
            return broken
        return ProtocolStateError("req must send a request before it can receive")

    def _check_wait(self, rid: int | None) -> None:
        """A recv of request ``rid`` is about to wait: raise if it never can end (the context
        closed, the request ended: :meth:`_ended_error`), or if it is queued with no pipe to go
        on and ``fail_no_peers`` set (:class:`gsp.NoPeers`); else return (it waits for a pipe)."""
        if self._closed:
            raise Closed(f"{self.noun} closed")
        if self._broken is not None or self._id != rid:
            raise self._ended_error()
        self._no_peers("recv")

    def do_poll(self, op: Op) -> bool:
        if op == "send":
            return self._proto._send_ready()
        # Ready unless a request is out with no reply yet (recv would wait for it).
        return (self._id is None or self._reply is not None or self._broken is not None
                or self._receiving)

    def do_wake_cases(self, op: Op) -> list[Recv]:
        if op == "send":
            return self._proto._send_wake_cases()
        return [self._changed.case()]

    def on_close(self) -> None:
        self._cancel(canceled=True)
        self._proto.forget(self)
        self._proto.fold(self)

    @property
    def stats(self) -> dict[str, int]:
        return dict(self._counts)

    @property
    def histograms(self) -> dict[str, dict[str, Any]]:
        return {"request_rtt_seconds": self._rtt.snapshot()}

    # -- protocol side ---------------------------------------------------------------------------
    def _count(self, key: str) -> None:
        """One more ``key`` event, on this context and on its socket (rare paths only)."""
        self._counts[key] += 1
        self._proto.stats[key] += 1

    def _timed_out(self) -> None:
        self._count("requests_timed_out")
        self._cancel()

    def _cancel(self, canceled: bool = False) -> None:
        """Forget the outstanding request (if any) and wake whoever waits on it; ``canceled``:
        the user gave up on it (a newer request, a close), counted if it was still unanswered."""
        if self._id is not None:
            if canceled:
                self._count("requests_canceled")
            self._proto._ids.pop(self._id)
        self._id = self._msg = self._pipe = self._reply = self._reply_pipe = None
        self._broken = None
        self._disarm()
        self._proto._unqueue(self)
        self._notify()

    def _dispatched(self, pipe: PipeHandle, notify: bool = True) -> None:
        self._pipe = pipe
        self._sent_id = self._id
        own = self._own  # an opened context has its own resend_time; the default follows
        t = own["resend_time"] if "resend_time" in own else self._proto._resend_time
        if t:
            self._resend_at = self._proto._resends.arm_in(t)
        else:
            self._resend_at = None
        if pipe.closed:  # died before remove_pipe could see us on it
            self._pipe_lost()
        if notify:  # a send waiting for its request to go (see do_send_body), a select
            self._notify()

    def _no_peers(self, op: str) -> None:
        """The request has no pipe to go on and the socket none at all: with ``fail_no_peers``
        cancel it and raise :class:`gsp.NoPeers`; else return (it waits for a pipe)."""
        try:
            self._proto.check_no_peers(op)
        except NoPeers:
            self._cancel()
            raise

    def _lost_peers(self) -> None:
        """The socket's last pipe went with ``fail_no_peers`` set: fail the outstanding request
        (its recv, or its send still waiting to go, raises :class:`gsp.NoPeers`)."""
        self._cancel()
        self._broken = NoPeers("recv: the last pipe of this req socket closed with the request "
                               "unanswered (fail_no_peers=True)")

    def _resend_due(self) -> None:
        # Runs in the hub (from Req._resend_sweep): only non-blocking work.
        self._resend_at = None
        if self._id is not None and self._reply is None and not self._closed:
            self._pipe = None
            self._count("requests_resent")
            self._proto._queue(self)

    def _pipe_lost(self) -> None:
        self._pipe = None
        if self.resend_time:
            self._disarm()
            self._count("requests_resent")
            self._proto._queue(self, front=True)  # resend at once on another pipe
        else:
            # Not idempotent, so don't resend: fail the recv instead (nng: ECONNRESET).
            self._cancel()
            self._broken = ConnectionBroken("the pipe carrying the request closed (resend "
                                            "disabled)")

    def _notify(self) -> None:
        """Something changed: wake selects (the ChangeNotice) and a waiting recv."""
        self._changed.fire()
        self._wakeup.wake()

    def _disarm(self) -> None:
        self._resend_at = None  # the sweep skips it


class Req(ContextHost, XReq):
    """Cooked req: contexts whose requests share a FIFO queue onto the socket's pipes."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._ids = IdMap()
        self._live = self._ids.live  # (its dict, kept: pipe_recv pops replies' ids from it)
        self._pending: deque[ReqContext] = deque()  # contexts waiting for a pipe with room
        self._flusher: "gevent.Greenlet | None" = None
        self._resends = Alarm(self._resend_sweep)  # one timer for every context's resend
        self._resend_time: float | None = handle.options["resend_time"]  # the socket's
        handle.watch("resend_time", self._resend_time_changed)
        self.stats.update(dict.fromkeys(REQ_COUNTERS, 0))
        self._rtt_closed = Histogram()  # the round trips of contexts closed since
        self.host_contexts(ReqContext(self))
        #: While draining: fired when a context's request ended (:class:`DrainingContext`).
        self.drained: ChangeNotice | None = None

    def _resend_time_changed(self, value: float | None) -> None:
        self._resend_time = value

    def fold(self, ctx: ReqContext) -> None:
        """A context closed: keep its round trips in the socket's histogram."""
        self._rtt_closed.add(ctx._rtt)

    def histograms(self) -> dict[str, dict[str, Any]]:
        live: list[Any] = [c for c in self.contexts() if not c.closed]
        rtt = Histogram.total([self._rtt_closed, *(c._rtt for c in live)])
        return {"request_rtt_seconds": rtt.snapshot()}

    def new_context(self) -> ReqContext:
        ctx = ReqContext(self)
        ctx.own_options("resend_time")
        return ctx

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        # A reply to us carries just the request id (a bare id is all a cooked req ever sends):
        # its first word has the high bit set. Anything else is not ours and is dropped.
        if len(data) >= 4 and data[0] & 0x80:
            ctx = self._live.pop(int.from_bytes(data[:4], "big"), None)  # (IdMap.pop inline)
            if ctx is None:
                return  # late (canceled, timed out, already answered): discarded
            # Its context's request ends here. (Its _disarm, _unqueue and _notify inline, and
            # the round trip into its histogram as Histogram.observe would: this runs between a
            # reply's read and its recv.)
            rtt = ctx._rtt
            took = _clock() - ctx._sent_at
            rtt.counts[_bucket(rtt.bounds, took)] += 1
            rtt.sum += took
            ctx._id = ctx._msg = ctx._pipe = ctx._resend_at = None
            ctx._reply = data[4:]
            ctx._reply_pipe = pipe
            if ctx._queued:
                self._unqueue(ctx)
            changed = ctx._changed
            if changed.armed:  # (a select may wait on it; else the call is saved)
                changed.fire()
            ctx._wakeup.wake()
            if self.drained is not None and isinstance(ctx, DrainingContext):
                ctx.ended()  # (for a recv waiting since before the drain: see drain)

    def remove_pipe(self, pipe: PipeHandle) -> None:
        super().remove_pipe(pipe)
        if not self.pipes and not self.closed and self.handle.options["fail_no_peers"]:
            for ctx in self._ids.owners():  # every request out: none has a pipe to go on
                ctx._lost_peers()
            return
        for ctx in self._ids.owners():
            if ctx._pipe is pipe:
                ctx._pipe_lost()

    # -- the send queue --------------------------------------------------------------------------
    def _send_ready(self) -> bool:
        """Whether a request sent now would go out at once (or fail at once)."""
        return self.closed or self.best_effort or \
            not self._pending and any(p.has_room() for p in self.pipes) or \
            not self.pipes and self.handle.options["fail_no_peers"]  # (fails at once)

    def _send_wake_cases(self) -> list[Recv]:
        return send_wake_cases(self.pipes, self.changed)  # changed: pipes or queue changed

    def _queue(self, ctx: ReqContext, front: bool = False) -> None:
        if ctx._queued or self.closed:
            return
        ctx._queued = True
        if front:
            self._pending.appendleft(ctx)
            self.changed.fire()  # the flusher may be waiting on behalf of another head
        else:
            self._pending.append(ctx)
        if self._flusher is None:
            self._flusher = self.handle.spawn(self._flush)

    def _unqueue(self, ctx: ReqContext) -> None:
        if ctx._queued:
            ctx._queued = False
            self._pending.remove(ctx)
            self.changed.fire()

    def _flush(self) -> None:
        """Hand queued requests, oldest first, to pipes as room appears (nng's send queue)."""
        try:
            while self._pending and not self.closed:
                ctx = self._pending[0]
                msg = ctx._msg
                assert msg is not None  # a queued context has a request to send
                pipe = self.try_next(msg)
                if pipe is None:
                    pipe = self.wait_next(msg, None)
                    if pipe is None or not (self._pending and self._pending[0] is ctx
                                            and ctx._msg is msg):
                        continue  # pipes or queue changed; or canceled meanwhile (the stray
                        # copy's reply is discarded)
                self._pending.popleft()
                ctx._queued = False
                ctx._dispatched(pipe)
        finally:
            self._flusher = None

    def _resend_sweep(self) -> None:
        """The resend alarm went off (in the hub): resend what is due, re-arm for the rest."""
        now = self._resends.now()
        nxt = float("inf")
        for ctx in self._ids.owners():
            at = ctx._resend_at
            if at is None:
                continue
            if at <= now:
                ctx._resend_due()
            elif at < nxt:
                nxt = at
        if nxt != float("inf") and not self.closed:
            self._resends.arm(nxt)

    def drain(self, timeout: float | None) -> None:
        """Send no new request (:class:`gsp.Closed`); the requests out still go, are resent and
        get their replies: wait until each is received by its recv (or ends: canceled, timed
        out, its context closed, its pipe lost for good)."""
        done = self.drained = ChangeNotice()
        contexts = [c for c in [self._default, *self._contexts] if not c.closed]
        for ctx in contexts:  # from now on each refuses new requests and tells the drain
            ctx.__class__ = _DrainingReqContext
        deadline = Deadline(timeout)
        while True:
            busy = [c for c in contexts
                    if not c.closed and (c._id is not None or c._reply is not None)]
            if not busy:
                return
            if any(c._receiving and c._reply is not None for c in busy):
                # A recv that was waiting when the drain began (in ReqContext's own method,
                # which tells nobody) is taking its reply now: let it run, then look again.
                gevent.sleep(0.001)
                deadline.remaining()
                continue
            select_channels([done.case()], deadline.remaining())

    def close(self) -> None:
        self.closed = True
        self._resends.close()
        self.close_contexts()
        super().close()


class _DrainingReqContext(DrainingContext, ReqContext):
    """A context of a draining :class:`Req`: new requests raise :class:`gsp.Closed`; the end of
    the request out (its reply received, canceled, closed) wakes the drain."""

    __slots__ = ()

    def do_send_body(self, body: bytes, timeout: float | None) -> None:
        raise Closed(f"req {self.noun} is draining: it sends no new request")

    def _cancel(self, canceled: bool = False) -> None:
        super()._cancel(canceled)
        self.ended()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return request_reply("req", 0x30, "rep", 0x31, XReq, Req, {"resend_time": RESEND_TIME})
