"""gsp — the Scalability Protocols (nanomsg/nng/mangos) on gevent, wire-compatible with nng.

The public API is what this module exports; everything in ``gsp._*`` is private. Plugin authors
also use :mod:`gsp.transport`, :mod:`gsp.protocol`, :mod:`gsp.wire` and :mod:`gsp.hookspecs`.
"""

from ._context import Context
from ._device import Device, device
from ._errors import (
    AddressInUse,
    BadFrame,
    BadMagic,
    BadOption,
    BadReserved,
    BadVersion,
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    GspError,
    HandshakeError,
    InvalidAddress,
    MessageTooLarge,
    NotSupported,
    ProtocolStateError,
    Timeout,
    UnknownPlugin,
    WireError,
    WouldBlock,
    WrongProtocol,
)
from ._message import Message
from ._pipe import Pipe, PipeEvent
from ._registry import hookimpl, registry
from ._socket import Dialer, Listener, Socket, socket
from .chan import CLOSED, Chan, Recv, Send, select

__version__ = "0.1.0"

__all__ = [
    "socket", "Socket", "Dialer", "Listener", "Pipe", "PipeEvent", "Message",
    "Context", "device", "Device",
    "Chan", "Recv", "Send", "select", "CLOSED",
    "hookimpl", "register_plugin", "unregister_plugin", "protocols", "transports",
    "GspError", "Timeout", "WouldBlock", "Closed", "ConnectionBroken", "ProtocolStateError",
    "NotSupported", "BadOption", "InvalidAddress", "AddressInUse", "ConnectionRefused",
    "UnknownPlugin", "WireError", "MessageTooLarge", "BadFrame", "HandshakeError", "BadMagic",
    "BadVersion", "BadReserved", "WrongProtocol",
]


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin module or object by hand (needed when entry-point autoload is off)."""
    registry.register(plugin, name)


def unregister_plugin(plugin: object) -> None:
    registry.unregister(plugin)


def protocols() -> list[str]:
    """Names of the installed protocols."""
    return sorted(registry.protocols)


def transports() -> list[str]:
    """URL schemes of the installed transports."""
    return sorted(registry.transports)
