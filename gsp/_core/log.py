"""What the core tells stdlib :mod:`logging`: endpoints, pipes, failures, and never per message.

Loggers: ``gsp.socket`` (pipe callbacks that raised, rejected pipes), ``gsp.listener`` (listen,
accept, handshake failures), ``gsp.dialer`` (dial, failed attempts and redials), ``gsp.pipe``
(attached, detached with the reason). ``gsp`` itself has a ``NullHandler`` (set in
``gsp/__init__.py``): nothing is printed unless the application configures logging.

Every record names the socket's protocol and the endpoint's URL in its text, and carries them as
attributes for handlers and filters: ``gsp_protocol``, ``gsp_url``, ``gsp_pipe`` (a pipe id or
``None``) and ``gsp_remote`` (the peer's address or ``None``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ..errors import MessageTooLarge, Timeout, WireError, WrongProtocol
from .views import PipeView, SocketView

if TYPE_CHECKING:
    from ..protocol.interface import ProtocolSpec

socket_log = logging.getLogger("gsp.socket")
listener_log = logging.getLogger("gsp.listener")
dialer_log = logging.getLogger("gsp.dialer")
pipe_log = logging.getLogger("gsp.pipe")

#: A repeating failure (a dialer's failed attempts, a listener's failed handshakes) is logged at
#: WARNING at most once per this many seconds; the ones in between go to DEBUG and are counted
#: in the next WARNING.
REPEAT_INTERVAL = 10.0


def fields(sock: SocketView, url: str | None, pipe: PipeView | None = None,
           remote: str | None = None, **more: Any) -> dict[str, Any]:
    """The ``extra=`` of a record: protocol, URL, pipe id and peer address (``None`` if n/a)."""
    if pipe is not None and remote is None:
        remote = pipe.remote_address
    out = {"gsp_protocol": sock.protocol, "gsp_url": url,
           "gsp_pipe": None if pipe is None else pipe.id, "gsp_remote": remote}
    out.update(more)
    return out


def pipe_url(pipe: PipeView) -> str | None:
    """The URL of the endpoint a pipe came from (its dialer's or listener's)."""
    ep = pipe.dialer or pipe.listener
    return None if ep is None else ep.url


def describe(exc: BaseException | None, spec: "ProtocolSpec | None" = None) -> str:
    """An error as a log line says it: wrong protocols by name, oversize with its sizes."""
    if exc is None:
        return "closed locally"
    if isinstance(exc, WrongProtocol) and spec is not None and exc.got is not None:
        return (f"wrong protocol: the peer speaks {_protocol_name(exc.got)}, "
                f"a {spec.name} socket needs {spec.peer_name} ({exc})")
    if isinstance(exc, Timeout):
        return f"timed out ({exc})"
    if isinstance(exc, MessageTooLarge):
        return f"{type(exc).__name__}: {exc} (the receiving socket's max_recv_size)"
    return f"{type(exc).__name__}: {exc}"


def _protocol_name(number: int) -> str:
    from .registry import registry
    for spec in registry.protocols.values():
        if spec.number == number:
            return f"{spec.name} (0x{number:x})"
    return f"an unknown protocol 0x{number:x}"


def oversize_fields(exc: BaseException | None) -> dict[str, Any]:
    """``gsp_size``/``gsp_limit`` of a :class:`gsp.MessageTooLarge` (``None`` when unknown)."""
    if isinstance(exc, MessageTooLarge):
        return {"gsp_size": exc.size, "gsp_limit": exc.limit}
    return {}


def detach_level(exc: BaseException | None) -> int:
    """A peer that broke the wire format (oversize, bad frames) is a WARNING; the rest INFO."""
    return logging.WARNING if isinstance(exc, WireError) else logging.INFO


class Repeats:
    """Rate limit for one repeating failure: WARNING at the first and then at most once per
    :data:`REPEAT_INTERVAL` seconds, DEBUG in between; :meth:`level` says which and how many
    were held back since the last WARNING."""

    __slots__ = ("count", "_held", "_last")

    def __init__(self) -> None:
        self.count = 0  #: failures since the last :meth:`reset`
        self._held = 0
        self._last = -float("inf")

    def level(self) -> tuple[int, int]:
        """Count one failure; ``(level, held back since the last WARNING)``."""
        self.count += 1
        now = time.monotonic()
        if now - self._last >= REPEAT_INTERVAL:
            held, self._held, self._last = self._held, 0, now
            return logging.WARNING, held
        self._held += 1
        return logging.DEBUG, 0

    def reset(self) -> int:
        """The failure is over (e.g. a dial succeeded): start afresh; returns the count."""
        n, self.count, self._held, self._last = self.count, 0, 0, -float("inf")
        return n


def held_note(held: int) -> str:
    return f" ({held} more like it since the last warning, logged at DEBUG)" if held else ""
