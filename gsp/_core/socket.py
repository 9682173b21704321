"""The socket: options, pipes, endpoints and pipe events around one protocol instance."""

from __future__ import annotations

import itertools
import logging
import os
import warnings
import weakref
from datetime import timedelta
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Iterable

import gevent
from gevent.event import AsyncResult
from gevent.pool import Group

from .._overrides import overrides
from ..chan import thread_ident
from ..errors import (
    BadOption,
    Closed,
    InheritedListener,
    MessageTooLarge,
    NotSupported,
    Timeout,
    WouldBlock,
    WrongThread,
)
from ..handles import check_op
from ..message import Message, as_bytes
from ..objects import ObjectCalls
from ..options import (
    FROM_OPTION,
    SOCKET_OPTIONS,
    Options,
    call_timed_out,
    call_timeout,
    duration,
    renamed_options,
)
from ..protocol.interface import Protocol, RejectPipe
from ..transport.limits import RecvLimits
from . import attrs, counters, fork, log
from .endpoints import (
    Dialer,
    EndpointHost,
    Listener,
    PipeSlots,
    accept_after_fork,
    endpoint_options,
    forget_dialer_after_fork,
    forget_listener_after_fork,
    orphan_dialer_after_fork,
    orphan_listener_after_fork,
    redial_after_fork,
    start_dialer,
    start_listener,
)
from .events import PipeEvent
from .handle import CoreSocketHandle
from .pipe import (
    CorePipe,
    Pipe,
    PipeHost,
    dropped_pipe_after_fork,
    forget_pipe_after_fork,
    orphan_pipe_after_fork,
    writer_of,
)
from .readers import Readers
from .registry import registry
from .sendrecv import SendRecvState, hot_field, recv_many

if TYPE_CHECKING:
    from ..chan import Recv
    from ..context import Context
    from ..handles import Op
    from ..options import Option
    from ..protocol.interface import ProtocolSpec
    from ..transport.interface import Connection

PipeCallback = Callable[[PipeEvent, Pipe], None]
_check_timeout = duration()

_open: "weakref.WeakValueDictionary[int, Socket]" = weakref.WeakValueDictionary()
_socket_ids = itertools.count(1)


def _option_specs(spec: "ProtocolSpec") -> "dict[str, Option]":
    """A socket's options: every socket's, the installed transports', the protocol's."""
    specs = dict(SOCKET_OPTIONS)
    specs.update(registry.transport_options())
    specs.update(spec.options)
    return specs


class Socket(ObjectCalls):
    """An SP socket. Safe to use from many greenlets at once.

    Create one with :func:`gsp.socket`. Options are keyword arguments there, attributes here
    (``sock.recv_timeout = 1``), or ``get_option``/``set_option``.
    """

    #: A process-wide id (1, 2, ...), as nng's; labels the socket in :func:`gsp.stats`.
    id: int = 0
    #: Set in a forked child when the socket's only endpoints stayed the parent's (_after_fork).
    _inherited: Closed | None = None  # the error of a socket closed by a fork

    def _set_closed(self, value: bool) -> None:
        self._hot.closed = value
        handle = self.__dict__.get("_handle")  # (None while __init__ runs: it starts open)
        if handle is not None:
            handle.closed = value  # what protocols and contexts read (a slot: no call)

    _closed = property(lambda self: self._hot.closed, _set_closed)
    _draining = False  # drain() began (set on the instance): no new endpoint, pipe or context
    _drain_end: "AsyncResult[None] | None" = None  # how drain() ended, for a concurrent one
    _send_timeout = hot_field("send_timeout")
    _recv_timeout = hot_field("recv_timeout")

    def __new__(cls, protocol: str, *, raw: bool = False, **options: Any) -> "Socket":
        # Options and protocol methods are the instance's attributes through its class (see
        # gsp._core.attrs): a class of this one's, made for the protocol and its options.
        spec = registry.protocol(protocol)
        specs = _option_specs(spec)
        klass = attrs.with_attrs(cls, specs, spec.methods, registry.protocol_methods(),
                                 renamed_options(specs))
        sock: Socket = object.__new__(klass)
        return sock

    if TYPE_CHECKING:  # what the attributes made by gsp._core.attrs look like to a type checker
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, protocol: str, *, raw: bool = False, **options: Any) -> None:
        self._hot = SendRecvState()
        self._hot.tid = thread_ident()  # its thread: see _check_thread
        self._hot.send_max = 0
        spec = registry.protocol(protocol)
        self.spec = spec
        self.protocol = spec.name
        self.raw = bool(raw)
        self._options = Options(_option_specs(spec))
        self._options.update_checked(options)
        self._watchers: dict[str, list[Callable[[Any], None]]] = {}
        self._send_timeout = self._options["send_timeout"]
        self._recv_timeout = self._options["recv_timeout"]
        self._watch("send_timeout", lambda v: setattr(self._hot, "send_timeout", v))
        self._watch("recv_timeout", lambda v: setattr(self._hot, "recv_timeout", v))
        limits = self._recv_limits = RecvLimits(  # what pipes hold of messages still arriving
            self._options["max_recv_partial"], self._options["recv_partial_timeout"])
        self._watch("max_recv_partial", limits.set_max_bytes)
        self._watch("recv_partial_timeout", limits.set_stall_timeout)
        self._group = Group()
        self._readers = Readers(self._spawn)
        self._closed = False
        self._pipes: dict[int, CorePipe] = {}
        slots = self._slots = PipeSlots(self._pipes, self._options)  # max_pipes
        self._watch("max_pipes", lambda v: slots.freed())
        self._listeners: list[Listener] = []
        self._dialers: list[Dialer] = []
        self._callbacks: list[PipeCallback] = []
        self._callback_errors: set[tuple[object, type[BaseException]]] = set()  # logged already
        #: Detaches for a broken wire format, by error type: warned of at a rate limit.
        self._detach_warnings: dict[type, log.Repeats] = {}
        self._tally = counters.tally()  # pipes that went, and their traffic
        handle = self._handle = CoreSocketHandle(
            self.protocol, self.raw, self._hot, self._readers, self._options, self._pipes,
            self._listeners, self._dialers, self._spawn, self._watch)
        proto = self._proto = self._hot.proto = spec.factory(handle, self.raw)
        # Optional fast paths, used only where the protocol overrides them (see gsp.protocol.Protocol).
        self._hot.recv_body = proto.recv_body if overrides(proto, Protocol, "recv_body") else None
        self._hot.send_body = proto.send_body if overrides(proto, Protocol, "send_body") else None
        self._hot.bare = proto.ready_bodies is not None
        self._hot.ready = proto.ready_bodies if self._hot.bare else proto.ready
        self._hot.send_direct = None
        #: How pipes deliver what they read: the batch hook where the protocol has one.
        self._deliver = proto.pipe_recv
        self._deliver_all = proto.pipe_recv_all \
            if overrides(proto, Protocol, "pipe_recv_all") else None
        self._pipe_host = PipeHost(self._hot, self._readers, self._pipes, self._spawn,
                                   self._deliver, self._deliver_all, self._pipe_gone)
        self._endpoint_host = EndpointHost(self._spawn, self._attach, self._endpoint_gone,
                                           self._tally, self._pipes)
        self.id = next(_socket_ids)  # listed (sockets()) until closed or collected
        _open[self.id] = self
        readers = self._readers

        def spin(seconds: float) -> None:  # recv_spin: what a lending wait calls, nothing more
            handle.lend_reads = readers.spinning(seconds) if seconds else readers.lend
        self._watch("recv_spin", spin)
        if self._options["recv_spin"]:
            spin(self._options["recv_spin"])
        fork.install(_after_fork_in_child)  # once per process: the child's fork hook

    # -- options -------------------------------------------------------------------------------
    def get_option(self, name: str) -> Any:
        return self._options[self._options.resolve(name)]

    def set_option(self, name: str, value: Any) -> None:
        name = self._options.resolve(name)
        value = self._options.specs[name].validate(name, value)
        self._proto.set_option(name, value)  # the protocol may refuse it
        self._options[name] = value
        for callback in self._watchers.get(name, ()):
            callback(value)

    def _watch(self, name: str, callback: Callable[[Any], None]) -> None:
        self._options.check_name(name)
        self._watchers.setdefault(name, []).append(callback)

    def _protocol_method(self, name: str,
                         method: Callable[..., Any] | None) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._closed:
                raise self._closed_error()
            if method is None:
                raise NotSupported(f"{self.protocol} sockets have no {name}()")
            return method(*args, **kwargs)
        call.__name__ = name
        call.__doc__ = method.__doc__ if method is not None else None
        return call

    def __setattr__(self, name: str, value: Any) -> None:
        opts = self.__dict__.get("_options")
        if opts is not None and name in opts.specs:
            self.set_option(name, value)
        elif opts is not None and not name.startswith("_") and (
                opts.renamed(name) is not None or not hasattr(self, name)):
            # An old name is set as its new one (with a warning); a typo such as
            # ``sock.recv_timeot = 1`` must not pass silently.
            self.set_option(name, value)
        else:
            object.__setattr__(self, name, value)

    @property
    def options(self) -> dict[str, Any]:
        """A snapshot of every option's current value."""
        return {n: self._options[n] for n in self._options.specs}

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of the socket's counters: traffic, pipes, queue depths, drops by reason and
        the protocol's own (every key: docs/stats.md)."""
        return counters.socket_stats(self._tally, list(self._pipes.values()), self._proto)

    @property
    def histograms(self) -> dict[str, dict[str, Any]]:
        """A snapshot of the protocol's histograms, by name (req: ``request_rtt_seconds``, every
        context's round trips): each ``{"bounds", "counts", "count", "sum"}`` (docs/stats.md)."""
        return self._proto.histograms()

    # -- messages --------------------------------------------------------------------------------
    # Every call takes ``timeout`` (seconds or a timedelta; None = forever; absent = the
    # socket's option) and ``block`` (False = timeout 0: gsp.WouldBlock when it cannot
    # complete at once). The hot path (neither given) costs two identity checks with
    # constants (``...`` is FROM_OPTION). They are positional-or-keyword on purpose: a
    # keyword-only parameter keeps CPython 3.11 from specialising the call (~60 ns more).
    def send(self, data: bytes | bytearray | memoryview, timeout: float | timedelta | None = FROM_OPTION,
             block: bool = True) -> None:
        """Send one message; waits up to ``timeout`` seconds (default: ``send_timeout``) when the
        protocol must wait. ``block=False`` never waits (:class:`gsp.WouldBlock`)."""
        hot = self._hot
        if hot.closed:
            raise self._closed_error()
        if type(data) is not bytes:  # bytes (the common case) need no call to take ownership
            data = as_bytes(data)
        if hot.send_direct is not None and hot.send_direct(data):
            return  # queued at once (CoreSocketHandle.send_direct): no call into the protocol
        if hot.send_max and len(data) > hot.send_max:  # (never direct: see _limit_sends)
            raise self._too_large(len(data))
        if hot.tid != thread_ident():  # (not on the fast path above: a foreign thread is caught here)
            raise self._wrong_thread()
        t = (hot.send_timeout if timeout is ... and block is True  # type: ignore[comparison-overlap]
             else call_timeout(timeout, block))
        try:
            if hot.send_body is not None:
                hot.send_body(data, t)
            else:
                hot.proto.send(Message(data), t)
        except (Timeout, WouldBlock) as exc:
            raise call_timed_out(exc, "send", t, timeout, block) from None
        except WrongThread:  # from a wait below: say which object was used
            raise self._wrong_thread() from None

    def _too_large(self, size: int) -> MessageTooLarge:
        limit = self._hot.send_max
        return MessageTooLarge(f"a {size}-byte message is over the {limit}-byte limit of this "
                               f"socket's datagram endpoints (udp:// carries one message a "
                               f"datagram)", size=size, limit=limit)

    def _limit_sends(self, transport: Any) -> None:
        """A transport whose messages are datagrams bounds every send from now on."""
        most: int = transport.message_max
        if most and (not self._hot.send_max or most < self._hot.send_max):
            self._hot.send_max = most
            # Measured sends go through the protocol: send checks the size after the direct
            # way, which stays shut from now on, so a socket without a datagram endpoint pays
            # nothing for the check on that way.
            self._handle.stop_direct()
            self._hot.send_direct = None

    def recv(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> bytes:
        """Receive one message body; waits up to ``timeout`` seconds (default: ``recv_timeout``).
        ``block=False`` takes a message only if one is queued (else :class:`gsp.WouldBlock`)."""
        hot = self._hot
        if hot.closed:
            raise self._closed_error()
        if hot.ready:  # a message is queued: no call into the protocol at all
            body: bytes = hot.ready.popleft() if hot.bare else hot.ready.popleft()[0]
            return body
        t = (hot.recv_timeout if timeout is ... and block is True  # type: ignore[comparison-overlap]
             else call_timeout(timeout, block))
        try:
            if hot.recv_body is not None:
                return hot.recv_body(t)
            return hot.proto.recv(t).body
        except (Timeout, WouldBlock) as exc:
            raise call_timed_out(exc, "recv", t, timeout, block) from None
        except WrongThread:  # from a wait below: say which object was used
            raise self._wrong_thread() from None

    def recv_many(self, limit: int, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> list[bytes]:
        """Receive up to ``limit`` message bodies in one call, oldest first: waits for the first
        as :meth:`recv` does (``timeout``, ``block``), then takes those already queued without
        waiting. The bodies are those :meth:`recv` would return one by one, at less cost each."""
        return recv_many(self._hot, self.recv, limit, timeout, block)

    def send_msg(self, msg: Message, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> None:
        """Send a :class:`gsp.Message`; raw sockets put its header on the wire as-is. ``timeout``
        and ``block`` as for :meth:`send`."""
        if self._closed:
            raise self._closed_error()
        if not isinstance(msg, Message):
            raise TypeError(f"send_msg takes a gsp.Message, not {type(msg).__name__}")
        t = (self._send_timeout if timeout is ... and block is True  # type: ignore[comparison-overlap]
             else call_timeout(timeout, block))
        out = Message(as_bytes(msg.body), as_bytes(msg.header), msg.pipe)
        if self._hot.send_max and len(out.body) + len(out.header) > self._hot.send_max:
            raise self._too_large(len(out.body) + len(out.header))
        try:
            self._proto.send(out, t)
        except (Timeout, WouldBlock) as exc:
            raise call_timed_out(exc, "send", t, timeout, block) from None
        except WrongThread:  # from a wait below: say which object was used
            raise self._wrong_thread() from None

    def recv_msg(self, timeout: float | timedelta | None = FROM_OPTION, block: bool = True) -> Message:
        """Receive a :class:`gsp.Message` with its header and the pipe it came on. ``timeout``
        and ``block`` as for :meth:`recv`."""
        if self._closed:
            raise self._closed_error()
        t = (self._recv_timeout if timeout is ... and block is True  # type: ignore[comparison-overlap]
             else call_timeout(timeout, block))
        try:
            return self._proto.recv(t)
        except (Timeout, WouldBlock) as exc:
            raise call_timed_out(exc, "recv", t, timeout, block) from None
        except WrongThread:  # from a wait below: say which object was used
            raise self._wrong_thread() from None

    # -- readiness: what gsp.select and gsp.Poller use --------------------------------------------
    def poll(self, op: "Op" = "recv") -> bool:
        """Whether ``op`` ("recv" or "send") called now with ``block=False`` would not raise
        :class:`gsp.WouldBlock` (it would complete, or fail at once). Never waits."""
        check_op(op)
        if self._closed or op == "recv" and self._hot.ready:
            return True
        return self._proto.poll(op)

    def _wake_cases(self, op: "Op" = "recv") -> "list[Recv]":
        """Select cases that become ready when :meth:`poll` may have turned true (what
        :func:`gsp.select` waits on: see :class:`gsp.poller.Selectable`)."""
        check_op(op)
        return [] if self._closed else self._proto.wake_cases(op)

    def _check_can_grow(self) -> None:
        """What a new context, listener or dialer needs: the socket open, not draining, and used
        from its own thread."""
        if self._closed:
            raise self._closed_error()
        if self._draining:
            raise Closed("socket is draining")
        self._check_thread()

    def open_context(self) -> "Context":
        """A context: an independent protocol state machine on this socket (req, rep, ...)."""
        self._check_can_grow()
        ctx = self._proto.open_context()
        ctx.socket = self
        return ctx

    # -- endpoints -------------------------------------------------------------------------------
    def listen(self, url: str, *, accept_gate: "Callable[[Listener], object] | None" = None,
               **options: Any) -> "Listener":
        """Listen on ``url`` now (raises :class:`gsp.AddressInUse` etc.) and accept in background.

        ``accept_gate``, if given, is called as ``accept_gate(listener)`` in the accepting
        greenlet before each accept, and returns when the listener may take its next
        connection: it may wait (cooperatively: ``gevent.sleep``, an event), and meanwhile the
        kernel's listen backlog holds the connections. Processes sharing one listening socket
        (``listen_fd``) use it to take turns; :class:`gsp.Prefork` balances its workers so. A
        gate that raises an ``Exception`` lets that accept go ahead, and is logged."""
        self._check_can_grow()
        if accept_gate is not None and not callable(accept_gate):
            raise BadOption(f"accept_gate must be a callable (listener) or None, "
                            f"not {accept_gate!r}")
        transport = registry.transport_for(url)
        opts = endpoint_options(self._options, transport, options, "listen")
        tl = transport.listener(url, opts)
        tl.bind()
        self._limit_sends(transport)
        lst = Listener(self, self._endpoint_host, tl, opts, self._slots, accept_gate)
        self._listeners.append(lst)
        start_listener(lst)
        return lst

    def dial(self, url: str, *, fail_fast: bool = False, background: bool = False,
             **options: Any) -> "Dialer":
        """Connect to ``url``; redial whenever the connection is lost, until the socket closes.

        By default it tries once now and, if that fails, keeps redialing in the background (the
        error is the dialer's ``last_error``). ``fail_fast=True`` raises the first attempt's
        error instead (and dials no more); ``background=True`` returns before the first attempt.
        ``options`` are the dialer's own (transport options, ``reconnect_time``, ...).
        """
        block = _dial_mode(fail_fast, background, options.pop("block", _NO_BLOCK), "dial")
        self._check_can_grow()
        transport = registry.transport_for(url)
        opts = endpoint_options(self._options, transport, options, "dial")
        td = transport.dialer(url, opts)
        self._limit_sends(transport)
        d = Dialer(self, self._endpoint_host, url, td, opts, self._slots)
        self._dialers.append(d)
        try:
            start_dialer(d, block)
        except BaseException:
            self._dialers.remove(d)
            d.close()
            raise
        return d

    # -- pipes -----------------------------------------------------------------------------------
    @property
    def pipes(self) -> list[Pipe]:
        """The attached pipes, oldest first."""
        return [p for p in self._pipes.values() if p.attached]

    @property
    def listeners(self) -> list["Listener"]:
        return list(self._listeners)

    @property
    def dialers(self) -> list["Dialer"]:
        return list(self._dialers)

    def on_pipe_event(self, callback: Callable[[PipeEvent, Pipe], None]) -> Callable[[], None]:
        """Call ``callback(event, pipe)`` on every pipe event; returns an unsubscribe function.

        At ``PipeEvent.ATTACHING`` the callback may reject the pipe with ``pipe.close()``.
        Callbacks run in gsp's greenlets and must not block. A callback that raises is logged
        (``gsp.socket``, with the traceback once per callback and error type) and changes
        nothing else: the pipe carries on and later callbacks still run.
        """
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def _attach(self, conn: "Connection", dialer: "Dialer | None" = None,
                listener: "Listener | None" = None,
                tally: counters.Tally | None = None) -> Pipe | None:
        """Turn a handshaken connection of an endpoint (whose ``tally`` counts its pipes) into a
        pipe, or close it if rejected."""
        if self._closed or self._draining:
            conn.close()
            return None
        conn.use_recv_limits(self._recv_limits)
        pipe = CorePipe(self, self._pipe_host, conn, self._options["send_buffer"], dialer, listener,
                    self._options["send_buffer_size"],
                    (self._tally,) if tally is None else (self._tally, tally))
        self._pipes[pipe.id] = pipe
        self._endpoint_host.sources.add(pipe)  # (admit.per_address)
        self._fire(PipeEvent.ATTACHING, pipe)
        if pipe.closed:
            self._log_rejected(pipe, "by a pipe event callback or hook at ATTACHING")
            return None
        try:
            self._proto.add_pipe(pipe)
        except RejectPipe as exc:
            pipe.close()
            self._log_rejected(pipe, f"by the {self.protocol} protocol: {exc}")
            return None
        pipe.attached = True
        self._readers.start(pipe)
        if log.pipe_log.isEnabledFor(logging.INFO):
            url = log.pipe_url(pipe)
            log.pipe_log.info("%s %s: pipe %d attached (peer %s)", self.protocol, url, pipe.id,
                              pipe.remote_address, extra=log.fields(self, url, pipe))
        self._fire(PipeEvent.ATTACHED, pipe)
        return pipe

    def _fire(self, event: PipeEvent, pipe: Pipe) -> None:
        """Run the gsp_pipe_event hooks and the socket's callbacks for ``event`` on ``pipe``."""
        # A callback that raises is logged and changes nothing else: the pipe is not rejected
        # (rejecting is an explicit pipe.close() at ATTACHING), later callbacks still run.
        try:
            registry.pm.hook.gsp_pipe_event(socket=self, event=event, pipe=pipe)
        except Exception as exc:
            self._callback_failed("a gsp_pipe_event hook", event, pipe, exc)
        for cb in [*self._callbacks]:
            try:
                cb(event, pipe)
            except Exception as exc:
                self._callback_failed(cb, event, pipe, exc)

    def _callback_failed(self, cb: object, event: PipeEvent, pipe: Pipe, exc: Exception) -> None:
        """Log a raising pipe callback: with its traceback at ERROR the first time this callback
        raises this type of error, at DEBUG after that."""
        try:
            key: tuple[object, type[BaseException]] = (cb, type(exc))
            first = key not in self._callback_errors
        except TypeError:  # an unhashable callable object
            key = (id(cb), type(exc))
            first = key not in self._callback_errors
        if first:
            self._callback_errors.add(key)
        level = logging.ERROR if first else logging.DEBUG
        if log.socket_log.isEnabledFor(level):
            url = log.pipe_url(pipe)
            log.socket_log.log(
                level, "%s %s: pipe event callback %r raised %s at %s of pipe %d; the pipe "
                "carries on%s", self.protocol, url, cb, type(exc).__name__, event.name, pipe.id,
                " (later ones like it are logged at DEBUG)" if first else f": {exc}",
                exc_info=exc if first else None, extra=log.fields(self, url, pipe))

    def _log_rejected(self, pipe: Pipe, how: str) -> None:
        """Log (INFO) that ``pipe`` was rejected ``how``."""
        if log.socket_log.isEnabledFor(logging.INFO):
            url = log.pipe_url(pipe)
            log.socket_log.info("%s %s: pipe %d (peer %s) rejected %s", self.protocol, url,
                                pipe.id, pipe.remote_address, how,
                                extra=log.fields(self, url, pipe))

    def _endpoint_gone(self, ep: "Listener | Dialer") -> None:
        """A listener or dialer closed: the socket lists it no more (unless it closes itself)."""
        if self._closed:
            return
        if ep in self._listeners:
            self._listeners.remove(ep)
        if ep in self._dialers:
            self._dialers.remove(ep)

    def _pipe_gone(self, pipe: Pipe) -> None:
        self._pipes.pop(pipe.id, None)
        self._endpoint_host.sources.discard(pipe)
        self._slots.freed()
        if pipe.attached:
            error = pipe.error
            level, held = log.detach_level(error), 0
            if level == logging.WARNING:  # at most once per log.REPEAT_INTERVAL by error type,
                repeats = self._detach_warnings.get(type(error))  # INFO as other detaches between
                if repeats is None:
                    repeats = self._detach_warnings[type(error)] = log.Repeats()
                level, held = repeats.level()
                level = max(level, logging.INFO)
            if log.pipe_log.isEnabledFor(level):
                url = log.pipe_url(pipe)
                log.pipe_log.log(level, "%s %s: pipe %d (peer %s) detached: %s%s", self.protocol,
                                 url, pipe.id, pipe.remote_address, log.describe(error),
                                 log.held_note(held),
                                 extra=log.fields(self, url, pipe, gsp_suppressed=held,
                                                  **log.oversize_fields(error)))
            self._fire(PipeEvent.DETACHED, pipe)

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> gevent.Greenlet:
        return self._group.spawn(fn, *args)

    # -- closing ---------------------------------------------------------------------------------
    def _closed_error(self) -> Closed:
        """What a call on the closed socket raises (not on the hot path: only once closed)."""
        why = self._inherited  # a new error like the one that closed it after a fork
        return Closed("socket is closed") if why is None else type(why)(str(why))

    @property
    def closed(self) -> bool:
        return bool(self._closed)

    def close(self) -> None:
        """Stop endpoints, flush queued messages for up to ``linger`` seconds, release everything.

        Every greenlet the socket spawned is joined and every connection closed when this returns.
        Blocked ``send``/``recv`` calls raise :class:`gsp.Closed`.
        """
        if self._closed:
            return
        self._check_thread()
        self._closed = True
        _open.pop(self.id, None)
        for lst in list(self._listeners):
            lst.close()
        for d in list(self._dialers):
            d.close(close_pipe=False)  # its pipe lingers with the others below
        self._proto.close()
        pipes = list(self._pipes.values())
        linger = self._options["linger"]
        for p in pipes:
            p.sendq.close()  # writers drain what is queued, then stop
        if linger > 0:
            writers = [w for w in (writer_of(p) for p in pipes) if w is not None]
            gevent.joinall(writers, timeout=linger)
        # Concurrently: a transport's close may wait on its peer (ws waits for the closing frame).
        gevent.joinall([self._spawn(p.close) for p in pipes if not p.closed])
        current = gevent.getcurrent()
        others = [g for g in self._group if g is not current]
        gevent.killall(others, block=True)

    def drain(self, timeout: float | timedelta | None = None) -> None:
        """Close gracefully: finish the work in hand, take no new work, then close.

        At once: listeners and dialers stop (the pipes up stay), new contexts, endpoints and
        (except for the replies REP and respondent owe) sends raise :class:`gsp.Closed`; REP and
        respondent take no new request (recv raises Closed; requests not yet taken by a recv are
        dropped, and their requesters resend when the pipe closes). Then it waits, up to
        ``timeout`` seconds (``None``: as long as it takes), for the protocol's work in hand to
        finish (:meth:`gsp.protocol.Protocol.drain`: every REP context answers the request it
        took; REQ's requests out get their replies, received) and for every pipe's send queue
        to empty, and closes (``linger`` still lets the last writes finish). When ``timeout``
        runs out it closes anyway and raises :class:`gsp.Timeout`. Idempotent: on a closed or
        drained socket it returns at once; a drain called while one runs waits for its end (and
        closes it then if its own ``timeout`` runs out first). See docs/webapp.md.
        """
        self._check_thread()
        t = _check_timeout("timeout", timeout)
        end = self._drain_end
        if end is not None:  # drained, or draining: the same end
            end.wait(t)
            if not end.ready():
                self.close()  # this caller's time ran out first: closing ends the other drain
                raise Timeout(f"drain did not finish within {t:g} s; the socket is closed",
                              timeout=t)
            return
        if self._closed:
            return
        end = self._drain_end = AsyncResult()
        self._draining = True
        self._handle.stop_direct()
        error: Timeout | None = None
        at = None if t is None else monotonic() + t

        def left() -> float | None:  # seconds left (0 once passed: a step that must wait fails)
            return None if at is None else max(0.0, at - monotonic())
        try:
            hot = self._hot  # every call through the protocol's send and recv from now on
            hot.send_direct = hot.send_body = hot.recv_body = None

            def stop_endpoints() -> None:  # (they may yield: the protocol stops work meanwhile)
                for lst in list(self._listeners):
                    lst.close()
                for d in list(self._dialers):
                    d.close(close_pipe=False)  # _attach takes no new pipe meanwhile
            stopping = self._spawn(stop_endpoints)
            self._proto.drain(left())
            stopping.join()
            pipes = list(self._pipes.values())
            for p in pipes:
                p.sendq.close()  # writers flush what is queued, then stop (as in close())
            writers = [w for w in (writer_of(p) for p in pipes) if w is not None]
            gevent.joinall(writers, timeout=left())
            if not all(w.dead for w in writers):
                raise Timeout("the send queues were not flushed in time")
        except (Timeout, WouldBlock):
            within = "in time" if t is None else f"within {t:g} s"
            error = Timeout(f"drain did not finish {within}; the socket is closed anyway",
                            timeout=t)
        finally:
            self.close()
            end.set(None)
        if error is not None:
            raise error

    def _check_thread(self) -> None:
        """Raise :class:`gsp.WrongThread` unless called from the OS thread that made the socket.
        Checked in ``close``, ``open_context``, ``listen``, ``dial``, in ``send`` when it cannot
        complete at once (the fast path does not look), and wherever gsp waits (channels,
        contexts): a foreign thread's call that waits, or closes, fails at once."""
        if self._hot.tid != thread_ident():
            raise self._wrong_thread()

    def _wrong_thread(self) -> WrongThread:
        return WrongThread("socket", self._hot.tid, thread_ident())

    # -- fork: what the socket does in a child process made by fork (gsp._core.fork) ---------
    def _after_fork(self, parent: int) -> None:
        """In a child forked from process ``parent``, before any greenlet runs: make the socket
        the child's own (gsp calls this from its fork hook; see :mod:`gsp._core.fork`). Its
        pipes go without a word to the parent's peers, dialers redial, listeners stay the
        parent's (the socket closes when they were all it had)."""
        if self._hot.tid != thread_ident():
            self._orphan(parent)
            return
        pipes = list(self._pipes.values())
        dialers = list(self._dialers)
        # 1. Nothing of this process may reach the parent's connections any more: the child's
        #    copy of every descriptor goes first, before any code of the socket's can run.
        for p in pipes:
            forget_pipe_after_fork(p)
        kept = [lst for lst in list(self._listeners) if forget_listener_after_fork(lst)]
        left = [lst for lst in self._listeners if lst not in kept]
        for d in dialers:
            forget_dialer_after_fork(d)
        # 2. The inherited greenlets: killed (not before their next turn, and with every
        #    descriptor they could use closed), except the one forking.
        current = gevent.getcurrent()
        for g in list(self._group):
            if g is not current:
                g.kill(block=False)
        self._readers.reset_after_fork()
        # 3. The protocol forgets the pipes, as it does pipes that went.
        for p in pipes:
            self._drop_forked_pipe(p)
        self._restart_after_fork(parent, len(pipes), dialers, left, kept)

    def _restart_after_fork(self, parent: int, pipes: int, dialers: "list[Dialer]",
                            left: "list[Listener]", kept: "list[Listener]") -> None:
        """The last step of :meth:`_after_fork`: dialers redial in the background; listeners
        stay the parent's (and the socket closes here when they were all it had)."""
        for d in dialers:
            redial_after_fork(d)
        for lst in left:
            if lst in self._listeners:
                self._listeners.remove(lst)
        for lst in kept:  # its accept loop went with the inherited greenlets
            accept_after_fork(lst)
        urls = [lst.url for lst in left]
        closed = bool(urls and not dialers and not kept)
        if closed:
            self._close_inherited(urls, parent)
        if log.socket_log.isEnabledFor(logging.INFO):
            self._log_forked(parent, pipes, [d.url for d in dialers], urls, kept, closed)

    def _drop_forked_pipe(self, pipe: CorePipe) -> None:
        if pipe.attached:
            try:
                self._proto.remove_pipe(pipe)
            except RejectPipe:
                pass
        self._pipes.pop(pipe.id, None)
        self._endpoint_host.sources.discard(pipe)
        dropped_pipe_after_fork(pipe)
        if pipe.attached:
            if log.pipe_log.isEnabledFor(logging.DEBUG):
                url = log.pipe_url(pipe)
                log.pipe_log.debug("%s %s: pipe %d (peer %s) dropped after fork (the parent "
                                   "keeps it)", self.protocol, url, pipe.id, pipe.remote_address,
                                   extra=log.fields(self, url, pipe))
            self._fire(PipeEvent.DETACHED, pipe)

    def _orphan(self, parent: int) -> None:
        """A socket of another OS thread (a :mod:`gsp.blocking` hub, a worker thread's): only
        the forking thread lives on in the child, so nothing of that socket can run here. The
        child's copies of its descriptors are closed (nothing sent), its greenlets, queues and
        waiters are left untouched (they belong to a hub that is gone), and every call on it
        raises :class:`gsp.Closed`, saying why."""
        for p in list(self._pipes.values()):
            orphan_pipe_after_fork(p)
        for lst in list(self._listeners):
            orphan_listener_after_fork(lst)
        for d in list(self._dialers):
            orphan_dialer_after_fork(d)
        self._closed_by_fork(Closed(
            f"this {self.protocol} socket belongs to OS thread {self._hot.tid} of process "
            f"{parent}, which does not exist in this forked child (pid {os.getpid()}): it is "
            f"closed here. Make the child's sockets in the child (gsp.per_process, or "
            f"gsp.blocking's hub, which starts afresh in a child)"))
        if log.socket_log.isEnabledFor(logging.INFO):
            log.socket_log.info("%s: forked (process %d): the socket belongs to another OS "
                                "thread of process %d, which the child does not have: its copies "
                                "of %s closed, the socket closed here", self.protocol,
                                os.getpid(), parent, _n(len(self._pipes), "pipe"),
                                extra=log.fields(self, None, gsp_parent=parent))

    def _closed_by_fork(self, why: Closed) -> None:
        """Closed in a forked child: every later call raises ``why`` again (a new one like it)."""
        self._inherited = why
        self._closed = True
        _open.pop(self.id, None)

    def _close_inherited(self, urls: list[str], parent: int) -> None:
        """A socket whose only endpoints were listeners has nothing to do in the child: it is
        closed here, and every call on it says why and what to do instead."""
        self._closed_by_fork(InheritedListener(
            f"this {self.protocol} socket was made in process {parent} before it forked, and its "
            f"only endpoints are that process's listeners ({', '.join(urls)}), which stay there: "
            f"it is closed in this process (pid {os.getpid()}). Make the socket after fork "
            f"(gunicorn post_fork, or gsp.per_process(factory)), or make a socket in this process "
            f"that listens on an address of its own, or on the same tcp address with "
            f"tcp_reuseport=True in every process (the kernel then spreads the connections among "
            f"them)"))
        self._proto.close()

    def _log_forked(self, parent: int, pipes: int, redialed: list[str], left: list[str],
                    kept: "list[Listener]", closed: bool) -> None:
        what = [f"dropped {_n(pipes, 'pipe')} inherited from process {parent} "
                f"(its connections are the parent's and stay open there)"]
        if redialed:
            what.append(f"redialing {_n(len(redialed), 'dialer')} ({', '.join(redialed)})")
        if left:
            what.append(f"left {_n(len(left), 'listener')} to the parent ({', '.join(left)})")
        if kept:
            what.append(f"kept {_n(len(kept), 'listener')} of this process's own "
                        f"({', '.join(lst.url for lst in kept)})")
        if closed:
            what.append("the socket is closed in this process: listen in the child or make the "
                        "socket after fork (see gsp.InheritedListener)")
        log.socket_log.info("%s: forked (process %d): %s", self.protocol, os.getpid(),
                            "; ".join(what), extra=log.fields(self, None, gsp_parent=parent))

    def __enter__(self) -> "Socket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._pipes)} pipes"
        return f"<gsp.Socket {self.protocol}{' raw' if self.raw else ''} {state}>"


def socket(protocol: str, *, raw: bool = False, listen: str | Iterable[str] | None = None,
           dial: str | Iterable[str] | None = None, fail_fast: bool = False,
           background: bool = False, **options: Any) -> Socket:
    """Open a socket of ``protocol`` ("pair", "push", "pull", ...), optionally listening/dialing.

    ``listen``/``dial`` take a URL or a list of URLs. Each ``dial`` is
    :meth:`Socket.dial` with ``fail_fast`` and ``background`` (by default: try now, keep
    redialing); ``options`` are the socket's. Per-endpoint options need :meth:`Socket.listen`
    and :meth:`Socket.dial`.
    """
    if "accept_gate" in options:
        raise BadOption("accept_gate is an argument of listen(), not a socket option: make the "
                        "socket, then call sock.listen(url, accept_gate=...)")
    block = _dial_mode(fail_fast, background, options.pop("block", _NO_BLOCK), "socket")
    if block is not None and dial is None:
        raise BadOption(f"{'fail_fast' if block else 'background'}=True says how to dial, and "
                        f"there is no dial=: pass dial=url, or call sock.dial(url, "
                        f"{'fail_fast' if block else 'background'}=True)")
    sock = Socket(protocol, raw=raw, **options)
    try:
        for url in _urls(listen):
            sock.listen(url)
        for url in _urls(dial):
            sock.dial(url, fail_fast=block is True, background=block is False)
    except BaseException:
        sock.close()
        raise
    return sock


def can(sock: Socket, op: "Op") -> bool:
    """Whether ``sock``'s protocol does ``op`` ("send" or "recv") at all: a pub socket never
    receives, a sub never sends (what :func:`gsp.device` asks). Never waits."""
    check_op(op)
    return type(sock._proto).can(op)


_NO_BLOCK: Any = object()  # dial()'s block= not given


def _dial_mode(fail_fast: bool, background: bool, block: Any, caller: str) -> bool | None:
    """How a dial starts, as :func:`~gsp._core.endpoints.start_dialer` takes it: None (try now,
    then keep redialing), True (fail fast) or False (background). ``block`` is the old spelling: it
    still works, with a DeprecationWarning naming the new one."""
    if block is not _NO_BLOCK:
        if block is not None and type(block) is not bool:
            raise BadOption(f"block must be None, True or False, not {block!r}")
        if fail_fast or background:
            raise BadOption("block= is the old spelling of fail_fast=/background=: give only "
                            "the new one")
        new = {None: "no block= (the default: try now, keep redialing)",
               True: "fail_fast=True", False: "background=True"}[block]
        warnings.warn(f"{caller}(..., block={block!r}) is deprecated for dialing; use {new}",
                      DeprecationWarning, stacklevel=3)
        return block
    if type(fail_fast) is not bool or type(background) is not bool:
        raise BadOption(f"fail_fast and background must be True or False, not "
                        f"{fail_fast!r} and {background!r}")
    if fail_fast and background:
        raise BadOption("fail_fast=True and background=True cannot go together: background "
                        "returns before the first attempt, so there is no error to raise at "
                        "once; choose one")
    return True if fail_fast else False if background else None


def _urls(v: str | Iterable[str] | None) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    return list(v)


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


# -- every open socket ----------------------------------------------------------------------------
def sockets() -> list[Socket]:
    """Every open socket of this process, oldest first (closed or garbage-collected sockets are
    not listed; the list holds them only weakly)."""
    refs = _open.valuerefs()  # one C-level copy: safe while sockets come and go
    found = [s for s in (r() for r in refs) if s is not None and not s.closed]
    return sorted(found, key=lambda s: s.id)


def stats() -> list[dict[str, Any]]:
    """A snapshot of every open socket: ``{"id", "protocol", "raw", "stats", "histograms",
    "pipes", "dialers", "listeners"}``, where ``stats`` is ``Socket.stats``, ``histograms``
    ``Socket.histograms``, and each pipe, dialer and listener is a
    dict of its labels (``id``, ``url``, ...) and its own ``stats`` (see docs/stats.md)."""
    return [_socket_entry(s) for s in sockets()]


def _socket_entry(sock: Socket) -> dict[str, Any]:
    pipes = []
    for p in list(sock._pipes.values()):
        ep = p.dialer or p.listener
        kind = "dialer" if p.dialer is not None else "listener" if ep is not None else None
        pipes.append({"id": p.id, "socket": sock.id, "endpoint": kind,
                      "url": None if ep is None else ep.url, "remote_address": p.remote_address,
                      "stats": p.stats})
    return {"id": sock.id, "protocol": sock.protocol, "raw": sock.raw, "stats": sock.stats,
            "histograms": sock.histograms, "pipes": pipes,
            "dialers": [{"id": d.id, "socket": sock.id, "url": d.url, "stats": d.stats}
                        for d in sock.dialers],
            "listeners": [{"id": lst.id, "socket": sock.id, "url": lst.url, "stats": lst.stats}
                          for lst in sock.listeners]}


def _after_fork_in_child(parent: int) -> None:
    """The fork hook (:func:`gsp._core.fork.install`): every open socket made in process
    ``parent`` becomes the child's own."""
    socks = sockets()
    if not socks:
        return
    # Let the child's event loop have its own poller before anything touches a watcher (gevent
    # does this itself when os.fork is monkey-patched, after this hook; twice is harmless).
    gevent.reinit()
    for sock in socks:
        try:
            sock._after_fork(parent)
        except Exception:  # never break the user's fork; the log says what went wrong
            log.socket_log.exception("%s: could not make the socket the child's own after fork",
                                     sock.protocol, extra=log.fields(sock, None))
