"""The core's objects as the objects they belong to see them: small typing Protocols, so that a
pipe or an endpoint names its socket (and a log record its labels) without importing the module
that makes them (no import cycle, type-checking imports included)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Protocol as _Typing

if TYPE_CHECKING:
    from ..protocol.interface import ProtocolSpec


class SocketView(_Typing):
    """A socket (:class:`gsp.Socket`), as its pipes, endpoints and log records see it."""

    @property
    def id(self) -> int: ...
    @property
    def protocol(self) -> str: ...
    @property
    def raw(self) -> bool: ...
    @property
    def spec(self) -> "ProtocolSpec": ...
    @property
    def closed(self) -> bool: ...


class EndpointView(_Typing):
    """A listener or dialer (:class:`gsp.Listener`, :class:`gsp.Dialer`), as its pipes and log
    records see it."""

    @property
    def id(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def socket(self) -> SocketView: ...


class PipeView(_Typing):
    """A pipe (:class:`gsp.Pipe`), as a log record sees it."""

    @property
    def id(self) -> int: ...
    @property
    def remote_address(self) -> str: ...
    @property
    def dialer(self) -> EndpointView | None: ...
    @property
    def listener(self) -> EndpointView | None: ...
