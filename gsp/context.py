"""Contexts: independent protocol state machines sharing one socket (and its pipes).

:class:`Context` is the user's class (``gsp.Context``): what a user calls on a context.
:class:`ProtocolContext` is the protocol author's base (``gsp.protocol.ProtocolContext``): a
protocol that offers contexts subclasses it and returns an instance from
``Protocol.open_context()``. The base class does the user-facing part (closed checks, timeouts,
message wrapping, ``with`` support); the subclass implements three hooks:

* ``do_send(msg, timeout)`` and ``do_recv(timeout) -> Message`` do the protocol work. They may block;
  ``select`` on :meth:`closing_case` as well so that :meth:`close` wakes them, and raise
  :class:`gsp.Closed` when it fires.
* ``on_close()`` releases protocol state (pending requests, registrations) once.

The protocol keeps its open contexts and calls :meth:`close` on each when the socket closes.
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable

from ._overrides import overrides
from .chan import Chan, Recv, thread_ident
from .errors import Closed, GspError, NotSupported, Timeout, WouldBlock, WrongThread
from .handles import check_op
from .message import Message, as_bytes
from .objects import ObjectCalls
from .options import FROM_OPTION, call_timed_out, call_timeout, duration

if TYPE_CHECKING:
    from .handles import Op, SocketHandle

_check_duration = duration()


_FOLLOW: Any = object()


class ContextOption:
    """A per-context option backed by the socket option of the same name: a context follows the
    socket's value until it is given its own (set on the context, validated with ``validate``,
    or copied by :meth:`ProtocolContext.own_options`). Declare it on a
    :class:`ProtocolContext` subclass::

        class SurveyContext(ProtocolContext):
            survey_time = ContextOption(duration())
    """

    def __init__(self, validate: Callable[[str, Any], Any]) -> None:
        self.validate = validate
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, ctx: "ProtocolContext | None", owner: type | None = None) -> Any:
        if ctx is None:
            return self
        value = ctx.__dict__.get(self.name, _FOLLOW)
        return ctx.handle.options[self.name] if value is _FOLLOW else value

    def __set__(self, ctx: "ProtocolContext", value: Any) -> None:
        ctx.__dict__[self.name] = self.validate(self.name, value)


class ContextHost:
    """Mixin for a cooked protocol whose socket-level ``send``/``recv`` are those of a default
    context (req, rep, surveyor, respondent). List it before the raw protocol class; call
    :meth:`host_contexts` in ``__init__``, implement :meth:`new_context`, and call
    :meth:`close_contexts` from ``close``. Contexts stop being tracked (:meth:`contexts`) from
    their ``on_close``, through :meth:`forget`. The protocol keeps :attr:`closed` (true once
    closed; :class:`gsp.protocol.routing.RoundRobin` has it)."""

    #: Whether the protocol closed (the protocol sets it; :meth:`open_context` then refuses).
    closed: bool

    def host_contexts(self, default: "ProtocolContext") -> None:
        """Make ``default`` the context behind the socket's own ``send``/``recv`` (call once,
        from ``__init__``). Raises nothing."""
        self._contexts: set[Any] = set()
        self._default = default
        default.noun = "socket"  # its errors speak of the socket the user called

    # (Properties, not methods: the socket takes these attributes once, when it opens, and
    # calls what it got, a call less each way than a method passing the call on; they still
    # count as overrides of Protocol's, for the socket's gsp.protocol.overrides check, and a
    # subclass may override them with methods of its own.)
    @property
    def send_body(self) -> "Callable[[Any, float | None], None]":
        """The socket's body-only send: the default context's :meth:`ProtocolContext.do_send_body`
        itself (it takes bytes only: a Message goes through ``send``; typed ``Any`` as a raw
        base class's ``send_body`` may take a Message, as RoundRobin's does)."""
        return self._default.do_send_body

    @property
    def recv_body(self) -> "Callable[[float | None], bytes]":
        """The socket's body-only recv: the default context's :meth:`ProtocolContext.do_recv_body`
        itself."""
        return self._default.do_recv_body

    def new_context(self) -> "ProtocolContext":
        """Required: make a new context of this protocol (:meth:`open_context` tracks it; it
        raises :class:`gsp.Closed` on a closed socket before calling this). May raise what the
        context's constructor does."""
        raise NotImplementedError

    def send(self, msg: Message, timeout: float | None) -> None:
        self._default.do_send(msg, timeout)

    def recv(self, timeout: float | None) -> Message:
        return self._default.do_recv(timeout)

    def poll(self, op: "Op") -> bool:
        return self._default.poll(op)

    def wake_cases(self, op: "Op") -> list[Recv]:
        return self._default._wake_cases(op)

    def open_context(self) -> "ProtocolContext":
        if self.closed:
            raise Closed("socket closed")
        ctx = self.new_context()
        self._contexts.add(ctx)
        return ctx

    def forget(self, ctx: "ProtocolContext") -> None:
        """A context closed: stop tracking it (contexts call this from their ``on_close``).
        Raises nothing."""
        self._contexts.discard(ctx)

    def contexts(self) -> "list[ProtocolContext]":
        """The default context and every open one (a new list). Raises nothing."""
        return [self._default, *self._contexts]

    def close_contexts(self) -> None:
        """Close the default context and every open one (call from the protocol's ``close``).
        Raises nothing."""
        for ctx in self.contexts():
            ctx.close()


class Context(ObjectCalls):
    """An independent state machine of a socket's protocol (e.g. one outstanding request
    each), opened with :meth:`gsp.Socket.open_context`.

    ``recv_timeout`` and ``send_timeout`` start as the socket's values at open time and can then
    be set per context. After :meth:`close` (or the socket's close) every operation raises
    :class:`gsp.Closed`, and calls blocked at that moment are woken with it.

    A context is an instance of its protocol's class, which derives from
    :class:`gsp.protocol.ProtocolContext`; this class names what a user calls.
    """

    # Slots for what every call reads (attributes of an instance dict cost more to read); the
    # instance dict (from ObjectCalls) keeps ContextOption values and a subclass's attributes.
    # (Here, not on ProtocolContext, so that the two classes have one layout: see
    # __init_subclass__.)
    __slots__ = ("handle", "socket", "_closed", "_closing", "noun", "_tid", "_own")

    #: The :class:`gsp.Socket` this context was opened on.
    socket: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A protocol's context derives from ProtocolContext. One written against gsp.Context
        # (which was the protocol author's base too) still works: it is made a ProtocolContext
        # (the two share one layout), with a DeprecationWarning.
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__ and cls.__qualname__ == "ProtocolContext" or \
                issubclass(cls, ProtocolContext):
            return
        warnings.warn(f"{cls.__qualname__} derives from gsp.Context, the user's class; a "
                      f"protocol's context derives from gsp.protocol.ProtocolContext",
                      DeprecationWarning, stacklevel=2)
        cls.__bases__ = tuple(ProtocolContext if b is Context else b for b in cls.__bases__)

    #: Seconds ``recv`` waits on this context; None = forever.
    recv_timeout = ContextOption(_check_duration)
    #: Seconds ``send`` waits on this context; None = forever.
    send_timeout = ContextOption(_check_duration)

    # ``timeout`` (seconds or a timedelta; None = forever; absent = this context's option) and
    # ``block`` (False = timeout 0: gsp.WouldBlock) as on :class:`gsp.Socket`. (ProtocolContext
    # implements each call.)
    def send(self, data: bytes | bytearray | memoryview, timeout: Any = FROM_OPTION,
             block: bool = True) -> None:
        """Send one message body on this context; waits up to ``timeout`` seconds (default: the
        context's ``send_timeout``) when it must. ``block=False`` never waits."""
        raise NotImplementedError

    def recv(self, timeout: Any = FROM_OPTION, block: bool = True) -> bytes:
        """Receive one message body on this context; waits up to ``timeout`` seconds (default:
        the context's ``recv_timeout``). ``block=False`` never waits."""
        raise NotImplementedError

    def send_msg(self, msg: Message, timeout: Any = FROM_OPTION, block: bool = True) -> None:
        """Send a :class:`gsp.Message` on this context (``timeout``/``block`` as :meth:`send`)."""
        raise NotImplementedError

    def recv_msg(self, timeout: Any = FROM_OPTION, block: bool = True) -> Message:
        """Receive a :class:`gsp.Message` on this context (``timeout``/``block`` as :meth:`recv`)."""
        raise NotImplementedError

    def poll(self, op: "Op") -> bool:
        """Whether ``op`` ("recv" or "send") called now with ``block=False`` would not raise
        :class:`gsp.WouldBlock` (it would complete, or fail at once). Never waits."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (on the context, or on its socket)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close this context only (idempotent); blocked calls on it raise :class:`gsp.Closed`."""
        raise NotImplementedError

    @property
    def stats(self) -> dict[str, int]:
        """This context's own counters, a snapshot (req: requests resent, timed out, canceled;
        docs/stats.md); ``{}`` for a protocol that counts nothing per context. The socket's
        ``stats`` include every context's."""
        return {}

    @property
    def histograms(self) -> dict[str, dict[str, Any]]:
        """This context's own histograms, by name (req: ``request_rtt_seconds``); ``{}`` for a
        protocol that keeps none per context. See :meth:`gsp.protocol.Protocol.histograms`."""
        return {}

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ProtocolContext(Context):
    """The base of a protocol's contexts (:class:`gsp.Context` is what a user sees of them).

    It does the user-facing part (closed checks, timeouts, message wrapping, ``with``
    support, selects) and calls the hooks a protocol implements: :meth:`do_send` and
    :meth:`do_recv` (and, optionally, :meth:`do_send_body`, :meth:`do_recv_body`,
    :meth:`do_poll`, :meth:`do_wake_cases`), :meth:`on_close`. A protocol that counts per
    context overrides ``stats`` and ``histograms``; a per-context option is a
    :class:`ContextOption` declared on the subclass. The constructor takes the socket's
    :class:`gsp.protocol.SocketHandle`.
    """

    __slots__ = ()  # (every slot is Context's)

    #: The hooks whose override gsp looks for (:func:`gsp.protocol.overrides`): a context
    #: offers ``send``/``recv`` (to :meth:`poll` and selects) where it overrides
    #: :meth:`do_send`/:meth:`do_recv`.
    OPTIONAL_HOOKS = frozenset({"do_send", "do_recv"})

    def __init__(self, handle: "SocketHandle") -> None:
        #: The socket's handle (see :class:`gsp.protocol.SocketHandle`).
        self.handle = handle
        #: The :class:`gsp.Socket` this context was opened on (set by ``open_context``).
        self.socket: Any = None
        self._closed = False
        self._closing: Chan[Any] = Chan()  # closed by close(): ready forever for every select
        self._tid = thread_ident()  # the OS thread whose hub made it (gsp.WrongThread elsewhere)
        # The instance dict, where ContextOption keeps this context's own values: a slot's load
        # (``self.__dict__`` is a descriptor's, which CPython 3.11 does not specialise).
        self._own: dict[str, Any] = self.__dict__
        #: What errors call this state machine: "context", or "socket" for a socket's default
        #: context (the user never opened it, so its errors never speak of a context).
        self.noun = "context"

        self.own_options("recv_timeout", "send_timeout")  # the socket's values at open time

    # -- per-context options ---------------------------------------------------------------------
    def own_options(self, *names: str) -> None:
        """Give this context its own copy of the socket's current value of each
        :class:`ContextOption` in ``names`` (otherwise it follows the socket's as it changes).
        Raises ``KeyError`` for a name that is not an option of the socket."""
        opts = self.handle.options
        for name in names:
            setattr(self, name, opts[name])

    # -- messages --------------------------------------------------------------------------------
    # ``timeout`` (seconds or a timedelta; None = forever; absent = this context's option) and
    # ``block`` (False = timeout 0: gsp.WouldBlock) as on :class:`gsp.Socket`.
    def send(self, data: bytes | bytearray | memoryview, timeout: float | timedelta | None = FROM_OPTION,
             block: bool = True) -> None:
        """Send one message body on this context; waits up to ``timeout`` seconds (default: the
        context's ``send_timeout``) when it must. ``block=False`` never waits."""
        if self._closed or self.handle.closed:
            raise self._closed_error()
        if self._tid != thread_ident():
            raise self._wrong_thread()
        if type(data) is not bytes:
            data = as_bytes(data)
        # (_call_send's work, inline: the usual call costs no second Python call)
        if timeout is ... and block is True:  # type: ignore[comparison-overlap]
            own = self._own  # (ContextOption's storage, read without the descriptor's call)
            t = own["send_timeout"] if "send_timeout" in own else self.send_timeout
        else:
            t = call_timeout(timeout, block)
        try:
            self.do_send_body(data, t)
        except (Timeout, WouldBlock, WrongThread) as exc:
            raise self._call_failed(exc, "send", t, timeout, block) from None

    def recv(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> bytes:
        """Receive one message body on this context; waits up to ``timeout`` seconds (default:
        the context's ``recv_timeout``). ``block=False`` never waits."""
        if self._closed or self.handle.closed:
            raise self._closed_error()
        # (_call_recv's work, inline, as in send)
        if timeout is ... and block is True:  # type: ignore[comparison-overlap]
            own = self._own
            t = own["recv_timeout"] if "recv_timeout" in own else self.recv_timeout
        else:
            t = call_timeout(timeout, block)
        try:
            return self.do_recv_body(t)
        except (Timeout, WouldBlock, WrongThread) as exc:
            raise self._call_failed(exc, "recv", t, timeout, block) from None

    def send_msg(self, msg: Message, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> None:
        """Send a :class:`gsp.Message` on this context (``timeout``/``block`` as :meth:`send`)."""
        if not isinstance(msg, Message):
            raise TypeError(f"send_msg takes a gsp.Message, not {type(msg).__name__}")
        self._check_open()
        self._call_send(Message(as_bytes(msg.body), as_bytes(msg.header), msg.pipe), timeout,
                        block)

    def recv_msg(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> Message:
        """Receive a :class:`gsp.Message` on this context (``timeout``/``block`` as :meth:`recv`)."""
        self._check_open()
        msg: Message = self._call_recv(timeout, block)
        return msg

    def _call_send(self, msg: Message, timeout: Any, block: bool) -> None:
        """:meth:`do_send` with ``timeout``/``block`` made into its timeout (``send_msg``'s)."""
        t = self._timeout("send_timeout", timeout, block)
        try:
            self.do_send(msg, t)
        except (Timeout, WouldBlock, WrongThread) as exc:
            raise self._call_failed(exc, "send", t, timeout, block) from None

    def _call_recv(self, timeout: Any, block: bool) -> Message:
        """:meth:`do_recv` with ``timeout``/``block`` made into its timeout (``recv_msg``'s)."""
        t = self._timeout("recv_timeout", timeout, block)
        try:
            return self.do_recv(t)
        except (Timeout, WouldBlock, WrongThread) as exc:
            raise self._call_failed(exc, "recv", t, timeout, block) from None

    def _timeout(self, option: str, timeout: Any, block: bool) -> float | None:
        """A call's timeout: this context's ``option`` for the usual call (no ``timeout``,
        ``block`` True), else what the call asked for. (send and recv do this inline.)"""
        if timeout is ... and block is True:
            own = self._own
            t: float | None = own[option] if option in own else getattr(self, option)
            return t
        return call_timeout(timeout, block)

    def _call_failed(self, exc: Timeout | WouldBlock | WrongThread, op: str, t: float | None, timeout: Any,
                     block: bool) -> GspError:
        """What a call that waited raises for ``exc``: the timeout, told as asked for, or the
        wrong thread, naming this context."""
        if isinstance(exc, WrongThread):  # from a wait below: say which object was used
            return self._wrong_thread()
        timed_out: GspError = call_timed_out(exc, op, t, timeout, block, f" on this {self.noun}")
        return timed_out

    # -- life cycle ------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (on the context, or on its socket)."""
        return self._closed

    # -- readiness: what gsp.select and gsp.Poller use --------------------------------------------
    def poll(self, op: "Op") -> bool:
        """Whether ``op`` ("recv" or "send") called now with ``block=False`` would not raise
        :class:`gsp.WouldBlock` (it would complete, or fail at once). Never waits."""
        check_op(op)
        if self._closed or self.handle.closed:
            return True
        return self.do_poll(op)

    def _wake_cases(self, op: "Op") -> list[Recv]:
        """Select cases that become ready when :meth:`poll` may have turned true (what
        :func:`gsp.select` waits on: see :class:`gsp.poller.Selectable`)."""
        check_op(op)
        if self._closed or self.handle.closed:
            return []
        cases = self.do_wake_cases(op)
        cases.append(self.closing_case())
        return cases

    def closing_case(self) -> Recv:
        """A :func:`gsp.select` case that becomes ready when this context closes (include it in
        every wait of :meth:`do_send`/:meth:`do_recv`). Raises nothing."""
        return Recv(self._closing)

    def close(self) -> None:
        """Close this context only (idempotent); blocked calls on it raise :class:`gsp.Closed`."""
        if self._closed:
            return
        if self._tid != thread_ident():
            raise self._wrong_thread()
        self._closed = True
        self._closing.close()
        self.on_close()

    def _check_open(self) -> None:
        if self._closed or self.handle.closed:
            raise self._closed_error()
        if self._tid != thread_ident():
            raise self._wrong_thread()

    def _wrong_thread(self) -> WrongThread:
        return WrongThread(self.noun, self._tid, thread_ident())

    def _closed_error(self) -> Closed:
        return Closed(f"{self.noun} is closed" if self._closed else "socket is closed")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<gsp.Context {self.handle.protocol} {state}>"

    # -- what a protocol implements --------------------------------------------------------------
    # Naming: the base class's public ``send``/``recv``/``poll``/... check the context and the
    # arguments, then call the protocol's ``do_<op>``; ``on_close`` is a notification.
    def do_send(self, msg: Message, timeout: float | None) -> None:
        """Send ``msg`` on this context, waiting up to ``timeout`` seconds (None: no limit; 0:
        never wait). Required for a context that sends (the default raises
        :class:`gsp.NotSupported`). May raise :class:`gsp.Timeout` (the base class turns it into
        the user's :class:`gsp.WouldBlock` for ``block=False``), :class:`gsp.Closed` when the
        context or socket closes meanwhile (select on :meth:`closing_case`), :class:`gsp.NoPeers`
        (``fail_no_peers``), or :class:`gsp.ProtocolStateError` when the protocol's state refuses it."""
        raise NotSupported(f"{self.handle.protocol} contexts cannot send")

    def do_recv(self, timeout: float | None) -> Message:
        """Receive one :class:`gsp.Message` on this context, waiting up to ``timeout`` seconds.
        Required for a context that receives (the default raises :class:`gsp.NotSupported`).
        May raise :class:`gsp.Timeout`, :class:`gsp.Closed`, :class:`gsp.NoPeers` or
        :class:`gsp.ProtocolStateError`, as :meth:`do_send`."""
        raise NotSupported(f"{self.handle.protocol} contexts cannot receive")

    def do_send_body(self, body: bytes, timeout: float | None) -> None:
        """Optional: :meth:`do_send` of a message without a header, given just its body (the
        socket's and the context's ``send`` come here; the default makes the Message). Raises
        what :meth:`do_send` does."""
        self.do_send(Message(body), timeout)

    def do_recv_body(self, timeout: float | None) -> bytes:
        """Optional: :meth:`do_recv`'s body alone (the socket's and the context's ``recv`` come
        here; the default takes it from the Message, an override need not make one). Raises
        what :meth:`do_recv` does."""
        return self.do_recv(timeout).body

    def do_poll(self, op: "Op") -> bool:
        """Like :meth:`gsp.protocol.Protocol.poll`, for this context (called while it is open).
        An operation the context does not offer answers True (it fails at once). Optional for
        a context that is never polled or selected on (the default raises
        :class:`gsp.NotSupported` for an operation it offers); never waits, raises nothing else."""
        if not self._offers(op):
            return True
        raise self._unselectable(op, "do_poll")

    def do_wake_cases(self, op: "Op") -> list[Recv]:
        """Like :meth:`gsp.protocol.Protocol.wake_cases`, for this context; its closing is
        covered already (:meth:`wake_cases` adds :meth:`closing_case`). Optional, as
        :meth:`do_poll` (the default raises :class:`gsp.NotSupported`)."""
        if not self._offers(op):
            return []
        raise self._unselectable(op, "do_wake_cases")

    def _offers(self, op: "Op") -> bool:
        return overrides(self, ProtocolContext, "do_" + op)

    def _unselectable(self, op: "Op", hook: str) -> NotSupported:
        return NotSupported(f"{self.handle.protocol} {self.noun}s cannot be polled or selected on "
                            f"for {op} (the protocol does not implement ProtocolContext.{hook})")

    def on_close(self) -> None:
        """Optional: release protocol state (pending requests, a registration on the protocol);
        called once, from :meth:`close`, after :attr:`closed` turned true. Must not raise."""
