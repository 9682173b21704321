"""Statistics: what the core counts, the snapshots users read, and the list of open sockets.

Nothing here runs per message. A pipe's reader and writer add whole batches to four counters
on the pipe (messages and bytes, in and out; the direct-write bypass adds its one message); a
socket or an endpoint keeps a *tally* of the pipes it lost (their traffic, folded in when they
go) and of its own events (dial attempts, handshake failures, ...), and a snapshot adds up the
tally and the live pipes at the time it is taken. docs/stats.md lists every key.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Sequence, cast

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

if TYPE_CHECKING:
    from ..message import Message
    from .endpoints import Dialer, Listener
    from .pipe import Pipe
    from .socket import Socket

__all__ = ["sockets", "stats"]

#: The traffic of a pipe, in the order of its counters (``Pipe._in_msgs`` ... ``_out_bytes``).
TRAFFIC = ("messages_received", "bytes_received", "messages_sent", "bytes_sent")
#: Handshake failures by kind, counted by listeners and dialers.
HANDSHAKE_KINDS = ("wrong_protocol", "timeout", "tls", "refused", "malformed", "closed", "other")
#: Why a dial attempt made no pipe.
DIAL_REASONS = ("refused", "timeout", "handshake", "rejected", "other")

_open: "weakref.WeakValueDictionary[int, Socket]" = weakref.WeakValueDictionary()
_socket_ids = itertools.count(1)
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
                          "pipes_stalled", "pipes_refused_full", *extra), 0)


def dialer_tally() -> dict[str, int]:
    return tally("dial_attempts", "dial_failures", *(f"dial_failures_{r}" for r in DIAL_REASONS),
                 *_handshake_keys())


def listener_tally() -> dict[str, int]:
    return tally("accepted", "accept_failures", "accept_waits", *_handshake_keys())


def _handshake_keys() -> tuple[str, ...]:
    return ("handshake_failures", *(f"handshake_failures_{k}" for k in HANDSHAKE_KINDS))


def pipe_gone(sock: "Socket", pipe: "Pipe") -> None:
    """Fold a pipe that is gone into its socket's and its endpoint's tallies."""
    traffic = (pipe._in_msgs, pipe._in_bytes, pipe._out_msgs, pipe._out_bytes)
    event = "pipes_detached" if pipe.attached else "pipes_rejected"
    oversize = int(isinstance(pipe.error, MessageTooLarge))
    stalled = int(isinstance(pipe.error, FrameStalled))
    ep = pipe.dialer or pipe.listener
    for t in (sock._tally, None if ep is None else ep._tally):
        if t is not None:
            for key, n in zip(TRAFFIC, traffic):
                t[key] += n
            t[event] += 1
            t["dropped_oversize"] += oversize
            t["pipes_stalled"] += stalled


def pipe_refused(sock: "Socket", ep: "Dialer | Listener") -> None:
    """Count a connection closed for want of room (``max_pipes``) on its socket and endpoint."""
    sock._tally["pipes_refused_full"] += 1
    ep._tally["pipes_refused_full"] += 1


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
def pipe_stats(pipe: "Pipe") -> dict[str, int]:
    return {"messages_received": pipe._in_msgs, "bytes_received": pipe._in_bytes,
            "messages_sent": pipe._out_msgs, "bytes_sent": pipe._out_bytes,
            "send_queue": len(pipe._q) + pipe._writing, "send_queue_bytes": pipe._q.queued_bytes,
            "dropped_oversize": int(isinstance(pipe.error, MessageTooLarge))}


def _owner_stats(t: dict[str, int], pipes: Iterable["Pipe"]) -> dict[str, int]:
    out = dict(t)
    mi = bi = mo = bo = queued = qbytes = live = 0
    for p in pipes:
        mi += p._in_msgs
        bi += p._in_bytes
        mo += p._out_msgs
        bo += p._out_bytes
        queued += len(p._q) + p._writing
        qbytes += p._q.queued_bytes
        live += p.attached and not p.closed
    out["messages_received"] += mi
    out["bytes_received"] += bi
    out["messages_sent"] += mo
    out["bytes_sent"] += bo
    out["pipes"] = live
    out["pipes_attached"] = out["pipes_detached"] + live
    out["send_queue"] = queued
    out["send_queue_bytes"] = qbytes
    return out


def socket_stats(sock: "Socket") -> dict[str, int]:
    out = _owner_stats(sock._tally, list(sock._pipes.values()))
    proto = sock._proto
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


def dialer_stats(d: "Dialer") -> dict[str, int]:
    out = _owner_stats(d._tally, _pipes_of(d))
    out["reconnects"] = max(out["pipes_attached"] - 1, 0)
    return out


def listener_stats(lst: "Listener") -> dict[str, int]:
    out = _owner_stats(lst._tally, _pipes_of(lst))
    out["handshakes"] = lst.handshakes
    return out


def _pipes_of(ep: "Dialer | Listener") -> list["Pipe"]:
    return [p for p in list(ep.socket._pipes.values()) if p.dialer is ep or p.listener is ep]


# -- every open socket ----------------------------------------------------------------------------
def register(sock: "Socket") -> int:
    """A new socket's id (1, 2, ... in this process); it is listed until closed or collected."""
    sid = next(_socket_ids)
    _open[sid] = sock
    return sid


def endpoint_id() -> int:
    return next(_endpoint_ids)


def forget(sock: "Socket") -> None:
    _open.pop(sock.id, None)


def sockets() -> list["Socket"]:
    """Every open socket of this process, oldest first (closed or garbage-collected sockets are
    not listed; the list holds them only weakly)."""
    refs = _open.valuerefs()  # one C-level copy: safe while sockets come and go
    found = [s for s in (r() for r in refs) if s is not None and not s.closed]
    return sorted(found, key=lambda s: s.id)


def stats() -> list[dict[str, Any]]:
    """A snapshot of every open socket: ``{"id", "protocol", "raw", "stats", "histograms",
    "pipes", "dialers", "listeners"}``, where ``stats`` is ``Socket.stats``, ``histograms``
    ``Socket.histograms``, and each pipe, dialer and listener is a
    dict of its labels (``id``, ``url``, ...) and its own ``stats`` (see docs/stats.md)."""
    return [_socket_entry(s) for s in sockets()]


def _socket_entry(sock: "Socket") -> dict[str, Any]:
    pipes = []
    for p in list(sock._pipes.values()):
        ep = p.dialer or p.listener
        kind = "dialer" if p.dialer is not None else "listener" if ep is not None else None
        pipes.append({"id": p.id, "socket": sock.id, "endpoint": kind,
                      "url": None if ep is None else ep.url, "remote_address": p.remote_address,
                      "stats": p.stats})
    return {"id": sock.id, "protocol": sock.protocol, "raw": sock.raw, "stats": sock.stats,
            "histograms": sock.histograms, "pipes": pipes,
            "dialers": [{"id": d.id, "socket": sock.id, "url": d.url, "stats": d.stats}
                        for d in sock.dialers],
            "listeners": [{"id": lst.id, "socket": sock.id, "url": lst.url, "stats": lst.stats}
                          for lst in sock.listeners]}
