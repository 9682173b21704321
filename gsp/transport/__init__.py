"""The transport-author SDK: everything a transport plugin needs, in one import.

* The interface (:mod:`.interface`): :class:`Transport`, :class:`TransportListener`,
  :class:`TransportDialer` and :class:`Connection`.
* Byte-stream transports (:mod:`.stream`): :class:`StreamConnection`, :class:`SocketListener`
  and :class:`SocketDialer` (tcp, ipc, tls+tcp and ws are made of them) and the socket calls with
  their errors mapped to gsp's.
* The parking reader (:mod:`.parking`): :class:`ParkingConnection`, a connection whose idle
  reads hold no greenlet (tcp, ipc and ws read so), for any transport over a gevent socket.
* Sockets given rather than made (:mod:`.fds`): an inherited listening descriptor (the
  :data:`LISTEN_FD` option) and an already-connected one (the ``socket://`` transport).
* TLS (:mod:`.tls`), URLs (:mod:`.urls`), the receive bounds of a socket's pipes
  (:mod:`.limits`), and the sans-IO SP codec, :mod:`gsp.transport.wire` (handshake, framing,
  incremental decoder).
* Declaring an option: :class:`Option` (its validators are in :mod:`gsp.options`). A plugin
  registers with :data:`gsp.hookimpl`; :func:`gsp.protocol.overrides` finds a class's optional
  hooks.

The conformance kit for a transport is :class:`gsp.testing.TransportSuite`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from ..options import Option
    from . import wire
    from .admission import SHED_REASONS, HandshakeRoom, bytes_received, source_of
    from .fds import LISTEN_FD, adopt_connected_socket, adopt_listening_socket, family_name
    from .interface import Connection, Transport, TransportDialer, TransportListener
    from .limits import Holding, RecvLimits
    from .parking import ParkingConnection, nonblocking_socket
    from .peer import Headers, Peer, PeerCertificate, WSRequest, parse_cookies, peer_of
    from .stream import (
        SocketDialer,
        SocketListener,
        StreamConnection,
        bind_stream_socket,
        connect_socket,
        forget_socket,
        map_socket_error,
        resolve,
    )
    from .tls import (
        TLS_OPTIONS,
        TLSContextSource,
        tls_close_notify,
        tls_context,
        tls_handshake,
        tls_properties,
        tls_refusal,
        tls_wrap,
    )
    from .urls import hostport, parse_host_port, split_url

__all__ = [
    # the interface
    "Transport", "TransportListener", "TransportDialer", "Connection",
    # byte streams
    "StreamConnection", "SocketListener", "SocketDialer", "resolve", "bind_stream_socket",
    "connect_socket", "map_socket_error", "forget_socket",
    # the parking reader
    "ParkingConnection", "nonblocking_socket",
    # adopted descriptors
    "LISTEN_FD", "adopt_listening_socket", "adopt_connected_socket", "family_name",
    # tls, urls, limits, the codec
    "TLS_OPTIONS", "TLSContextSource", "tls_context", "tls_wrap", "tls_handshake", "tls_refusal",
    "tls_properties", "tls_close_notify",
    "split_url", "parse_host_port", "hostport", "RecvLimits", "Holding", "wire",
    # admission: shedding connections in their handshake
    "HandshakeRoom", "SHED_REASONS", "bytes_received", "source_of",
    # who the peer is (pipe.peer)
    "Peer", "PeerCertificate", "WSRequest", "Headers", "peer_of", "parse_cookies",
    # options
    "Option",
]

# The names imported above for type checkers load on first use (PEP 562, gsp._lazy), so that
# importing one module of the package (the sans-IO codec, an interface) loads no more than it
# needs.
__getattr__, __dir__ = attach(__name__, renamed={
    "hookimpl": ("gsp", "hookimpl"), "overrides": ("gsp.protocol", "overrides")})
