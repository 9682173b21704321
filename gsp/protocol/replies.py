"""The protocol bases of the two request/reply-shaped protocol pairs (req/rep,
surveyor/respondent), over the backtrace of :mod:`gsp.protocol.backtrace`.

Responders (rep, respondent) pop the backtrace, remember it, and send it back in front of the
reply; raw responders prepend the receiving pipe's id so a reply can be routed back by
:meth:`XResponder.send`. :class:`Requester` is the requester side's base (req, surveyor).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Mapping

import gevent

from ..chan import Recv, select_channels
from ..context import ContextHost, ProtocolContext
from ..errors import Closed, ProtocolStateError
from ..message import Message
from ..options import Option
from .backtrace import MAX_HOPS, TTL_OPTION, reply, split_backtrace, u32
from .inbox import Inbox
from .interface import Op, PipeHandle, Protocol, ProtocolSpec, SocketHandle, raw_or_cooked
from .routing import PipeMap
from .waiting import ChangeNotice, Deadline, Wakeup

__all__ = ["Requester", "XResponder", "Responder", "ResponderContext", "DrainingContext",
           "responder", "request_reply"]


class Requester(Protocol):
    """The receiving half shared by raw req and raw surveyor: a reply's backtrace (up to its
    first high-bit word) is parsed into the header and the message queued for ``recv``; a reply
    without one is garbage and dropped (the pipe stays). Cooked subclasses override
    :meth:`_deliver` to route replies by id instead of queueing them."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._recvq: Inbox[Message] = Inbox.for_option(handle, "block")  # back-pressure
        self.recv_queue = self._recvq

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        split = split_backtrace(data, MAX_HOPS)
        if split is not None:
            self._deliver(Message(split[1], split[0], pipe))

    def _deliver(self, msg: Message) -> None:
        try:
            self._recvq.put(msg, source=msg.pipe)  # fair across pipes
        except Closed:
            pass  # socket closing

    def recv(self, timeout: float | None) -> Message:
        return self._recvq.get(timeout)

    def close(self) -> None:
        super().close()
        self._recvq.close()


# -- responders: rep and respondent -------------------------------------------------------------
class XResponder(PipeMap):
    """Raw rep/respondent: receive puts ``<pipe id><backtrace>`` in the header; send routes by the
    header's first word (the pipe id), strips it, and sends the rest of the header back.

    A send never waits on one peer: a reply to a pipe whose queue stays full (after one yield, so
    a writer that keeps up drains it) is dropped and counted in ``stats["dropped_queue_full"]``,
    as in mangos and nng's xrep — a peer that never reads its replies cannot park every sender
    (the requester resends). A reply to a pipe that is gone (its requester hung up, or the
    pipe broke) is dropped and counted in ``stats["dropped_peer_gone"]``.

    A request whose backtrace has no high-bit word within ``ttl`` words is dropped (garbage, or
    too many hops: devices can legitimately forward those, so the pipe stays), counted in
    ``stats["dropped_ttl"]``."""

    send_never_waits = True  # a reply to a full pipe is dropped

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._recvq: Inbox[Message] = Inbox.for_option(handle, "block")  # back-pressure
        self.recv_queue = self._recvq
        self.closed = False
        self.stats["dropped_queue_full"] = 0
        self.stats["dropped_peer_gone"] = 0
        self._ttl: int = handle.options["ttl"]
        handle.watch("ttl", self._ttl_changed)
        self.stats["dropped_ttl"] = 0

    def _ttl_changed(self, value: int) -> None:
        self._ttl = value

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        if len(data) >= 4 and data[0] & 0x80:  # straight from a requester: just its id
            backtrace, body = data[:4], data[4:]
        else:
            split = split_backtrace(data, self._ttl)
            if split is None:
                self.stats["dropped_ttl"] += 1
                return
            backtrace, body = split
        self._deliver(body, backtrace, pipe)

    def _deliver(self, body: bytes, backtrace: bytes, pipe: PipeHandle) -> None:
        """Queue the request ``body`` that came on ``pipe`` with ``backtrace`` for ``recv``."""
        # Raw: the pipe id in front, for the user's reply to carry. Cooked: the context keeps
        # the pipe itself.
        header = u32(pipe.id) + backtrace if self.raw else backtrace
        try:
            # blocks: back-pressure; fair across pipes (measured inline: no Message.__len__ call)
            self._recvq.put(Message(body, header, pipe), nbytes=len(header) + len(body),
                            source=pipe)
        except Closed:
            pass  # socket closing

    def recv(self, timeout: float | None) -> Message:
        return self._recvq.get(timeout)

    def send(self, msg: Message, timeout: float | None) -> None:
        if self.closed:
            raise Closed("socket closed")
        self._route(msg.header, msg.body)

    def _route_pipe(self, header: bytes | None) -> PipeHandle | None:
        """The pipe a reply with this header (pipe id + backtrace) goes to, if it is still here."""
        if header is None or len(header) < 4:
            return None
        return self.pipes.get(int.from_bytes(header[:4], "big"))

    def _route(self, header: bytes, body: bytes) -> None:
        """Send ``body`` back along ``header`` (pipe id + backtrace) if that pipe takes it now or
        after one yield; else drop it (counted). A missing header drops it silently; a gone pipe,
        counted as ``dropped_peer_gone``: the requester resends, if it is still there."""
        pipe = self._route_pipe(header)
        if pipe is not None:
            self._reply_to(pipe, reply(header[4:], body))
        elif header is not None and len(header) >= 4:
            self.stats["dropped_peer_gone"] += 1

    def _reply_to(self, pipe: PipeHandle, out: "Message | bytes") -> None:
        """Send ``out`` (see :func:`reply`) on ``pipe`` as :meth:`_route` does."""
        if not pipe.try_send(out):
            self._reply_not_taken(pipe, out)

    def _reply_not_taken(self, pipe: PipeHandle, out: "Message | bytes") -> None:
        """``pipe.try_send(out)`` just refused ``out``: count it gone with a closed pipe, else
        (unless ``best_effort``) try once more after one loop turn, else count it dropped."""
        if pipe.closed:  # the requester resends, if it is still there
            self.stats["dropped_peer_gone"] += 1
            return
        if not self.best_effort:
            gevent.sleep(0)  # a writer that keeps up drains the queue in this turn
            if pipe.closed:
                self.stats["dropped_peer_gone"] += 1
                return
            if pipe.try_send(out):
                return
        self.stats["dropped_queue_full"] += 1

    def drain(self, timeout: float | None) -> None:
        """Take no new request (recv raises :class:`gsp.Closed`; queued and arriving requests are
        dropped, and their requesters resend once the pipe closes). Raw: replies still go out
        (a device may be forwarding them) and nothing is waited for."""
        self._recvq.close()

    def close(self) -> None:
        self.closed = True
        self._recvq.close()


class ResponderContext(ProtocolContext):
    """One rep/respondent state machine: ``recv`` a request, then ``send`` its one reply."""

    __slots__ = ("_proto", "_route", "_receiving", "_got", "_wakeup")

    def __init__(self, proto: "Responder") -> None:
        super().__init__(proto.handle)
        self._proto = proto
        # The pipe and backtrace of the request being answered.
        self._route: tuple[PipeHandle, bytes] | None = None
        self._receiving = False
        # A request handed over while parked in recv: its body and route (no Message made).
        self._got: tuple[bytes, tuple[PipeHandle, bytes]] | None = None
        # A request delivered while a receiver is parked is handed to it: never blocks.
        self._wakeup = Wakeup(proto.handle)

    def do_recv(self, timeout: float | None) -> Message:
        body = self.do_recv_body(timeout)
        assert self._route is not None  # set by the recv that just returned
        return Message(body, b"", self._route[0])

    def do_recv_body(self, timeout: float | None) -> bytes:
        if self._receiving:
            raise ProtocolStateError(f"another recv is already waiting on this {self.noun}")
        self._route = None  # a new recv abandons an unanswered request, as in nng
        self._receiving = True
        proto = self._proto
        parked: deque[ResponderContext] | None = None
        try:
            q = proto._recvq
            if q.poll():  # queued (or closed): no wait, so no case for this context's closing
                if self._closed:
                    raise Closed(f"{self.noun} closed")
                m = q.get(0)  # (a closed queue raises gsp.Closed)
                assert m.pipe is not None  # a received request came on a pipe
                body, route = m.body, (m.pipe, m.header)
            else:
                # Park on the empty queue as one of the protocol's parked receivers: the next
                # request is handed straight to the longest-parked one (no queue, no select).
                parked = proto._parked
                parked.append(self)
                deadline: Deadline | None = None
                while True:
                    if proto.closed or self._closed:
                        raise Closed("socket closed" if proto.closed else f"{self.noun} closed")
                    got = self._got
                    if got is not None:
                        self._got = None
                        body, route = got
                        break
                    if timeout is None:  # (no Deadline to make for the usual wait)
                        self._wakeup.wait(None)
                        continue
                    if deadline is None:
                        deadline = Deadline(timeout)
                    self._wakeup.wait(deadline.remaining())
        finally:
            self._receiving = False
            if parked is not None:
                got = self._got
                if got is not None:  # handed a request, then interrupted: it goes to someone else
                    self._got = None
                    proto._hand_back(*got)
                elif parked and self in parked:
                    parked.remove(self)
        self._route = route
        return body

    def do_send(self, msg: Message, timeout: float | None) -> None:
        self.do_send_body(msg.body, timeout)

    def do_send_body(self, body: bytes, timeout: float | None) -> None:
        route = self._route
        if route is None:
            raise ProtocolStateError(
                f"{self.handle.protocol} can only send a reply to a request it received")
        self._route = None  # one reply per request
        pipe, backtrace = route
        out = reply(backtrace, body)
        if not pipe.try_send(out):  # (the usual case inline: the pipe takes it at once; a
            self._proto._reply_not_taken(pipe, out)  # closed pipe takes nothing: counted there)

    def do_poll(self, op: Op) -> bool:
        if op == "recv":
            return self._receiving or self._proto._recvq.poll()
        return True  # a reply never waits (or fails at once: no request)

    def do_wake_cases(self, op: Op) -> list[Recv]:
        return [self._proto._recvq.wake_case()] if op == "recv" else []

    def on_close(self) -> None:
        self._route = None
        parked = self._proto._parked
        if self in parked:  # a closed context is never handed a request
            parked.remove(self)
        self._proto.forget(self)
        self._wakeup.wake()


class Responder(ContextHost, XResponder):
    """Cooked rep/respondent: the raw routing plus a reply state machine per context.

    A context whose ``recv`` finds the queue empty parks itself; while any is parked (so the
    queue is empty), a request goes straight to the one parked longest. Selects and pollers
    still wait on the queue: it fills once nobody is parked."""

    def __init__(self, handle: SocketHandle, raw: bool) -> None:
        super().__init__(handle, raw)
        self._parked: deque[ResponderContext] = deque()
        self.host_contexts(ResponderContext(self))
        #: While draining: fired when a context's request ended (:class:`DrainingContext`).
        self.drained: ChangeNotice | None = None

    def new_context(self) -> ResponderContext:
        return ResponderContext(self)

    def pipe_recv(self, pipe: PipeHandle, data: bytes) -> None:
        # The usual request, inline: straight from a requester (its id alone is the backtrace),
        # with a receiver parked and so nothing queued. (_deliver and _hand_over, in one call.)
        parked = self._parked
        if parked and len(data) >= 4 and data[0] & 0x80 and not len(self._recvq):
            ctx = parked.popleft()  # (open: a context leaves the parked ones as it closes)
            ctx._got = (data[4:], (pipe, data[:4]))
            ctx._wakeup.wake()
            return
        super().pipe_recv(pipe, data)

    def _deliver(self, body: bytes, backtrace: bytes, pipe: PipeHandle) -> None:
        if self._parked and not len(self._recvq) and self._hand_over(body, (pipe, backtrace)):
            return  # (no Message made: the receiver takes body and route as they are)
        super()._deliver(body, backtrace, pipe)  # may wait for room
        # A put that waited may land after every receiver parked on the queue it left empty
        # (parked receivers do not watch the queue): hand them what is queued now.
        parked, q = self._parked, self._recvq
        while parked and len(q):
            m = q.get(0)
            assert m.pipe is not None  # a queued request came on a pipe
            self._hand_over(m.body, (m.pipe, m.header))

    def _hand_over(self, body: bytes, route: tuple[PipeHandle, bytes]) -> bool:
        """Give the request ``body`` (its ``route``: pipe and backtrace) to the receiver parked
        longest, if one is parked (a context leaves the parked ones as it closes)."""
        parked = self._parked
        if not parked:
            return False
        ctx = parked.popleft()
        ctx._got = (body, route)
        ctx._wakeup.wake()
        return True

    def _hand_back(self, body: bytes, route: tuple[PipeHandle, bytes]) -> None:
        """A request handed to a receiver that then left (interrupted, or closed): to the next
        parked one, else to the head of the queue (never lost, never waits)."""
        if not self._hand_over(body, route):
            pipe, backtrace = route
            self._recvq.put_back(Message(body, backtrace, pipe), pipe)

    def drain(self, timeout: float | None) -> None:
        """Take no new request (new contexts and every recv raise :class:`gsp.Closed`, parked
        receivers are woken with it; requests queued or arriving are dropped, and their
        requesters resend once the pipe closes), and wait until every context answered (or
        abandoned: a recv, or its close) the request it took. Replies still go out."""
        self.closed = True
        self._recvq.close()
        parked, self._parked = self._parked, deque()
        for ctx in parked:
            ctx._wakeup.wake()
        done = self.drained = ChangeNotice()
        contexts = [c for c in [self._default, *self._contexts] if not c.closed]
        for ctx in contexts:  # from now on each tells the drain when its request ends
            ctx.__class__ = _DrainingResponderContext
        deadline = Deadline(timeout)
        while any(c._route is not None and not c.closed for c in contexts):
            select_channels([done.case()], deadline.remaining())

    def close(self) -> None:
        super().close()
        self.close_contexts()


class DrainingContext(ProtocolContext):
    """Base of the class a draining host gives each of its open contexts from then on
    (``ctx.__class__ = ...``; req's and rep's drains): a subclass lists it before the context's
    own class and calls :meth:`ended` where the work the context holds ends; :meth:`ended` wakes
    the drain (it fires the host's ``drained`` :class:`ChangeNotice`, set by its drain). A recv ends
    that work, whatever it returns or raises. Only while draining, so the usual calls pay
    nothing for it."""

    __slots__ = ()
    _proto: Any  # the host (the context's own class sets it): its ``drained`` ChangeNotice

    def do_recv_body(self, timeout: float | None) -> bytes:
        try:
            return super().do_recv_body(timeout)
        finally:
            self.ended()

    def ended(self) -> None:
        """Wake the drain: the work this context held ended. Raises nothing."""
        done = self._proto.drained
        if done is not None:
            done.fire()


class _DrainingResponderContext(DrainingContext, ResponderContext):
    """A context of a draining :class:`Responder`: the end of its request (the reply sent, a
    recv, its close) wakes the drain."""

    __slots__ = ()

    def do_send_body(self, body: bytes, timeout: float | None) -> None:
        try:
            super().do_send_body(body, timeout)
        finally:
            self.ended()

    def on_close(self) -> None:
        super().on_close()
        self.ended()


#: The factory of rep and respondent (and any protocol with their state machine): the wire
#: behaviour is identical, only the numbers differ.
responder = raw_or_cooked(XResponder, Responder)


def request_reply(requester: str, number: int, responder_name: str, responder_number: int,
                  raw: Callable[[SocketHandle, bool], Protocol],
                  cooked: Callable[[SocketHandle, bool], Protocol],
                  options: Mapping[str, Option] | None = None,
                  methods: tuple[str, ...] = ()) -> list[ProtocolSpec]:
    """The two :class:`ProtocolSpec` of a request/reply-shaped pair (req/rep, surveyor/respondent,
    the example's scatter/gather): the requester, made of ``raw`` or ``cooked``, with its own
    ``options`` and ``methods``; and the responder, rep's state machine (:data:`responder`) under
    its own name and number, with the ``ttl`` option."""
    return [
        ProtocolSpec(requester, number, responder_name, responder_number,
                     raw_or_cooked(raw, cooked), options=options, methods=methods),
        ProtocolSpec(responder_name, responder_number, requester, number, responder,
                     options={"ttl": TTL_OPTION}),
    ]
