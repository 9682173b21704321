"""surveyor/respondent, nng 1.9 semantics, with contexts and raw (device) modes.

A surveyor broadcasts a survey (id u32 BE, high bit set) to every respondent without blocking and
collects replies until ``survey_time`` passes; then ``recv`` raises :class:`gsp.Timeout` and late
replies are discarded. A new survey on the same context cancels the previous one. The respondent
is the responder of :mod:`gsp.protocol.replies` (the same state machine as rep).
"""

from __future__ import annotations

from typing import Any

from ..chan import CLOSED, Chan, Recv, select_channels
from ..errors import Canceled, Closed, ProtocolStateError, Timeout, WouldBlock
from ..hookspecs import hookimpl
from ..message import Message
from ..options import Option, duration
from ..protocol import (
    ChangeNotice,
    ContextHost,
    ContextOption,
    IdMap,
    Op,
    PipeHandle,
    ProtocolContext,
    ProtocolSpec,
    Requester,
    SocketHandle,
    broadcast,
    call_later,
    request_reply,
    u32,
)

_check_survey = duration()
SURVEY_TIME = Option("survey_time", 1.0, _check_survey,
                     "seconds a survey collects replies; None = until the next survey")


class XSurveyor(Requester):
    """Raw surveyor: send puts header+body as given on every pipe with room (never blocks: a
    respondent whose queue is still full after one yield misses that survey, counted in
    ``stats["dropped_queue_full"]``); replies arrive with their backtrace parsed into the
    header."""

    send_never_waits = True  # a respondent whose queue is full misses the survey

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._pipes: list[PipeHandle] = []
        self.closed = False
        self.stats["dropped_queue_full"] = 0

    def add_pipe(self, pipe: PipeHandle) -> None:
        self._pipes.append(pipe)

    def remove_pipe(self, pipe: PipeHandle) -> None:
        if pipe in self._pipes:
            self._pipes.remove(pipe)

    def send(self, msg: Message, timeout: float | None) -> None:
        if self.closed:
            raise Closed("socket closed")
        if not self._pipes:
            self.check_no_peers()  # NoPeers with fail_no_peers; else the survey goes nowhere
        self.stats["dropped_queue_full"] += broadcast(self._pipes, msg)

    def drain(self, timeout: float | None) -> None:
        """No new survey (:class:`gsp.Closed`, from contexts too); replies to the last ones
        are received until the socket closes, not waited for."""
        self.closed = True
        super().drain(timeout)

    def close(self) -> None:
        self.closed = True
        super().close()


class _Survey:
    """One survey's reply queue; ``expired`` tells a woken receiver why the queue closed."""

    __slots__ = ("id", "replies", "expired", "time")

    def __init__(self, sid: int, capacity: int, time: float | None) -> None:
        self.id = sid
        self.replies: Chan[Message] = Chan(capacity)
        self.expired = False
        self.time = time  # survey_time it was sent with


def _expired(survey: _Survey) -> Timeout:
    # Not a wait running out (no .timeout): the survey's own time did.
    return Timeout(f"recv: the survey expired (survey_time={survey.time:g} s); "
                   "send a new survey to receive again")


class SurveyContext(ProtocolContext):
    """One survey at a time: ``send`` a survey, then ``recv`` replies until it expires."""

    #: Seconds a survey collects replies; None = until the next survey. The default context
    #: follows the socket's ``survey_time``; an opened one starts with its value then.
    survey_time = ContextOption(_check_survey)

    __slots__ = ("_proto", "_survey", "_timer", "_changed")

    def __init__(self, proto: "Surveyor") -> None:
        super().__init__(proto.handle)
        self._proto = proto
        self._survey: _Survey | None = None  # the current (or last expired) survey
        self._timer: Any = None
        self._changed = ChangeNotice()  # a reply arrived, the survey ended or expired (for selects)

    def do_send(self, msg: Message, timeout: float | None) -> None:
        proto = self._proto
        if not proto._pipes:
            proto.check_no_peers()  # before the survey starts: the last one carries on
        self._end()
        sid = proto._ids.alloc(self)
        t = self.survey_time
        survey = self._survey = _Survey(sid, self.handle.options["recv_buffer"], t)
        if t is not None:
            self._timer = call_later(t, self._expire, survey)
        proto._broadcast(Message(msg.body, u32(sid)))

    def do_recv(self, timeout: float | None) -> Message:
        survey = self._survey
        if survey is None:
            raise ProtocolStateError("surveyor must send a survey before it can receive")
        if survey.expired:
            raise _expired(survey)
        i, m = select_channels([Recv(survey.replies), self.closing_case()], timeout)
        if i == 1 or self._closed:
            raise Closed(f"{self.noun} closed")
        if m is CLOSED:
            if survey.expired:
                raise _expired(survey)
            raise Canceled(f"survey canceled by a newer survey on this {self.noun}")
        reply: Message = m
        return reply

    def _got(self, sid: int, reply: Message) -> None:
        survey = self._survey
        if survey is not None and survey.id == sid:
            try:
                survey.replies.send(reply, block=False)
            except (WouldBlock, Closed):
                return  # queue full: like nng, drop rather than stall the pipe
            self._changed.fire()

    def _expire(self, survey: _Survey) -> None:
        # Runs in the hub: only non-blocking work.
        if self._survey is survey and not survey.expired:
            self._end()
            survey.expired = True
            self._survey = survey  # keep it: recv now raises Timeout until the next survey

    def _end(self) -> None:
        """Stop the current survey: unregister its id, discard its queued replies."""
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        survey, self._survey = self._survey, None
        if survey is not None and not survey.expired:
            self._proto._ids.pop(survey.id)
            survey.replies.close()  # wakes blocked receivers with CLOSED
        self._changed.fire()

    def do_poll(self, op: Op) -> bool:
        survey = self._survey
        if op == "send" or survey is None or survey.expired:
            return True  # a survey never waits; a recv without one fails at once
        return len(survey.replies) > 0 or survey.replies.closed

    def do_wake_cases(self, op: Op) -> list[Recv]:
        return [] if op == "send" else [self._changed.case()]

    def on_close(self) -> None:
        self._end()
        self._proto.forget(self)


class Surveyor(ContextHost, XSurveyor):
    """Cooked surveyor: survey ids and deadlines per context; replies routed by id."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._ids = IdMap()
        self.host_contexts(SurveyContext(self))

    def new_context(self) -> SurveyContext:
        ctx = SurveyContext(self)
        ctx.own_options("survey_time")
        return ctx

    def _broadcast(self, msg: Message) -> None:
        XSurveyor.send(self, msg, None)

    def _deliver(self, msg: Message) -> None:
        h = msg.header
        if len(h) != 4:
            return  # not a reply to a survey of ours
        sid = int.from_bytes(h, "big")
        ctx = self._ids.get(sid)
        if ctx is not None:  # else late (expired or canceled survey): discard
            ctx._got(sid, Message(msg.body, b"", msg.pipe))

    def close(self) -> None:
        super().close()
        self.close_contexts()


@hookimpl
def gsp_protocols() -> list[ProtocolSpec]:
    return request_reply("surveyor", 0x62, "respondent", 0x63, XSurveyor, Surveyor,
                         {"survey_time": SURVEY_TIME})
