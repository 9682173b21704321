"""The control channel between the orchestrating process and a worker: JSON lines both ways.

A worker reports on stdout (``{"ready": {...}}``, ``{"started": true}``, ``{"result": {...}}``,
``{"na": "..."}``, ``{"error": "..."}``) and reads words ("go", "measure", "stop") on stdin.
Reading never blocks the OS thread: workers run gevent hubs or native threads that must keep
going while they wait for the next word.

Roles (see :mod:`gsp_bench.libs`) see the channel only as a :class:`Control`; :class:`Ctl` is
the worker's end, :class:`ConsoleCtl` stands in for the orchestrator when a role runs straight
from the command line (``gsp bench local_thr ...``).
"""

from __future__ import annotations

import json
import os
import select
import sys
from typing import Any, Callable, Protocol


class NotApplicable(Exception):
    """This library has no way to run this workload (e.g. raw sockets have no inproc)."""


class Control(Protocol):
    """What a role may say to, and hear from, whoever runs it."""

    def ready(self, **info: Any) -> None: ...

    def started(self) -> None: ...

    def result(self, **figures: Any) -> None: ...

    def poll(self) -> str | None: ...

    def wait(self, word: str, interval: float = ...) -> None: ...


class Ctl:
    """The worker's end of the channel: reports on stdout, words from stdin."""

    def __init__(self, sleep: Callable[[float], None]) -> None:
        self._sleep = sleep
        self._fd = sys.stdin.fileno()
        self._buf = b""
        self._eof = False

    def _emit(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def ready(self, **info: Any) -> None:
        self._emit({"ready": info})

    def started(self) -> None:
        """A throughput receiver has its first message: the sender may send the rest."""
        self._emit({"started": True})

    def result(self, **figures: Any) -> None:
        self._emit({"result": figures})

    def poll(self) -> str | None:
        """The next word if one has arrived, else None (a closed stdin reads as "stop")."""
        while b"\n" not in self._buf and not self._eof:
            r, _, _ = select.select([self._fd], [], [], 0)  # timeout 0: never blocks the hub
            if not r:
                return None
            chunk = os.read(self._fd, 4096)
            if not chunk:
                self._eof = True
            self._buf += chunk
        if b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            return line.decode().strip()
        return "stop" if self._eof else None

    def wait(self, word: str, interval: float = 0.005) -> None:
        """Sleep (the library's way: gevent or thread) until ``word`` or "stop" arrives."""
        while True:
            got = self.poll()
            if got == word or got == "stop":
                return
            if got is None:
                self._sleep(interval)


class ConsoleCtl:
    """Stands in for the orchestrator when a role runs straight from the command line: nobody
    sends words, so every wait ends at once (a sender's linger flushes what is still queued)."""

    def __init__(self) -> None:
        self.figures: dict[str, Any] = {}

    def ready(self, **info: Any) -> None:
        if "url" in info:
            print(f"listening on {info['url']}", file=sys.stderr, flush=True)

    def started(self) -> None:
        pass

    def result(self, **figures: Any) -> None:
        self.figures = figures

    def poll(self) -> str | None:
        return "stop"

    def wait(self, word: str, interval: float = 0.0) -> None:
        pass
