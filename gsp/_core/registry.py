"""The plugin registry: a pluggy PluginManager over the ``gsp`` entry-point group.

gsp's own transports and protocols are entry points of that group too (listed once, in
pyproject.toml): they load exactly as a third party's do.
"""

from __future__ import annotations

import os
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

import pluggy

from .. import hookspecs
from ..errors import GspError, InvalidAddress, UnknownPlugin
from ..options import Option
from ..protocol.interface import ProtocolSpec
from ..transport import wire
from ..transport.interface import Transport
from ..transport.urls import split_url

ENTRY_POINT_GROUP = "gsp"
#: Set to a non-empty value to load only gsp's own entry points (no third-party autoload).
DISABLE_AUTOLOAD_ENV = "GSP_DISABLE_PLUGIN_AUTOLOAD"


def _is_builtin(ep: EntryPoint) -> bool:
    return ep.value.split(":")[0].startswith("gsp.")


class Registry:
    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("gsp")
        self.pm.add_hookspecs(hookspecs)
        self._loaded = False
        self._transports: dict[str, Transport] = {}
        self._protocols: dict[str, ProtocolSpec] = {}
        self._methods: frozenset[str] = frozenset()

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
        if not any(map(_is_builtin, eps)):
            raise GspError("gsp's own transports and protocols are not registered: install its "
                           "distribution, gevent-sp (pip install gevent-sp, or pip install -e . "
                           "in a checkout), instead of running it from a bare source tree")
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
        for ep in eps:
            if autoload or _is_builtin(ep):
                if self.pm.get_plugin(ep.value) is None and not self.pm.is_blocked(ep.value):
                    self.pm.register(ep.load(), name=ep.value)
        self._rebuild()

    def _rebuild(self) -> None:
        transports: dict[str, Transport] = {}
        for group in self.pm.hook.gsp_transports():
            for t in group or ():
                for scheme in t.schemes:
                    if scheme in transports and transports[scheme] is not t:
                        raise GspError(f"two plugins claim the URL scheme {scheme!r}")
                    transports[scheme] = t
        protocols: dict[str, ProtocolSpec] = {}
        for group in self.pm.hook.gsp_protocols():
            for p in group or ():
                if p.name in protocols:
                    raise GspError(f"two plugins claim the protocol {p.name!r}")
                protocols[p.name] = p
                wire.PROTOCOL_NAMES.setdefault(p.number, p.name)  # for WrongProtocol's message
        self._transports, self._protocols = transports, protocols
        self._methods = frozenset(m for p in protocols.values() for m in p.methods)

    def register(self, plugin: Any, name: str | None = None) -> None:
        """Register a plugin object or module by hand (e.g. when autoload is off)."""
        self._load()
        self.pm.register(plugin, name=name)
        self._rebuild()

    def unregister(self, plugin: Any) -> None:
        self._load()
        self.pm.unregister(plugin)
        self._rebuild()

    def transport_for(self, url: str) -> Transport:
        """The transport serving ``url``'s scheme; :class:`gsp.InvalidAddress` if none does."""
        self._load()
        scheme, _ = split_url(url)
        return _find(self._transports, scheme, InvalidAddress,
                     f"no transport for {scheme!r} in {url!r}; installed schemes")

    def protocol(self, name: str) -> ProtocolSpec:
        """The protocol called ``name``; :class:`gsp.UnknownPlugin` if none is installed."""
        self._load()
        return _find(self._protocols, name, UnknownPlugin,
                     f"unknown protocol {name!r}; installed protocols")

    @property
    def transports(self) -> dict[str, Transport]:
        self._load()
        return dict(self._transports)

    @property
    def protocols(self) -> dict[str, ProtocolSpec]:
        self._load()
        return dict(self._protocols)

    def protocol_methods(self) -> frozenset[str]:
        """Every name some installed protocol offers as a socket method (``spec.methods``)."""
        self._load()
        return self._methods

    def transport_options(self) -> dict[str, Option]:
        self._load()
        out: dict[str, Option] = {}
        for t in set(self._transports.values()):
            out.update(t.options)
        return out


T = TypeVar("T")


def _find(table: dict[str, T], key: str, error: type[GspError], what: str) -> T:
    found = table.get(key)
    if found is None:
        raise error(f"{what}: {', '.join(sorted(table)) or 'none'}")
    return found


registry = Registry()
