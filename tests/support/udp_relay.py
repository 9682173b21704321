"""A user-space UDP relay that loses, delays, duplicates and reorders datagrams (no netem here).

Clients send to :attr:`UDPRelay.address`; each client address gets an upstream socket of its own
towards the server, so the server sees one peer per client, and the server's answers go back
through it. Every datagram, either way, is dropped with probability ``loss``, else delayed by
``delay`` ± ``jitter`` seconds (uniform; datagrams overtake one another when their delays cross:
reordering) and sent once more with probability ``dup`` (after its own random delay). The random
source is seeded, so a failing run can be replayed.
"""

from __future__ import annotations

import random
from typing import Any

import gevent
from gevent import socket as gsocket


class UDPRelay:
    def __init__(self, server: tuple[str, int], *, loss: float = 0.0, delay: float = 0.0,
                 jitter: float = 0.0, dup: float = 0.0, seed: int = 1) -> None:
        self.server = server
        self.loss, self.delay, self.jitter, self.dup = loss, delay, jitter, dup
        self.rng = random.Random(seed)
        self.front = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.address: tuple[str, int] = self.front.getsockname()
        self.upstream: dict[Any, Any] = {}
        self.greenlets = [gevent.spawn(self._pump_front)]
        self.counts = {"passed": 0, "lost": 0, "duplicated": 0}

    @property
    def url(self) -> str:
        return f"udp://{self.address[0]}:{self.address[1]}"

    def _later(self, sock: Any, data: bytes, to: Any) -> None:
        if self.rng.random() < self.loss:
            self.counts["lost"] += 1
            return
        copies = 2 if self.rng.random() < self.dup else 1
        self.counts["duplicated"] += copies - 1
        self.counts["passed"] += 1
        for _ in range(copies):
            wait = max(0.0, self.delay + self.rng.uniform(-self.jitter, self.jitter))
            self.greenlets.append(gevent.spawn_later(wait, self._send, sock, data, to))
        if len(self.greenlets) > 4096:
            self.greenlets = [g for g in self.greenlets if not g.dead]

    @staticmethod
    def _send(sock: Any, data: bytes, to: Any) -> None:
        try:
            sock.sendto(data, to)
        except OSError:
            pass

    def _pump_front(self) -> None:
        while True:
            data, client = self.front.recvfrom(70000)
            up = self.upstream.get(client)
            if up is None:
                up = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_DGRAM)
                up.bind(("127.0.0.1", 0))
                self.upstream[client] = up
                self.greenlets.append(gevent.spawn(self._pump_back, up, client))
            self._later(up, data, self.server)

    def _pump_back(self, up: Any, client: Any) -> None:
        while True:
            data, _ = up.recvfrom(70000)
            self._later(self.front, data, client)

    def close(self) -> None:
        gevent.killall(self.greenlets, block=True, timeout=5)
        self.front.close()
        for up in self.upstream.values():
            up.close()

    def __enter__(self) -> "UDPRelay":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
