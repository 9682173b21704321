"""Gevent code beside blocking Spark calls: PySpark's py4j calls block the calling thread's hub,
so receivers and producers that must keep running meanwhile get an OS thread and a hub of their
own — a :class:`gsp.blocking.Hub`, gsp's public hub-in-a-thread."""

from __future__ import annotations

import threading
from concurrent.futures import wait
from typing import Any, Callable

from gsp.blocking import Hub


class HubThread:
    """Runs ``fn(stop)`` in a daemon OS thread with its own gevent hub (a
    :class:`gsp.blocking.Hub`), stopped at the end.

    ``stop`` is a :class:`threading.Event` that :meth:`join` sets; ``fn`` should return soon
    after it is set. :meth:`join` returns ``fn``'s result or raises its exception.
    """

    def __init__(self, fn: Callable[[threading.Event], Any], name: str = "gsp-hub") -> None:
        self.stop = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._name = name
        self._hub = Hub(name)
        self._future = self._hub.submit(fn, self.stop)

    def is_alive(self) -> bool:
        return not self._future.done()

    def join(self, timeout: float | None = None) -> Any:
        self.stop.set()
        if not wait([self._future], timeout).done:
            raise TimeoutError(f"{self._name} did not stop within {timeout} s")
        self.error = self._future.exception()
        if self.error is None:
            self.result = self._future.result()
        self._hub.close(timeout)
        if self.error is not None:
            raise self.error
        return self.result
