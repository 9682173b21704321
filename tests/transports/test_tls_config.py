"""TLS as options (versions, ciphers, the key's password, CRLs) and certificate reload, on
tls+tcp and wss alike (both build their contexts with gsp.transport.tls): real handshakes on
127.0.0.1 with certificates made here (tests/support/certs.py)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Callable

import pynng
import pytest
import trustme

import gsp
from gsp import TLSHandshakeError
from gsp.testing import wait_for
from tests.support import nng
from tests.support.certs import PKI, cert_der, encrypt_key, issue, replace, write_crl

URLS = {"tls+tcp": "tls+tcp://127.0.0.1:0", "wss": "wss://127.0.0.1:0/sp"}
SCHEMES = list(URLS)


Mk = Callable[..., gsp.Socket]


def _pair(gsp_socket: Mk, **kw: Any) -> tuple[gsp.Socket, gsp.Socket]:
    a = gsp_socket("pair", recv_timeout=5, send_timeout=5, **kw)
    b = gsp_socket("pair", recv_timeout=5, send_timeout=5, **kw)
    return a, b


def _served(url: str, gsp_socket: Mk, **dial: Any) -> dict[str, Any]:
    """Dial ``url`` with a fresh socket (a new handshake); the pipe's properties."""
    s = gsp_socket("pair", recv_timeout=5)
    s.dial(url, fail_fast=True, **dial)
    props: dict[str, Any] = s.pipes[0].properties
    s.close()
    return props


# -- bad values -----------------------------------------------------------------------------

@pytest.mark.parametrize("name, value, says", [
    ("tls_min_version", "1.1", "'1.2' or '1.3'"),
    ("tls_min_version", 1.3, "'1.2' or '1.3'"),
    ("tls_max_version", "TLSv1.3", "'1.2' or '1.3'"),
    ("tls_ciphers", "", "non-empty str"),
    ("tls_ciphers", "NO-SUCH-CIPHER", "OpenSSL selects no cipher"),
    ("tls_ciphers", ["ECDHE+AESGCM"], "non-empty str"),
    ("tls_key_password", 1234, "str or bytes"),
    ("tls_key_password", "", "1..1023 bytes"),
    ("tls_key_password", b"x" * 1024, "1..1023 bytes"),
    ("tls_crl_file", "", "file path"),
    ("tls_crl_file", 7, "file path"),
])
@pytest.mark.parametrize("where", ["socket", "listen", "dial"])
def test_each_bad_value_is_refused_naming_the_option(
        gsp_socket: Callable[..., gsp.Socket], pki: PKI, name: str, value: Any,
                                                     says: str, where: str) -> None:
    s = gsp_socket("pair")
    with pytest.raises(gsp.BadOption, match=name) as err:
        if where == "socket":
            s.set_option(name, value)
        elif where == "listen":
            s.listen(URLS["tls+tcp"], **pki.listen_options(**{name: value}))
        else:
            s.dial("tls+tcp://127.0.0.1:1", background=True, **{name: value})
    assert says in str(err.value)
    assert not s.listeners and not s.dialers


def test_a_password_is_never_shown_in_an_error() -> None:
    with gsp.socket("pair") as s, pytest.raises(gsp.BadOption) as err:
        s.set_option("tls_key_password", ["hunter2"])
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_min_above_max_is_refused_at_listen_and_dial(
        gsp_socket: Callable[..., gsp.Socket], pki: PKI, scheme: str) -> None:
    s = gsp_socket("pair")
    with pytest.raises(gsp.BadOption, match="tls_min_version '1.3' is above tls_max_version"):
        s.listen(URLS[scheme], **pki.listen_options(tls_min_version="1.3",
                                                    tls_max_version="1.2"))
    with pytest.raises(gsp.BadOption, match="tls_min_version '1.3' is above"):
        s.dial(URLS[scheme].replace(":0", ":1"), background=True, tls_min_version="1.3",
               tls_max_version="1.2")
    assert not s.listeners and not s.dialers


# -- versions and ciphers -------------------------------------------------------------------

@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_tls12_client_is_refused_by_a_listener_with_minimum_13(
        pki: PKI, scheme: str, gsp_socket: Mk) -> None:
    a, b = _pair(gsp_socket)
    url = a.listen(URLS[scheme], **pki.listen_options(tls_min_version="1.3")).url
    with pytest.raises(TLSHandshakeError):
        b.dial(url, fail_fast=True, **pki.dial_options(tls_max_version="1.2"))
    assert not a.pipes and not b.pipes
    assert _served(url, gsp_socket, **pki.dial_options())["tls_version"] == "TLSv1.3"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_maximum_version_and_ciphers_apply(pki: PKI, scheme: str,
                                           gsp_socket: Mk) -> None:
    a, _ = _pair(gsp_socket)
    cipher = "ECDHE-ECDSA-AES256-GCM-SHA384"  # trustme's keys are ECDSA
    url = a.listen(URLS[scheme], **pki.listen_options(tls_max_version="1.2",
                                                      tls_ciphers=cipher)).url
    props = _served(url, gsp_socket, **pki.dial_options())
    assert (props["tls_version"], props["tls_cipher"]) == ("TLSv1.2", cipher)
    with pytest.raises(TLSHandshakeError):  # no cipher in common
        _served(url, gsp_socket, **pki.dial_options(tls_ciphers="ECDHE-ECDSA-AES128-GCM-SHA256"))


# -- the key's password ---------------------------------------------------------------------

@pytest.mark.parametrize("password", ["s3cret", b"s3cret"], ids=["str", "bytes"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_password_protected_key_loads(pki: PKI, tmp_path: Path, scheme: str,
                                        password: Any, gsp_socket: Mk) -> None:
    key = encrypt_key(pki.server_key_file, tmp_path / "server.key", b"s3cret")
    a, b = _pair(gsp_socket)
    url = a.listen(URLS[scheme], **pki.listen_options(tls_key_file=key,
                                                      tls_key_password=password)).url
    b.dial(url, fail_fast=True, **pki.dial_options())
    b.send(b"ping")
    assert a.recv() == b"ping"


@pytest.mark.plugins("gsp_ws")
def test_a_wrong_or_missing_password_is_a_clear_error(
        gsp_socket: Callable[..., gsp.Socket], pki: PKI, tmp_path: Path) -> None:
    key = encrypt_key(pki.server_key_file, tmp_path / "server.key", b"s3cret")
    s = gsp_socket("pair")
    with pytest.raises(gsp.BadOption, match="does not decrypt with tls_key_password: wrong"):
        s.listen(URLS["tls+tcp"], **pki.listen_options(tls_key_file=key,
                                                       tls_key_password="nope"))
    with pytest.raises(gsp.BadOption, match="is encrypted: pass its password as "
                                            "tls_key_password"):
        s.listen(URLS["wss"], **pki.listen_options(tls_key_file=key))
    # A dialer's client key alike.
    with pytest.raises(gsp.BadOption, match="wrong password"):
        s.dial("tls+tcp://127.0.0.1:1", background=True, tls_cert_file=pki.client_cert_file,
               tls_key_file=key, tls_key_password=b"nope")
    assert not s.listeners and not s.dialers


# -- revocation -----------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_revoked_client_certificate_is_refused(pki: PKI, tmp_path: Path, scheme: str,
                                                 gsp_socket: Mk) -> None:
    revoked_cert, revoked_key = issue(pki.ca, tmp_path, "revoked", "client.example",
                                      common_name="revoked-client")
    crl = write_crl(pki.ca, tmp_path / "ca.crl", revoked_cert)
    a, b = _pair(gsp_socket)
    url = a.listen(URLS[scheme], **pki.listen_options(
        tls_client_auth="required", tls_ca_file=pki.ca_file, tls_crl_file=crl)).url
    with pytest.raises(TLSHandshakeError):
        b.dial(url, fail_fast=True, **pki.dial_options(tls_cert_file=revoked_cert,
                                                   tls_key_file=revoked_key))
    assert not a.pipes
    # A certificate the CRL does not name passes.
    good = _served(url, gsp_socket, **pki.dial_options(tls_cert_file=pki.client_cert_file,
                                                    tls_key_file=pki.client_key_file))
    assert good["tls_version"]
    wait_for(lambda: not a.pipes, what="the good client's pipe to go")


def test_a_dialer_checks_the_servers_certificate_against_its_crl(
        pki: PKI, tmp_path: Path, gsp_socket: Mk) -> None:
    a, b = _pair(gsp_socket)
    url = a.listen(URLS["tls+tcp"], **pki.listen_options()).url
    revoking = write_crl(pki.ca, tmp_path / "revoking.crl", pki.server_cert_file)
    with pytest.raises(TLSHandshakeError, match="certificate verification failed: .*revoked"):
        b.dial(url, fail_fast=True, **pki.dial_options(tls_crl_file=revoking))
    empty = write_crl(pki.ca, tmp_path / "empty.crl")
    assert _served(url, gsp_socket, **pki.dial_options(tls_crl_file=empty))["tls_version"]


# -- reload ---------------------------------------------------------------------------------

@pytest.fixture
def live(pki: PKI, tmp_path: Path) -> dict[str, str]:
    """The server's certificate and key copied where a test may replace them."""
    cert, key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(pki.server_cert_file, cert)
    shutil.copy(pki.server_key_file, key)
    return {"tls_cert_file": str(cert), "tls_key_file": str(key)}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_certificate_replaced_on_disk_is_served_to_the_next_handshake(
        pki: PKI, tmp_path: Path, live: dict[str, str], scheme: str,
        gsp_socket: Mk, caplog: pytest.LogCaptureFixture) -> None:
    a, b = _pair(gsp_socket)
    url = a.listen(URLS[scheme], **live).url
    b.dial(url, fail_fast=True, **pki.dial_options())  # this pipe stays up throughout
    assert b.pipes[0].properties["peer_certificate_der"] == cert_der(pki.server_cert_file)
    new_cert, new_key = issue(pki.ca, tmp_path, "renewed", common_name="renewed")
    caplog.set_level(logging.INFO, logger="gsp.listener")
    replace(live["tls_key_file"], new_key)
    replace(live["tls_cert_file"], new_cert)
    props = _served(url, gsp_socket, **pki.dial_options())
    assert props["peer_certificate_der"] == cert_der(new_cert)
    assert props["peer_subject"]["commonName"] == "renewed"
    assert any("the TLS files changed; new handshakes use them" in r.getMessage()
               for r in caplog.records)
    b.send(b"still up")  # the pipe made before the change is untouched
    assert a.recv() == b"still up"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_broken_replacement_keeps_the_last_good_certificate(
        pki: PKI, tmp_path: Path, live: dict[str, str], scheme: str,
        gsp_socket: Mk, caplog: pytest.LogCaptureFixture) -> None:
    a, _ = _pair(gsp_socket)
    listener = a.listen(URLS[scheme], **live)
    replace(live["tls_cert_file"], b"-----BEGIN CERTIFICATE-----\nbroken\n")
    with caplog.at_level(logging.WARNING, logger="gsp.listener"):
        for _ in range(3):  # served with the last good one; warned once for this version
            props = _served(listener.url, gsp_socket, **pki.dial_options())
            assert props["peer_certificate_der"] == cert_der(pki.server_cert_file)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].name == "gsp.listener"
    assert "do not load; new handshakes keep the previous certificates" in warnings[0].getMessage()
    assert listener.url in warnings[0].getMessage()
    assert isinstance(warnings[0].gsp_error, gsp.BadOption)  # type: ignore[attr-defined]
    with pytest.raises(gsp.BadOption, match="cannot load the TLS certificate"):
        listener.reload()  # an explicit reload says so to the caller
    assert _served(listener.url, gsp_socket, **pki.dial_options())["peer_certificate_der"] == \
        cert_der(pki.server_cert_file)
    # Fixed: the next handshake uses it.
    new_cert, new_key = issue(pki.ca, tmp_path, "fixed")
    replace(live["tls_key_file"], new_key)
    replace(live["tls_cert_file"], new_cert)
    listener.reload()
    assert _served(listener.url, gsp_socket, **pki.dial_options())["peer_certificate_der"] == \
        cert_der(new_cert)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_dialer_redials_against_a_new_ca(pki: PKI, tmp_path: Path, live: dict[str, str],
                                           scheme: str, gsp_socket: Mk) -> None:
    """The server moves to a certificate of another CA; the dialer's tls_ca_file is replaced
    with that CA: the dialer's next handshake (a redial) trusts it, without a new dialer."""
    trusted = tmp_path / "trusted-ca.pem"
    shutil.copy(pki.ca_file, trusted)
    a, b = _pair(gsp_socket, reconnect_time=0.05, max_reconnect_time=0.1)
    url = a.listen(URLS[scheme], **live).url
    dialer = b.dial(url, fail_fast=True, tls_ca_file=str(trusted))
    other = trustme.CA()
    new_cert, new_key = issue(other, tmp_path, "other")
    replace(live["tls_key_file"], new_key)
    replace(live["tls_cert_file"], new_cert)
    other.cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
    replace(str(trusted), str(tmp_path / "other-ca.pem"))
    b.pipes[0].close()
    wait_for(lambda: b.pipes and not b.pipes[0].closed, timeout=5, what="the redial")
    assert b.pipes[0].properties["peer_certificate_der"] == cert_der(new_cert)
    assert dialer.last_error is None
    dialer.reload()  # loads: nothing to report


def test_reload_on_an_endpoint_without_files_does_nothing(gsp_socket: Mk) -> None:
    a, _ = _pair(gsp_socket)
    listener = a.listen("tcp://127.0.0.1:0")
    listener.reload()
    a.dial(listener.url).reload()


def test_a_crl_of_another_ca_refuses_every_peer(pki: PKI, tmp_path: Path,
                                                gsp_socket: Mk) -> None:
    """OpenSSL needs the CRL of the peer's issuer: without it the peer is refused (docs/tls.md)."""
    a, b = _pair(gsp_socket)
    url = a.listen(URLS["tls+tcp"], **pki.listen_options()).url
    stranger = write_crl(trustme.CA(), tmp_path / "stranger.crl")
    with pytest.raises(TLSHandshakeError, match="unable to get certificate CRL"):
        b.dial(url, fail_fast=True, **pki.dial_options(tls_crl_file=stranger))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_new_path_set_on_the_socket_is_used_by_the_next_handshake(
        pki: PKI, tmp_path: Path, live: dict[str, str], scheme: str,
        gsp_socket: Mk) -> None:
    a = gsp_socket("pair", **live)
    url = a.listen(URLS[scheme]).url
    new_cert, new_key = issue(pki.ca, tmp_path, "moved")
    a.set_option("tls_key_file", new_key)
    a.set_option("tls_cert_file", new_cert)
    assert _served(url, gsp_socket, **pki.dial_options())["peer_certificate_der"] == \
        cert_der(new_cert)


@pytest.mark.interop
def test_interop_nng_dialer_trusting_only_a_new_ca_reaches_a_renewed_listener(
        gsp_socket: Callable[..., gsp.Socket],
        pki: PKI, tmp_path: Path, live: dict[str, str]) -> None:
    """pynng's nng (mbedtls) dials a gsp listener whose certificate was replaced on disk by one
    of a CA the nng client alone trusts: only the renewed certificate can pass."""
    other = trustme.CA()
    new_cert, new_key = issue(other, tmp_path, "other")
    config = pynng.TLSConfig(pynng.TLSConfig.MODE_CLIENT, server_name="localhost",
                             ca_string=other.cert_pem.bytes().decode())
    g = gsp_socket("pull", recv_timeout=5)
    url = g.listen(URLS["tls+tcp"], **live).url
    replace(live["tls_key_file"], new_key)
    replace(live["tls_cert_file"], new_cert)
    n = nng.socket("push", tls_config=config)
    try:
        nng.run(n.dial, url, block=True)
        nng.run(n.send, b"renewed")
        assert g.recv() == b"renewed"
    finally:
        n.close()
