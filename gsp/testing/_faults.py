"""A TCP proxy that misbehaves on demand, for fault tests of any stream transport.

``FaultProxy(target)`` listens on 127.0.0.1 and forwards every connection to ``target`` (a
``tcp://host:port`` URL or a ``(host, port)`` pair); dial ``proxy.url`` (or ``proxy.address``
with another scheme) instead of the target. Then:

* ``proxy.delay = 0.05`` — every chunk is passed on that long after it arrived (both ways), as
  over a link with that latency: chunks in flight do not wait for each other;
* ``proxy.jitter = 0.02`` — each chunk's delay varies that much either way, at random (a byte
  stream keeps its order: a chunk never overtakes the one before it);
* ``proxy.blackhole()`` — from now on bytes vanish (read and dropped, both ways): the peers see
  an open connection that carries nothing, as behind a dead router;
* ``proxy.truncate(n)`` — each open connection passes ``n`` more bytes towards the target, then
  both sides are closed (a frame cut in the middle);
* ``proxy.reset()`` — every open connection is reset (RST, no FIN);
* ``proxy.heal()`` — back to forwarding (new connections too).

Connections made after a fault are forwarded normally unless ``proxy.refuse = True``, which
closes them at once. ``close()`` stops everything.
"""

from __future__ import annotations

import random
import socket as _stdsocket
import struct
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import gevent
from gevent import socket as gsocket
from gevent.event import Event
from gevent.pool import Group

__all__ = ["FaultProxy"]

_CHUNK = 65536


class _Link:
    """One proxied connection: the client's socket, the target's, and two pumps."""

    def __init__(self, proxy: "FaultProxy", client: Any, upstream: Any) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.budget: int | None = None  # bytes still let through towards the target
        self.closed = False

    def pump(self, src: Any, dst: Any, to_target: bool) -> None:
        line: deque[tuple[float, bytes]] = deque()  # chunks in flight: (when due, bytes)
        ready = Event()
        writer: gevent.Greenlet | None = None  # passes them on; from the first delay
        last = 0.0
        try:
            while not self.closed:
                data = src.recv(_CHUNK)
                if not data:
                    break
                delay, jitter = self.proxy.delay, self.proxy.jitter
                if delay or jitter or line:
                    due = time.monotonic() + max(delay + random.uniform(-jitter, jitter), 0.0)
                    last = max(due, last)  # never before the chunk ahead of it
                    line.append((last, data))
                    if writer is None:
                        writer = self.proxy._group.spawn(self._deliver, line, ready, dst,
                                                         to_target)
                    ready.set()
                    continue
                if not self._forward(data, dst, to_target):
                    break
        except OSError:
            pass
        if writer is not None:
            line.append((0.0, b""))  # the end, after what is in flight
            ready.set()
            writer.join()
        self.close()

    def _deliver(self, line: "deque[tuple[float, bytes]]", ready: Event, dst: Any,
                 to_target: bool) -> None:
        """Pass on the chunks in flight, each when it is due."""
        try:
            while not self.closed:
                if not line:
                    ready.clear()
                    ready.wait()
                    continue
                due, data = line[0]
                if not data:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    gevent.sleep(wait)
                line.popleft()
                if not self._forward(data, dst, to_target):
                    self.close()
                    return
        except OSError:
            self.close()

    def _forward(self, data: bytes, dst: Any, to_target: bool) -> bool:
        """Send ``data`` on, as the faults allow; False once the link is done."""
        if self.proxy.dropping:
            return True
        if to_target and self.budget is not None:
            data = data[:self.budget]
            self.budget -= len(data)
            dst.sendall(data)
            return self.budget > 0
        dst.sendall(data)
        return True

    def close(self, rst: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        for s in (self.client, self.upstream):
            try:
                if rst:  # SO_LINGER with a zero timeout: close() sends RST instead of FIN
                    s.setsockopt(_stdsocket.SOL_SOCKET, _stdsocket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass
        self.proxy._links.discard(self)


class FaultProxy:
    """See the module docstring."""

    def __init__(self, target: str | tuple[str, int]) -> None:
        if isinstance(target, str):
            parts = urlsplit(target)
            if parts.hostname is None or parts.port is None:
                raise ValueError(f"FaultProxy needs tcp://host:port, not {target!r}")
            target = (parts.hostname, parts.port)
        self.target = target
        self.delay = 0.0
        self.jitter = 0.0
        self.dropping = False
        self.refuse = False
        self._links: set[_Link] = set()
        self._group = Group()
        self._lsock = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_STREAM)
        self._lsock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(128)
        #: ``(host, port)`` the proxy listens on, and the same as a tcp:// URL.
        self.address: tuple[str, int] = self._lsock.getsockname()[:2]
        self.url = f"tcp://{self.address[0]}:{self.address[1]}"
        self._group.spawn(self._accept)

    @property
    def connections(self) -> int:
        """Connections being proxied now."""
        return len(self._links)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._lsock.accept()
            except OSError:
                return
            if self.refuse:
                client.close()
                continue
            self._group.spawn(self._connect, client)

    def _connect(self, client: Any) -> None:
        try:
            upstream = gsocket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        link = _Link(self, client, upstream)
        self._links.add(link)
        self._group.spawn(link.pump, client, upstream, True)
        self._group.spawn(link.pump, upstream, client, False)

    def blackhole(self) -> None:
        """Drop every byte from now on, both ways, keeping connections open."""
        self.dropping = True

    def heal(self) -> None:
        """Forward again, with no delay, and accept new connections."""
        self.dropping = False
        self.refuse = False
        self.delay = 0.0
        self.jitter = 0.0

    def truncate(self, nbytes: int = 3) -> None:
        """Let ``nbytes`` more bytes through towards the target on each open connection, then
        close it (both sides, with FIN)."""
        for link in list(self._links):
            link.budget = nbytes
            if nbytes <= 0:
                link.close()

    def reset(self) -> None:
        """Reset every open connection (RST on both sides)."""
        for link in list(self._links):
            link.close(rst=True)

    def close(self) -> None:
        self._lsock.close()
        for link in list(self._links):
            link.close()
        self._group.kill(block=True)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
