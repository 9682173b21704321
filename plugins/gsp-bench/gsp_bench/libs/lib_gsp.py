"""gsp itself, on gevent greenlets: the library the others are compared to.

Only the top-level package is used (``gsp.socket``), as an application would.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable

from .. import tls
from .base import Lib, SPLib, cpu_between, opened
from .loops import cpu_seconds, echo_forever, process_cpu
from .runtime import Greenlets


class Gsp(SPLib):
    name = "gsp"
    settle = 0.05
    conns_dialers = Lib.conns_dialers_pooled
    extra: dict[str, Any] = {}  # options every socket gets (GspSpin's recv_spin)

    def __init__(self) -> None:
        import gsp
        self.gsp = gsp
        self.greenlets = Greenlets()
        super().__init__(self.greenlets)

    def _open(self, kind: str, timeout: float | None = None) -> Any:
        # No size limit (the 1 MiB runs); a sender may take its time to flush at close.
        options: dict[str, Any] = {"max_recv_size": 0, **self.extra}
        if kind == "push":
            options["linger"] = 30
        if timeout is not None:
            options["recv_timeout"] = timeout
        return self.gsp.socket(kind, **options)

    def _dial_how(self, block: bool | None) -> dict[str, Any]:
        return {"fail_fast": block is True, "background": block is False}

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        s = self._open(kind)
        try:
            if tls.secure(url):
                f = tls.files()
                s.listen(url, tls_cert_file=f.cert, tls_key_file=f.key)
            else:
                s.listen(url)
        except BaseException:
            s.close()
            raise
        return s, s.listeners[0].url

    def _dial_tls(self, s: Any, url: str) -> dict[str, Any]:
        return {"tls_ca_file": tls.files().ca} if tls.secure(url) else {}  # (it names 127.0.0.1)

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        g = self.greenlets.spawn(echo_forever, listening.send, listening.recv)
        return lambda: g.kill()

    def requesters(self, stack: ExitStack, url: str, clients: int) -> list[Any]:
        """Concurrent requesters as gsp would write them: one REQ socket (one connection) and a
        context per client greenlet, so the requests in flight share reads and writes."""
        s: Any = opened(stack, self.dial("req", url, block=True))
        return [s.open_context() for _ in range(clients)]

    def spread_requesters(self, stack: ExitStack, url: str, clients: int,
                          conns: int) -> list[Any]:
        """``clients`` contexts spread over ``conns`` REQ sockets (connections) in turn."""
        socks: list[Any] = [opened(stack, self.dial("req", url, block=True))
                            for _ in range(min(conns, clients))]
        return [socks[i % len(socks)].open_context() for i in range(clients)]

    def rep_server_procs(self, ctl: Any, url: str, procs: int) -> None:
        """``procs`` worker processes echoing on one tcp address: :class:`gsp.Prefork` (forked
        now, before this process's hub has run anything), supervised until "stop"."""
        if procs == 1:
            return super().rep_server_procs(ctl, url, procs)

        def serve(sock: Any, worker: Any) -> None:
            echo_forever(sock.send, sock.recv)  # until the drain on "stop" closes it

        with self.gsp.Prefork("rep", url, serve, procs=procs, drain_timeout=5,
                              max_recv_size=0) as server:
            server.start()
            ctl.ready(url=server.url, pids=list(server.pids.values()))

            def cpu() -> float:  # the supervisor's and every worker's
                return cpu_seconds() + sum(map(process_cpu, server.pids.values()))

            cpu_between(ctl, cpu, lambda: server.supervise(timeout=0.01))
            while (word := ctl.poll()) != "stop":
                if word is None:
                    server.supervise(timeout=0.05)

    def pipes(self, listening: Any) -> int | None:
        return len(listening.pipes)

    def storm_listener(self, url: str) -> tuple[str, Callable[[], int], Callable[[], None]]:
        """A pull socket's listener, every option at its default; what it disposed of: the
        connections whose handshake failed or that failed at accept (reset in the backlog)."""
        s = self._open("pull")
        lst = s.listen(url)

        def disposed() -> int:
            st = lst.stats
            return int(st["handshake_failures"] + st["accept_failures"] + st["handshakes_shed"])

        return lst.url, disposed, s.close


#: ``gsp bench --spin``'s default: the seconds of ``recv_spin`` that ``gsp-spin`` sets.
SPIN = 200e-6
SPIN_ENV = "GSP_BENCH_SPIN"


class GspSpin(Gsp):
    """gsp in its low-latency mode: every socket with ``recv_spin`` (``--spin`` seconds, carried
    to the workers in ``GSP_BENCH_SPIN``; 200 µs unless told)."""

    name = "gsp-spin"

    def __init__(self) -> None:
        import os
        self.extra = {"recv_spin": float(os.environ.get(SPIN_ENV, SPIN))}
        super().__init__()
