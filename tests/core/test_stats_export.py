"""Statistics seen from outside: gsp.sockets()/gsp.stats() listings, a protocol's own
counters, and the Prometheus collector (gsp.prometheus)."""

from __future__ import annotations

import gc
import subprocess
import sys
from typing import Callable

import gsp
from gsp.message import Message
from gsp.protocol import Protocol, ProtocolSpec
from gsp.testing import WAIT, wait_for
from tests.support import HDR_REQ, TCP, plugged_protocols, raw_connect

Mk = Callable[..., gsp.Socket]


# -- every socket --------------------------------------------------------------------------------

def test_sockets_lists_open_sockets_and_forgets_closed_ones(gsp_socket: Mk):
    a, b = gsp_socket("pull"), gsp_socket("push")
    assert b.id > a.id > 0
    assert [s for s in gsp.sockets() if s in (a, b)] == [a, b]
    c = gsp.socket("pair")
    assert c in gsp.sockets()
    c.close()
    assert c not in gsp.sockets()
    ids = {s.id for s in gsp.sockets()}
    d = gsp.socket("pair")  # never closed, only dropped: collected, it is gone from the list
    did = d.id
    assert did in {s.id for s in gsp.sockets()}
    del d
    gc.collect()
    assert {s.id for s in gsp.sockets()} == ids


def test_stats_lists_every_socket_with_its_pipes_and_endpoints(gsp_socket: Mk):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push")
    lst = pull.listen(TCP)
    dialer = push.dial(lst.url, fail_fast=True)
    push.send(b"hello")
    assert pull.recv() == b"hello"
    listing = {e["id"]: e for e in gsp.stats()}
    p, q = listing[pull.id], listing[push.id]
    assert (p["protocol"], p["raw"], q["protocol"]) == ("pull", False, "push")
    assert p["stats"]["messages_received"] == 1 and p["stats"]["bytes_received"] == 5
    [lentry] = p["listeners"]
    assert (lentry["id"], lentry["url"], lentry["socket"]) == (lst.id, lst.url, pull.id)
    assert lentry["stats"]["accepted"] == 1 and p["dialers"] == []
    [dentry] = q["dialers"]
    assert (dentry["id"], dentry["url"]) == (dialer.id, lst.url) and dentry["id"] != lst.id
    assert dentry["stats"]["dial_attempts"] == 1
    [pipe] = p["pipes"]
    assert (pipe["id"], pipe["endpoint"], pipe["url"]) == (pull.pipes[0].id, "listener", lst.url)
    assert pipe["remote_address"] == pull.pipes[0].remote_address
    assert pipe["stats"]["messages_received"] == 1
    assert q["pipes"][0]["endpoint"] == "dialer"
    pull.close()
    assert pull.id not in {e["id"] for e in gsp.stats()}


def test_gsp_exports_stats_lazily():
    code = ("import sys, gsp; assert 'gevent' not in sys.modules; "
            "assert callable(gsp.stats) and callable(gsp.sockets); print(gsp.stats())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# -- Prometheus ----------------------------------------------------------------------------------

def test_prometheus_collector(gsp_socket: Mk):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import gsp.prometheus

    registry = CollectorRegistry()
    collector = gsp.prometheus.register(registry)
    pull = gsp_socket("pull", recv_timeout=WAIT, handshake_timeout=0.2)
    push = gsp_socket("push")
    sub = gsp_socket("sub")
    lst = pull.listen(TCP)
    push.dial(lst.url, fail_fast=True)
    wait_for(lambda: pull.pipes, what="the pipe")
    push.send(b"abc")
    push.send(b"defgh")
    assert pull.recv() + pull.recv() == b"abcdefgh"
    wrong = raw_connect(lst.url)
    try:
        wrong.sendall(HDR_REQ)  # a REQ is no peer of pull's: wrong protocol
        wait_for(lambda: lst.stats["handshake_failures"] == 1, what="the failed handshake")
    finally:
        wrong.close()
    wait_for(lambda: push.stats["messages_sent"] == 2, what="the sends counted")

    samples = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def value(name: str, sock: gsp.Socket, **labels: str) -> float:
        key = {"socket": str(sock.id), "protocol": sock.protocol, **labels}
        return samples[(name, tuple(sorted(key.items())))]

    assert value("gsp_messages_received_total", pull) == 2
    assert value("gsp_bytes_received_total", pull) == 8
    assert value("gsp_messages_sent_total", push) == 2
    assert value("gsp_bytes_sent_total", push) == 8
    assert value("gsp_pipes", pull) == 1
    assert value("gsp_receive_queue_messages", pull) == 0
    assert value("gsp_dropped_messages_total", sub, reason="no_subscriber") == 0
    lurl = {"url": lst.url, "endpoint": "listener"}
    assert value("gsp_endpoint_messages_received_total", pull, **lurl) == 2
    assert value("gsp_accepted_connections_total", pull, **lurl) == 2
    assert value("gsp_handshake_failures_total", pull, kind="wrong_protocol", **lurl) == 1
    assert value("gsp_handshake_failures_total", pull, kind="timeout", **lurl) == 0
    durl = {"url": lst.url, "endpoint": "dialer"}
    assert value("gsp_dial_attempts_total", push, **durl) == 1
    assert value("gsp_dial_failures_total", push, reason="refused", **durl) == 0
    assert value("gsp_reconnects_total", push, **durl) == 0
    assert not [k for k in samples if k[0].startswith("gsp_") and "pipe" in dict(k[1])]
    registry.unregister(collector)
    assert b"gsp_" not in generate_latest(registry)


def test_prometheus_exports_a_protocols_own_counters(gsp_socket: Mk):
    from prometheus_client import CollectorRegistry, generate_latest

    import gsp.prometheus

    s = gsp_socket("pair1", polyamorous=True)
    s.send(b"nobody")  # no peer: dropped_no_peer
    registry = CollectorRegistry()
    registry.register(gsp.prometheus.GspCollector())
    text = generate_latest(registry).decode()
    assert (f'gsp_dropped_messages_total{{protocol="pair1",reason="no_peer",socket="{s.id}"}} 1.0'
            in text)
    assert "protocol_events" not in text  # pair1 counts drops only


def test_prometheus_without_prometheus_client_says_what_to_install():
    code = ("import sys; sys.modules['prometheus_client'] = None; "
            "sys.modules['prometheus_client.core'] = None\n"
            "try:\n    import gsp.prometheus\nexcept ImportError as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == \
        'gsp.prometheus needs prometheus_client: pip install "gevent-sp[prometheus]"', r.stderr


class _Counting(Protocol):
    """A plugin protocol with counters of its own: a bare ``dropped`` and an event count."""

    def __init__(self, handle, raw):
        super().__init__(handle, raw)
        self.stats.update(dropped=0, widgets=0)

    def send(self, msg: Message, timeout: float | None) -> None:
        self.stats["dropped"] += 1
        self.stats["widgets"] += 2


def test_a_protocols_own_counters_and_a_bare_dropped():
    from prometheus_client import CollectorRegistry, generate_latest

    import gsp.prometheus

    with plugged_protocols(ProtocolSpec("counting", 0x7FF0, "counting", 0x7FF0, _Counting)):
        with gsp.socket("counting") as s:
            s.send(b"a")
            s.send(b"b")
            st = s.stats
            assert (st["dropped"], st["dropped_other"], st["widgets"]) == (2, 2, 4)
            registry = CollectorRegistry()
            gsp.prometheus.register(registry)
            text = generate_latest(registry).decode()
            assert (f'gsp_dropped_messages_total{{protocol="counting",reason="other",'
                    f'socket="{s.id}"}} 2.0') in text
            assert (f'gsp_protocol_events_total{{counter="widgets",protocol="counting",'
                    f'socket="{s.id}"}} 4.0') in text

