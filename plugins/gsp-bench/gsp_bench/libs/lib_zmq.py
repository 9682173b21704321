"""pyzmq, two ways: on native threads ("pyzmq"), and on gevent through ``zmq.green``
("zmq.green"), the way a gevent application would use zmq. One class; only the runtime and the
import differ.
"""

from __future__ import annotations

import importlib
from time import perf_counter
from typing import Any, Callable

from ..ctl import Control, NotApplicable
from .base import Lib, Sock
from .loops import DATA, END, WARM, Fanin, kind
from .runtime import Greenlets, Threads


class Zmq(Lib):
    def __init__(self, green: bool) -> None:
        super().__init__(Greenlets() if green else Threads())
        self.name = "zmq.green" if green else "pyzmq"
        self.zmq: Any = importlib.import_module("zmq.green" if green else "zmq")
        self.ctx = self.zmq.Context()

    @staticmethod
    def _speaks(url: str) -> None:
        if url.split("://", 1)[0] not in ("tcp", "ipc", "inproc"):
            raise NotApplicable("zmq speaks ZMTP over tcp, ipc and inproc, not SP over "
                                + url.split("://", 1)[0])

    def _open(self, kind: str) -> Any:
        zmq = self.zmq
        s = self.ctx.socket(getattr(zmq, kind.upper()))
        s.linger = 30000 if kind == "push" else 0
        return s

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        self._speaks(url)
        s = self._open(kind)
        if url.startswith("tcp://") and url.endswith(":0"):
            url = url[:-1] + "*"
        s.bind(url)
        return s, s.getsockopt(self.zmq.LAST_ENDPOINT).decode()

    def dial(self, kind: str, url: str, block: bool | None = None,
             timeout: float | None = None) -> Sock:
        self._speaks(url)
        s = self._open(kind)  # zmq connects in the background whatever ``block`` says
        if timeout is not None:
            s.rcvtimeo = int(timeout * 1000)
        if kind == "sub":
            s.setsockopt(self.zmq.SUBSCRIBE, b"")
        s.connect(url)
        sock: Sock = s
        return sock

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        listening.rcvtimeo = 100
        return self.serve_echo_polling(listening, self.zmq.Again)

    def subs(self, ctl: Control, url: str, n: int, count: int) -> None:
        """One thread (or greenlet) drains every ready socket: the idiomatic zmq fan-in."""
        zmq = self.zmq
        socks = [self.dial("sub", url) for _ in range(n)]
        fan = Fanin(n)
        poller = zmq.Poller()
        for s in socks:
            poller.register(s, zmq.POLLIN)
        index = {s: i for i, s in enumerate(socks)}
        counts, firsts, lasts = [0] * n, [0.0] * n, [0.0] * n
        said_ready = False
        while fan.done < n:
            for s, _ in poller.poll(1000):
                i = index[s]
                while True:  # the counting is inline, as in sub_loop: this is the hot path
                    try:
                        m = s.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    k = kind(m)
                    if k == DATA:
                        lasts[i] = perf_counter()
                        if not counts[i]:
                            firsts[i] = lasts[i]
                        counts[i] += 1
                    elif k == WARM:
                        fan.warm.add(i)
                    elif k == END:
                        fan.merge(counts[i], firsts[i], lasts[i])
                        poller.unregister(s)
                        break
            if not said_ready and len(fan.warm) == n:
                said_ready = True
                ctl.ready(subs=n)
        ctl.result(**fan.figures(n * count))
        for s in socks:
            s.close()

    def conns_dialers(self, ctl: Control, url: str, n: int) -> None:
        self.ctx.max_sockets = n + 64
        super().conns_dialers(ctl, url, n)
