"""The protocol-author SDK: everything a protocol plugin needs, in one import (as mangos'
``protocol.go``).

* The interface (:mod:`.interface`): :class:`Protocol`, :class:`ProtocolSpec`, the handles a
  protocol sees the socket and its pipes through (:class:`SocketHandle`, :class:`PipeHandle`),
  :func:`overrides` (how an optional hook is found) and the small types around them.
* Contexts: :class:`ProtocolContext` (the base of a protocol's contexts, which a user sees as
  :class:`gsp.Context`), :class:`ContextHost`, :class:`ContextOption`, :class:`Wakeup`.
* Routing (:mod:`.routing`): :class:`RoundRobin` and :class:`PipeMap`, the bases of the two ways
  SP protocols route a message out, and :func:`broadcast`.
* Request/reply: the backtrace header and its ids (:mod:`.backtrace`), and the bases built on
  them (:mod:`.replies`: :class:`Requester`, :class:`Responder` and friends), shared by req/rep
  and surveyor/respondent.
* The receive queue (:mod:`.inbox`): :class:`Inbox`; waiting helpers (:mod:`.waiting`):
  :class:`ChangeNotice`, :class:`Deadline`, :class:`Alarm`, :func:`call_later`.
* Declaring an option: :class:`Option` (its validators are in :mod:`gsp.options`). A plugin
  registers with :data:`gsp.hookimpl`.

The conformance kit for a protocol is :class:`gsp.testing.ProtocolSuite`.
"""

from __future__ import annotations

from .._lazy import moved
from ..context import ContextHost, ContextOption, ProtocolContext
from ..message import JOIN_MAX, Message
from ..options import Option
from .backtrace import HIGH_BIT, MAX_HOPS, TTL_OPTION, IdMap, reply, split_backtrace, u32
from .histogram import LATENCY_BOUNDS, Histogram
from .inbox import Inbox, Policy
from .interface import (
    LendingWait,
    Op,
    PipeHandle,
    Protocol,
    ProtocolSpec,
    RecvQueue,
    RejectPipe,
    SocketHandle,
    check_op,
    overrides,
    raw_or_cooked,
)
from .replies import (
    DrainingContext,
    Requester,
    Responder,
    ResponderContext,
    XResponder,
    request_reply,
    responder,
)
from .routing import PipeMap, RoundRobin, broadcast, send_wake_cases
from .waiting import Alarm, ChangeNotice, Deadline, Wakeup, call_later

__all__ = [
    # the interface
    "Protocol", "ProtocolSpec", "SocketHandle", "PipeHandle", "RejectPipe", "RecvQueue",
    "LendingWait", "Op", "check_op", "overrides", "raw_or_cooked",
    # contexts
    "ProtocolContext", "ContextHost", "ContextOption",
    # routing
    "RoundRobin", "PipeMap", "broadcast", "send_wake_cases",
    # request/reply
    "HIGH_BIT", "MAX_HOPS", "TTL_OPTION", "u32", "split_backtrace", "reply", "IdMap", "Requester",
    "XResponder", "Responder", "ResponderContext", "DrainingContext", "responder",
    "request_reply",
    # queues and waiting
    "Inbox", "Policy", "ChangeNotice", "Deadline", "Alarm", "call_later", "Wakeup",
    # statistics
    "Histogram", "LATENCY_BOUNDS",
    # options, messages
    "Option", "Message", "JOIN_MAX",
]

# Old spellings (docs/api-guide.md, "Renamed names").
__getattr__ = moved(__name__, {"Context": ("gsp.protocol", "ProtocolContext"),
                               "hookimpl": ("gsp", "hookimpl")})
