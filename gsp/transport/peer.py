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
from typing import Any, Iterable, Mapping
from urllib.parse import parse_qs, urlsplit

__all__ = ["Peer", "PeerCertificate", "WSRequest", "peer_of", "parse_cookies"]


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


@dataclass(frozen=True)
class WSRequest:
    """The HTTP upgrade request a ws/wss listener accepted from its peer."""

    method: str
    #: the request's path, without its query
    path: str
    version: str
    #: the request's headers as received, names lower-cased
    headers: tuple[tuple[str, str], ...]
    #: the request target as sent: the path and its query (``/sp?token=abc``)
    target: str = ""

    @property
    def request_line(self) -> str:
        return f"{self.method} {self.target or self.path} {self.version}"

    @property
    def query(self) -> str:
        """The raw query string (``""`` if none)."""
        return (self.target or self.path).partition("?")[2]

    @property
    def query_params(self) -> Mapping[str, list[str]]:
        """The query's parameters, ``{name: [values]}`` (blank values kept)."""
        return MappingProxyType(parse_qs(self.query, keep_blank_values=True))

    @property
    def cookies(self) -> Mapping[str, str]:
        """``{name: value}`` from the ``Cookie`` headers (:func:`parse_cookies`)."""
        return parse_cookies(self.header_values("cookie"))

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` (any case), in the order sent."""
        name = name.lower()
        return [v for k, v in self.headers if k == name]


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


def _ws_request(props: Mapping[str, Any]) -> WSRequest | None:
    headers = props.get("ws_request_headers")
    if headers is None:
        return None
    # RFC 6455: an opening handshake is a GET of HTTP/1.1.
    path = str(props.get("ws_path", "/"))
    return WSRequest("GET", path, "HTTP/1.1",
                     tuple((str(k).lower(), str(v)) for k, v in headers),
                     str(props.get("ws_target") or path))


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) else None


def peer_of(address: str, properties: Mapping[str, Any]) -> Peer:
    """The :class:`Peer` of a connection whose ``remote_address`` is ``address``, from these
    ``properties``: ``peer_pid``, ``peer_uid``, ``peer_gid`` (ipc); ``peer_certificate`` (the
    ``getpeercert()`` dict) and ``peer_certificate_der`` (TLS: :func:`gsp.transport.tls_properties`
    sets both); ``ws_request_headers``, ``ws_path`` and ``ws_target`` (the path with its query)
    (a ws/wss listener's connections)."""
    ip, port = _ip_port(address)
    return Peer(address=address, ip=ip, port=port, pid=_int(properties.get("peer_pid")),
                uid=_int(properties.get("peer_uid")), gid=_int(properties.get("peer_gid")),
                certificate=_certificate(properties), ws_request=_ws_request(properties))
