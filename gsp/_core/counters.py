"""Statistics: what the core counts, the snapshots users read, and the list of open sockets.

Nothing here runs per message. A pipe's reader and writer add whole batches to four counters
on the pipe (messages and bytes, in and out; the direct-write bypass adds its one message); a
socket or an endpoint keeps a *tally* of the pipes it lost (their traffic, folded in when they
go) and of its own events (dial attempts, handshake failures, ...), and a snapshot adds up the
tally and the live pipes at the time it is taken. docs/stats.md lists every key.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Iterable, Sequence, cast
from typing import Protocol as _Typing

from ..admit import REASONS as REFUSE_REASONS
from ..errors import (
    Closed,
    ConnectionBroken,
    ConnectionRefused,
    FrameStalled,
    HandshakeError,
    MessageTooLarge,
    Timeout,
    TLSHandshakeError,
    UpgradeRefused,
    WrongProtocol,
)
from ..transport.admission import SHED_REASONS

if TYPE_CHECKING:
    from ..message import Message
    from ..protocol.interface import Protocol

#: The traffic of a pipe, in the order of its counters (``Pipe._traffic``).
TRAFFIC = ("messages_received", "bytes_received", "messages_sent", "bytes_sent")
#: An owner's counters (a socket's or an endpoint's), by name: see :func:`tally`.
Tally = dict[str, int]
Traffic = tuple[int, int, int, int]
#: Handshake failures by kind, counted by listeners and dialers.
HANDSHAKE_KINDS = ("wrong_protocol", "timeout", "tls", "refused", "malformed", "closed", "other")
#: Why a dial attempt made no pipe.
DIAL_REASONS = ("refused", "timeout", "handshake", "rejected", "other")

_endpoint_ids = itertools.count(1)


_join = b"".join


def size(batch: "Sequence[Message | bytes]") -> int:
    """The bytes (headers and bodies) of a batch of messages, at the least cost per message: a
    burst of small bodies is joined by one C loop (a small copy: ~7 ns a message, against ~16 ns
    for ``sum(map(len, batch))``); Messages are measured inline (~40 ns, against ~80 ns through
    ``Message.__len__``)."""
    if not batch:
        return 0
    first = batch[0]
    if type(first) is bytes:
        if len(batch) == 1:  # a request, a reply: one body
            return len(first)
        if len(batch) > 8 and len(first) <= 128:
            try:
                return len(_join(batch))  # type: ignore[arg-type]  # a Message: TypeError
            except TypeError:
                pass
        return sum(map(len, batch))
    msgs = cast("Sequence[Message]", batch)  # mostly: a body among them raises AttributeError
    try:
        return sum([len(m.header) + len(m.body) for m in msgs])
    except AttributeError:
        return sum(map(len, batch))


# -- tallies: an owner's counters, kept between snapshots ------------------------------------------
def tally(*extra: str) -> dict[str, int]:
    """The counters of an owner of pipes (a socket or an endpoint): the traffic of its pipes that
    are gone, how many went (detached, rejected, closed for an oversize message or a stalled
    one; refused at ``max_pipes``), and ``extra``."""
    return dict.fromkeys((*TRAFFIC, "pipes_detached", "pipes_rejected", "dropped_oversize",
                          "pipes_stalled", "pipes_refused",
                          *(f"pipes_refused_{r}" for r in REFUSE_REASONS), *extra), 0)


def dialer_tally() -> dict[str, int]:
    return tally("dial_attempts", "dial_failures", *(f"dial_failures_{r}" for r in DIAL_REASONS),
                 *_handshake_keys())


def listener_tally() -> dict[str, int]:
    return tally("accepted", "accept_failures", "handshakes_shed",
                 *(f"handshakes_shed_{r}" for r in SHED_REASONS), *_handshake_keys())


def _handshake_keys() -> tuple[str, ...]:
    return ("handshake_failures", *(f"handshake_failures_{k}" for k in HANDSHAKE_KINDS))


def pipe_gone(t: Tally, traffic: Traffic, attached: bool, error: BaseException | None) -> None:
    """Fold a pipe that is gone (its ``traffic``, whether it was ``attached``, the ``error``
    that ended it) into a tally (its socket's, its endpoint's)."""
    for key, n in zip(TRAFFIC, traffic):
        t[key] += n
    t["pipes_detached" if attached else "pipes_rejected"] += 1
    t["dropped_oversize"] += isinstance(error, MessageTooLarge)
    t["pipes_stalled"] += isinstance(error, FrameStalled)


def pipe_refused(sock: Tally, ep: Tally, reason: str = "full") -> None:
    """Count a connection refused on its socket and endpoint, by reason (``full``: for want of
    room, ``max_pipes``; else the ``admit`` rule's, :data:`gsp.admit.REASONS`)."""
    key = f"pipes_refused_{reason}"
    for t in (sock, ep):
        t["pipes_refused"] += 1
        t[key] += 1


def handshake_failed(t: dict[str, int], exc: BaseException) -> None:
    """Count a failed handshake by kind (our own close is no failure)."""
    if isinstance(exc, Closed):
        return
    if isinstance(exc, WrongProtocol):
        kind = "wrong_protocol"
    elif isinstance(exc, TLSHandshakeError):
        kind = "tls"
    elif isinstance(exc, Timeout):
        kind = "timeout"
    elif isinstance(exc, UpgradeRefused):
        kind = "refused"  # an HTTP answer instead of the 101 (ws: origin, ws_authorize, path)
    elif isinstance(exc, HandshakeError):
        kind = "malformed"  # bad magic, version or reserved bytes: not an SP peer
    elif isinstance(exc, ConnectionBroken):
        kind = "closed"  # the peer hung up (a port probe, a TLS peer that gave up)
    else:
        kind = "other"
    t["handshake_failures"] += 1
    t[f"handshake_failures_{kind}"] += 1


def handshake_shed(t: dict[str, int], reason: str) -> None:
    """Count a connection closed in its handshake to make room, by reason (SHED_REASONS)."""
    t["handshakes_shed"] += 1
    t[f"handshakes_shed_{reason}"] += 1


def dial_failed(t: dict[str, int], reason: str) -> None:
    t["dial_failures"] += 1
    t[f"dial_failures_{reason}"] += 1


def connect_reason(exc: BaseException) -> str:
    """Why a dialer's transport could not connect, as a ``dial_failures_<reason>`` key."""
    if isinstance(exc, ConnectionRefused):
        return "refused"
    if isinstance(exc, Timeout):
        return "timeout"
    return "other"


# -- snapshots -------------------------------------------------------------------------------------
class PipeCounts(_Typing):
    """What a snapshot reads of a pipe: its public counters (:meth:`gsp.Pipe.stats`, made by
    :func:`pipe_stats`) and whether it is up."""

    @property
    def stats(self) -> dict[str, int]: ...
    attached: bool
    closed: bool


def pipe_stats(traffic: Traffic, send_queue: tuple[int, int],
               error: BaseException | None) -> dict[str, int]:
    out = dict(zip(TRAFFIC, traffic))
    out["send_queue"], out["send_queue_bytes"] = send_queue
    out["dropped_oversize"] = int(isinstance(error, MessageTooLarge))
    return out


def owner_stats(t: Tally, pipes: Iterable[PipeCounts]) -> dict[str, int]:
    """A snapshot of an owner of pipes: its tally and its live ``pipes`` added up."""
    out = dict(t)
    summed = (*TRAFFIC, "send_queue", "send_queue_bytes")
    out.update(send_queue=0, send_queue_bytes=0)
    live = 0
    for p in pipes:
        counts = p.stats
        for key in summed:
            out[key] += counts[key]
        live += p.attached and not p.closed
    out["pipes"] = live
    out["pipes_attached"] = out["pipes_detached"] + live
    return out


def socket_stats(t: Tally, pipes: Iterable[PipeCounts], proto: "Protocol") -> dict[str, int]:
    out = owner_stats(t, pipes)
    depth = proto.recv_queue_depth()
    if depth is not None:
        out["recv_queue"] = depth
    if proto.recv_queue is not None:
        out["recv_queue_bytes"] = proto.recv_queue.queued_bytes
    for key, n in proto.stats.items():
        if key == "dropped":  # a protocol's own total, without a reason
            key = "dropped_other"
        out[key] = out.get(key, 0) + n
    out["dropped"] = sum(n for key, n in out.items() if key.startswith("dropped_"))
    return out




# -- ids -----------------------------------------------------------------------------------------
def endpoint_id() -> int:
    """A new listener's or dialer's id (1, 2, ... in this process)."""
    return next(_endpoint_ids)
