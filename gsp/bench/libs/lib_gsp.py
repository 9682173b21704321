"""gsp itself, on gevent greenlets: the library the others are compared to.

Only the top-level package is used (``gsp.socket``), as an application would.
"""

from __future__ import annotations

from typing import Any, Callable

from .base import Lib, Sock
from .loops import echo_forever
from .runtime import Greenlets


class Gsp(Lib):
    name = "gsp"
    settle = 0.05
    conns_dialers = Lib.conns_dialers_pooled

    def __init__(self) -> None:
        import gsp
        self.gsp = gsp
        self.greenlets = Greenlets()
        super().__init__(self.greenlets)

    def _open(self, kind: str, **options: Any) -> Any:
        # No size limit (the 1 MiB runs); a sender may take its time to flush at close.
        options.setdefault("recv_max_size", 0)
        if kind == "push":
            options.setdefault("linger", 30)
        return self.gsp.socket(kind, **options)

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        s = self._open(kind)
        try:
            s.listen(url)
        except BaseException:
            s.close()
            raise
        return s, s.listeners[0].url

    def dial(self, kind: str, url: str, block: bool | None = None,
             timeout: float | None = None) -> Sock:
        s = self._open(kind) if timeout is None else self._open(kind, recv_timeout=timeout)
        try:
            if kind == "sub":
                s.subscribe(b"")
            s.dial(url, block=block)
        except BaseException:
            s.close()
            raise
        sock: Sock = s
        return sock

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        g = self.greenlets.spawn(echo_forever, listening.send, listening.recv)
        return lambda: g.kill()

    def pipes(self, listening: Any) -> int | None:
        return len(listening.pipes)
