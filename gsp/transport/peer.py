"""Who is on the other end of a pipe: one shape for every transport (``pipe.peer``).

:class:`Peer` gathers what a connection's transport knows of its peer: the address, for every
transport; the peer process's ``pid``/``uid``/``gid`` over ``ipc://``/``unix://``/``abstract://``
(SO_PEERCRED); its :class:`PeerCertificate` over TLS (tls+tcp, wss); the HTTP upgrade request
(:class:`WSRequest`) a ws/wss listener accepted. What a transport does not know is ``None``.
It is read from the connection's ``remote_address`` and ``properties`` (the keys the built-in
transports and gsp-ws set, listed on :func:`peer_of`), so a plugin transport fills it the same
way. nng 2.0 gives the same facts as ``nng_pipe_peer_addr`` and ``nng_pipe_peer_cert``.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import ssl
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import parse_qs, urlsplit

__all__ = ["Peer", "PeerCertificate", "WSRequest", "Headers", "peer_of", "parse_cookies"]


def _name(rdns: Any) -> dict[str, str]:
    """``{"commonName": "x", ...}`` from ``getpeercert()``'s tuple of RDNs."""
    return {k: v for rdn in rdns or () for k, v in rdn}


def _when(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromtimestamp(ssl.cert_time_to_seconds(text), datetime.timezone.utc)


@dataclass(frozen=True)
class PeerCertificate:
    """The peer's TLS certificate. ``der`` and ``fingerprint`` (SHA-256, hex) are there for
    any certificate the peer sent; the decoded fields only for one that was verified (Python's
    ssl decodes no other): else ``subject``/``issuer`` are empty and the dates ``None``."""

    der: bytes
    fingerprint: str
    subject: Mapping[str, str]
    issuer: Mapping[str, str]
    #: subjectAltName entries as (kind, value): ``("DNS", "localhost")``,
    #: ``("IP Address", "127.0.0.1")``, ...
    sans: tuple[tuple[str, str], ...]
    not_before: datetime.datetime | None
    not_after: datetime.datetime | None
    serial_number: str | None
    verified: bool

    @property
    def common_name(self) -> str | None:
        return self.subject.get("commonName")


def parse_cookies(values: Iterable[str]) -> Mapping[str, str]:
    """``{name: value}`` from the values of a request's ``Cookie`` headers, as browsers send
    them: ``a=1; b="2"`` (quotes taken off); the first of a name wins."""
    out: dict[str, str] = {}
    for line in values:
        for part in line.split(";"):
            name, eq, value = part.strip().partition("=")
            value = value.strip()
            if len(value) > 1 and value[0] == value[-1] == '"':
                value = value[1:-1]
            if eq and name and name not in out:
                out[name] = value
    return MappingProxyType(out)


class Headers(Mapping[str, str]):
    """An HTTP request's headers, read-only; names are case-insensitive. ``headers[name]`` is
    the value (a header sent several times: its values joined with ``", "``);
    ``get_all(name)`` lists them; iterating gives the names in lower case; ``raw`` is every
    ``(name, value)`` pair in the order sent, names in lower case."""

    __slots__ = ("raw", "_map")

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self.raw: tuple[tuple[str, str], ...] = tuple((str(k).lower(), str(v)) for k, v in pairs)
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

    def __eq__(self, other: object) -> bool:
        return self.raw == other.raw if isinstance(other, Headers) else Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self.raw)

    def get_all(self, name: str) -> list[str]:
        return list(self._map.get(name.lower(), ()))

    def __repr__(self) -> str:
        return f"Headers({list(self.raw)!r})"


@dataclass(frozen=True, repr=False)
class WSRequest:
    """A WebSocket upgrade request a ws/wss listener or a WSGI mount received: what the
    ``admit.ws_*`` rules read (``pipe.peer.ws_request``) and what gsp-ws's ``ws_authorize``
    check is given, one type for both. Read-only.

    Made with keywords as gsp-ws does (``WSRequest(method="GET", target="/sp?t=1",
    headers=[("host", "x")], remote_address="ws://10.0.0.7:5", ...)``): ``path`` is the target's
    path when not given, and ``headers`` may be ``(name, value)`` pairs."""

    method: str = "GET"
    #: the request's path, without its query
    path: str = ""
    version: str = "HTTP/1.1"
    #: the request's headers (:class:`Headers`: case-insensitive; ``.raw``: the pairs as sent,
    #: names lower-cased)
    headers: Headers = Headers()
    #: the request target as sent: the path and its query (``/sp?token=abc``)
    target: str = ""
    #: the connection's addresses as its pipe's (``"ws://10.0.0.7:51234"``)
    remote_address: str = ""
    local_address: str = ""
    #: the peer's ``(host, port)``; behind a proxy, the proxy's (read its headers, e.g.
    #: ``X-Forwarded-For``, if you trust it)
    peer: tuple[str, int] | None = None
    #: wss: the TLS properties the pipe will have (``tls_version``, ``peer_certificate``, ...);
    #: ``None`` on ws
    tls: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Headers):
            object.__setattr__(self, "headers", Headers(self.headers))
        if not self.path:
            object.__setattr__(self, "path", self.target.partition("?")[0] or "/")
        if not self.target:
            object.__setattr__(self, "target", self.path)
        if self.tls is not None and not isinstance(self.tls, MappingProxyType):
            object.__setattr__(self, "tls", MappingProxyType(dict(self.tls)))

    def __repr__(self) -> str:
        where = f" from {self.remote_address}" if self.remote_address else ""
        return f"<WSRequest {self.method} {self.path}{where}>"

    @property
    def request_line(self) -> str:
        return f"{self.method} {self.target} {self.version}"

    @property
    def query(self) -> str:
        """The raw query string (``""`` if none)."""
        return self.target.partition("?")[2]

    @property
    def query_params(self) -> Mapping[str, list[str]]:
        """The query's parameters, ``{name: [values]}`` (blank values kept)."""
        return MappingProxyType(parse_qs(self.query, keep_blank_values=True))

    @property
    def cookies(self) -> Mapping[str, str]:
        """``{name: value}`` from the ``Cookie`` headers (:func:`parse_cookies`)."""
        return parse_cookies(self.headers.get_all("cookie"))

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        values = self.headers.get_all(name)
        return values[0] if values else None

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` (any case), in the order sent."""
        return self.headers.get_all(name)


@dataclass(frozen=True)
class Peer:
    """What a pipe's transport knows of its peer (None where it knows nothing)."""

    #: the peer's address as a URL: ``tcp://10.0.0.7:40112``, ``ipc:///run/app.sock``, ...
    address: str
    #: the peer's IP address and port, for transports over IP
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    port: int | None
    pid: int | None
    uid: int | None
    gid: int | None
    certificate: PeerCertificate | None
    ws_request: WSRequest | None


def _ip_port(address: str) -> tuple[Any, int | None]:
    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None, None
    if not host:
        return None, None
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]), port
    except ValueError:
        return None, None


def _certificate(props: Mapping[str, Any]) -> PeerCertificate | None:
    der = props.get("peer_certificate_der")
    if not der:
        return None
    cert = props.get("peer_certificate") or {}
    return PeerCertificate(
        der=der, fingerprint=hashlib.sha256(der).hexdigest(),
        subject=_name(cert.get("subject")), issuer=_name(cert.get("issuer")),
        sans=tuple((str(k), str(v)) for k, v in cert.get("subjectAltName", ())),
        not_before=_when(cert.get("notBefore")), not_after=_when(cert.get("notAfter")),
        serial_number=cert.get("serialNumber"), verified=bool(cert))


def _ws_request(address: str, props: Mapping[str, Any]) -> WSRequest | None:
    request = props.get("ws_request")
    if isinstance(request, WSRequest):  # the transport made it (gsp-ws does)
        return request
    headers = props.get("ws_request_headers")
    if headers is None:
        return None
    # RFC 6455: an opening handshake is a GET of HTTP/1.1.
    path = str(props.get("ws_path", "/"))
    return WSRequest("GET", path, "HTTP/1.1", Headers(headers),
                     str(props.get("ws_target") or path), remote_address=address)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) else None


def peer_of(address: str, properties: Mapping[str, Any]) -> Peer:
    """The :class:`Peer` of a connection whose ``remote_address`` is ``address``, from these
    ``properties``: ``peer_pid``, ``peer_uid``, ``peer_gid`` (ipc); ``peer_certificate`` (the
    ``getpeercert()`` dict) and ``peer_certificate_der`` (TLS: :func:`gsp.transport.tls_properties`
    sets both); ``ws_request`` (a :class:`WSRequest`), or ``ws_request_headers``, ``ws_path``
    and ``ws_target`` (the path with its query) to make one of (a ws/wss listener's
    connections)."""
    ip, port = _ip_port(address)
    return Peer(address=address, ip=ip, port=port, pid=_int(properties.get("peer_pid")),
                uid=_int(properties.get("peer_uid")), gid=_int(properties.get("peer_gid")),
                certificate=_certificate(properties),
                ws_request=_ws_request(address, properties))
