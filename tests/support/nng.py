"""Helpers for driving pynng (nng, a real independent peer) from gevent tests.

pynng's calls block the OS thread, which would freeze every greenlet (including the gsp peer),
so each blocking call runs on gevent's native threadpool while the hub keeps serving gsp.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import gevent
import pynng


def run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """Run a blocking pynng call on a native thread; this greenlet waits, others run."""
    return gevent.get_hub().threadpool.apply(fn, args, kw)


def spawn(fn: Callable[..., Any], *args: Any, **kw: Any):
    """Start a blocking pynng call on a native thread; ``.get()`` the returned AsyncResult."""
    return gevent.get_hub().threadpool.spawn(fn, *args, **kw)


def bound_url(listener: "pynng.Listener", scheme: str = "tcp") -> str:
    """The URL a pynng listener bound (with its real port when it listened on port 0)."""
    if scheme == "ipc":
        return listener.url
    return f"{scheme}://{listener.local_address}"  # str() of the address is right; .port is not


def socket(kind: str, **kw: Any) -> "pynng.Socket":
    """A pynng socket of the named protocol ("pair", "push", ...) with bounded timeouts."""
    cls = {
        "pair": pynng.Pair0, "pair1": pynng.Pair1, "push": pynng.Push0, "pull": pynng.Pull0,
        "req": pynng.Req0, "rep": pynng.Rep0, "pub": pynng.Pub0, "sub": pynng.Sub0,
        "surveyor": pynng.Surveyor0, "respondent": pynng.Respondent0, "bus": pynng.Bus0,
    }[kind]
    kw.setdefault("recv_timeout", 5000)
    kw.setdefault("send_timeout", 5000)
    return cls(**kw)


def recv_many(sock: "pynng.Socket", count: int) -> list[bytes]:
    """Receive ``count`` messages on one native thread (run it with :func:`spawn`)."""
    return [sock.recv() for _ in range(count)]


def send_many(sock: "pynng.Socket", messages: "list[bytes]") -> None:
    """Send every message back-to-back on one native thread (run it with :func:`spawn`)."""
    for m in messages:
        sock.send(m)


def raises(exc_type: type[BaseException], fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """Run a blocking pynng call on a native thread; return the ``exc_type`` error it raised (or
    None). Unlike ``pytest.raises(...)`` around :func:`run`, an expected error is not printed
    by the threadpool as a failure."""
    def call() -> Any:
        try:
            fn(*args, **kw)
        except exc_type as exc:
            return exc
        return None
    return run(call)


def close_after(gsp_sock: Any, nng_sock: "pynng.Socket", timeout: float = 3.0) -> None:
    """Close ``gsp_sock``, wait (up to ``timeout`` s) until nng has dropped every pipe to it,
    then close ``nng_sock``. nng 1.x can panic (``pthread_mutex_lock: Invalid argument``, an
    abort of the whole process) when its socket is closed while one of its pipes is still
    being torn down, as after a peer's WebSocket close (nanomsg/nng#2110): a bug of nng's close
    path, not of the exchange a test checks."""
    try:
        gsp_sock.close()
        deadline = time.monotonic() + timeout
        while nng_sock.pipes and time.monotonic() < deadline:
            gevent.sleep(0.01)
        gevent.sleep(0.05)  # the pipe's last callbacks run after it leaves the list
    finally:
        nng_sock.close()


def added_pipes(sock: "pynng.Socket") -> list[int]:
    """A live list of the ids of pipes nng fully attached (post-add) on ``sock``; pipes nng
    rejects after its pre-add event (e.g. a wrong peer protocol) never show up here."""
    ids: list[int] = []
    sock.add_post_pipe_connect_cb(lambda pipe: ids.append(pipe.id))
    return ids
