"""The same workloads written once per library: gsp, pynng, pyzmq (native threads), zmq.green and
a raw gevent socket baseline (length-prefixed frames, no library).

Each *role* runs in a worker process (see ``worker``) and talks to the orchestrator through a
:class:`~gsp.bench.ctl.Control`: ``ready(url=...)`` once bound or connected, ``result(...)`` with raw
figures (counts, seconds, bytes), and ``wait("stop")`` before closing, so a sender never closes
with messages still queued. Every library uses its natural style: gevent greenlets for gsp,
zmq.green and raw; native threads (or a zmq Poller) for pynng and pyzmq.
"""

from __future__ import annotations

import gc
import os
import struct
import threading
import time
from collections import deque
from time import perf_counter
from typing import Any, Callable

from .ctl import Control, NotApplicable

LIBS = ("gsp", "pynng", "pyzmq", "zmq.green", "raw-gevent")
_POOL = 256  # dials in flight at once per process (listen backlogs are 1024)


def payload(size: int, kind: bytes = b"D") -> bytes:
    """A message of ``size`` bytes whose first byte says what it is (Warm-up, Data, End)."""
    return (kind + b"x" * (size - 1)) if size > 0 else b""


def rss() -> int:
    """Resident set size of this process, bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def raise_nofile() -> int:
    """Raise the soft fd limit to the hard one (many-connection runs need ~1 fd per pipe)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def _kind(m: Any) -> int:
    return m[0] if len(m) else 0


_W, _D, _E = ord("W"), ord("D"), ord("E")


class _Fanin:
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


class Lib:
    name = ""

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def event(self) -> Any:
        return threading.Event()

    # Every role; a library without a way to run one raises NotApplicable.
    def _na(self, ctl: Control, **kw: Any) -> None:
        raise NotApplicable(f"{self.name} cannot run this workload")

    thr_recv = thr_send = lat_server = lat_client = inproc_thr = inproc_lat = _na
    pub = subs = rep_server = req_clients = conns_server = conns_dialers = _na


# -- gsp -------------------------------------------------------------------------------------------

class Gsp(Lib):
    name = "gsp"

    def __init__(self) -> None:
        import gevent
        import gevent.event
        import gevent.pool

        import gsp
        self.gevent = gevent
        self.gsp = gsp

    def sleep(self, seconds: float) -> None:
        self.gevent.sleep(seconds)

    def event(self) -> Any:
        return self.gevent.event.Event()

    def _sock(self, proto: str, **kw: Any) -> Any:
        kw.setdefault("recv_max_size", 0)
        return self.gsp.socket(proto, **kw)

    def thr_recv(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("pull", listen=url) as s:
            ctl.ready(url=s.listeners[0].url)
            ctl.result(**_recv_count(s.recv, count, ctl.started))

    def thr_send(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("push", dial=url, linger=30) as s:
            _send_n(s.send, payload(size), count, lambda: ctl.wait("go"))
            ctl.wait("stop")

    def lat_server(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("rep", listen=url) as s:
            ctl.ready(url=s.listeners[0].url)
            send, recv = s.send, s.recv
            for _ in range(count):
                send(recv())
            ctl.wait("stop")

    def lat_client(self, ctl: Control, url: str, size: int, count: int, warmup: int) -> None:
        with self._sock("req", dial=url) as s:
            ctl.result(**_round_trips(s.send, s.recv, size, count, warmup))

    def inproc_thr(self, ctl: Control, size: int, count: int) -> None:
        url = f"inproc://bench-thr-{os.getpid()}"
        with self._sock("pull", listen=url) as pull, self._sock("push", dial=url) as push:
            ev = self.event()
            g = self.gevent.spawn(_send_n, push.send, payload(size), count, ev.wait)
            figures = _recv_count(pull.recv, count, ev.set)
            g.get()
        ctl.result(**figures)

    def inproc_lat(self, ctl: Control, size: int, count: int, warmup: int) -> None:
        url = f"inproc://bench-lat-{os.getpid()}"
        with self._sock("rep", listen=url) as rep, self._sock("req", dial=url) as req:
            g = self.gevent.spawn(_echo_n, rep.send, rep.recv, count + warmup)
            figures = _round_trips(req.send, req.recv, size, count, warmup)
            g.get()
        ctl.result(**figures)

    def pub(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("pub", listen=url) as s:
            ctl.ready(url=s.listeners[0].url)
            _publish(ctl, s.send, self.sleep, size, count)

    def subs(self, ctl: Control, url: str, n: int, count: int) -> None:
        socks = [self._sock("sub", dial=url) for _ in range(n)]
        try:
            for s in socks:
                s.subscribe(b"")
            fan = _Fanin(n)
            gs = [self.gevent.spawn(_sub_loop, fan, i, s.recv) for i, s in enumerate(socks)]
            _await_warm(ctl, fan, self.sleep)
            self.gevent.joinall(gs, raise_error=True)
            ctl.result(**fan.figures(n * count))
        finally:
            for s in socks:
                s.close()

    def rep_server(self, ctl: Control, url: str) -> None:
        with self._sock("rep", listen=url) as s:
            ctl.ready(url=s.listeners[0].url)
            g = self.gevent.spawn(_echo_forever, s.send, s.recv)
            ctl.wait("stop")
            g.kill()

    def req_clients(self, ctl: Control, url: str, size: int, clients: int, count: int) -> None:
        socks = [self._sock("req") for _ in range(clients)]
        try:
            for s in socks:
                s.dial(url, block=True)
            per = max(1, count // clients)
            t0 = perf_counter()
            gs = [self.gevent.spawn(_round_trips, s.send, s.recv, size, per, 0, False)
                  for s in socks]
            self.gevent.joinall(gs, raise_error=True)
            ctl.result(requests=per * clients, elapsed=perf_counter() - t0)
        finally:
            for s in socks:
                s.close()

    def conns_server(self, ctl: Control, url: str) -> None:
        with self._sock("rep", listen=url) as s:
            g = self.gevent.spawn(_echo_forever, s.send, s.recv)
            self.gevent.sleep(0.05)
            gc.collect()
            before = rss()
            ctl.ready(url=s.listeners[0].url)
            ctl.wait("measure")
            gc.collect()
            ctl.result(rss_before=before, rss_after=rss(), pipes=len(s.pipes))
            ctl.wait("stop")
            g.kill()

    def conns_dialers(self, ctl: Control, url: str, n: int) -> None:
        socks: list[Any] = []

        def one(_: int) -> None:
            s = self._sock("req", linger=0)
            socks.append(s)
            s.dial(url, block=True)
            s.send(b"x")
            s.recv()

        t0 = perf_counter()
        try:
            self.gevent.pool.Pool(_POOL).map(one, range(n))
            ctl.ready(elapsed=perf_counter() - t0, served=n)
            ctl.wait("stop")
        finally:
            for s in socks:
                s.close()


# -- shared loops (library-neutral: they take bound send/recv callables) ------------------------

def _recv_count(recv: Callable[[], Any], count: int,
                started: Callable[[], Any]) -> dict[str, Any]:
    """nng local_thr: time from the first message to the last. The sender sends the first one
    alone and the rest once told we have it (``started``), so no backlog queued before the clock
    starts inflates the rate (a receiver's I/O may run ahead of its application)."""
    recv()
    t0 = perf_counter()
    started()
    for _ in range(count - 1):
        recv()
    return {"count": count, "elapsed": perf_counter() - t0}


def _send_n(send: Callable[[bytes], Any], msg: bytes, count: int,
            wait_started: Callable[[], Any] = lambda: None) -> None:
    send(msg)
    wait_started()
    for _ in range(count - 1):
        send(msg)


def _echo_n(send: Callable[[Any], Any], recv: Callable[[], Any], count: int) -> None:
    for _ in range(count):
        send(recv())


def _echo_forever(send: Callable[[Any], Any], recv: Callable[[], Any]) -> None:
    while True:
        send(recv())


def _round_trips(send: Callable[[bytes], Any], recv: Callable[[], Any], size: int, count: int,
                 warmup: int, samples: bool = True) -> dict[str, Any]:
    msg = payload(size)
    for _ in range(warmup):
        send(msg)
        recv()
    out: list[float] = []
    add = out.append
    t0 = perf_counter()
    for _ in range(count):
        t = perf_counter()
        send(msg)
        recv()
        add(perf_counter() - t)
    return {"count": count, "elapsed": perf_counter() - t0, "samples": out if samples else None}


def _publish(ctl: Control, send: Callable[[bytes], Any], sleep: Callable[[float], None],
             size: int, count: int) -> None:
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


def _sub_loop(fan: _Fanin, i: int, recv: Callable[[], Any]) -> None:
    n, first, last = 0, 0.0, 0.0
    while True:
        k = _kind(recv())
        if k == _D:
            last = perf_counter()
            if not n:
                first = last
            n += 1
        elif k == _W:
            fan.warm.add(i)
        elif k == _E:
            fan.merge(n, first, last)
            return


def _await_warm(ctl: Control, fan: _Fanin, sleep: Callable[[float], None]) -> None:
    while len(fan.warm) < fan.n:
        sleep(0.005)
    ctl.ready(subs=fan.n)


# -- raw gevent sockets: the floor a library on gevent can approach -------------------------------

_LEN = struct.Struct(">Q")
_BIG = 64 * 1024


class RawConn:
    """Length-prefixed frames (u64 BE, like SP over tcp) on a gevent socket, written by hand the
    way a careful programmer would: sends buffered and flushed as one write (or on demand), big
    bodies written and read in place, small frames parsed out of each recv."""

    __slots__ = ("sock", "out", "outn", "msgs", "pending")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.out: list[bytes] = []
        self.outn = 0
        self.msgs: deque[bytes] = deque()
        self.pending = b""

    def send(self, data: bytes, flush: bool = False) -> None:
        n = len(data)
        if n >= _BIG:
            self.out.append(_LEN.pack(n))
            self.flush()
            self.sock.sendall(data)
            return
        self.out.append(_LEN.pack(n))
        self.out.append(data)
        self.outn += n + 8
        if flush or self.outn >= _BIG:
            self.flush()

    def flush(self) -> None:
        if self.out:
            self.sock.sendall(b"".join(self.out))
            self.out.clear()
            self.outn = 0

    def recv(self) -> bytes:
        msgs = self.msgs
        while not msgs:
            chunk = self.sock.recv(256 * 1024)
            if not chunk:
                raise EOFError("peer closed")
            data = self.pending + chunk if self.pending else chunk
            pos, end = 0, len(data)
            unpack = _LEN.unpack_from
            while end - pos >= 8:
                (n,) = unpack(data, pos)
                start = pos + 8
                if end - start < n:
                    if n >= _BIG:  # read the rest of a big body straight into place
                        body = bytearray(n)
                        have = end - start
                        body[:have] = data[start:]
                        view = memoryview(body)
                        while have < n:
                            got = self.sock.recv_into(view[have:])
                            if not got:
                                raise EOFError("peer closed")
                            have += got
                        msgs.append(bytes(body))
                        pos = end
                    break
                pos = start + n
                msgs.append(data[start:pos])
            self.pending = data[pos:]
        return msgs.popleft()


class Raw(Lib):
    name = "raw-gevent"

    def __init__(self) -> None:
        import gevent
        import gevent.pool
        from gevent import socket as gsocket
        self.gevent = gevent
        self.gs = gsocket

    def sleep(self, seconds: float) -> None:
        self.gevent.sleep(seconds)

    def _listen(self, url: str) -> tuple[Any, str]:
        gs = self.gs
        if url.startswith("tcp://"):
            host, port = url[6:].rsplit(":", 1)
            ls = gs.socket(gs.AF_INET, gs.SOCK_STREAM)
            ls.setsockopt(gs.SOL_SOCKET, gs.SO_REUSEADDR, 1)
            ls.bind((host, int(port)))
            ls.listen(1024)
            return ls, f"tcp://{host}:{ls.getsockname()[1]}"
        if url.startswith("ipc://"):
            ls = gs.socket(gs.AF_UNIX, gs.SOCK_STREAM)
            ls.bind(url[6:])
            ls.listen(1024)
            return ls, url
        raise NotApplicable("raw sockets have no inproc transport")

    def _connect(self, url: str) -> RawConn:
        gs = self.gs
        if url.startswith("tcp://"):
            host, port = url[6:].rsplit(":", 1)
            s = gs.create_connection((host, int(port)))
            s.setsockopt(gs.IPPROTO_TCP, gs.TCP_NODELAY, 1)
        else:
            s = gs.socket(gs.AF_UNIX, gs.SOCK_STREAM)
            s.connect(url[6:])
        return RawConn(s)

    def _accept(self, ls: Any) -> RawConn:
        s, _ = ls.accept()
        if s.family != self.gs.AF_UNIX:
            s.setsockopt(self.gs.IPPROTO_TCP, self.gs.TCP_NODELAY, 1)
        return RawConn(s)

    def _serve(self, ls: Any, handler: Callable[[RawConn], None]) -> Any:
        def loop() -> None:
            while True:
                self.gevent.spawn(handler, self._accept(ls))
        return self.gevent.spawn(loop)

    def thr_recv(self, ctl: Control, url: str, size: int, count: int) -> None:
        ls, bound = self._listen(url)
        ctl.ready(url=bound)
        c = self._accept(ls)
        ctl.result(**_recv_count(c.recv, count, ctl.started))
        c.sock.close()
        ls.close()

    def thr_send(self, ctl: Control, url: str, size: int, count: int) -> None:
        c = self._connect(url)
        _send_n(c.send, payload(size), count, lambda: (c.flush(), ctl.wait("go")))
        c.flush()
        ctl.wait("stop")
        c.sock.close()

    def lat_server(self, ctl: Control, url: str, size: int, count: int) -> None:
        ls, bound = self._listen(url)
        ctl.ready(url=bound)
        c = self._accept(ls)
        for _ in range(count):
            c.send(c.recv(), True)
        ctl.wait("stop")
        c.sock.close()
        ls.close()

    def lat_client(self, ctl: Control, url: str, size: int, count: int, warmup: int) -> None:
        c = self._connect(url)
        ctl.result(**_round_trips(lambda m: c.send(m, True), c.recv, size, count, warmup))
        c.sock.close()

    def pub(self, ctl: Control, url: str, size: int, count: int) -> None:
        ls, bound = self._listen(url)
        conns: list[RawConn] = []
        g = self._serve(ls, conns.append)
        ctl.ready(url=bound)

        def send(m: bytes) -> None:
            flush = m[0] != _D  # data is coalesced; warm-up and end markers go out at once
            for c in list(conns):
                c.send(m, flush)

        _publish(ctl, send, self.sleep, size, count)
        g.kill()
        for c in conns:
            c.sock.close()
        ls.close()

    def subs(self, ctl: Control, url: str, n: int, count: int) -> None:
        conns = [self._connect(url) for _ in range(n)]
        fan = _Fanin(n)
        gs = [self.gevent.spawn(_sub_loop, fan, i, c.recv) for i, c in enumerate(conns)]
        _await_warm(ctl, fan, self.sleep)
        self.gevent.joinall(gs, raise_error=True)
        ctl.result(**fan.figures(n * count))
        for c in conns:
            c.sock.close()

    def _echo(self, c: RawConn) -> None:
        try:
            while True:
                c.send(c.recv(), True)
        except (EOFError, OSError):
            c.sock.close()

    def rep_server(self, ctl: Control, url: str) -> None:
        ls, bound = self._listen(url)
        g = self._serve(ls, self._echo)
        ctl.ready(url=bound)
        ctl.wait("stop")
        g.kill()
        ls.close()

    def req_clients(self, ctl: Control, url: str, size: int, clients: int, count: int) -> None:
        conns = [self._connect(url) for _ in range(clients)]
        per = max(1, count // clients)
        t0 = perf_counter()
        gs = [self.gevent.spawn(_round_trips, lambda m, c=c: c.send(m, True), c.recv, size, per,
                                0, False) for c in conns]
        self.gevent.joinall(gs, raise_error=True)
        ctl.result(requests=per * clients, elapsed=perf_counter() - t0)
        for c in conns:
            c.sock.close()

    def conns_server(self, ctl: Control, url: str) -> None:
        ls, bound = self._listen(url)
        served: list[RawConn] = []

        def handler(c: RawConn) -> None:
            served.append(c)
            self._echo(c)

        g = self._serve(ls, handler)
        gc.collect()
        before = rss()
        ctl.ready(url=bound)
        ctl.wait("measure")
        gc.collect()
        ctl.result(rss_before=before, rss_after=rss(), pipes=len(served))
        ctl.wait("stop")
        g.kill()
        ls.close()

    def conns_dialers(self, ctl: Control, url: str, n: int) -> None:
        conns: list[RawConn] = []

        def one(_: int) -> None:
            c = self._connect(url)
            conns.append(c)
            c.send(b"x", True)
            c.recv()

        t0 = perf_counter()
        self.gevent.pool.Pool(_POOL).map(one, range(n))
        ctl.ready(elapsed=perf_counter() - t0, served=n)
        ctl.wait("stop")
        for c in conns:
            c.sock.close()


# -- pyzmq: native threads, or zmq.green on gevent ------------------------------------------------

class Zmq(Lib):
    def __init__(self, green: bool) -> None:
        if green:
            import gevent
            import gevent.event
            import zmq.green as zmq
            self.name = "zmq.green"
            self.event = gevent.event.Event  # type: ignore[method-assign]
            self._sleep = gevent.sleep
            self._spawn = lambda fn, *a: gevent.spawn(fn, *a)
            self._join = lambda g: g.get()
        else:
            import zmq
            self.name = "pyzmq"
            self._sleep = time.sleep
            self._spawn = _thread
            self._join = _join_thread
        self.zmq = zmq
        self.ctx = zmq.Context()

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    def _sock(self, kind: int, **opts: Any) -> Any:
        s = self.ctx.socket(kind)
        s.linger = 0 if kind != self.zmq.PUSH else 30000
        for k, v in opts.items():
            setattr(s, k, v)
        return s

    def _bind(self, s: Any, url: str) -> str:
        if url.startswith("tcp://") and url.endswith(":0"):
            url = url[:-1] + "*"
        s.bind(url)
        return s.getsockopt(self.zmq.LAST_ENDPOINT).decode()

    def thr_recv(self, ctl: Control, url: str, size: int, count: int) -> None:
        s = self._sock(self.zmq.PULL)
        ctl.ready(url=self._bind(s, url))
        ctl.result(**_recv_count(s.recv, count, ctl.started))
        s.close()

    def thr_send(self, ctl: Control, url: str, size: int, count: int) -> None:
        s = self._sock(self.zmq.PUSH)
        s.connect(url)
        _send_n(s.send, payload(size), count, lambda: ctl.wait("go"))
        ctl.wait("stop")
        s.close()

    def lat_server(self, ctl: Control, url: str, size: int, count: int) -> None:
        s = self._sock(self.zmq.REP)
        ctl.ready(url=self._bind(s, url))
        _echo_n(s.send, s.recv, count)
        ctl.wait("stop")
        s.close()

    def lat_client(self, ctl: Control, url: str, size: int, count: int, warmup: int) -> None:
        s = self._sock(self.zmq.REQ)
        s.connect(url)
        ctl.result(**_round_trips(s.send, s.recv, size, count, warmup))
        s.close()

    def inproc_thr(self, ctl: Control, size: int, count: int) -> None:
        url = f"inproc://bench-thr-{os.getpid()}"
        pull, push = self._sock(self.zmq.PULL), self._sock(self.zmq.PUSH)
        pull.bind(url)
        push.connect(url)
        ev = self.event()
        g = self._spawn(_send_n, push.send, payload(size), count, ev.wait)
        ctl.result(**_recv_count(pull.recv, count, ev.set))
        self._join(g)
        push.close()
        pull.close()

    def inproc_lat(self, ctl: Control, size: int, count: int, warmup: int) -> None:
        url = f"inproc://bench-lat-{os.getpid()}"
        rep, req = self._sock(self.zmq.REP), self._sock(self.zmq.REQ)
        rep.bind(url)
        req.connect(url)
        g = self._spawn(_echo_n, rep.send, rep.recv, count + warmup)
        ctl.result(**_round_trips(req.send, req.recv, size, count, warmup))
        self._join(g)
        req.close()
        rep.close()

    def pub(self, ctl: Control, url: str, size: int, count: int) -> None:
        s = self._sock(self.zmq.PUB)
        ctl.ready(url=self._bind(s, url))
        _publish(ctl, s.send, self.sleep, size, count)
        s.close()

    def subs(self, ctl: Control, url: str, n: int, count: int) -> None:
        zmq = self.zmq
        socks = []
        for _ in range(n):
            s = self._sock(zmq.SUB)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect(url)
            socks.append(s)
        fan = _Fanin(n)
        poller = zmq.Poller()
        for s in socks:
            poller.register(s, zmq.POLLIN)
        index = {s: i for i, s in enumerate(socks)}
        counts, firsts, lasts = [0] * n, [0.0] * n, [0.0] * n
        said_ready = False
        # One thread (or greenlet) drains every ready socket: the idiomatic zmq fan-in.
        while fan.done < n:
            for s, _ in poller.poll(1000):
                i = index[s]
                while True:
                    try:
                        m = s.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    k = _kind(m)
                    if k == _D:
                        lasts[i] = perf_counter()
                        if not counts[i]:
                            firsts[i] = lasts[i]
                        counts[i] += 1
                    elif k == _W:
                        fan.warm.add(i)
                    elif k == _E:
                        fan.merge(counts[i], firsts[i], lasts[i])
                        poller.unregister(s)
                        break
            if not said_ready and len(fan.warm) == n:
                said_ready = True
                ctl.ready(subs=n)
        ctl.result(**fan.figures(n * count))
        for s in socks:
            s.close()

    def _echo_loop(self, s: Any, stop: threading.Event) -> None:
        s.rcvtimeo = 100
        while not stop.is_set():
            try:
                s.send(s.recv())
            except self.zmq.Again:
                continue

    def rep_server(self, ctl: Control, url: str) -> None:
        s = self._sock(self.zmq.REP)
        ctl.ready(url=self._bind(s, url))
        stop = threading.Event()
        g = self._spawn(self._echo_loop, s, stop)
        ctl.wait("stop")
        stop.set()
        self._join(g)
        s.close()

    def req_clients(self, ctl: Control, url: str, size: int, clients: int, count: int) -> None:
        socks = [self._sock(self.zmq.REQ) for _ in range(clients)]
        for s in socks:
            s.connect(url)
        per = max(1, count // clients)
        t0 = perf_counter()
        gs = [self._spawn(_round_trips, s.send, s.recv, size, per, 0, False) for s in socks]
        for g in gs:
            self._join(g)
        ctl.result(requests=per * clients, elapsed=perf_counter() - t0)
        for s in socks:
            s.close()

    def conns_server(self, ctl: Control, url: str) -> None:
        s = self._sock(self.zmq.REP)
        bound = self._bind(s, url)
        stop = threading.Event()
        g = self._spawn(self._echo_loop, s, stop)
        gc.collect()
        before = rss()
        ctl.ready(url=bound)
        ctl.wait("measure")
        gc.collect()
        ctl.result(rss_before=before, rss_after=rss(), pipes=None)
        ctl.wait("stop")
        stop.set()
        self._join(g)
        s.close()

    def conns_dialers(self, ctl: Control, url: str, n: int) -> None:
        self.ctx.max_sockets = n + 64
        t0 = perf_counter()
        socks = [self._sock(self.zmq.REQ, rcvtimeo=60000) for _ in range(n)]
        for s in socks:
            s.connect(url)
        for s in socks:  # REQ queues the request until its connection is up
            s.send(b"x")
        for s in socks:
            s.recv()
        ctl.ready(elapsed=perf_counter() - t0, served=n)
        ctl.wait("stop")
        for s in socks:
            s.close()


def _thread(fn: Callable[..., Any], *args: Any) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised by _join_thread in the caller
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.box = box  # type: ignore[attr-defined]
    t.start()
    return t


def _join_thread(t: Any) -> Any:
    t.join()
    if "error" in t.box:
        raise t.box["error"]
    return t.box.get("value")


# -- pynng: native threads ------------------------------------------------------------------------

class Nng(Lib):
    name = "pynng"

    def __init__(self) -> None:
        import pynng
        self.nng = pynng

    def _listen(self, s: Any, url: str) -> str:
        lst = s.listen(url)
        return lst.url if url.startswith("ipc://") else f"tcp://{lst.local_address}"

    def _sock(self, cls: str, **kw: Any) -> Any:
        kw.setdefault("recv_max_size", 0)
        return getattr(self.nng, cls)(**kw)

    def thr_recv(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("Pull0") as s:
            ctl.ready(url=self._listen(s, url))
            ctl.result(**_recv_count(s.recv, count, ctl.started))

    def thr_send(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("Push0") as s:
            s.dial(url, block=True)
            _send_n(s.send, payload(size), count, lambda: ctl.wait("go"))
            ctl.wait("stop")

    def lat_server(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("Rep0") as s:
            ctl.ready(url=self._listen(s, url))
            _echo_n(s.send, s.recv, count)
            ctl.wait("stop")

    def lat_client(self, ctl: Control, url: str, size: int, count: int, warmup: int) -> None:
        with self._sock("Req0") as s:
            s.dial(url, block=True)
            ctl.result(**_round_trips(s.send, s.recv, size, count, warmup))

    def inproc_thr(self, ctl: Control, size: int, count: int) -> None:
        url = f"inproc://bench-thr-{os.getpid()}"
        with self._sock("Pull0", listen=url) as pull, self._sock("Push0", dial=url) as push:
            ev = self.event()
            t = _thread(_send_n, push.send, payload(size), count, ev.wait)
            ctl.result(**_recv_count(pull.recv, count, ev.set))
            _join_thread(t)

    def inproc_lat(self, ctl: Control, size: int, count: int, warmup: int) -> None:
        url = f"inproc://bench-lat-{os.getpid()}"
        with self._sock("Rep0", listen=url) as rep, self._sock("Req0", dial=url) as req:
            t = _thread(_echo_n, rep.send, rep.recv, count + warmup)
            ctl.result(**_round_trips(req.send, req.recv, size, count, warmup))
            _join_thread(t)

    def pub(self, ctl: Control, url: str, size: int, count: int) -> None:
        with self._sock("Pub0") as s:
            ctl.ready(url=self._listen(s, url))
            _publish(ctl, s.send, self.sleep, size, count)

    def subs(self, ctl: Control, url: str, n: int, count: int) -> None:
        socks = [self._sock("Sub0", recv_timeout=60000) for _ in range(n)]
        try:
            for s in socks:
                s.subscribe(b"")
                s.dial(url, block=False)
            fan = _Fanin(n)
            ts = [_thread(_sub_loop, fan, i, s.recv) for i, s in enumerate(socks)]
            _await_warm(ctl, fan, self.sleep)
            for t in ts:
                _join_thread(t)
            ctl.result(**fan.figures(n * count))
        finally:
            for s in socks:
                s.close()

    def _echo_loop(self, s: Any, stop: threading.Event) -> None:
        s.recv_timeout = 100
        while not stop.is_set():
            try:
                s.send(s.recv())
            except self.nng.Timeout:
                continue

    def rep_server(self, ctl: Control, url: str) -> None:
        with self._sock("Rep0") as s:
            ctl.ready(url=self._listen(s, url))
            stop = threading.Event()
            t = _thread(self._echo_loop, s, stop)
            ctl.wait("stop")
            stop.set()
            _join_thread(t)

    def req_clients(self, ctl: Control, url: str, size: int, clients: int, count: int) -> None:
        socks = [self._sock("Req0") for _ in range(clients)]
        try:
            for s in socks:
                s.dial(url, block=True)
            per = max(1, count // clients)
            t0 = perf_counter()
            ts = [_thread(_round_trips, s.send, s.recv, size, per, 0, False) for s in socks]
            for t in ts:
                _join_thread(t)
            ctl.result(requests=per * clients, elapsed=perf_counter() - t0)
        finally:
            for s in socks:
                s.close()

    def conns_server(self, ctl: Control, url: str) -> None:
        with self._sock("Rep0") as s:
            bound = self._listen(s, url)
            stop = threading.Event()
            t = _thread(self._echo_loop, s, stop)
            gc.collect()
            before = rss()
            ctl.ready(url=bound)
            ctl.wait("measure")
            gc.collect()
            ctl.result(rss_before=before, rss_after=rss(), pipes=None)
            ctl.wait("stop")
            stop.set()
            _join_thread(t)

    def conns_dialers(self, ctl: Control, url: str, n: int) -> None:
        t0 = perf_counter()
        socks = [self._sock("Req0", recv_timeout=60000) for _ in range(n)]
        try:
            for s in socks:
                s.dial(url, block=False)
            for s in socks:  # req holds the request until its pipe is up
                s.send(b"x")
            for s in socks:
                s.recv()
            ctl.ready(elapsed=perf_counter() - t0, served=n)
            ctl.wait("stop")
        finally:
            for s in socks:
                s.close()


def make(name: str) -> Lib:
    if name == "gsp":
        return Gsp()
    if name == "raw-gevent":
        return Raw()
    if name == "pyzmq":
        return Zmq(green=False)
    if name == "zmq.green":
        return Zmq(green=True)
    if name == "pynng":
        return Nng()
    raise ValueError(f"unknown library {name!r}; choose from {', '.join(LIBS)}")
