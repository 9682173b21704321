"""The queue of connections a listener has accepted and its socket has not taken yet (inproc://
and udp://, whose connections do not come from a listening OS socket): ``accept`` takes the
next, ``close`` closes the queue and every connection still waiting in it."""

from __future__ import annotations

from typing import TypeVar

from ..chan import Chan
from ..errors import Closed
from ..transport import Connection

C = TypeVar("C", bound=Connection)


def next_accepted(queue: Chan[C]) -> C:
    """The next connection (waiting for one); :class:`~gsp.errors.Closed` once the listener
    closed the queue."""
    try:
        return queue.recv()
    except Closed:
        raise Closed("listener closed") from None


def close_queued(queue: Chan[C]) -> None:
    """Close ``queue`` and each connection left in it (no accept will take them)."""
    queue.close()
    for conn in queue.drain(1 << 30):
        conn.close()
