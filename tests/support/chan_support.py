"""Helpers the gsp.chan tests share (test_chan.py, test_chan_select.py, test_chan_interrupts.py):
the type of the ``spawn`` fixture and checks that no waiter is left queued on a channel."""

from __future__ import annotations

from typing import Callable

from gevent import Greenlet

from gsp.chan import Chan

#: The ``spawn`` fixture's type (tests/conftest.py): spawn a greenlet, killed at teardown.
Spawn = Callable[..., Greenlet]


def waiters(ch: Chan) -> tuple[int, int]:
    """(blocked receivers, blocked senders) still queued on ``ch``."""
    return len(ch._recvq), len(ch._sendq)


def assert_clean(*chans: Chan) -> None:
    """No blocked receiver or sender is left queued on any of ``chans``."""
    for ch in chans:
        assert waiters(ch) == (0, 0), f"waiter left behind on {ch!r}"
