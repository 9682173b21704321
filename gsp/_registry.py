"""The plugin registry: a pluggy PluginManager over the ``gsp`` entry-point group."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pluggy

from . import hookspecs
from ._errors import GspError, InvalidAddress, UnknownPlugin
from .protocol import ProtocolSpec
from .transport import Transport, split_url

ENTRY_POINT_GROUP = "gsp"
#: Set to a non-empty value to load only gsp's own entry points (no third-party autoload).
DISABLE_AUTOLOAD_ENV = "GSP_DISABLE_PLUGIN_AUTOLOAD"

# Used only when gsp runs from a source tree without installed metadata.
_BUILTIN_MODULES = (
    "gsp._transports.tcp", "gsp._transports.ipc", "gsp._transports.inproc", "gsp._transports.tls",
    "gsp._protocols.pair", "gsp._protocols.pushpull",
    "gsp._protocols.pubsub", "gsp._protocols.bus", "gsp._protocols.pair1",
    "gsp._protocols.reqrep", "gsp._protocols.survey",
)

hookimpl = pluggy.HookimplMarker("gsp")


class Registry:
    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("gsp")
        self.pm.add_hookspecs(hookspecs)
        self._loaded = False
        self._transports: dict[str, Transport] = {}
        self._protocols: dict[str, ProtocolSpec] = {}

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        from importlib.metadata import entry_points
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
        own = [ep for ep in eps if ep.dist is not None and ep.dist.name == "gsp"]
        if not own:
            for name in _BUILTIN_MODULES:
                self.pm.register(importlib.import_module(name), name=name)
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
        for ep in eps:
            if ep in own or autoload:
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
        self._transports, self._protocols = transports, protocols

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
        self._load()
        scheme, _ = split_url(url)
        t = self._transports.get(scheme)
        if t is None:
            raise InvalidAddress(
                f"no transport for {scheme!r} in {url!r}; installed schemes: "
                f"{', '.join(sorted(self._transports)) or 'none'}")
        return t

    def protocol(self, name: str) -> ProtocolSpec:
        self._load()
        spec = self._protocols.get(name)
        if spec is None:
            raise UnknownPlugin(
                f"unknown protocol {name!r}; installed protocols: "
                f"{', '.join(sorted(self._protocols)) or 'none'}")
        return spec

    @property
    def transports(self) -> dict[str, Transport]:
        self._load()
        return dict(self._transports)

    @property
    def protocols(self) -> dict[str, ProtocolSpec]:
        self._load()
        return dict(self._protocols)

    def transport_options(self) -> dict[str, Any]:
        self._load()
        out: dict[str, Any] = {}
        for t in set(self._transports.values()):
            out.update(t.options)
        return out


registry = Registry()
