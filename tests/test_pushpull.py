"""push and pull through the protocol conformance kit; their load balancing and blocking are
in test_core.py (the socket core's acceptance tests use them)."""

from __future__ import annotations

from gsp.testing import ProtocolSuite


class TestPushProtocol(ProtocolSuite):
    protocol, peer = "push", "pull"
    number, peer_number = 0x50, 0x51
    can_recv = False
    send_blocks = True  # a message waits for a peer to take it


class TestPullProtocol(ProtocolSuite):
    protocol, peer = "pull", "push"
    number, peer_number = 0x51, 0x50
    can_send = False
