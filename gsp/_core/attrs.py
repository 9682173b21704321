"""A socket's options and protocol methods as its attributes, without ``__getattr__``.

``sock.recv_timeout`` reads an option and ``sub.subscribe(...)`` calls a method of the protocol.
A class that defines ``__getattr__`` pays for that on every attribute of every instance: CPython
then looks each one up through a slot hook and never specialises the load, so ``sock.send``,
``sock.recv`` and the socket's own loads inside them cost more. Counted with
``tests/tools/work_count.py`` (instructions a message, under callgrind): a 16-byte push/pull
message 7,893 → 6,367 without it, a request served by a REP with 16 clients 50.9 k → 48.8 k.

So each socket is an instance of a subclass of the class asked for, made once per protocol and
option set, with a descriptor per option and per protocol method. The subclass keeps the class's
name; ``isinstance`` is unchanged. Real attributes come first, as they did: the descriptors are
not data descriptors (an instance's own attribute wins) and none is made for a name the class
already has. Setting an option still goes through the socket's ``__setattr__`` (validation,
watchers).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol

from ..options import warn_renamed


class _Host(Protocol):
    """What the descriptors need of a socket."""

    _options: Any
    _proto: Any

    def _protocol_method(self, name: str, method: Callable[..., Any] | None
                         ) -> Callable[..., Any]: ...


class OptionAttr:
    """An option read as an attribute: its value now (``Options[name]``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, sock: _Host | None, owner: type | None = None) -> Any:
        if sock is None:
            return self
        return sock._options[self.name]


class RenamedAttr:
    """An option's old name read as an attribute: the new one's value, with a warning."""

    __slots__ = ("old", "new")

    def __init__(self, old: str, new: str) -> None:
        self.old = old
        self.new = new

    def __get__(self, sock: _Host | None, owner: type | None = None) -> Any:
        if sock is None:
            return self
        warn_renamed(self.old, self.new)
        return getattr(sock, self.new)


class MethodAttr:
    """A protocol's method as the socket's (checked for a closed socket at each call), or, for a
    name only other installed protocols offer, a call that raises :class:`gsp.NotSupported`."""

    __slots__ = ("name", "offered")

    def __init__(self, name: str, offered: bool) -> None:
        self.name = name
        self.offered = offered  # this socket's protocol has it

    def __get__(self, sock: _Host | None, owner: type | None = None) -> Any:
        if sock is None:
            return self
        method = getattr(sock._proto, self.name) if self.offered else None
        return sock._protocol_method(self.name, method)


_Key = tuple[type, frozenset[str], frozenset[str], frozenset[str], frozenset[tuple[str, str]]]
_classes: dict[_Key, type] = {}


def with_attrs(base: type, options: Iterable[str], methods: Iterable[str],
               known_methods: Iterable[str], renamed: Mapping[str, str]) -> type:
    """``base``'s subclass whose instances have ``options`` (names) and ``methods`` (the
    protocol's) as attributes, every other name in ``known_methods`` (any installed
    protocol's) as a method raising NotSupported, and each old option name of ``renamed``
    (old: new) reading its new one; made once, then reused."""
    base = base.__dict__.get("_attrs_base", base)  # (a class made here: its base again)
    key = (base, frozenset(options), frozenset(methods), frozenset(known_methods),
           frozenset(renamed.items()))
    cls = _classes.get(key)
    if cls is None:
        names: dict[str, Any] = {}
        for name in sorted(key[1]):  # options before methods, as the old lookup went
            if not hasattr(base, name):
                names[name] = OptionAttr(name)
        for old, new in sorted(key[4]):
            if old not in names and not hasattr(base, old):
                names[old] = RenamedAttr(old, new)
        for name in sorted(key[3] | key[2]):
            if name not in names and not hasattr(base, name):
                names[name] = MethodAttr(name, name in key[2])
        names["_attrs_base"] = base
        names["__module__"] = base.__module__
        names["__qualname__"] = base.__qualname__
        names["__doc__"] = base.__doc__
        cls = _classes[key] = type(base.__name__, (base,), names)
    return cls
