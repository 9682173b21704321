"""The protocol-author SDK: everything a protocol plugin needs, in one import (as mangos'
``protocol.go``).

* The interface (:mod:`.interface`): :class:`Protocol`, :class:`ProtocolSpec`, the handles a
  protocol sees the socket and its pipes through (:class:`SocketHandle`, :class:`PipeHandle`),
  :func:`overrides` (how an optional hook is found) and the small types around them.
* Contexts: :class:`Context` (the base of a protocol's contexts; also the user's
  :class:`gsp.Context`), :class:`ContextHost`, :class:`ContextOption`, :class:`Wakeup`.
* Routing (:mod:`.routing`): :class:`RoundRobin` and :class:`PipeMap`, the bases of the two ways
  SP protocols route a message out, and :func:`broadcast`.
* Request/reply: the backtrace header and its ids (:mod:`.backtrace`), and the bases built on
  them (:mod:`.replies`: :class:`Requester`, :class:`Responder` and friends), shared by req/rep
  and surveyor/respondent.
* The receive queue (:mod:`.inbox`): :class:`Inbox`; waiting helpers (:mod:`.waiting`):
  :class:`Signal`, :class:`Deadline`, :class:`Alarm`, :func:`call_later`.
* Declaring options: :class:`Option` and its validators; registering: :data:`hookimpl`.

The conformance kit for a protocol is :class:`gsp.testing.ProtocolSuite`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..context import Context, ContextHost, ContextOption, Wakeup
    from ..hookspecs import hookimpl
    from ..message import JOIN_MAX, Message
    from ..options import (
        Check,
        Option,
        Validator,
        anything,
        boolean,
        described,
        duration,
        instance_of,
        integer,
        optional,
    )
    from .backtrace import HIGH_BIT, MAX_HOPS, TTL_OPTION, IdMap, reply, split_backtrace, u32
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
        responder,
    )
    from .routing import PipeMap, RoundRobin, broadcast, send_wake_cases
    from .waiting import Alarm, Deadline, Signal, call_later

__all__ = [
    # the interface
    "Protocol", "ProtocolSpec", "SocketHandle", "PipeHandle", "RejectPipe", "RecvQueue",
    "LendingWait", "Op", "check_op", "overrides", "raw_or_cooked",
    # contexts
    "Context", "ContextHost", "ContextOption", "Wakeup",
    # routing
    "RoundRobin", "PipeMap", "broadcast", "send_wake_cases",
    # request/reply
    "HIGH_BIT", "MAX_HOPS", "TTL_OPTION", "u32", "split_backtrace", "reply", "IdMap", "Requester",
    "XResponder", "Responder", "ResponderContext", "DrainingContext", "responder",
    # queues and waiting
    "Inbox", "Policy", "Signal", "Deadline", "Alarm", "call_later",
    # options, messages, registration
    "Option", "Check", "Validator", "described", "duration", "integer", "boolean", "anything",
    "optional", "instance_of", "Message", "JOIN_MAX", "hookimpl",
]

#: name -> the module it comes from, loaded on first use (PEP 562), so that importing one
#: module of the package (the sans-IO codec, an interface) loads no more than it needs.
_FROM = {
    "..context": ("Context", "ContextHost", "ContextOption", "Wakeup",),
    "..hookspecs": ("hookimpl",),
    "..message": ("JOIN_MAX", "Message",),
    "..options": (
        "Check", "Option", "Validator", "anything", "boolean", "described", "duration", "instance_of",
        "integer", "optional",
    ),
    ".backtrace": (
        "HIGH_BIT", "MAX_HOPS", "TTL_OPTION", "IdMap", "reply", "split_backtrace", "u32",
    ),
    ".inbox": ("Inbox", "Policy",),
    ".interface": (
        "LendingWait", "Op", "PipeHandle", "Protocol", "ProtocolSpec", "RecvQueue", "RejectPipe",
        "SocketHandle", "check_op", "overrides", "raw_or_cooked",
    ),
    ".replies": ("DrainingContext", "Requester", "Responder", "ResponderContext", "XResponder",
                 "responder",),
    ".routing": ("PipeMap", "RoundRobin", "broadcast", "send_wake_cases",),
    ".waiting": ("Alarm", "Deadline", "Signal", "call_later",),
}
_LAZY = {name: module for module, names in _FROM.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
