"""tls+tcp:// — SP over TLS over TCP, with tcp's 8-byte length framing.

The TLS handshake runs in ``Connection.handshake`` (the core runs that in a greenlet per
connection, under ``handshake_timeout``), never in ``accept()``: a client that connects and then
stalls delays nobody. Contexts and peer identities come from :mod:`gsp.transport.tls`, shared with wss.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import sys
import time
from typing import TYPE_CHECKING, Any, Mapping

import gevent

from ..errors import Closed, ConnectionBroken, Timeout
from ..hookspecs import hookimpl
from ..transport import (
    TLS_OPTIONS,
    StreamConnection,
    TLSContextSource,
    Transport,
    bytes_received,
    tls_close_notify,
    tls_handshake,
    tls_refusal,
    tls_wrap,
    wire,
)
from .tcp import TCP_OPTIONS, TCPDialer, TCPListener

if TYPE_CHECKING:
    from ..protocol import ProtocolSpec

_TCP_CLOSE = 7  # tcp_info's tcpi_state of a connection that is over (Linux's tcp_states.h)


# -- tls+tcp --------------------------------------------------------------------------------

#: What a finished TLS handshake counts for in :meth:`TLSConnection.handshake_progress`.
TLS_DONE = 4096


class TLSConnection(StreamConnection):
    """A TCP connection that becomes TLS in ``handshake``, then speaks SP with tcp framing."""

    def __init__(self, sock: Any, max_size: int, local: str, remote: str,
                 tls: TLSContextSource, server_side: bool, server_hostname: str | None) -> None:
        super().__init__(sock, wire.TCP, max_size, local, remote)
        self._tls = tls
        self._server_side = server_side
        self._server_hostname = server_hostname
        self._secured = False
        self._tls_done = False  # the TLS handshake is done (handshake_progress)
        self._kernel = 0  # bytes the kernel received during it, as last read
        self._kernel_at = -1.0

    def handshake(self, spec: "ProtocolSpec", timeout: float | None) -> None:
        start = time.monotonic()
        what = f"TLS with {self.remote_address}"
        with gevent.Timeout(timeout, Timeout(f"TLS handshake with {self.remote_address} timed out")):
            if self._closed:
                raise Closed("connection closed locally")
            # The files as they are now; this handshake keeps this context whatever comes next.
            self.sock = tls_wrap(self.sock, self._tls.get(), server_side=self._server_side,
                                 server_hostname=self._server_hostname)
            self.properties.update(tls_handshake(self.sock, what))
        self._tls_done = True
        # One handshake_timeout bounds TLS and SP together.
        left = None if timeout is None else max(timeout - (time.monotonic() - start), 0.001)
        super().handshake(spec, left)
        self._secured = True
        # From now on a stream that ends without TLS's close_notify reaches _io_error instead of
        # passing for a clean end: it may be the kernel giving up on the connection.
        self.sock.suppress_ragged_eofs = False

    def before_socket_close(self) -> None:
        if self._tls_done:
            tls_close_notify(self.sock)

    def handshake_progress(self) -> int:
        """A TLS handshake under way counts the bytes the kernel received from the peer (its
        reads are OpenSSL's); a finished one counts as :data:`TLS_DONE`, then the SP header's
        bytes as on tcp."""
        if not self._tls_done:  # (a system call: read at most every 50 ms)
            now = time.monotonic()
            if now - self._kernel_at >= 0.05:
                self._kernel = min(bytes_received(self.sock), TLS_DONE - 1)
                self._kernel_at = now
            return self._kernel
        return TLS_DONE + super().handshake_progress()

    def _io_error(self, exc: OSError, what: str) -> Exception:
        # With TLS 1.3 a server refuses a client certificate only after the client's handshake
        # returned: the client reads the alert during the SP handshake. Report it as TLS.
        if not self._closed and not self._secured:
            refusal = tls_refusal(exc, f"TLS with {self.remote_address}")
            if refusal is not None:
                return refusal
        if not self._closed and isinstance(exc, (ssl.SSLEOFError, ConnectionResetError)):
            # Python's ssl reports a peer's reset as an EOF up to 3.12, as the kernel's
            # ECONNRESET from 3.13 on: either is the peer closing. OpenSSL reports a read the
            # kernel failed (ETIMEDOUT) as an EOF too; TCP_INFO tells.
            if _timed_out(self.sock):
                return ConnectionBroken(f"{what} on {self.remote_address}: "
                                        f"{os.strerror(errno.ETIMEDOUT)}")
            return ConnectionBroken(f"{self.remote_address} closed the connection")
        return super()._io_error(exc, what)


def _timed_out(sock: Any) -> bool:
    """Whether the kernel gave up on this TCP connection: closed (TCP_CLOSE) after unanswered
    retransmissions or keepalive probes (tcp_info's tcpi_retransmits, tcpi_probes); Linux only."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 4)
    except OSError:
        return False
    return bool(info[0] == _TCP_CLOSE and (info[2] or info[3]))


class TLSListener(TCPListener):
    scheme = "tls+tcp"

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.tls = TLSContextSource(options, server=True, url=url)

    def bind(self) -> None:
        super().bind()
        self.tls.url = self.url  # the bound port, for the log

    def reload(self) -> None:
        self.tls.reload()

    def wrap(self, sock: Any, local: str, remote: str) -> TLSConnection:
        # No TLS here: accept() must stay fast; the handshake greenlet does it.
        return TLSConnection(sock, self.options["max_recv_size"], local, remote,
                             self.tls, True, None)


class TLSDialer(TCPDialer):
    scheme = "tls+tcp"

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.tls = TLSContextSource(options, server=False, url=url)
        self.server_hostname = options["tls_server_name"] or self.host

    def reload(self) -> None:
        self.tls.reload()

    def wrap(self, sock: Any, local: str, remote: str) -> TLSConnection:
        return TLSConnection(sock, self.options["max_recv_size"], local, remote,
                             self.tls, False, self.server_hostname)


class TLSTransport(Transport):
    schemes = ("tls+tcp",)
    options = {**TCP_OPTIONS, **TLS_OPTIONS}
    listener_class = TLSListener
    dialer_class = TLSDialer


@hookimpl
def gsp_transports() -> list[Transport]:
    return [TLSTransport()]
