"""Certificates for ``--transport tls+tcp`` and ``wss``: a throwaway CA and a server certificate
for ``localhost`` and ``127.0.0.1`` (made with ``trustme``), written to a directory the runner
names in ``$GSP_BENCH_TLS`` for every worker and native tool:

* ``ca.pem``      the CA every dialer trusts (the server name checked is ``localhost``)
* ``cert.pem``    the listener's certificate chain, ``key.pem`` its key
* ``server.pem``  both in one file (C nng's ``nng_tls_config_cert_key_file``)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .ctl import NotApplicable

ENV = "GSP_BENCH_TLS"
#: The schemes that run over TLS.
SECURE = ("tls+tcp", "wss")
#: The name the dialers check (the certificate carries it, and 127.0.0.1).
SERVER_NAME = "localhost"


def secure(url: str) -> bool:
    return url.split("://", 1)[0] in SECURE


def make(directory: str) -> None:
    """Write a CA and a server certificate into ``directory`` (see the module's doc)."""
    try:
        import trustme
    except ImportError:
        raise NotApplicable("tls+tcp and wss need trustme for their certificates "
                            "(pip install 'gevent-sp-bench[tls]')") from None
    ca = trustme.CA()
    cert = ca.issue_cert(SERVER_NAME, "127.0.0.1")
    ca.cert_pem.write_to_path(os.path.join(directory, "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(os.path.join(directory, "cert.pem"))
    for blob in cert.cert_chain_pems[1:]:
        blob.write_to_path(os.path.join(directory, "cert.pem"), append=True)
    cert.private_key_pem.write_to_path(os.path.join(directory, "key.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(os.path.join(directory, "server.pem"))


@dataclass(frozen=True)
class Files:
    ca: str
    cert: str
    key: str

    def read(self, name: str) -> str:
        with open(getattr(self, name), encoding="ascii") as f:
            return f.read()


def files() -> Files:
    """The files the runner made for this run (``$GSP_BENCH_TLS``)."""
    d = os.environ.get(ENV)
    if not d:
        raise NotApplicable(f"no certificates: ${ENV} is not set (the runner sets it)")
    return Files(*(os.path.join(d, n) for n in ("ca.pem", "cert.pem", "key.pem")))
