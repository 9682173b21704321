"""Option specs: names, defaults and validators shared by sockets, endpoints and plugins.

A validator is any ``check(name, value) -> normalised value`` that raises :class:`gsp.BadOption`.
The factories here (:func:`duration`, :func:`integer`, :func:`optional`, :func:`instance_of`) and
:data:`boolean` return :class:`Check` validators, which also say what they accept (type, unit,
range) so the options reference (docs/options.md) is generated from the specs themselves; wrap a
hand-written validator with :func:`described` to say the same.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from datetime import timedelta
from typing import Any, Callable, Iterator, Literal, Mapping, MutableMapping

from .admit import check_option as _check_admit
from .errors import BadOption, timed_out

__all__ = [
    "Option", "Options", "Validator", "Check", "described", "duration", "integer", "boolean",
    "anything", "optional", "instance_of", "SOCKET_OPTIONS", "ENDPOINT_OPTIONS", "Scope",
    "seconds", "whole_seconds", "warn_renamed", "renamed_options", "FROM_OPTION", "call_timeout", "call_source", "call_timed_out",
]

_UNSET: Any = object()

Validator = Callable[[str, Any], Any]


class Check:
    """A validator that describes what it accepts, for the docs and ``repr``.

    ``type`` is the Python type(s) accepted ("int", "float or None", "ssl.SSLContext"), ``unit``
    the unit of numbers ("s", "bytes", "messages"; "" if none), ``range`` the values allowed
    ("1..255", ">= 0", "'none', 'optional', 'required'"; "" if any value of the type).
    """

    __slots__ = ("_check", "type", "unit", "range")

    def __init__(self, check: Validator, type: str, unit: str = "", range: str = "") -> None:
        self._check = check
        self.type = type
        self.unit = unit
        self.range = range

    def __call__(self, name: str, v: Any) -> Any:
        return self._check(name, v)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in ("unit", "range") if getattr(self, k))
        return f"<Check {self.type!r}{extra}>"


def described(type: str, unit: str = "", range: str = "") -> Callable[[Validator], Check]:
    """Decorate a hand-written validator with what it accepts (see :class:`Check`)::

        @described("str", range="'none', 'optional', 'required'")
        def _client_auth(name, v): ...
    """
    def wrap(check: Validator) -> Check:
        return Check(check, type, unit, range)
    return wrap


def _describe(validate: Validator, field: str) -> str:
    value = getattr(validate, field, "")
    return value if isinstance(value, str) else ""


Scope = Literal["dial", "listen"]


class Option:
    """One named option: a default, a validator that returns the normalised value, a doc line.

    ``type``, ``unit`` and ``range`` come from the validator when it is a :class:`Check`
    ("" otherwise). ``scope`` says where a transport option does something: ``"dial"``
    (dialers only, e.g. ``tls_verify``), ``"listen"`` (listeners only, e.g.
    ``tls_client_auth``) or ``None`` (both). ``Socket.dial``/``listen`` refuse an option given to
    an endpoint it does nothing on, with :class:`gsp.BadOption`; set on the socket, it applies to
    the endpoints it fits.

    ``renamed_from`` lists the option's old names: each still works wherever the name does (a
    keyword, an attribute, ``get_option``/``set_option``, ``options[...]``), with a
    :class:`DeprecationWarning` naming the new one (docs/api-guide.md, "Renamed names").
    """

    __slots__ = ("name", "default", "validate", "doc", "scope", "renamed_from")

    def __init__(self, name: str, default: Any, validate: Validator, doc: str = "",
                 scope: Scope | None = None, renamed_from: tuple[str, ...] = ()) -> None:
        if scope not in (None, "dial", "listen"):
            raise ValueError(f"scope must be None, 'dial' or 'listen', not {scope!r}")
        self.name = name
        self.default = default
        self.validate = validate
        self.doc = doc
        self.scope = scope
        self.renamed_from = tuple(renamed_from)

    @property
    def type(self) -> str:
        return _describe(self.validate, "type")

    @property
    def unit(self) -> str:
        return _describe(self.validate, "unit")

    @property
    def range(self) -> str:
        return _describe(self.validate, "range")

    def __repr__(self) -> str:
        return f"<Option {self.name}={self.default!r}>"


_HERE = os.path.dirname(os.path.abspath(__file__))  # gsp's own files: not a use site


def warn_renamed(old: str, new: str) -> None:
    """Warn (:class:`DeprecationWarning`) that option ``old`` is now ``new``, pointing at the
    first caller outside gsp: the use site."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_HERE):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(f"option {old!r} is renamed {new!r}; the old name still works for now",
                  DeprecationWarning, stacklevel=level)


def renamed_options(specs: Mapping[str, Option]) -> dict[str, str]:
    """``{old name: new name}`` of the options in ``specs`` (their ``renamed_from``)."""
    return {old: o.name for o in specs.values() for old in o.renamed_from}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def seconds(name: str, v: Any, *, allow_none: bool = True, allow_zero: bool = True) -> float | None:
    """``v`` as float seconds: an int, a float or a :class:`datetime.timedelta`, >= 0 (or > 0);
    ``None`` (forever) when allowed. Seconds, however large: gsp has no milliseconds (docs/api-guide.md).
    Raises :class:`gsp.BadOption` naming ``name``."""
    if v is None and allow_none:
        return None
    if isinstance(v, timedelta):
        v = v.total_seconds()
    if not _is_number(v) or v != v or v < 0 or (v == 0 and not allow_zero):
        want = "a number of seconds " + (">= 0" if allow_zero else "> 0")
        raise BadOption(f"{name} must be {want} or a timedelta{' or None' if allow_none else ''}"
                        f", not {v!r}")
    return float(v)


#: The default of a per-call ``timeout`` argument: use the socket's (or context's) option.
#: It is ``...`` (Ellipsis) so a hot path compares it with a constant, not a global (~10 ns).
FROM_OPTION: Any = Ellipsis


def call_timeout(timeout: Any, block: Any) -> float | None:
    """The timeout of one ``send``/``recv`` call given ``timeout=`` (seconds, a timedelta, or
    None = forever) and/or ``block=False`` (= timeout 0), when either is not the default."""
    if block is not True and block is not False:
        raise BadOption(f"block must be True or False, not {block!r}")
    if not block:
        if timeout is not FROM_OPTION and timeout != 0:
            raise BadOption(f"block=False means timeout 0; it cannot go with timeout={timeout!r}")
        return 0.0
    return seconds("timeout", timeout)


def call_source(op: str, timeout: Any, block: bool, asked: float, where: str = "") -> str:
    """Where the timeout of a call came from, for its error message (see
    :func:`gsp.errors.timed_out`): ``block=False``, ``timeout=0.5`` or ``recv_timeout=2``."""
    if not block:
        return "block=False"
    if timeout is FROM_OPTION:
        return f"{op}_timeout={asked:g}{where}"
    return f"timeout={asked:g}"


def call_timed_out(exc: Any, op: str, t: float | None, timeout: Any, block: bool,
                   where: str = "") -> Any:
    """A :class:`gsp.Timeout` of one ``send``/``recv`` call (``exc``), told in the caller's terms:
    the timeout asked for and where it came from (:func:`call_source`). A timeout that was not a
    wait running out (a survey that expired: ``exc.timeout`` is None) is returned as it is."""
    if exc.timeout is None or t is None:
        return exc
    return timed_out(op, t, call_source(op, timeout, block, t, where))


def duration(*, allow_none: bool = True, allow_zero: bool = True) -> Check:
    """Validator of a duration in seconds (see :func:`seconds`): int/float or timedelta >= 0
    (or > 0); ``None`` means forever when allowed."""
    def check(name: str, v: Any) -> Any:
        return seconds(name, v, allow_none=allow_none, allow_zero=allow_zero)
    return Check(check, "float or None" if allow_none else "float", "s",
                 ">= 0" if allow_zero else "> 0")


def whole_seconds(lo: int, hi: int) -> Check:
    """Validator of a duration the kernel takes in whole seconds (TCP keepalive): an int, a
    float or a :class:`datetime.timedelta`, a fraction rounded up, in ``lo..hi`` seconds once
    rounded. The value kept is the int."""
    def check(name: str, v: Any) -> Any:
        t = seconds(name, v, allow_none=False)
        n = math.ceil(t) if t is not None else 0
        if n < lo or n > hi:
            raise BadOption(f"{name} must be a number of seconds in {lo}..{hi} (or a timedelta; "
                            f"a fraction is rounded up to whole seconds), not {v!r}")
        return n
    return Check(check, "float", "s", f"{lo}..{hi}, rounded up to whole seconds")


def integer(lo: int, hi: int | None = None, *, unit: str = "", range: str = "") -> Check:
    """An int in ``lo..hi`` (``hi`` None: no upper bound). ``unit`` and ``range`` (default: the
    bounds in decimal) only describe it."""
    def check(name: str, v: Any) -> Any:
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise BadOption(f"{name} must be an int {rng}, not {v!r}")
        return v
    return Check(check, "int", unit, range or (f">= {lo}" if hi is None else f"{lo}..{hi}"))


def _boolean(name: str, v: Any) -> Any:
    if not isinstance(v, bool):
        raise BadOption(f"{name} must be True or False, not {v!r}")
    return v


boolean = Check(_boolean, "bool")


def _anything(name: str, v: Any) -> Any:
    return v


anything = Check(_anything, "any")


def optional(inner: Validator) -> Check:
    """``inner``, or ``None``."""
    def check(name: str, v: Any) -> Any:
        return None if v is None else inner(name, v)
    kind = _describe(inner, "type") or "any"
    return Check(check, kind if kind.endswith(" or None") else f"{kind} or None",
                 _describe(inner, "unit"), _describe(inner, "range"))


def instance_of(*types: type) -> Check:
    def check(name: str, v: Any) -> Any:
        if not isinstance(v, types):
            raise BadOption(f"{name} must be {' or '.join(t.__name__ for t in types)}, not {v!r}")
        return v
    return Check(check, " or ".join(t.__name__ for t in types))


#: The longest ``recv_spin``: a spin is for a reply due within microseconds, not a way to wait.
SPIN_MAX = 0.01


@described("float", "s", f"0..{SPIN_MAX:g}")
def _spin_check(name: str, v: Any) -> Any:
    t = seconds(name, v, allow_none=False)
    if t is None or t > SPIN_MAX:
        raise BadOption(f"{name} must be a number of seconds in 0..{SPIN_MAX:g} (a spin is "
                        f"for a reply due within microseconds), not {v!r}")
    return t


# Options every socket has. Endpoint-scoped ones may also be given to listen()/dial().
SOCKET_OPTIONS: dict[str, Option] = {o.name: o for o in [
    Option("recv_timeout", None, duration(), "seconds recv() waits; None = forever"),
    Option("send_timeout", None, duration(), "seconds send() waits; None = forever"),
    Option("max_recv_size", 1 << 20, integer(0, unit="bytes"),
           "largest message accepted, bytes; 0 = unlimited", renamed_from=("recv_max_size",)),
    Option("reconnect_time", 0.1, duration(allow_none=False, allow_zero=False),
           "first redial delay, seconds"),
    Option("max_reconnect_time", 10.0, duration(allow_none=False),
           "redial backoff ceiling, seconds; 0 = no backoff", renamed_from=("reconnect_time_max",)),
    Option("send_buffer", 1024, integer(1, 1 << 24, unit="messages"), "messages queued per pipe for sending"),
    Option("send_buffer_size", 4 << 20, integer(0, unit="bytes"),
           "bytes queued per pipe for sending; full at this or send_buffer, whichever comes "
           "first (one message is always let in); 0 = no byte bound",
           renamed_from=("send_buffer_bytes",)),
    Option("recv_buffer", 1024, integer(1, 1 << 24, unit="messages"), "messages queued on the socket for recv()"),
    Option("recv_buffer_size", 16 << 20, integer(0, unit="bytes"),
           "bytes queued on the socket for recv(); full at this or recv_buffer, whichever comes "
           "first (one message is always let in); 0 = no byte bound",
           renamed_from=("recv_buffer_bytes",)),
    Option("linger", 1.0, duration(allow_none=False), "seconds close() waits to flush queued messages"),
    Option("best_effort", False, boolean, "drop instead of blocking when no peer can take a message"),
    Option("handshake_timeout", 10.0, duration(allow_zero=False),
           "seconds a new connection may take to finish its SP handshake"),
    Option("max_recv_partial", 64 << 20, integer(0, unit="bytes"),
           "bytes all pipes may hold in messages still arriving; at the bound a pipe in the "
           "middle of one reads no further until others finish; 0 = no bound",
           renamed_from=("recv_partial_max",)),
    Option("recv_partial_timeout", 30.0, duration(allow_zero=False),
           "seconds a message still arriving may go without new bytes (or held back by "
           "max_recv_partial) before its pipe is closed with FrameStalled; None = never"),
    Option("max_pipes", 0, integer(0, unit="pipes"),
           "pipes the socket (or, given to listen(), that listener) may have at once, dialed "
           "and accepted; beyond it a new connection is closed right after accept, before its "
           "handshake (stats: pipes_refused_full), and dialers wait for room; 0 = no limit",
           scope="listen"),
    Option("max_handshakes", 256, integer(0, unit="connections"),
           "connections a listener may have in their SP handshake (TLS, ws upgrade) at once; "
           "at the bound it keeps accepting and closes the one that has sent the fewest bytes "
           "(then the oldest) to make room (stats: handshakes_shed_full); 0 = no bound",
           scope="listen"),
    Option("max_handshakes_per_address", 0, integer(0, unit="connections"),
           "connections from one source address a listener may have in their handshake at "
           "once; at the bound a newcomer from it is taken and the least advanced of that "
           "address's is closed (stats: handshakes_shed_address); 0 = no bound",
           scope="listen"),
    Option("admit", None, Check(_check_admit, "gsp.admit rule, callable (peer) -> bool, or None"),
           "who may become a pipe: a gsp.admit rule (cidr, uid/gid/pid, certificate, ws_header, "
           "ws_cookie, ws_query, ws_path, per_address; combined with &, |, ~) or a callable "
           "(peer) -> bool, judged before the pipe attaches; a refused connection is closed "
           "before any message (stats: pipes_refused_<reason>); given to listen() or dial(), "
           "that endpoint's own (docs/admission.md); None = everyone"),
    Option("fail_no_peers", False, boolean,
           "raise gsp.NoPeers at once where a send (or req's recv) would wait for a peer to "
           "exist: no pipe at all; as mangos' OptionFailNoPeers (docs/errors.md)"),
    Option("recv_spin", 0.0, _spin_check,
           "seconds a wait for a reply or a request (req, rep, surveyor, respondent) keeps the "
           "event loop polling, without sleeping, before the hub sleeps: a lower round trip "
           "for CPU time; 0 = off, which costs nothing (docs/measuring.md, low-latency mode)"),
]}

# Options that listen()/dial() accept besides their transport's own.
ENDPOINT_OPTIONS = frozenset(
    {"max_recv_size", "reconnect_time", "max_reconnect_time", "handshake_timeout", "max_pipes",
     "max_handshakes", "max_handshakes_per_address", "admit"}
)


class Options(MutableMapping[str, Any]):
    """Validated option values layered over defaults (and, for endpoints, over the socket's).

    Endpoints see a socket's later changes unless they set the option themselves, as mangos'
    OptionsInherit test expects.
    """

    def __init__(self, specs: Mapping[str, Option], parent: "Options | None" = None) -> None:
        self.specs = specs
        self._values: dict[str, Any] = {}
        self.parent = parent

    def renamed(self, name: str) -> str | None:
        """The current name of an option once called ``name`` (None: not an old name)."""
        return renamed_options(self.specs).get(name)

    def resolve(self, name: str) -> str:
        """``name``, or the new name of an old one (with a DeprecationWarning); an unknown name
        raises :class:`gsp.BadOption` listing the known ones."""
        if name in self.specs:
            return name
        new = self.renamed(name)
        if new is None:
            known = ", ".join(sorted(self.specs))
            raise BadOption(f"unknown option {name!r}; known options: {known}")
        warn_renamed(name, new)
        return new

    def check_name(self, name: str) -> Option:
        """The spec of option ``name`` (an old name: of its new one, with a warning)."""
        spec = self.specs.get(name)
        if spec is None:
            return self.specs[self.resolve(name)]
        return spec

    def __setitem__(self, name: str, value: Any) -> None:
        name = self.resolve(name)
        self._values[name] = self.specs[name].validate(name, value)

    def __getitem__(self, name: str) -> Any:
        # Plain dict look-ups (a ChainMap costs ~250 ns per read: protocols read options per send).
        value = self._values.get(name, _UNSET)
        if value is not _UNSET:
            return value
        if self.parent is not None:
            if name not in self.specs:  # an old name: its new one's value here
                return self[self.resolve(name)]
            return self.parent[name]
        spec = self.specs.get(name)
        if spec is None:
            return self[self.resolve(name)]
        return spec.default

    def __delitem__(self, name: str) -> None:
        del self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def update_checked(self, values: Mapping[str, Any]) -> None:
        """Validate all of ``values`` first, then apply them: a bad one changes nothing."""
        named = {self.resolve(n): v for n, v in values.items()}
        if len(named) < len(values):
            raise BadOption(f"an option is given twice, by its new name and its old one: "
                            f"{', '.join(sorted(values))}")
        checked = {n: self.specs[n].validate(n, v) for n, v in named.items()}
        self._values.update(checked)
