"""Gevent code beside blocking Spark calls: PySpark's py4j calls block the calling thread's hub,
so receivers and producers that must keep running meanwhile get an OS thread and a hub of their
own."""

from __future__ import annotations

import threading
from typing import Any, Callable

import gevent


class HubThread:
    """Runs ``fn(stop)`` in a daemon OS thread with its own gevent hub, destroyed at the end.

    ``stop`` is a :class:`threading.Event` that :meth:`join` sets; ``fn`` should return soon
    after it is set. :meth:`join` returns ``fn``'s result or raises its exception.
    """

    def __init__(self, fn: Callable[[threading.Event], Any], name: str = "gsp-hub") -> None:
        self.stop = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._fn = fn
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        hub = gevent.get_hub()
        try:
            self.result = self._fn(self.stop)
        except BaseException as exc:
            self.error = exc
        finally:
            hub.destroy(destroy_loop=True)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> Any:
        self.stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"{self._thread.name} did not stop within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result
