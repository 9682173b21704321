"""REQ/REP statistics: per req socket and context, requests resent, timed out and
canceled, and a round-trip time histogram; per rep, replies dropped because the requester's pipe
was gone. Read as snapshots (``stats``, ``histograms``, :func:`gsp.stats`) and exported by
:mod:`gsp.prometheus` (a Prometheus histogram)."""

from __future__ import annotations

import time
from typing import Callable

import pytest

import gsp
from gsp.protocol import LATENCY_BOUNDS, Histogram
from gsp.testing import WAIT, wait_for
from tests.support import TCP

Mk = Callable[..., gsp.Socket]


def _req_rep(gsp_socket: Mk, **req_opts: object) -> tuple[gsp.Socket, gsp.Socket]:
    rep = gsp_socket("rep", recv_timeout=WAIT)
    req = gsp_socket("req", recv_timeout=WAIT, **req_opts)
    req.dial(rep.listen(TCP).url, fail_fast=True)
    return req, rep


def _echo(req: gsp.Socket | gsp.Context, rep: gsp.Socket, n: int) -> None:
    for i in range(n):
        req.send(b"q%d" % i)
        rep.send(rep.recv())
        assert req.recv() == b"q%d" % i


def test_round_trips_fill_the_histogram_of_the_socket_and_its_context(gsp_socket: Mk) -> None:
    req, rep = _req_rep(gsp_socket)
    t0 = time.perf_counter()
    _echo(req, rep, 20)
    took = time.perf_counter() - t0
    h = req.histograms["request_rtt_seconds"]
    assert h["count"] == 20 and sum(h["counts"]) == 20
    assert tuple(h["bounds"]) == LATENCY_BOUNDS and len(h["counts"]) == len(LATENCY_BOUNDS) + 1
    assert 0 < h["sum"] <= took  # each round trip measured inside the loop's time
    entry = next(e for e in gsp.stats() if e["id"] == req.id)
    assert entry["histograms"] == req.histograms
    assert rep.histograms == {}  # rep keeps none
    assert req.stats["requests_resent"] == req.stats["requests_timed_out"] == 0


def test_contexts_count_their_own_and_the_socket_all_even_after_a_close(gsp_socket: Mk) -> None:
    req, rep = _req_rep(gsp_socket)
    a, b = req.open_context(), req.open_context()
    _echo(a, rep, 3)
    _echo(b, rep, 2)
    _echo(req, rep, 1)
    assert a.histograms["request_rtt_seconds"]["count"] == 3
    assert b.histograms["request_rtt_seconds"]["count"] == 2
    assert req.histograms["request_rtt_seconds"]["count"] == 6
    a.send(b"x")
    a.close()  # an unanswered request closed with its context: canceled, and its counts kept
    assert a.stats["requests_canceled"] == 1
    assert req.histograms["request_rtt_seconds"]["count"] == 6
    assert req.stats["requests_canceled"] == 1


def test_resends_timeouts_and_cancellations_are_counted(gsp_socket: Mk) -> None:
    req, rep = _req_rep(gsp_socket, resend_time=0.05)
    ctx = req.open_context()
    ctx.send(b"nobody answers")
    assert rep.recv() == b"nobody answers"
    assert rep.recv() == b"nobody answers"  # resent after resend_time
    wait_for(lambda: ctx.stats["requests_resent"] >= 1, what="the resend counted")
    with pytest.raises(gsp.Timeout):
        ctx.recv(timeout=0.01)
    assert ctx.stats["requests_timed_out"] == 1
    req.resend_time = None
    req.send(b"one")
    req.send(b"two")  # cancels "one"
    assert req.stats["requests_canceled"] == 1
    assert req.stats["requests_timed_out"] == 1  # the socket's include the context's
    assert req.stats["requests_resent"] >= 1


def test_rep_counts_a_reply_whose_requester_is_gone(gsp_socket: Mk) -> None:
    req, rep = _req_rep(gsp_socket)
    req.send(b"q")
    assert rep.recv() == b"q"
    req.close()
    wait_for(lambda: not rep.pipes, what="the requester's pipe gone")
    rep.send(b"too late")
    assert rep.stats["dropped_peer_gone"] == 1
    assert rep.stats["dropped"] == 1


def test_a_best_effort_rep_counts_a_gone_requester_as_gone_not_as_a_full_queue(
        gsp_socket: Mk) -> None:
    req, rep = _req_rep(gsp_socket)
    rep.best_effort = True
    req.send(b"q")
    assert rep.recv() == b"q"
    req.close()
    wait_for(lambda: not rep.pipes, what="the requester's pipe gone")
    rep.send(b"too late")
    assert (rep.stats["dropped_peer_gone"], rep.stats["dropped_queue_full"]) == (1, 0)


@pytest.mark.parametrize("best_effort", [False, True])
def test_raw_rep_counts_a_reply_routed_to_a_gone_pipe(gsp_socket: Mk, best_effort: bool) -> None:
    rep = gsp_socket("rep", raw=True, recv_timeout=WAIT, best_effort=best_effort)
    req = gsp_socket("req", recv_timeout=WAIT)
    req.dial(rep.listen(TCP).url, fail_fast=True)
    req.send(b"q")
    m = rep.recv_msg()
    req.close()
    wait_for(lambda: not rep.pipes, what="the requester's pipe gone")
    rep.send_msg(gsp.Message(b"too late", m.header))
    assert (rep.stats["dropped_peer_gone"], rep.stats["dropped_queue_full"]) == (1, 0)


def test_prometheus_exports_the_round_trip_histogram_and_the_counters(gsp_socket: Mk) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import gsp.prometheus

    registry = CollectorRegistry()
    collector = gsp.prometheus.register(registry)
    try:
        req, rep = _req_rep(gsp_socket)
        _echo(req, rep, 5)
        req.send(b"a")
        req.send(b"b")  # one canceled
        samples = {}
        for fam in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in fam.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        sock = {"socket": str(req.id), "protocol": "req"}
        inf = tuple(sorted({**sock, "le": "+Inf"}.items()))
        assert samples[("gsp_request_rtt_seconds_bucket", inf)] == 5
        assert samples[("gsp_request_rtt_seconds_count", tuple(sorted(sock.items())))] == 5
        assert samples[("gsp_request_rtt_seconds_sum", tuple(sorted(sock.items())))] > 0
        buckets = sorted((float(dict(k)["le"]), v) for (name, k), v in samples.items()
                         if name == "gsp_request_rtt_seconds_bucket" and dict(k)["socket"] == str(req.id))
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
        canceled = tuple(sorted({**sock, "counter": "requests_canceled"}.items()))
        assert samples[("gsp_protocol_events_total", canceled)] == 1
    finally:
        registry.unregister(collector)


def test_histogram_buckets_sums_and_checks() -> None:
    h = Histogram((0.001, 0.01))
    for x in (0.0005, 0.001, 0.005, 0.5):
        h.observe(x)
    assert h.counts == [2, 1, 1] and h.count == 4 and h.sum == pytest.approx(0.5065)
    total = Histogram.total([h, h], bounds=(0.001, 0.01))
    assert total.counts == [4, 2, 2] and total.snapshot()["count"] == 8
    with pytest.raises(ValueError, match="increase"):
        Histogram((0.01, 0.001))
    with pytest.raises(ValueError, match="increase"):
        Histogram(())
    with pytest.raises(ValueError, match="bounds"):
        Histogram((1.0,)).add(h)
