"""gsp — the Scalability Protocols (nanomsg/nng/mangos) on gevent, wire-compatible with nng.

The user API is what this module exports, with the modules beside it: :mod:`gsp.errors` (the one
error tree), :mod:`gsp.message`, :mod:`gsp.chan` (channels and ``select``), :mod:`gsp.context`,
:mod:`gsp.poller` (:func:`gsp.select` over sockets, contexts and channels; :class:`gsp.Poller`),
:mod:`gsp.objects` (the msgpack codec of ``send_obj``/``recv_obj``), :mod:`gsp.options` (option
specs), :mod:`gsp.blocking` (sockets driven from threads that do not run gevent),
:mod:`gsp.perprocess`, :func:`gsp.prefork`, :mod:`gsp.allocator` (:func:`gsp.tune_allocator`), :mod:`gsp.prometheus`
(:func:`gsp.stats` as Prometheus metrics) and :mod:`gsp.hookspecs` (the plugin hooks, for
:func:`gsp.register_plugin`).

Plugin authors have two SDK packages, each one import: :mod:`gsp.protocol` (a new topology) and
:mod:`gsp.transport` (a new URL scheme); :mod:`gsp.testing` is their conformance kit. Everything
under ``gsp._*`` is private: the core (``gsp._core``) and the built-in protocols and transports,
which register through gsp's entry points as any plugin does.

Names that need gevent load on first use, so ``import gsp`` alone (e.g. by the pytest plugin in
:mod:`gsp.testing`) neither imports gevent nor creates a hub.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._lazy import attach
from .errors import (
    AddressInUse,
    BadFrame,
    BadMagic,
    BadMessage,
    BadOption,
    BadReserved,
    BadVersion,
    Canceled,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    FrameStalled,
    GspError,
    HandshakeError,
    InheritedListener,
    InvalidAddress,
    MessageTooLarge,
    NoPeers,
    NotSupported,
    ProtocolStateError,
    Timeout,
    TLSHandshakeError,
    UnknownPlugin,
    UpgradeRefused,
    WireError,
    WorkerFailed,
    WouldBlock,
    WrongProtocol,
    WrongThread,
)
from .hookspecs import hookimpl
from .message import Message

if TYPE_CHECKING:
    # The user API's names that load on first use (gsp._lazy), each from its module.
    from ._core.device import Device, device
    from ._core.endpoints import Dialer, Listener
    from ._core.events import PipeEvent
    from ._core.pipe import Pipe
    from ._core.prefork import Prefork, PreforkWorker, prefork
    from ._core.registry import registry
    from ._core.socket import Socket, socket, sockets, stats
    from .allocator import tune_allocator
    from .chan import CLOSED, Chan, Recv, Send
    from .context import Context
    from .perprocess import PerProcess, per_process
    from .poller import POLLIN, POLLOUT, Poller, select

__version__ = "1.0.0rc1"

# Library convention: gsp logs under the "gsp" hierarchy (gsp.socket, gsp.listener, gsp.dialer,
# gsp.pipe) and prints nothing unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "socket", "Socket", "Dialer", "Listener", "Pipe", "PipeEvent", "Message",
    "Context", "device", "Device", "sockets", "stats",
    "Chan", "Recv", "Send", "select", "CLOSED", "Poller", "POLLIN", "POLLOUT", "tune_allocator",
    "hookimpl", "register_plugin", "unregister_plugin", "protocol_names", "transport_schemes",
    "registry",
    "GspError", "Timeout", "WouldBlock", "Closed", "ConnectionBroken", "ProtocolStateError",
    "Canceled", "NotSupported", "BadOption", "InvalidAddress", "AddressInUse", "ConnectionRefused",
    "UnknownPlugin", "WireError", "MessageTooLarge", "BadFrame", "HandshakeError", "BadMagic",
    "BadVersion", "BadReserved", "WrongProtocol", "BadMessage", "FrameStalled",
    "per_process", "PerProcess", "InheritedListener",
    "NoPeers",
    "UpgradeRefused",
    "WrongThread", "TLSHandshakeError",
    "prefork", "Prefork", "PreforkWorker", "WorkerFailed",
]

# The names imported above for type checkers, and the public submodules (importable as
# attributes too: ``gsp.transport.Transport``), load on first use.
__getattr__, __dir__ = attach(__name__, submodules=(
    "errors", "chan", "options", "message", "hookspecs", "handles", "overrides", "protocol",
    "transport", "context", "testing", "objects", "cat", "poller", "prometheus",
    "allocator", "perprocess", "blocking", "admit"),
    renamed={"protocols": ("gsp", "protocol_names"), "transports": ("gsp", "transport_schemes")})


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin module or object by hand (needed when entry-point autoload is off)."""
    from ._core.registry import registry
    registry.register(plugin, name)


def unregister_plugin(plugin: object) -> None:
    from ._core.registry import registry
    registry.unregister(plugin)


def protocol_names() -> list[str]:
    """Names of the installed protocols (what :func:`gsp.socket` takes), sorted."""
    from ._core.registry import registry
    return sorted(registry.protocols)


def transport_schemes() -> list[str]:
    """URL schemes of the installed transports (``tcp``, ``ipc``, ...), sorted."""
    from ._core.registry import registry
    return sorted(registry.transports)
