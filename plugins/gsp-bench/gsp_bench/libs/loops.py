"""The timed and counted loops every library shares. They take bound ``send``/``recv``
callables (never a socket), so the library's own methods run in the hot loop with nothing of
ours in between, and the same loop measures every library the same way.
"""

from __future__ import annotations

import os
import resource
import threading
from time import perf_counter
from typing import Any, Callable

from ..ctl import Control

Send = Callable[[bytes], Any]
Recv = Callable[[], Any]

WARM, DATA, END = ord("W"), ord("D"), ord("E")


def payload(size: int, kind: bytes = b"D") -> bytes:
    """A message of ``size`` bytes whose first byte says what it is (Warm-up, Data, End)."""
    return (kind + b"x" * (size - 1)) if size > 0 else b""


def kind(m: Any) -> int:
    """The first byte of a message (:data:`WARM`, :data:`DATA`, :data:`END`), 0 if empty."""
    return m[0] if len(m) else 0


def cpu_seconds() -> float:
    """CPU time (user + system) of this whole process so far, every thread included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def process_cpu(pid: int) -> float:
    """CPU time (user + system) of another process of this user so far (Linux ``/proc``), 0 if
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def page_faults() -> int:
    """Minor page faults of this whole process so far (pages the kernel mapped in on first touch:
    what a fresh big message body costs when the allocator does not keep its memory)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def recv_count(recv: Recv, count: int, started: Callable[[], Any]) -> dict[str, Any]:
    """nng local_thr: time from the first message to the last. The sender sends the first one
    alone and the rest once told we have it (``started``), so no backlog queued before the clock
    starts inflates the rate (a receiver's I/O may run ahead of its application). ``cpu`` is the
    process's CPU seconds over the same span, ``faults`` its minor page faults."""
    recv()
    t0, c0, f0 = perf_counter(), cpu_seconds(), page_faults()
    started()
    for _ in range(count - 1):
        recv()
    return {"count": count, "elapsed": perf_counter() - t0, "cpu": cpu_seconds() - c0,
            "faults": page_faults() - f0}


def send_n(send: Send, msg: bytes, count: int,
           wait_started: Callable[[], Any] = lambda: None) -> None:
    """nng remote_thr: ``count`` messages; the first alone, the rest after ``wait_started``."""
    send(msg)
    wait_started()
    for _ in range(count - 1):
        send(msg)


def echo_n(send: Send, recv: Recv, count: int) -> None:
    for _ in range(count):
        send(recv())


def echo_timed(send: Send, recv: Recv, count: int, warmup: int) -> float:
    """:func:`echo_n` of ``warmup`` then ``count`` requests: the process's CPU seconds over the
    ``count`` (the round trips the client times)."""
    echo_n(send, recv, warmup)
    c0 = cpu_seconds()
    echo_n(send, recv, count)
    return cpu_seconds() - c0


def echo_forever(send: Send, recv: Recv) -> None:
    while True:
        send(recv())


def echo_until(stop: threading.Event, send: Send, recv: Recv,
               timed_out: type[BaseException]) -> None:
    """Echo until ``stop`` is set; ``recv`` must time out (raising ``timed_out``) now and then
    so the flag is seen. The shape for native threads, which cannot be killed."""
    while not stop.is_set():
        try:
            send(recv())
        except timed_out:
            continue


def round_trips(send: Send, recv: Recv, size: int, count: int, warmup: int,
                samples: bool = True) -> dict[str, Any]:
    """nng remote_lat: ``warmup`` untimed round trips, then ``count`` timed one by one; ``cpu``
    is this process's CPU seconds over the timed ones (with an inproc peer: both ends')."""
    msg = payload(size)
    for _ in range(warmup):
        send(msg)
        recv()
    out: list[float] = []
    add = out.append
    c0 = cpu_seconds()
    t0 = perf_counter()
    for _ in range(count):
        t = perf_counter()
        send(msg)
        recv()
        add(perf_counter() - t)
    elapsed = perf_counter() - t0
    return {"count": count, "elapsed": elapsed, "cpu": cpu_seconds() - c0,
            "samples": out if samples else None}


def publish(ctl: Control, send: Send, sleep: Callable[[float], None], size: int,
            count: int) -> None:
    """Warm-up messages until every subscriber has one ("go"), the data, then end markers until
    the subscribers are done ("stop"): a PUB may drop, so one end marker might not arrive."""
    w, d, e = payload(max(size, 1), b"W"), payload(max(size, 1), b"D"), payload(max(size, 1), b"E")
    while (word := ctl.poll()) not in ("go", "stop"):
        send(w)
        sleep(0.002)
    if word == "stop":
        return
    for _ in range(count):
        send(d)
    while ctl.poll() != "stop":
        send(e)
        sleep(0.002)


class Fanin:
    """What a subscriber process measures: data messages delivered to all its subscribers, and the
    first and last arrival among them. Each subscriber counts on its own and merges once at the
    end (threads must not share a counter)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.first = float("inf")
        self.last = 0.0
        self.delivered = 0
        self.warm: set[int] = set()
        self.done = 0
        self.lock = threading.Lock()

    def merge(self, count: int, first: float, last: float) -> None:
        with self.lock:
            self.done += 1
            if count:
                self.delivered += count
                self.first = min(self.first, first)
                self.last = max(self.last, last)

    def figures(self, expected: int) -> dict[str, Any]:
        return {"delivered": self.delivered, "elapsed": max(self.last - self.first, 1e-9),
                "expected": expected}


def sub_loop(fan: Fanin, i: int, recv: Recv) -> None:
    """One subscriber's own task: counts in locals (the hot path), merges once at its end."""
    n, first, last = 0, 0.0, 0.0
    while True:
        k = kind(recv())
        if k == DATA:
            last = perf_counter()
            if not n:
                first = last
            n += 1
        elif k == WARM:
            fan.warm.add(i)
        elif k == END:
            fan.merge(n, first, last)
            return


def await_warm(ctl: Control, fan: Fanin, sleep: Callable[[float], None]) -> None:
    """Say "ready" once every subscriber has had a warm-up message (its subscription is live)."""
    while len(fan.warm) < fan.n:
        sleep(0.005)
    ctl.ready(subs=fan.n)
