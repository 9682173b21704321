"""Authorization before the upgrade: the ``ws_authorize`` listener option.

A ws/wss listener or a WSGI mount given ``ws_authorize=check`` calls ``check(request)`` with an
:class:`UpgradeRequest` for every upgrade request that is otherwise acceptable (right path,
subprotocol and origin), before answering 101. ``check`` accepts by returning ``None`` and
refuses by returning or raising a :class:`Refusal` (an HTTP status from 400 to 599 and a reason
sent as the response's text)::

    def check(request: gsp_ws.UpgradeRequest) -> gsp_ws.Refusal | None:
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
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import parse_qs

import gsp
from gsp.options import described
from gsp.transport import parse_cookies

__all__ = ["Refusal", "UpgradeRequest", "Headers"]

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


class Headers(Mapping[str, str]):
    """The request's headers, read-only; names are case-insensitive. ``headers[name]`` is the
    value (a header sent several times: its values joined with ``", "``); ``get_all(name)``
    lists them; iterating gives the names in lower case; ``raw`` is every ``(name, value)`` pair
    in the order sent, names in lower case."""

    __slots__ = ("raw", "_map")

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.raw: tuple[tuple[str, str], ...] = tuple((k.lower(), v) for k, v in pairs)
        grouped: dict[str, list[str]] = {}
        for k, v in self.raw:
            grouped.setdefault(k, []).append(v)
        self._map = {k: tuple(vs) for k, vs in grouped.items()}

    def __getitem__(self, name: str) -> str:
        return ", ".join(self._map[name.lower()])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def get_all(self, name: str) -> list[str]:
        return list(self._map.get(name.lower(), ()))

    def __repr__(self) -> str:
        return f"Headers({list(self.raw)!r})"


def _cookies(headers: Headers) -> Mapping[str, str]:
    return parse_cookies(headers.get_all("cookie"))  # as pipe.peer.ws_request.cookies reads them


class UpgradeRequest:
    """What a ``ws_authorize`` check sees of an upgrade request (read-only).

    ``method`` (``"GET"``), ``path`` (without the query), ``query`` (the raw query string, ``""``
    if none) and ``query_params`` (``{name: [values]}``), ``headers`` (:class:`Headers`:
    case-insensitive), ``cookies`` (``{name: value}`` from the ``Cookie`` headers),
    ``remote_address`` and ``local_address`` (as on the pipe: ``"ws://10.0.0.7:51234"``),
    ``peer`` (the peer's ``(host, port)``; behind a proxy, the proxy's: look at its headers,
    e.g. ``X-Forwarded-For``, if you trust it) and ``tls`` (wss: the TLS properties the pipe
    will have, such as ``peer_certificate`` with client certificates, ``tls_version``;
    ``None`` on ws).
    """

    __slots__ = ("method", "path", "query", "query_params", "headers", "cookies",
                 "remote_address", "local_address", "peer", "tls")

    method: str
    path: str
    query: str
    query_params: Mapping[str, list[str]]
    headers: Headers
    cookies: Mapping[str, str]
    remote_address: str
    local_address: str
    peer: tuple[str, int] | None
    tls: Mapping[str, Any] | None

    def __init__(self, *, method: str, target: str, headers: Iterable[tuple[str, str]],
                 remote_address: str, local_address: str, peer: tuple[str, int] | None,
                 tls: Mapping[str, Any] | None) -> None:
        path, _, query = target.partition("?")
        heads = Headers(headers)
        for name, value in (
                ("method", method), ("path", path or "/"), ("query", query),
                ("query_params", MappingProxyType(parse_qs(query, keep_blank_values=True))),
                ("headers", heads), ("cookies", _cookies(heads)),
                ("remote_address", remote_address), ("local_address", local_address),
                ("peer", peer), ("tls", None if tls is None else MappingProxyType(dict(tls)))):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an UpgradeRequest is read-only ({name})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an UpgradeRequest is read-only ({name})")

    def __repr__(self) -> str:
        return f"<UpgradeRequest {self.method} {self.path} from {self.remote_address}>"


@described("callable (gsp_ws.UpgradeRequest) -> gsp_ws.Refusal or None")
def check_authorize(name: str, v: Any) -> Any:
    """The ``ws_authorize`` option's validator."""
    if not callable(v):
        raise gsp.BadOption(f"{name} must be a callable taking a gsp_ws.UpgradeRequest and "
                            f"returning None (accept) or a gsp_ws.Refusal, not {v!r}")
    return v


_FAILED = "the server could not check this request"


class Authorize:
    """Runs a listener's ``ws_authorize`` check (the option read at each request, so a change
    on the socket applies to the next one) and logs a failing check, rate limited."""

    __slots__ = ("options", "where", "_last_log", "_held")

    def __init__(self, options: Mapping[str, Any], where: str) -> None:
        self.options = options
        self.where = where
        self._last_log = -float("inf")
        self._held = 0

    def __call__(self, make: Callable[[], UpgradeRequest], protocol: str) -> Refusal | None:
        """None to accept; else the refusal to answer. ``make`` builds the request (only when
        there is a check); ``protocol`` is the socket's, for the log."""
        check: Callable[[UpgradeRequest], Any] | None = self.options["ws_authorize"]
        if check is None:
            return None
        request = make()
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

    def _failed(self, request: UpgradeRequest, protocol: str, exc: Exception) -> None:
        now = time.monotonic()
        held = 0
        if now - self._last_log < _LOG_EVERY:
            self._held += 1
        else:
            held, self._held, self._last_log = self._held, 0, now
        extra = {"gsp_protocol": protocol, "gsp_url": self.where, "gsp_pipe": None,
                 "gsp_remote": request.remote_address, "gsp_error": exc, "gsp_suppressed": held}
        if self._held:
            log.debug("%s %s: ws_authorize failed on %r (answered 500): %r", protocol,
                      self.where, request, exc, extra=extra)
            return
        log.error("%s %s: ws_authorize failed on %r (answered 500)%s", protocol, self.where,
                  request,
                  f" ({held} more like it since the last error, logged at DEBUG)" if held else "",
                  exc_info=exc, extra=extra)
