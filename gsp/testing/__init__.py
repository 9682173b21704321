"""gsp.testing — the conformance kit for gsp plugins, and helpers for tests that use gsp.

Installing gsp registers :mod:`gsp.testing.plugin` as a pytest plugin (entry point ``pytest11``),
which provides the fixtures ``gsp_socket``, ``gsp_spawn``, ``gsp_free_url`` and
``gsp_leak_check``. A transport or protocol plugin checks itself against gsp's contract by
subclassing a suite in one of its test modules::

    from gsp.testing import ProtocolSuite, TransportSuite

    class TestZlibTransport(TransportSuite):
        scheme = "tcp+zlib"

    class TestStarProtocol(ProtocolSuite):
        protocol = peer = "star"
        raw_header = bytes(4)

Importing this package costs nothing: the names below load their modules (and gevent) on first
use, so the pytest plugin can import it in projects that never use gsp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from ._faults import FaultProxy
    from ._helpers import (
        WAIT,
        LeakSnapshot,
        RawPeer,
        connected,
        free_port,
        free_url,
        live_greenlets,
        ping_pong,
        socket_fds,
        wait_for,
    )
    from ._kit import SuiteBase, read_to_eof
    from ._protocol import ProtocolSuite
    from ._protocol_base import ProtocolSuiteBase
    from ._transport import TransportSuite
    from ._transport_base import TransportSuiteBase

__all__ = [
    "TransportSuite", "ProtocolSuite",
    # Their bases: a suite's description and helpers without its checks (for a plugin's own
    # checks in the suite's terms), and what both share.
    "TransportSuiteBase", "ProtocolSuiteBase", "SuiteBase",
    "WAIT", "wait_for", "connected", "ping_pong", "free_url", "free_port", "read_to_eof",
    "RawPeer", "FaultProxy",
    "LeakSnapshot", "live_greenlets", "socket_fds",
]

# The names imported above for type checkers load on first use (gsp._lazy).
__getattr__, __dir__ = attach(__name__)
