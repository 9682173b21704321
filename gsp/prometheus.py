"""gsp's statistics as Prometheus metrics (the ``gevent-sp[prometheus]`` extra).

``gsp.prometheus.register()`` adds a collector to ``prometheus_client``'s default registry (or
the one given); every scrape then reads :func:`gsp.stats` once — nothing is counted or stored
between scrapes, so the collector costs the sockets nothing. Metric names and labels are listed
in docs/stats.md. Per-pipe counters are not exported (pipe ids come and go: one time series
each would only pile up); :func:`gsp.stats` has them.

Scrape from the gevent thread that owns the sockets: serve ``prometheus_client.make_wsgi_app()``
from a ``gevent.pywsgi`` server, or call ``start_http_server`` after
``gevent.monkey.patch_all()`` (its server thread is then a greenlet).
"""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING, Any, Iterator

try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
except ImportError as exc:  # the extra is not installed
    raise ImportError("gsp.prometheus needs prometheus_client: "
                      "pip install \"gevent-sp[prometheus]\"") from exc

import gsp

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["GspCollector", "register"]

_SOCKET = ("socket", "protocol")
_ENDPOINT = ("socket", "protocol", "url", "endpoint")

# stats key -> (metric name, help); counters get prometheus_client's "_total" suffix
_TRAFFIC = {
    "messages_received": ("messages_received", "Messages received (headers and bodies)"),
    "messages_sent": ("messages_sent", "Messages handed to the transport"),
    "bytes_received": ("bytes_received", "Bytes of the messages received (header + body)"),
    "bytes_sent": ("bytes_sent", "Bytes of the messages sent (header + body)"),
}
_SOCKET_COUNTERS = {  # sockets and endpoints (these with "endpoint_" in front)
    **_TRAFFIC,
    "pipes_attached": ("pipes_attached", "Pipes that attached (connections that carried traffic)"),
    "pipes_detached": ("pipes_detached", "Pipes that went away after attaching"),
    "pipes_rejected": ("pipes_rejected", "Pipes rejected by the protocol or a pipe hook"),
    "pipes_stalled": ("pipes_stalled", "Pipes closed because a message stopped arriving (FrameStalled)"),
    "pipes_refused_full": ("pipes_refused_full",
                           "Connections closed for want of room: the socket was at max_pipes"),
}
_GAUGES = {
    "pipes": ("pipes", "Pipes attached now"),
    "send_queue": ("send_queue_messages", "Messages queued on the pipes' send queues now"),
    "recv_queue": ("receive_queue_messages", "Messages waiting in the receive queue(s) now"),
    "send_queue_bytes": ("send_queue_bytes", "Bytes waiting in the pipes' send queues now"),
    "recv_queue_bytes": ("receive_queue_bytes", "Bytes waiting in the socket's receive queue now"),
    "handshakes": ("handshakes", "Connections in their SP handshake now (listeners)"),
}
_DIALER_COUNTERS = {
    "dial_attempts": ("dial_attempts", "Connection attempts (connect and handshake)"),
    "reconnects": ("reconnects", "Pipes a dialer made after its first"),
}
_LISTENER_COUNTERS = {
    "accepted": ("accepted_connections", "Connections accepted (before the handshake)"),
    "accept_failures": ("accept_failures", "Errors accepting a connection (e.g. out of fds)"),
}
# stats key prefix -> (metric name, label, help)
_BY_LABEL = {
    "dropped_": ("dropped_messages", "reason", "Messages dropped, by reason"),
    "dial_failures_": ("dial_failures", "reason", "Dial attempts that made no pipe, by reason"),
    "handshake_failures_": ("handshake_failures", "kind", "Failed SP handshakes, by kind"),
    "handshakes_shed_": ("handshakes_shed", "reason",
                         "Connections closed in their handshake to make room, by reason: full "
                         "(max_handshakes), address (max_handshakes_per_address)"),
    "pipes_refused_": ("pipes_refused", "reason",
                       "Connections refused before they became pipes, by reason: full "
                       "(max_pipes), or the kind of admit rule that refused them (address, "
                       "per_address, credentials, certificate, ws_request, callable)"),
}
#: Keys of both sockets and endpoints that _BY_LABEL exports: "endpoint_" in front for these.
_PREFIXED = ("dropped_", "pipes_refused_")
_HISTOGRAMS = {
    "request_rtt_seconds": "req: seconds from a request's send to its reply's arrival",
}
_KNOWN = {*_SOCKET_COUNTERS, *_GAUGES, "dropped", "dropped_oversize", "pipes_refused"}


class _Families:
    """Metric families by name, each sample summed over equal label sets (two dialers of one
    socket to the same URL are one time series)."""

    def __init__(self) -> None:
        self._kinds: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        self._values: dict[str, dict[tuple[str, ...], float]] = {}
        self._histograms: dict[str, HistogramMetricFamily] = {}

    def add(self, kind: str, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        names = tuple(labels)
        self._kinds.setdefault(name, (kind, doc, names))
        series = self._values.setdefault(name, {})
        key = tuple(labels.values())
        series[key] = series.get(key, 0) + value

    def histogram(self, name: str, doc: str, labels: dict[str, str], h: dict[str, Any]) -> None:
        """A histogram snapshot (:class:`gsp.protocol.Histogram`) as one Prometheus series."""
        fam = self._histograms.get(name)
        if fam is None:
            fam = self._histograms[name] = HistogramMetricFamily(f"gsp_{name}", doc,
                                                                 labels=tuple(labels))
        running = list(accumulate(h["counts"]))
        buckets = [(repr(b), n) for b, n in zip(h["bounds"], running)] + [("+Inf", running[-1])]
        fam.add_metric(list(labels.values()), buckets, h["sum"])

    def metrics(self) -> Iterator[Metric]:
        yield from self._histograms.values()
        for name, (kind, doc, names) in self._kinds.items():
            fam: Metric
            if kind == "counter":
                fam = CounterMetricFamily(f"gsp_{name}", doc, labels=names)
            else:
                fam = GaugeMetricFamily(f"gsp_{name}", doc, labels=names)
            for key, value in self._values[name].items():
                fam.add_metric(list(key), value)
            yield fam


def _add_all(out: _Families, stats: dict[str, int], labels: dict[str, str], prefix: str,
             counters: dict[str, tuple[str, str]]) -> None:
    for key, (name, doc) in counters.items():
        if key in stats:
            out.add("counter", prefix + name, doc, labels, stats[key])
    for key, (name, doc) in _GAUGES.items():
        if key in stats:
            out.add("gauge", prefix + name, doc, labels, stats[key])
    for key, n in stats.items():
        for start, (name, label, doc) in _BY_LABEL.items():
            if key.startswith(start):
                out.add("counter", prefix + name if start in _PREFIXED else name, doc,
                        {**labels, label: key[len(start):]}, n)


class GspCollector:
    """A ``prometheus_client`` collector of every open gsp socket, read at scrape time."""

    def collect(self) -> Iterator[Metric]:
        out = _Families()
        for entry in gsp.stats():
            sock = {"socket": str(entry["id"]), "protocol": entry["protocol"]}
            stats: dict[str, int] = entry["stats"]
            _add_all(out, stats, sock, "", _SOCKET_COUNTERS)
            for name, h in entry["histograms"].items():
                out.histogram(name, _HISTOGRAMS.get(name, "A protocol's histogram"), sock, h)
            for key, n in stats.items():
                if key not in _KNOWN and not key.startswith(_PREFIXED):
                    out.add("counter", "protocol_events", "Protocol-specific counters",
                            {**sock, "counter": key}, n)
            for kind, extra in (("dialer", _DIALER_COUNTERS), ("listener", _LISTENER_COUNTERS)):
                ep: dict[str, Any]
                for ep in entry[f"{kind}s"]:
                    labels = {**sock, "url": ep["url"], "endpoint": kind}
                    _add_all(out, ep["stats"], labels, "endpoint_", _SOCKET_COUNTERS)
                    for key, (name, doc) in extra.items():
                        out.add("counter", name, doc, labels, ep["stats"][key])
        yield from out.metrics()


def register(registry: "CollectorRegistry | None" = None) -> GspCollector:
    """Register a :class:`GspCollector` with ``registry`` (default: prometheus_client's global
    ``REGISTRY``) and return it (``registry.unregister(collector)`` removes it)."""
    from prometheus_client import REGISTRY

    collector = GspCollector()
    (REGISTRY if registry is None else registry).register(collector)
    return collector
