"""The HTTP side of SP over WebSocket: the ws options, the subprotocol check
(``<name>.sp.nanomsg.org``) and the HTTP errors a refused upgrade gets."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Mapping, Sequence

import gsp
from gsp.options import Option, boolean, described, duration, optional
from gsp.transport import TLS_OPTIONS

from .auth import check_authorize, origin_key

SUFFIX = ".sp.nanomsg.org"


def subprotocol(name: str) -> str:
    return name + SUFFIX


# -- options ----------------------------------------------------------------------------------

@described("int", "bytes", ">= 0")
def _size(name: str, v: Any) -> Any:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise gsp.BadOption(f"{name} must be an int >= 0 (0 = unlimited), not {v!r}")
    return v


@described("dict[str, str] or (name, value) pairs")
def _header_pairs(name: str, v: Any) -> Any:
    items = v.items() if isinstance(v, Mapping) else v
    try:
        out = tuple((k, val) for k, val in items)
    except (TypeError, ValueError):
        raise gsp.BadOption(f"{name} must be a mapping or (name, value) pairs, not {v!r}") from None
    for k, val in out:
        if not isinstance(k, str) or not isinstance(val, str) or not k or any(
                c in s for s in (k, val) for c in "\r\n") or ":" in k:
            raise gsp.BadOption(f"{name}: bad header {k!r}: {val!r}")
    return out


@described("'*' or a collection of origins")
def _origin_set(name: str, v: Any) -> Any:
    if v == "*":
        return "*"
    if isinstance(v, str) or not hasattr(v, "__iter__") or \
            not all(isinstance(o, str) for o in v):
        raise gsp.BadOption(f"{name} takes the origins of the other sites whose pages may "
                            f"connect, such as {{'https://app.example.com'}}, or '*' for any "
                            f"site, not {v!r}")
    origins = frozenset(origin_key(o) for o in v)
    return "*" if "*" in origins else origins


_headers = optional(_header_pairs)
_origins = optional(_origin_set)


WS_OPTIONS: dict[str, Option] = {o.name: o for o in [
    Option("ws_request_headers", None, _headers,
           "dialers: extra HTTP headers for the upgrade request ({name: value} or pairs)",
           scope="dial"),
    Option("ws_response_headers", None, _headers,
           "listeners: extra HTTP headers for the 101 response", scope="listen"),
    Option("ws_origins", None, _origins,
           "listeners: the other sites whose web pages may connect (Origin values such as "
           "'https://app.example.com'; '*' = any site); others get 403. A page of the "
           "endpoint's own origin (its host:port is the Host header's) always may; None = only "
           "those. Requests without Origin (clients that are not browsers: gsp, nng) are not "
           "asked: Origin only guards against other sites' pages",
           scope="listen"),
    Option("ws_authorize", None, optional(check_authorize),
           "listeners: called with each upgrade request (a gsp.transport.WSRequest: path, query, "
           "headers, cookies, peer, tls) before the 101; returns None to accept, or returns or "
           "raises a gsp_ws.Refusal(status, reason) to answer that 4xx/5xx instead; a check "
           "that fails otherwise answers 500 (logged). None = accept all (docs/webapp.md)",
           scope="listen"),
    Option("ws_recv_text", False, boolean,
           "accept text frames as messages (by default they close the pipe with 1003, as in nng)"),
    Option("ws_max_frame_size", 1 << 20, _size,
           "largest frame accepted, bytes; 0 = unlimited (nng: 1 MiB)",
           renamed_from=("ws_recv_frame_max",)),
    Option("ws_max_send_frame_size", 1 << 16, _size,
           "outgoing messages are cut into frames of at most this; 0 = one frame (nng: 64 KiB)",
           renamed_from=("ws_send_frame_max",)),
    Option("ws_ping_interval", 30.0, duration(allow_zero=False),
           "seconds of silence from the peer before gsp sends it a WebSocket Ping; None = never"),
    Option("ws_ping_timeout", 10.0, duration(allow_none=False, allow_zero=False),
           "seconds a pinged peer has to send anything (its Pong) before the pipe is closed"),
    *TLS_OPTIONS.values(),
]}


def check_upgrade(offered: Sequence[str], protocol: str) -> str | None:
    """Why a listener of ``protocol`` must answer this upgrade 400 (the subprotocols it
    ``offered`` do not include the socket's), or None. (Who may connect:
    :class:`gsp_ws.auth.UpgradeGate`.)"""
    want = subprotocol(protocol)
    if want not in offered:
        got = ", ".join(offered) or "no subprotocol"
        return f"this endpoint speaks {want}; the request offered {got}"
    return None


def status_line(status: int) -> str:
    """``"401 Unauthorized"``: the status and its standard phrase."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Error"


def http_error(status: int, text: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 error response with a plain-text body."""
    body = (text + "\n").encode()
    lines = [f"HTTP/1.1 {status_line(status)}",
             "Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(body)}",
             "Connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _as_bytes_headers(headers: Any) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers or ()]
