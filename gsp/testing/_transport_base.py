"""The transport suite's description: what a subclass declares and may override, and the
helpers its checks use (the checks are in :mod:`gsp.testing._transport`)."""

from __future__ import annotations

from typing import Any, ClassVar

import gsp

from ._helpers import connected
from ._kit import MiB, _Kit


class TransportSuiteBase(_Kit):
    """Conformance checks for a transport (URL scheme). Subclass it in a test module::

        from gsp.testing import TransportSuite

        class TestZlibTransport(TransportSuite):
            scheme = "tcp+zlib"
            bad_urls = ("tcp+zlib://nohost",)
            options = {"zlib_level": (9, 10)}

            def listen_url(self) -> str:
                return "tcp+zlib://127.0.0.1:0"

            anonymous_url = listen_url

    Only :attr:`scheme` is required when ``gsp_free_url(scheme)`` can make URLs for it (tcp,
    tls+tcp, ipc, inproc, or a transport with a ``free_url(scheme, directory)`` method).
    """

    #: The URL scheme under test.
    scheme: ClassVar[str] = ""
    #: URLs of this scheme that ``listen`` and ``dial`` must refuse with :class:`gsp.InvalidAddress`
    #: (a few scheme-independent ones are always tried too).
    bad_urls: ClassVar[tuple[Any, ...]] = ()
    #: The transport's own options: name -> (a good value, a bad value).
    options: ClassVar[dict[str, tuple[Any, Any]]] = {}
    #: What dialing a listener of a protocol that is not the dialer's peer raises.
    wrong_protocol_error: ClassVar[type[BaseException]] = gsp.WrongProtocol
    #: How many dialers :meth:`test_many_pipes` connects to one listener.
    many_pipes: ClassVar[int] = 50
    #: Largest message :meth:`test_message_sizes` sends with ``recv_max_size=0`` (no limit).
    unlimited_size: ClassVar[int] = 2 * MiB + 1

    def _check_description(self) -> None:
        assert self.scheme, f"{type(self).__name__} must set scheme, the URL scheme under test"

    # -- what a subclass may override ------------------------------------------------------------
    def listen_url(self) -> str:
        """A fresh URL to listen on (default: ``gsp_free_url(scheme)``)."""
        return self._free_url(self.scheme)

    def anonymous_url(self) -> str | None:
        """A URL that binds a new address on every listen (like port 0), or None if the
        transport has no such thing."""
        return None

    def listen_options(self) -> dict[str, Any]:
        """Options every listen of the suite gets (e.g. a TLS certificate)."""
        return {}

    def dial_options(self) -> dict[str, Any]:
        """Options every dial of the suite gets (e.g. a CA to trust)."""
        return {}

    def raw_connect(self, url: str) -> Any:
        """For a transport that puts SP's 8-byte header straight on a byte stream: a plain
        connected socket to ``url`` (with ``recv``/``sendall``/``close``), used to send garbage
        headers. None (the default) leaves that part of :meth:`test_wrong_protocol_refused` out."""
        return None

    def unused_url(self) -> str:
        """A dialable URL nothing listens on, which may be listened on later (default: a URL a
        listener bound and released)."""
        probe = self.socket("pair")
        try:
            return self.listen(probe).url
        finally:
            probe.close()

    # -- helpers for the checks ------------------------------------------------------------------
    def listen(self, sock: gsp.Socket, url: str | None = None, **options: Any) -> gsp.Listener:
        return sock.listen(self.listen_url() if url is None else url,
                           **{**self.listen_options(), **options})

    def dial(self, sock: gsp.Socket, url: str, **options: Any) -> gsp.Dialer:
        return sock.dial(url, **{**self.dial_options(), **options})

    def connect(self, listener_sock: gsp.Socket, url: str, dialer_sock: gsp.Socket,
                **options: Any) -> gsp.Dialer:
        """Dial and wait until both ends have the pipe."""
        return connected(listener_sock, url, dialer_sock, **{**self.dial_options(), **options})

    def transport_options(self, protocol: str, extra: dict[str, Any]) -> dict[str, Any]:
        """The option mapping the core would hand the transport for an endpoint of a
        ``protocol`` socket with ``extra`` set (read from a socket's option snapshot)."""
        probe = gsp.socket(protocol, **extra)
        try:
            return dict(probe.options)
        finally:
            probe.close()
