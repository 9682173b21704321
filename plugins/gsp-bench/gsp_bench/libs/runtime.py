"""How a library runs things side by side, the way its users would: gevent greenlets (gsp,
zmq.green, raw gevent) or native threads (pynng, pyzmq). The roles start helpers, wait for them,
sleep and signal only through a :class:`Runtime`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Protocol


class Event(Protocol):
    def set(self) -> Any: ...

    def wait(self) -> Any: ...


class Runtime:
    """Start a task, wait for it, sleep, make an event."""

    def spawn(self, fn: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError

    def join(self, task: Any) -> Any:
        """The task's value; its exception is raised here."""
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def event(self) -> Event:
        raise NotImplementedError


class Greenlets(Runtime):
    def __init__(self) -> None:
        import gevent
        import gevent.event
        self.gevent = gevent
        self._event = gevent.event.Event

    def spawn(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.gevent.spawn(fn, *args)

    def join(self, task: Any) -> Any:
        return task.get()

    def sleep(self, seconds: float) -> None:
        self.gevent.sleep(seconds)

    def event(self) -> Event:
        ev: Event = self._event()
        return ev


class Threads(Runtime):
    def spawn(self, fn: Callable[..., Any], *args: Any) -> Any:
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # re-raised by join() in the caller
                box["error"] = exc

        t = threading.Thread(target=run, daemon=True)
        t.box = box  # type: ignore[attr-defined]
        t.start()
        return t

    def join(self, task: Any) -> Any:
        task.join()
        if "error" in task.box:
            raise task.box["error"]
        return task.box.get("value")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def event(self) -> Event:
        return threading.Event()
