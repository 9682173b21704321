"""A peer black-holed at the packet level is noticed by TCP keepalive, and the dialer redials.

    unshare -rn python tests/tools/blackhole_probe.py [--tls CA CERT KEY]

Run it only in a fresh network namespace (``unshare -rn``, or ``unshare -n`` as root): it
rewires that namespace's loopback, and refuses to start where ``lo`` is already up or other
interfaces exist. It brings ``lo`` up and connects gsp pair sockets over 127.0.0.1: per scheme
(tcp, and tls+tcp given certificate files) one pair with ``tcp_keepalive_idle`` /
``tcp_keepalive_interval`` / ``tcp_keepalive_count`` 1 / 1 / 2 and one with ``tcp_keepalive``
off. A message crosses each, then every pipe is left idle (nothing unacknowledged, so the kernel
is on its keepalive path, not retransmitting) and the black hole starts: a tc filter on ``lo``'s
ingress whose classic-BPF program answers TC_ACT_SHOT drops every packet after it was sent, so
senders see their packets leave and get nothing back -- no FIN, no RST, no ICMP, no local error.
Once every keepalive pipe ended (or after ``--limit`` s) the filter goes and each keepalive
dialer must redial and deliver a message.

It prints one JSON object: per link, ``ended_after`` (s from the black hole's start to the
dialer's ``DETACHED`` pipe event, or null), the pipe's ``error`` (type and text) and ``remote``
address, whether the listener's end ended too, ``redial_after`` (s from the heal until a message sent through the new
pipe was received, or null) and, for every link, ``open_when_detected``: whether its first pipe
was still up when the last keepalive pipe ended.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import time
from typing import Any

import gevent
from netns import lo_is_up, tool  # (this directory: the script's own, first on sys.path)

import gsp

KEEPALIVE = {"tcp_keepalive_idle": 1, "tcp_keepalive_interval": 1, "tcp_keepalive_count": 2}
NO_KEEPALIVE = {"tcp_keepalive": False}
#: Drop everything that arrives on lo: tc's classic-BPF ``bytecode`` (one instruction, ``ret #2``)
#: run in direct-action mode, where 2 is TC_ACT_SHOT.
DROP_ALL = ["filter", "add", "dev", "lo", "ingress", "bpf", "da", "bytecode", "1,6 0 0 2"]


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=10)


def check_private_namespace() -> None:
    if socket.if_nameindex() != [(1, "lo")] or lo_is_up():
        raise SystemExit("blackhole_probe: run me in a fresh network namespace "
                         "(unshare -rn python tests/tools/blackhole_probe.py); interfaces here: "
                         f"{socket.if_nameindex()}, lo up: {lo_is_up()}")


class Link:
    """A listening and a dialing pair socket, connected, with one message crossed each way."""

    def __init__(self, scheme: str, options: dict[str, Any], listen_options: dict[str, Any],
                 dial_options: dict[str, Any]) -> None:
        self.server = gsp.socket("pair", recv_timeout=5, send_timeout=5, **options)
        self.client = gsp.socket("pair", recv_timeout=5, send_timeout=5, reconnect_time=0.05,
                                 max_reconnect_time=0.2, **options)
        self.ended_at: float | None = None
        url = self.server.listen(f"{scheme}://127.0.0.1:0", **listen_options).url
        self.client.on_pipe_event(self._event)
        self.client.dial(url, fail_fast=True, **dial_options)
        self.cross(b"hello")
        (self.pipe,) = self.client.pipes
        (self.server_pipe,) = self.server.pipes

    def _event(self, event: gsp.PipeEvent, pipe: gsp.Pipe) -> None:
        if event is gsp.PipeEvent.DETACHED and self.ended_at is None:
            self.ended_at = time.monotonic()

    def cross(self, body: bytes) -> None:
        self.client.send(body)
        assert self.server.recv() == body
        self.server.send(body)
        assert self.client.recv() == body

    def redial(self, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if any(not p.closed for p in self.client.pipes):
                self.cross(b"back")
                return True
            gevent.sleep(0.01)
        return False

    def close(self) -> None:
        self.client.close()
        self.server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tls", nargs=3, metavar=("CA", "CERT", "KEY"),
                    help="also tls+tcp, with these PEM files (CA, server certificate, its key)")
    ap.add_argument("--limit", type=float, default=15.0,
                    help="seconds to wait for the keepalive pipes to end, then for each redial")
    args = ap.parse_args()
    ip, tc = tool("ip"), tool("tc")
    check_private_namespace()
    run(ip, "link", "set", "lo", "up")
    schemes: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {"tcp": ({}, {})}
    if args.tls:
        ca, cert, key = args.tls
        schemes["tls+tcp"] = ({"tls_cert_file": cert, "tls_key_file": key}, {"tls_ca_file": ca})
    links: dict[str, Link] = {}
    try:
        for scheme, (listen_opts, dial_opts) in schemes.items():
            links[scheme] = Link(scheme, KEEPALIVE, listen_opts, dial_opts)
            links[f"{scheme} keepalive off"] = Link(scheme, NO_KEEPALIVE, listen_opts, dial_opts)
        watched = [link for name, link in links.items() if not name.endswith("off")]
        gevent.sleep(0.3)  # every ACK delivered: nothing in flight when the black hole starts
        run(tc, "qdisc", "add", "dev", "lo", "clsact")
        run(tc, *DROP_ALL)
        start = time.monotonic()
        while any(link.ended_at is None for link in watched) and \
                time.monotonic() - start < args.limit:
            gevent.sleep(0.01)
        open_when_detected = {name: not link.pipe.closed for name, link in links.items()}
        run(tc, "qdisc", "del", "dev", "lo", "clsact")
        healed = time.monotonic()
        report: dict[str, Any] = {"keepalive": KEEPALIVE}
        for name, link in links.items():
            report[name] = {"open_when_detected": open_when_detected[name]}
            if link in watched:
                redialed = link.ended_at is not None and link.redial(args.limit)
                report[name].update(
                    ended_after=None if link.ended_at is None else round(link.ended_at - start, 3),
                    error=None if link.pipe.error is None else
                    [type(link.pipe.error).__name__, str(link.pipe.error)],
                    remote=link.pipe.remote_address,
                    server_pipe_ended=link.server_pipe.closed,
                    redial_after=round(time.monotonic() - healed, 3) if redialed else None)
        print(json.dumps(report), flush=True)
    finally:
        for link in links.values():
            link.close()


if __name__ == "__main__":
    main()
