"""Authorization before the upgrade: the ``ws_authorize`` listener option.

A ws/wss listener or a WSGI mount given ``ws_authorize=check`` calls ``check(request)`` with the
request, a :class:`gsp.transport.WSRequest` (what ``pipe.peer.ws_request`` and the
``gsp.admit.ws_*`` rules read), for every upgrade request that is otherwise acceptable (right path,
subprotocol and origin), before answering 101. ``check`` accepts by returning ``None`` and
refuses by returning or raising a :class:`Refusal` (an HTTP status from 400 to 599 and a reason
sent as the response's text)::

    def check(request: gsp.transport.WSRequest) -> gsp_ws.Refusal | None:
        if request.headers.get("authorization") != "Bearer " + TOKEN:
            return gsp_ws.Refusal(401, "a bearer token is needed",
                                  headers={"WWW-Authenticate": "Bearer"})
        return None

A ``check`` that raises anything else (or returns anything else) is a bug: the client gets
500 with no detail, and the error is logged on ``gsp.listener`` with its traceback (at most once
every 10 s per listener; the repeats at DEBUG). The listener keeps serving. ``check`` runs in
the connection's own greenlet (on a listener under ``handshake_timeout``), so it may block on
gevent I/O (a database, an HTTP call) without delaying other peers.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import gsp
from gsp.options import described
from gsp.transport import WSRequest

__all__ = ["Refusal"]

log = logging.getLogger("gsp.listener")

_LOG_EVERY = 10.0  # seconds between two logged tracebacks of one listener's failing check


def _header_ok(name: Any, value: Any) -> bool:
    if not isinstance(name, str) or not isinstance(value, str) or not name or ":" in name:
        return False
    try:
        (name + value).encode("latin-1")
    except UnicodeEncodeError:
        return False
    return "\r" not in name + value and "\n" not in name + value


class Refusal(Exception):
    """The answer refusing an upgrade: ``status`` (400..599, e.g. 401 or 403), ``reason`` (the
    response's text; the dialer's :class:`gsp.UpgradeRefused` carries both) and extra response
    ``headers`` (``{name: value}`` or pairs, e.g. ``WWW-Authenticate``). Return it from a
    ``ws_authorize`` check, or raise it."""

    def __init__(self, status: int = 403, reason: str = "",
                 headers: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            raise ValueError(f"a refusal's status is an int in 400..599, not {status!r}")
        pairs = tuple(headers.items() if isinstance(headers, Mapping) else headers)
        for k, v in pairs:
            if not _header_ok(k, v):
                raise ValueError(f"bad refusal header {k!r}: {v!r} (latin-1 text, no line "
                                 "breaks, no ':' in the name)")
        super().__init__(status, reason)
        self.status = status
        self.reason = " ".join(str(reason).split())  # one line of text
        self.headers = pairs

    def __str__(self) -> str:
        return f"HTTP {self.status}" + (f": {self.reason}" if self.reason else "")


@described("callable (gsp.transport.WSRequest) -> gsp_ws.Refusal or None")
def check_authorize(name: str, v: Any) -> Any:
    """The ``ws_authorize`` option's validator."""
    if not callable(v):
        raise gsp.BadOption(f"{name} must be a callable taking a gsp.transport.WSRequest and "
                            f"returning None (accept) or a gsp_ws.Refusal, not {v!r}")
    return v


_FAILED = "the server could not check this request"

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(scheme: str, netloc: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host[:port]`` (the port by default ``scheme``'s), lower case."""
    try:
        parts = urlsplit("//" + netloc)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    return None if not host else (host, port or _DEFAULT_PORTS[scheme])


def same_origin(origin: str, host: str | None) -> bool:
    """Whether a page of ``origin`` (``"http://127.0.0.1:8080"``) is the endpoint's own: its
    host and port are those of the request's ``Host`` header (a port left out is the
    origin's scheme's default)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or not host or parts.path not in ("", "/"):
        return False
    mine = _host_port(parts.scheme, parts.netloc)
    return mine is not None and mine == _host_port(parts.scheme, host)


def origin_key(origin: str) -> str:
    """An origin as ``ws_origins`` compares them: lower case, no trailing slash."""
    return origin.strip().lower().rstrip("/")


class _Every:
    """A log line at ``level`` at most once per 10 s, DEBUG in between; counts those held."""

    __slots__ = ("_last", "held")

    def __init__(self) -> None:
        self._last = -float("inf")
        self.held = 0

    def level(self, level: int) -> tuple[int, int]:
        """The level of the next line and, when it is ``level``, how many were held since."""
        now = time.monotonic()
        if now - self._last < _LOG_EVERY:
            self.held += 1
            return logging.DEBUG, 0
        held, self.held, self._last = self.held, 0, now
        return level, held


def _held_note(held: int, level: str) -> str:
    return f" ({held} more like it since the last {level}, logged at DEBUG)" if held else ""


class UpgradeGate:
    """Who of the browsers and clients sending a listener's upgrade requests gets the 101,
    before it is sent (per listener; the options read at each request, so a change on the
    socket applies to the next one): the page's origin (``ws_origins``; by default only the
    endpoint's own), then the ``ws_authorize`` check. Refusals of either are logged, rate
    limited."""

    __slots__ = ("options", "where", "_origins", "_failures")

    def __init__(self, options: Mapping[str, Any], where: str) -> None:
        self.options = options
        self.where = where
        self._origins = _Every()
        self._failures = _Every()

    def __call__(self, request: WSRequest, protocol: str) -> Refusal | None:
        """None to let ``request`` in; else the refusal to answer. ``protocol`` is the
        socket's, for the log."""
        origin = request.header("origin")
        if origin is not None:  # a browser's request (other clients send no Origin)
            refusal = self._origin(request, origin, protocol)
            if refusal is not None:
                return refusal
        return self._authorize(request, protocol)

    def _origin(self, request: WSRequest, origin: str, protocol: str) -> Refusal | None:
        allowed = self.options["ws_origins"]
        if allowed == "*" or same_origin(origin, request.header("host")) or \
                (allowed is not None and origin_key(origin) in allowed):
            return None
        how = (f"to let pages of {origin} connect, pass ws_origins={{{origin_key(origin)!r}}} "
               "to mount() or listen() (ws_origins='*' lets any site's pages in)")
        level, held = self._origins.level(logging.WARNING)
        if log.isEnabledFor(level):
            log.log(level, "%s %s: refused a WebSocket upgrade from a page of %s (Host %s; 403): "
                    "this endpoint serves pages of its own origin%s; %s%s", protocol,
                    self.where, origin, request.header("host"),
                    "" if allowed is None else " and of ws_origins", how,
                    _held_note(held, "warning"),
                    extra={"gsp_protocol": protocol, "gsp_url": self.where, "gsp_pipe": None,
                           "gsp_remote": request.remote_address, "gsp_suppressed": held})
        return Refusal(403, f"a page of {origin} may not open this WebSocket endpoint; {how}")

    def _authorize(self, request: WSRequest, protocol: str) -> Refusal | None:
        check: Callable[[WSRequest], Any] | None = self.options["ws_authorize"]
        if check is None:
            return None
        try:
            answer = check(request)
        except Refusal as refusal:
            return refusal
        except Exception as exc:  # a bug in the check: 500, logged; the listener serves on
            self._failed(request, protocol, exc)
            return Refusal(500, _FAILED)
        if answer is None or isinstance(answer, Refusal):
            return answer
        self._failed(request, protocol, TypeError(
            f"ws_authorize returned {answer!r}; it must return None (accept) or a "
            "gsp_ws.Refusal (or raise one)"))
        return Refusal(500, _FAILED)

    def _failed(self, request: WSRequest, protocol: str, exc: Exception) -> None:
        level, held = self._failures.level(logging.ERROR)
        extra = {"gsp_protocol": protocol, "gsp_url": self.where, "gsp_pipe": None,
                 "gsp_remote": request.remote_address, "gsp_error": exc, "gsp_suppressed": held}
        if level == logging.DEBUG:
            log.debug("%s %s: ws_authorize failed on %r (answered 500): %r", protocol,
                      self.where, request, exc, extra=extra)
            return
        log.error("%s %s: ws_authorize failed on %r (answered 500)%s", protocol, self.where,
                  request, _held_note(held, "error"), exc_info=exc, extra=extra)
