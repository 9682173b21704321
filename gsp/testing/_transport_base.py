"""The transport suite's description: what a subclass declares and may override, and the
helpers its checks use (the checks are in :mod:`gsp.testing._transport`)."""

from __future__ import annotations

from typing import Any, ClassVar

import gevent
import pytest

import gsp

from ._helpers import WAIT, connected, registry
from ._kit import MiB, SuiteBase

#: The checks that need more than the transport itself: check name -> what it needs. Each is
#: skipped, with this reason, where the suite's subclass does not provide it (see
#: :attr:`TransportSuiteBase.not_applicable`).
CHECK_NEEDS: dict[str, str] = {
    "test_garbage_headers_refused": "raw_connect(url) (a plain socket to a listener, to send "
                                    "garbage SP headers on its byte stream)",
    "test_parking_reader": "connections built on gsp.transport.ParkingConnection (the parking "
                           "reader, whose promises the check holds them to)",
}


class TransportSuiteBase(SuiteBase):
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

    Every check runs on every transport except those that need more than the transport itself:

    - ``test_garbage_headers_refused`` needs :meth:`raw_connect` (a plain socket to a listener,
      for a transport that puts SP's 8-byte header straight on a byte stream).
    - ``test_parking_reader`` needs connections built on
      :class:`gsp.transport.ParkingConnection` (as tcp's, ipc's and ws's are): it holds them to
      the parking reader's promises, on connections made by the transport's own listener and
      dialer.

    Where a transport does not provide it, the check is *skipped*, and pytest reports it with the
    reason (``pytest -rs`` lists them). A transport that cannot provide it at all (no byte
    stream: inproc, ws; connections that park their own way: inproc) says so in
    :attr:`not_applicable`; the check then passes after asserting that the transport indeed
    lacks it.
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
    #: Largest message :meth:`test_message_sizes` sends with ``max_recv_size=0`` (no limit).
    unlimited_size: ClassVar[int] = 2 * MiB + 1
    #: Checks of :data:`CHECK_NEEDS` that cannot apply to this transport: check name -> why. Such
    #: a check passes (after asserting the transport lacks what it needs) instead of being
    #: skipped; one not declared here is skipped, with its reason, when its need is missing.
    not_applicable: ClassVar[dict[str, str]] = {}

    def _check_description(self) -> None:
        name = type(self).__name__
        assert self.scheme, f"{name} must set scheme, the URL scheme under test"
        for check, why in self.not_applicable.items():
            assert check in CHECK_NEEDS, \
                f"{name}.not_applicable names {check!r}, which is not one of {sorted(CHECK_NEEDS)}"
            assert why, f"{name}.not_applicable[{check!r}] must say why"

    def _cannot_run(self, check: str) -> None:
        """End ``check``, whose need (:data:`CHECK_NEEDS`) this transport does not provide:
        pass if :attr:`not_applicable` declares it, else skip with the reason."""
        if check not in self.not_applicable:
            pytest.skip(f"{check} not run: {self.scheme} provides no {CHECK_NEEDS[check]} "
                        f"(override it, or declare the check in not_applicable with the reason)")

    def _check_applies(self, check: str) -> None:
        """Fail if ``check`` is declared not applicable although its need is provided."""
        assert check not in self.not_applicable, \
            f"{type(self).__name__}.not_applicable declares {check!r}, yet the transport " \
            f"provides {CHECK_NEEDS[check]}: remove the declaration"

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
        headers. None (the default) skips :meth:`test_garbage_headers_refused` (see
        :attr:`not_applicable`)."""
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

    def connection_pair(self, protocol: str = "pair") -> tuple[Any, Any, Any]:
        """``(dialed, accepted, listener)``: two connections of the transport's own dialer and
        listener, handshaken as ``protocol`` (a protocol that is its own peer), and the
        :class:`gsp.transport.TransportListener` that accepted one. The caller closes all
        three."""
        url = self.listen_url()
        transport = registry().transport_for(url)
        tl = transport.listener(url, self.transport_options(protocol, self.listen_options()))
        conns: list[Any] = []
        spec = registry().protocol(protocol)
        shakes = []
        try:
            tl.bind()
            accept = self._spawn(tl.accept)
            td = transport.dialer(tl.url, self.transport_options(protocol, self.dial_options()))
            try:
                with gevent.Timeout(WAIT, AssertionError(f"the transport's dial of {tl.url} "
                                                         f"and its accept hung")):
                    conns.append(td.dial())
                    # (ws: the listener accepts once the dialer's handshake sent its request)
                    shakes.append(self._spawn(conns[0].handshake, spec, WAIT))
                    conns.append(accept.get())
                    shakes.append(self._spawn(conns[1].handshake, spec, WAIT))
            finally:
                td.close()
                accept.kill()
            gevent.joinall(shakes, timeout=2 * WAIT, raise_error=True)
            assert all(g.successful() for g in shakes), "the handshakes did not finish"
        except BaseException:
            for c in conns:
                c.close()
            tl.close()
            raise
        return conns[0], conns[1], tl

    def transport_options(self, protocol: str, extra: dict[str, Any]) -> dict[str, Any]:
        """The option mapping the core would hand the transport for an endpoint of a
        ``protocol`` socket with ``extra`` set (read from a socket's option snapshot)."""
        probe = gsp.socket(protocol, **extra)
        try:
            return dict(probe.options)
        finally:
            probe.close()
