"""trustme helpers for the TLS tests, and the interop scenarios tls/ws/wss tests share.

``make_pki`` issues a throwaway CA, a server certificate for 127.0.0.1 and localhost, and two
client certificates (one from the CA, one from an unrelated CA), written to files so both gsp's
``tls_*_file`` options and pynng's ``TLSConfig`` can use them.
"""

from __future__ import annotations

import datetime
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import pynng
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from gevent import ssl as gssl

import gsp
from tests.support import nng
from tests.support.nng_process import NngProcess, tls_config


@dataclass
class PKI:
    ca: trustme.CA
    ca_file: str
    server_cert_file: str
    server_key_file: str
    client_cert_file: str
    client_key_file: str
    rogue_ca_file: str  # a CA that signed nothing here: trusting only it rejects our server
    rogue_cert_file: str  # a client certificate from the rogue CA
    rogue_key_file: str

    def listen_options(self, **extra: Any) -> dict[str, Any]:
        return {"tls_cert_file": self.server_cert_file, "tls_key_file": self.server_key_file,
                **extra}

    def dial_options(self, **extra: Any) -> dict[str, Any]:
        return {"tls_ca_file": self.ca_file, **extra}

    def nng_server_args(self, require_client_cert: bool = False) -> dict[str, Any]:
        """``pynng.TLSConfig``'s arguments for a server (``mode`` and ``auth_required`` as
        :class:`tests.support.nng_process.NngProcess` takes them)."""
        return {"mode": "server",
                "own_cert_string": Path(self.server_cert_file).read_text(),
                "own_key_string": Path(self.server_key_file).read_text(),
                "ca_string": Path(self.ca_file).read_text() if require_client_cert else None,
                "auth_required": require_client_cert}

    def nng_client_args(self, with_cert: bool = False) -> dict[str, Any]:
        # nng (mbedtls) matches DNS names; the certificate carries "localhost" for it.
        return {"mode": "client", "server_name": "localhost",
                "ca_string": Path(self.ca_file).read_text(),
                "own_cert_string": Path(self.client_cert_file).read_text() if with_cert else None,
                "own_key_string": Path(self.client_key_file).read_text() if with_cert else None}

    def nng_server(self, require_client_cert: bool = False) -> pynng.TLSConfig:
        return tls_config(self.nng_server_args(require_client_cert))

    def nng_client(self, with_cert: bool = False) -> pynng.TLSConfig:
        return tls_config(self.nng_client_args(with_cert))

    def server_context(self, cooperative: bool = False) -> ssl.SSLContext:
        # gevent's servers (pywsgi) wrap with the context's own class: without monkey-patching
        # only a gevent.ssl.SSLContext gives cooperative sockets there.
        cls = gssl.SSLContext if cooperative else ssl.SSLContext
        ctx = cls(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert_file, self.server_key_file)
        return ctx


def make_pki(directory: Path) -> PKI:
    ca = trustme.CA()
    rogue = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.example", common_name="gsp-test-client")
    stranger = rogue.issue_cert("client.example", common_name="stranger")
    files: dict[str, str] = {}

    def put(name: str, blob: Any) -> None:
        path = directory / name
        blob.write_to_path(str(path))
        files[name] = str(path)

    put("ca.pem", ca.cert_pem)
    put("rogue-ca.pem", rogue.cert_pem)
    put("server.key", server.private_key_pem)
    put("client.key", client.private_key_pem)
    put("rogue.key", stranger.private_key_pem)
    for name, leaf in (("server.pem", server), ("client.pem", client), ("rogue.pem", stranger)):
        path = directory / name
        path.write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
        files[name] = str(path)
    return PKI(ca, files["ca.pem"], files["server.pem"], files["server.key"], files["client.pem"],
               files["client.key"], files["rogue-ca.pem"], files["rogue.pem"], files["rogue.key"])


# -- certificates for the TLS option and reload tests (tests/transports/test_tls_config.py) --------------

def issue(ca: trustme.CA, directory: Path, name: str, *hosts: str,
          common_name: str | None = None) -> tuple[str, str]:
    """A leaf certificate of ``ca`` for ``hosts`` (default: 127.0.0.1 and localhost), written to
    ``<name>.pem`` (the chain) and ``<name>.key``; returns the two paths."""
    leaf = ca.issue_cert(*(hosts or ("127.0.0.1", "localhost")), common_name=common_name)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    cert.write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def encrypt_key(key_file: str, dest: Path, password: bytes) -> str:
    """``key_file`` encrypted with ``password`` (PKCS#8 PEM) at ``dest``."""
    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), None)
    dest.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(password)))
    return str(dest)


def write_crl(ca: trustme.CA, dest: Path, *revoked: str) -> str:
    """A CRL of ``ca`` revoking the certificates in the PEM files ``revoked`` (none: an empty
    CRL, which a peer checked against it passes)."""
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(issuer.subject)
               .last_update(now - datetime.timedelta(minutes=1))
               .next_update(now + datetime.timedelta(days=1)))
    for path in revoked:
        serial = x509.load_pem_x509_certificate(Path(path).read_bytes()).serial_number
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build())
    crl = builder.sign(key, hashes.SHA256())
    dest.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return str(dest)


def cert_der(path: str) -> bytes:
    """The first certificate of a PEM file, DER-encoded (as ``peer_certificate_der`` shows it)."""
    return ssl.PEM_cert_to_DER_cert(Path(path).read_text().split("-----END CERTIFICATE-----")[0]
                                    + "-----END CERTIFICATE-----\n")


def replace(dest: str, source: str | bytes) -> None:
    """Put new content at ``dest`` as deployment tools do: write a new file, rename it over."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    tmp = Path(dest + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


# -- interop scenarios ------------------------------------------------------------------------

#: protocol pair -> (first role, second role); the test picks which role gsp plays.
PAIRS = {"reqrep": ("req", "rep"), "pubsub": ("pub", "sub"), "pushpull": ("push", "pull")}


def need_protocol(name: str) -> None:
    """Fail (not skip) clearly when a protocol this interop test needs is not installed."""
    assert name in gsp.protocol_names(), f"protocol {name!r} is not installed: {gsp.protocol_names()}"


# A subscriber polls with a short timeout while the publisher repeats its first message.
def nng_socket(kind: str, **kw: Any) -> pynng.Socket:
    s = nng.socket(kind, recv_timeout=300 if kind == "sub" else 3000, send_timeout=3000, **kw)
    if kind == "sub":
        s.subscribe(b"topic")
    return s


def gsp_socket(kind: str, **kw: Any) -> gsp.Socket:
    s = gsp.socket(kind, recv_timeout=0.3 if kind == "sub" else 3, send_timeout=3, **kw)
    if kind == "sub":
        s.subscribe(b"topic")
    return s


def exchange(gsp_kind: str, g: gsp.Socket, n: pynng.Socket) -> None:
    """Send what ``gsp_kind`` and its peer can send, both ways where possible, and check it."""
    if gsp_kind == "req":
        for i in range(3):
            g.send(b"q%d" % i)
            got = nng.run(n.recv)
            nng.run(n.send, got.upper())
            assert g.recv() == b"Q%d" % i
    elif gsp_kind == "rep":
        for i in range(3):
            nng.run(n.send, b"q%d" % i)
            got = g.recv()
            g.send(got.upper())
            assert nng.run(n.recv) == b"Q%d" % i
    elif gsp_kind == "push":
        for i in range(3):
            g.send(b"m%d" % i)
        assert nng.run(nng.recv_many, n, 3) == [b"m0", b"m1", b"m2"]
    elif gsp_kind == "pull":
        nng.run(nng.send_many, n, [b"m0", b"m1", b"m2"])
        assert [g.recv() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    elif gsp_kind == "pub":
        _pubsub(lambda m: g.send(m), lambda: nng.run(n.recv))
    elif gsp_kind == "sub":
        _pubsub(lambda m: nng.run(n.send, m), g.recv)
    else:
        raise AssertionError(gsp_kind)


def _pubsub(send: Any, recv: Any) -> None:
    # PUB drops until the subscriber's pipe is up: publish until one message gets through.
    with gevent.Timeout(5, AssertionError("no publication arrived")):
        while True:
            send(b"topic hello")
            try:
                got = recv()  # the subscriber's recv timeout is short (see above)
                break
            except (gsp.Timeout, pynng.Timeout):
                continue
    assert got == b"topic hello"
    send(b"nope: not subscribed")
    send(b"topic end")
    while got != b"topic end":
        got = recv()
        assert got in (b"topic hello", b"topic end")


def interop(pair: str, gsp_role: int, gsp_listens: bool, scheme: str, *, path: str = "",
            gsp_listen_options: dict[str, Any] | None = None,
            gsp_dial_options: dict[str, Any] | None = None,
            nng_server: dict[str, Any] | None = None,
            nng_client: dict[str, Any] | None = None) -> None:
    """gsp plays role ``gsp_role`` of ``PAIRS[pair]`` against pynng over ``scheme``;
    ``nng_server``/``nng_client``: the nng side's TLS arguments (``PKI.nng_server_args``). Over
    wss the nng socket runs in a process of its own (:class:`tests.support.nng_process.NngProcess`): its
    close path can abort the process there (nanomsg/nng#2110)."""
    kinds = PAIRS[pair]
    gk, nk = kinds[gsp_role], kinds[1 - gsp_role]
    need_protocol(gk)
    tls = nng_client if gsp_listens else nng_server
    g = gsp_socket(gk)
    n: Any
    if scheme == "wss":
        n = NngProcess(nk, recv_timeout=300 if nk == "sub" else 3000, tls=tls)
        if nk == "sub":
            n.subscribe(b"topic")
    else:
        n = nng_socket(nk)
        if tls is not None:
            n.tls_config = tls_config(tls)
    try:
        if gsp_listens:
            url = g.listen(f"{scheme}://127.0.0.1:0{path}", **(gsp_listen_options or {})).url
            nng.run(n.dial, url, block=True)
        else:
            if isinstance(n, NngProcess):
                url = n.listen(f"{scheme}://127.0.0.1:0{path}")
            else:
                url = nng.bound_url(nng.run(n.listen, f"{scheme}://127.0.0.1:0{path}"),
                                    scheme) + path
            g.dial(url, fail_fast=True, **(gsp_dial_options or {}))
        exchange(gk, g, n)
    finally:
        if isinstance(n, NngProcess):
            try:
                n.close()  # first: nng never tears a wss pipe down (tests/support/nng_process.py)
            finally:
                g.close()
        else:
            nng.close_after(g, n)
