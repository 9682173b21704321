"""push and pull through the protocol conformance kit; their load balancing and blocking are
in test_core.py (the socket core's acceptance tests use them)."""

from __future__ import annotations

from typing import Any

import pytest

import gsp
from gsp.testing import ProtocolSuite, wait_for


class TestPushProtocol(ProtocolSuite):
    protocol, peer = "push", "pull"
    number, peer_number = 0x50, 0x51
    can_recv = False
    send_blocks = True  # a message waits for a peer to take it


class TestPullProtocol(ProtocolSuite):
    protocol, peer = "pull", "push"
    number, peer_number = 0x51, 0x50
    can_send = False


def test_a_pull_that_hangs_up_hands_what_it_never_got_to_the_other_pulls(gsp_socket: Any) -> None:
    # push's promise: an accepted message goes to a pull unless it was written into a
    # connection that then ended. a never reads: its queue, then both TCP buffers fill, then
    # the push's queue for it (send_buffer 8). Then b dials in and a hangs up: the 8 messages
    # still queued for a, never written, go to b, once each, in order (stats["requeued"]).
    a = gsp_socket("pull", recv_buffer=1)
    b = gsp_socket("pull", recv_timeout=5)
    push = gsp_socket("push", send_buffer=8, send_timeout=5)
    push.dial(a.listen("tcp://127.0.0.1:0").url, fail_fast=True)
    wait_for(lambda: push.pipes and a.pipes, what="the pipe to a")
    body = b"x" * 65536
    n = 0
    misses = 0
    while misses < 2:  # full: two sends in a row found no room in 0.5 s (the writer writes
        try:           # while a send waits, until the kernel takes no more)
            push.send(b"%06d" % n + body, timeout=0.5)
            n, misses = n + 1, 0
        except gsp.Timeout:
            misses += 1  # (not accepted: its number is sent again)
        assert n < 10_000, "a pull that never reads took 650 MB?"
    assert push.pipes[0].stats["send_queue"] >= 8 and push.stats["requeued"] == 0
    push.dial(b.listen("tcp://127.0.0.1:0").url, fail_fast=True)
    wait_for(lambda: len(push.pipes) == 2, what="the pipe to b")
    a.close()
    got = [int(b.recv()[:6]) for _ in range(8)]
    assert got == list(range(n - 8, n)) and push.stats["requeued"] == 8
    push.send(b"%06d" % n + body)  # and b takes the new ones too
    assert int(b.recv()[:6]) == n
    with pytest.raises(gsp.Timeout):
        b.recv(timeout=0.3)  # nothing twice
