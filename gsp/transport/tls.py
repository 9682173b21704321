"""TLS for stream transports: options, contexts, the handshake and what a pipe shows of it.

tls+tcp and wss build their ``ssl.SSLContext`` and read the peer's identity the same way through
these helpers: :data:`TLS_OPTIONS` (the ``tls_*`` options), :func:`tls_context`, :class:`TLSContextSource`
(the context of an endpoint, rebuilt when its files change on disk), :func:`tls_wrap`,
:func:`tls_handshake` and :func:`tls_properties`. TLS failures are :class:`TLSHandshakeError`.
"""

from __future__ import annotations

import _ssl
import logging
import os
import ssl
from typing import Any, Mapping

from gevent import ssl as gssl

from ..errors import BadOption, Closed, ConnectionBroken, GspError, TLSHandshakeError
from ..options import Option, boolean, described, optional

__all__ = [
    "TLS_OPTIONS", "TLSContextSource", "tls_context", "tls_wrap", "tls_handshake", "tls_refusal",
    "tls_properties", "tls_close_notify",
]


# -- options ----------------------------------------------------------------------------------

@described("ssl.SSLContext")
def _ssl_context(name: str, v: Any) -> Any:
    # The C base class: a context made before gevent.monkey.patch_all() is still accepted.
    if not isinstance(v, _ssl._SSLContext):
        raise BadOption(f"{name} must be an ssl.SSLContext, not {v!r}")
    return v


@described("str or os.PathLike", range="a file path")
def _path(name: str, v: Any) -> Any:
    if not isinstance(v, (str, os.PathLike)) or not os.fspath(v):
        raise BadOption(f"{name} must be a file path, not {v!r}")
    return os.fspath(v)


@described("str", range="non-empty")
def _text(name: str, v: Any) -> Any:
    if not isinstance(v, str) or not v:
        raise BadOption(f"{name} must be a non-empty str, not {v!r}")
    return v


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@described("str", range="'none', 'optional', 'required'")
def _client_auth(name: str, v: Any) -> Any:
    if v not in _CLIENT_AUTH:
        raise BadOption(f"{name} must be 'none', 'optional' or 'required', not {v!r}")
    return v


# TLS 1.0 and 1.1 are not offered: OpenSSL 3 refuses them at its default security level and
# Python deprecates them.
_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


@described("str", range="'1.2', '1.3'")
def _version(name: str, v: Any) -> Any:
    if v not in _VERSIONS:
        raise BadOption(f"{name} must be '1.2' or '1.3' (a TLS version), not {v!r}")
    return v


@described("str", range="an OpenSSL cipher list")
def _ciphers(name: str, v: Any) -> Any:
    if not isinstance(v, str) or not v:
        raise BadOption(f"{name} must be a non-empty str (an OpenSSL cipher list such as "
                        f"'ECDHE+AESGCM'), not {v!r}")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(v)
    except (ssl.SSLError, ValueError):  # ValueError: a NUL or a character not UTF-8
        raise BadOption(f"{name}: OpenSSL selects no cipher from {v!r} (an OpenSSL cipher list "
                        "such as 'ECDHE+AESGCM:!aNULL'; TLS 1.3's suites are always on)") from None
    return v


_PASSWORD_MAX = 1023  # bytes: OpenSSL's PEM_BUFSIZE less one, the most load_cert_chain takes


@described("str or bytes", range=f"1..{_PASSWORD_MAX} bytes")
def _password(name: str, v: Any) -> Any:
    # Never echo the value: it is a secret.
    if not isinstance(v, (str, bytes)):
        raise BadOption(f"{name} must be a str or bytes (the private key's password), "
                        f"not a value of type {type(v).__name__}")
    try:
        size = len(v.encode() if isinstance(v, str) else v)
    except UnicodeEncodeError:
        raise BadOption(f"{name} must be a str encodable as UTF-8 or bytes") from None
    if not 0 < size <= _PASSWORD_MAX:
        raise BadOption(f"{name} must be 1..{_PASSWORD_MAX} bytes long, not {size}")
    return v


TLS_OPTIONS: dict[str, Option] = {o.name: o for o in [
    Option("ssl_context", None, optional(_ssl_context),
           "an ssl.SSLContext used as is (the tls_* options are then ignored)"),
    Option("tls_cert_file", None, optional(_path),
           "PEM certificate chain: required on listeners; a client certificate on dialers. "
           "Read again for a new handshake when it changed on disk (docs/tls.md)"),
    Option("tls_key_file", None, optional(_path), "PEM private key (default: in tls_cert_file)"),
    Option("tls_key_password", None, optional(_password),
           "the password of an encrypted private key (tls_key_file, or the key in tls_cert_file)"),
    Option("tls_ca_file", None, optional(_path),
           "PEM CA bundle that verifies the peer (default: the system's CAs)"),
    Option("tls_crl_file", None, optional(_path),
           "PEM certificate revocation list(s) of the CA: a peer's certificate it revokes is "
           "refused (listeners: client certificates, with tls_client_auth; dialers: the "
           "server's, with tls_verify)"),
    Option("tls_min_version", "1.2", _version, "the oldest TLS version accepted"),
    Option("tls_max_version", None, optional(_version),
           "the newest TLS version offered (default: the newest the ssl module has)"),
    Option("tls_ciphers", None, optional(_ciphers),
           "OpenSSL cipher list for TLS 1.2 (default: OpenSSL's); TLS 1.3's suites are "
           "always on"),
    Option("tls_verify", True, boolean, "dialers: verify the server's certificate and host name",
           scope="dial"),
    Option("tls_server_name", None, optional(_text),
           "dialers: the host name to verify and send as SNI (default: the URL's host)",
           scope="dial"),
    Option("tls_client_auth", "none", _client_auth,
           "listeners: client certificates 'none', 'optional' or 'required' (mutual TLS)",
           scope="listen"),
]}


# -- helpers shared with other transports -----------------------------------------------------

def tls_context(options: Mapping[str, Any], *, server: bool, what: str) -> ssl.SSLContext:
    """The SSLContext an endpoint uses: ``ssl_context`` as given, else one built from tls_*.

    Raises :class:`gsp.BadOption` for a listener without a certificate, files that do not load
    (a wrong ``tls_key_password`` included) or ``tls_min_version`` above ``tls_max_version``.
    """
    given: ssl.SSLContext | None = options["ssl_context"]
    if given is not None:
        return given
    if server and options["tls_cert_file"] is None:
        raise BadOption(f"{what}: a TLS listener needs a certificate; pass ssl_context= "
                        "or tls_cert_file= (and tls_key_file= if the key is separate)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    if server:
        # No TLS 1.3 session tickets (OpenSSL sends two after every handshake): nng 2.0 on Mbed
        # TLS 4 fails the connection on one (mbedtls_ssl_read returns
        # MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET, which nng's engine reports as
        # NNG_ECRYPTO), and gsp's dialers never resume a session, so they serve nobody here.
        ctx.num_tickets = 0
    _versions(ctx, options, what)
    if options["tls_ciphers"] is not None:
        ctx.set_ciphers(options["tls_ciphers"])
    try:
        if server:
            _server_trust(ctx, options)
        else:
            _client_trust(ctx, options)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise BadOption(f"{what}: cannot load the TLS CA/CRL files: {exc}") from None
    if options["tls_cert_file"] is not None:
        _load_cert_chain(ctx, options, what)
    return ctx


def _versions(ctx: ssl.SSLContext, options: Mapping[str, Any], what: str) -> None:
    low, high = options["tls_min_version"], options["tls_max_version"]
    if high is not None and _VERSIONS[low] > _VERSIONS[high]:
        raise BadOption(f"{what}: tls_min_version {low!r} is above tls_max_version {high!r}")
    ctx.minimum_version = _VERSIONS[low]
    if high is not None:
        ctx.maximum_version = _VERSIONS[high]


def _trust(ctx: ssl.SSLContext, options: Mapping[str, Any], purpose: ssl.Purpose) -> None:
    ca, crl = options["tls_ca_file"], options["tls_crl_file"]
    if ca is not None:
        ctx.load_verify_locations(ca)
    else:
        ctx.load_default_certs(purpose)
    if crl is not None:
        ctx.load_verify_locations(crl)  # PEM CRLs load like CAs
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


def _server_trust(ctx: ssl.SSLContext, options: Mapping[str, Any]) -> None:
    mode = options["tls_client_auth"]
    if mode != "none":
        _trust(ctx, options, ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = _CLIENT_AUTH[mode]


def _client_trust(ctx: ssl.SSLContext, options: Mapping[str, Any]) -> None:
    # PROTOCOL_TLS_CLIENT: CERT_REQUIRED and check_hostname
    if options["tls_verify"]:
        _trust(ctx, options, ssl.Purpose.SERVER_AUTH)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE


class _Encrypted(Exception):
    """The key is encrypted and no tls_key_password was given."""


def _load_cert_chain(ctx: ssl.SSLContext, options: Mapping[str, Any], what: str) -> None:
    cert, key = options["tls_cert_file"], options["tls_key_file"]
    password = options["tls_key_password"]
    asked: list[bool] = []

    def give_password() -> Any:  # OpenSSL asks only for an encrypted key
        asked.append(True)
        if password is None:  # never let OpenSSL prompt on the terminal
            raise _Encrypted
        return password

    files = f"{cert}, {key}" if key else cert
    try:
        ctx.load_cert_chain(cert, key, give_password)
    except _Encrypted:
        raise BadOption(f"{what}: the TLS private key ({key or cert}) is encrypted: pass its "
                        "password as tls_key_password=") from None
    except ssl.SSLError as exc:
        if asked and "MISMATCH" not in str(exc.reason):
            raise BadOption(f"{what}: the TLS private key ({key or cert}) does not decrypt with "
                            "tls_key_password: wrong password") from None
        raise BadOption(f"{what}: cannot load the TLS certificate/key files ({files}): "
                        f"{exc.reason or exc}") from None
    except (OSError, ValueError) as exc:
        raise BadOption(f"{what}: cannot load the TLS certificate/key files: {exc}") from None


# -- certificate reload ------------------------------------------------------------------------

_FILES = ("tls_cert_file", "tls_key_file", "tls_ca_file", "tls_crl_file")
_SETTINGS = (*_FILES, "tls_key_password", "tls_min_version", "tls_max_version", "tls_ciphers",
             "tls_verify", "tls_client_auth")


def _file_stamp(path: str | None) -> Any:
    """What tells a file's new version: device, inode (a file renamed into place), size and
    modification times (one rewritten in place); the errno when it cannot be read."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        return exc.errno
    except ValueError:  # a NUL in the path: tls_context reports it
        return "invalid"
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _stamp(options: Mapping[str, Any]) -> tuple[Any, ...]:
    return (*(options[n] for n in _SETTINGS), *(_file_stamp(options[n]) for n in _FILES))


class TLSContextSource:
    """The SSLContext of one endpoint, rebuilt when its files change: :meth:`get` for each new
    handshake (a handshake keeps the context it started with).

    :meth:`get` compares the files' stat (inode, size, mtimes) and the tls_* option values with
    those of the context in use, a few microseconds; when they changed it builds a new context.
    A version that does not load is logged once at WARNING on ``gsp.listener`` (``gsp.dialer``
    for a dialer) and not tried again until the files change again: handshakes go on with the
    last good context. :meth:`reload` rebuilds now and raises :class:`gsp.BadOption` when the
    files do not load (the last good context stays in use). An ``ssl_context`` option is used as
    given and never rebuilt.
    """

    __slots__ = ("options", "server", "url", "_context", "_stamp", "_broken", "_log")

    def __init__(self, options: Mapping[str, Any], *, server: bool, url: str) -> None:
        self.options = options
        self.server = server
        self.url = url  #: the endpoint's URL (the bound one once a listener is bound), for logs
        self._log = logging.getLogger("gsp.listener" if server else "gsp.dialer")
        self._stamp: tuple[Any, ...] | None = None
        self._broken: tuple[Any, ...] | None = None  # a stamp that did not load
        self._context = self._build(_stamp(options))  # raises BadOption: listen/dial fails

    @property
    def what(self) -> str:
        return f"{'listen' if self.server else 'dial'} {self.url}"

    def _build(self, stamp: tuple[Any, ...]) -> ssl.SSLContext:
        ctx = tls_context(self.options, server=self.server, what=self.what)
        self._context, self._stamp, self._broken = ctx, stamp, None
        return ctx

    def get(self) -> ssl.SSLContext:
        """The context for a new handshake: the files as they are on disk now, if they load."""
        given: ssl.SSLContext | None = self.options["ssl_context"]
        if given is not None:
            return given
        stamp = _stamp(self.options)
        if stamp != self._stamp and stamp != self._broken:
            try:
                self._build(stamp)
            except BadOption as exc:
                self._broken = stamp
                self._log.warning("%s: the TLS files changed but do not load; new handshakes "
                                  "keep the previous certificates: %s", self.what, exc,
                                  extra=self._fields(exc))
            else:
                if self._log.isEnabledFor(logging.INFO):
                    self._log.info("%s: the TLS files changed; new handshakes use them",
                                   self.what, extra=self._fields(None))
        return self._context

    def reload(self) -> ssl.SSLContext:
        """Build the context from the files now; raise :class:`gsp.BadOption` if they do not
        load, keeping the last good context for new handshakes."""
        stamp = _stamp(self.options)
        try:
            return self._build(stamp)
        except BadOption:
            self._broken = stamp
            raise

    def _fields(self, exc: BaseException | None) -> dict[str, Any]:
        return {"gsp_protocol": None, "gsp_url": self.url, "gsp_pipe": None,
                "gsp_remote": None, "gsp_error": exc}


def tls_wrap(sock: Any, context: ssl.SSLContext, *, server_side: bool,
             server_hostname: str | None = None) -> Any:
    """Wrap a connected gevent socket in a gevent SSLSocket; no handshake yet.

    Callers store the result before :func:`tls_handshake` so that closing it aborts a handshake
    in progress (the plain socket is detached by the wrap).
    """
    try:
        return gssl.SSLSocket(sock=sock, server_side=server_side,
                              server_hostname=None if server_side else server_hostname,
                              do_handshake_on_connect=False, _context=context)
    except ValueError as exc:  # e.g. a server context used to dial
        sock.close()
        raise TLSHandshakeError(f"cannot start TLS: {exc}") from None
    except OSError as exc:
        sock.close()
        raise ConnectionBroken(f"cannot start TLS: {exc.strerror or exc}") from None


def tls_close_notify(sslsock: Any) -> None:
    """Send TLS's close_notify alert on ``sslsock`` (a gevent SSLSocket) before it is closed:
    RFC 8446 (6.1) has each party send one before closing its side, and a peer that holds to
    it (Python's ``ssl`` with ``suppress_ragged_eofs`` off, Go's ``crypto/tls``) reads an end
    without one as an error, even an attack. One ``SSL_shutdown`` with the socket made
    non-blocking: the peer's answering close_notify is not waited for, and where the alert
    cannot go at once (a full send buffer, a handshake not finished, a socket already closed, a
    plain socket) nothing is sent. Never blocks, never raises."""
    unwrap = getattr(sslsock, "unwrap", None)
    if unwrap is None:
        return
    try:
        sslsock.settimeout(0.0)
        unwrap()
    except (ssl.SSLError, OSError, ValueError):
        pass  # SSLWantReadError above all: ours went out, the peer's has not come (yet)


def tls_handshake(sslsock: Any, what: str) -> dict[str, Any]:
    """Run the TLS handshake on a :func:`tls_wrap` socket; return :func:`tls_properties`."""
    try:
        sslsock.do_handshake()
    except GspError:  # a gevent.Timeout carrying gsp.Timeout (an OSError subclass): keep it
        raise
    except ssl.SSLCertVerificationError as exc:
        raise TLSHandshakeError(
            f"{what}: certificate verification failed: {exc.verify_message}") from None
    except ssl.SSLError as exc:
        raise TLSHandshakeError(f"{what}: TLS handshake failed: {exc.reason or exc}") from None
    except OSError as exc:
        raise ConnectionBroken(f"{what}: connection lost in the TLS handshake: "
                               f"{exc.strerror or exc}") from None
    except AttributeError:
        # gevent's SSLSocket drops its TLS object when it is closed: a handshake started (or
        # resumed) after another greenlet closed it, as a listener shedding the connection
        # to make room does, fails on that object, not with an OSError.
        if sslsock.fileno() != -1:
            raise
        raise Closed(f"{what}: closed before its TLS handshake finished") from None
    return tls_properties(sslsock)


def tls_refusal(exc: OSError, what: str) -> TLSHandshakeError | None:
    """The :class:`TLSHandshakeError` for an ``ssl.SSLError`` a read or write met before the
    connection was established, else None. With TLS 1.3 a server refuses a client certificate
    only after the client's handshake returned: the client reads the alert in its first read
    (the SP handshake on tls+tcp, the HTTP upgrade on wss)."""
    if isinstance(exc, ssl.SSLError):
        return TLSHandshakeError(f"{what} failed: {exc.reason or exc}")
    return None


def tls_properties(sslsock: Any) -> dict[str, Any]:
    """What a pipe shows of a TLS session: the peer's verified certificate and subject, etc.

    ``peer_certificate`` is ``None`` unless the peer sent a certificate that was verified.
    """
    cert = sslsock.getpeercert() or None
    cipher = sslsock.cipher()
    props: dict[str, Any] = {
        "tls_version": sslsock.version(),
        "tls_cipher": cipher[0] if cipher else None,
        "peer_certificate": cert,
        "peer_certificate_der": sslsock.getpeercert(binary_form=True),
        "peer_subject": None,
    }
    if cert:
        props["peer_subject"] = {k: v for rdn in cert.get("subject", ()) for k, v in rdn}
    return props
