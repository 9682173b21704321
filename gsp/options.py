"""Option specs: names, defaults and validators shared by sockets, endpoints and plugins."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, MutableMapping

from .errors import BadOption

_UNSET: Any = object()

Validator = Callable[[str, Any], Any]


class Option:
    """One named option: a default, a validator that returns the normalised value, a doc line."""

    __slots__ = ("name", "default", "validate", "doc")

    def __init__(self, name: str, default: Any, validate: Validator, doc: str = "") -> None:
        self.name = name
        self.default = default
        self.validate = validate
        self.doc = doc

    def __repr__(self) -> str:
        return f"<Option {self.name}={self.default!r}>"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def duration(*, allow_none: bool = True, allow_zero: bool = True) -> Validator:
    """Seconds as int/float >= 0 (or > 0); ``None`` means forever when allowed."""
    def check(name: str, v: Any) -> Any:
        if v is None and allow_none:
            return None
        if not _is_number(v) or v != v or v < 0 or (v == 0 and not allow_zero):
            want = "a number of seconds " + (">= 0" if allow_zero else "> 0")
            raise BadOption(f"{name} must be {want}{' or None' if allow_none else ''}, not {v!r}")
        return float(v)
    return check


def integer(lo: int, hi: int | None = None) -> Validator:
    def check(name: str, v: Any) -> Any:
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise BadOption(f"{name} must be an int {rng}, not {v!r}")
        return v
    return check


def boolean(name: str, v: Any) -> Any:
    if not isinstance(v, bool):
        raise BadOption(f"{name} must be True or False, not {v!r}")
    return v


def anything(name: str, v: Any) -> Any:
    return v


def optional(inner: Validator) -> Validator:
    def check(name: str, v: Any) -> Any:
        return None if v is None else inner(name, v)
    return check


def instance_of(*types: type) -> Validator:
    def check(name: str, v: Any) -> Any:
        if not isinstance(v, types):
            raise BadOption(f"{name} must be {' or '.join(t.__name__ for t in types)}, not {v!r}")
        return v
    return check


# Options every socket has. Endpoint-scoped ones may also be given to listen()/dial().
SOCKET_OPTIONS: dict[str, Option] = {o.name: o for o in [
    Option("recv_timeout", None, duration(), "seconds recv() waits; None = forever"),
    Option("send_timeout", None, duration(), "seconds send() waits; None = forever"),
    Option("recv_max_size", 1 << 20, integer(0), "largest message accepted, bytes; 0 = unlimited"),
    Option("reconnect_time", 0.1, duration(allow_none=False, allow_zero=False),
           "first redial delay, seconds"),
    Option("reconnect_time_max", 10.0, duration(allow_none=False),
           "redial backoff ceiling, seconds; 0 = no backoff"),
    Option("send_buffer", 1024, integer(1, 1 << 24), "messages queued per pipe for sending"),
    Option("recv_buffer", 1024, integer(1, 1 << 24), "messages queued on the socket for recv()"),
    Option("linger", 1.0, duration(allow_none=False), "seconds close() waits to flush queued messages"),
    Option("best_effort", False, boolean, "drop instead of blocking when no peer can take a message"),
    Option("handshake_timeout", 10.0, duration(allow_zero=False),
           "seconds a new connection may take to finish its SP handshake"),
]}

# Options that listen()/dial() accept besides their transport's own.
ENDPOINT_OPTIONS = frozenset(
    {"recv_max_size", "reconnect_time", "reconnect_time_max", "handshake_timeout"}
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

    def check_name(self, name: str) -> Option:
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.specs))
            raise BadOption(f"unknown option {name!r}; known options: {known}")
        return spec

    def __setitem__(self, name: str, value: Any) -> None:
        self._values[name] = self.check_name(name).validate(name, value)

    def __getitem__(self, name: str) -> Any:
        # Plain dict look-ups (a ChainMap costs ~250 ns per read: protocols read options per send).
        value = self._values.get(name, _UNSET)
        if value is not _UNSET:
            return value
        if self.parent is not None:
            return self.parent[name]
        spec = self.specs.get(name)
        if spec is None:
            raise BadOption(f"unknown option {name!r}")
        return spec.default

    def __delitem__(self, name: str) -> None:
        del self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def update_checked(self, values: Mapping[str, Any]) -> None:
        """Validate all of ``values`` first, then apply them: a bad one changes nothing."""
        checked = {n: self.check_name(n).validate(n, v) for n, v in values.items()}
        self._values.update(checked)
