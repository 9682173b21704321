"""Every workload's roles, written once over a small per-library interface.

A role runs in a worker process (see :mod:`gsp_bench.worker`) and talks to the runner through a
:class:`~gsp_bench.ctl.Control`: ``ready(url=...)`` once bound or connected, ``result(...)``
with raw figures (counts, seconds, bytes), and ``wait("stop")`` before closing, so a sender
never closes with messages still queued.

A library (a :class:`Lib` subclass in ``lib_*.py``) supplies sockets by *kind* (the SP
protocol name: "push", "pull", "req", "rep", "pub", "sub") through :meth:`Lib.listen` and
:meth:`Lib.dial`, and a :class:`~.runtime.Runtime` for its natural concurrency: gevent
greenlets for gsp, zmq.green and raw gevent; native threads for pynng and pyzmq. A library
overrides a role only where its idiom differs (zmq's poller fan-in, the dialers' shape on
gevent); a library that cannot run a role raises :class:`~gsp_bench.ctl.NotApplicable` (raw
sockets have no inproc).
"""

from __future__ import annotations

import gc
import importlib
import os
import struct
import threading
from contextlib import ExitStack, closing
from time import monotonic, perf_counter
from typing import Any, Callable, Protocol

from ..ctl import Control, NotApplicable
from .loops import (
    Fanin,
    await_warm,
    cpu_seconds,
    echo_n,
    echo_timed,
    echo_until,
    payload,
    publish,
    recv_count,
    round_trips,
    send_n,
    sub_loop,
)
from .runtime import Runtime, Threads

POOL = 256  # dials in flight at once per process (listen backlogs are 1024)
RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection


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


class Sock(Protocol):
    """A connected socket as the roles use it (send and recv are taken as bound methods)."""

    def send(self, data: bytes, /) -> Any: ...

    def recv(self) -> Any: ...

    def close(self) -> None: ...


class Lib:
    """One library: its sockets (the first group of methods) and every role (the rest; the
    runner starts a role by name, keyword arguments from the JSON spec)."""

    name = ""
    settle = 0.0  # seconds the echo task gets to start before a baseline RSS is taken

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    # What each library supplies.

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        """A listening socket of ``kind`` on ``url`` (port 0: any) and the URL it is bound to."""
        raise NotImplementedError

    def dial(self, kind: str, url: str, block: bool | None = None,
             timeout: float | None = None) -> Sock:
        """A socket of ``kind`` dialing ``url`` (``block`` as gsp's and pynng's ``dial``); a "sub"
        subscribes to everything; ``timeout`` bounds each recv (seconds)."""
        raise NotImplementedError

    def peer(self, listening: Any) -> Sock:
        """What a one-peer role on a listening socket talks through (the socket itself)."""
        sock: Sock = listening
        return sock

    def flush(self, sock: Sock) -> None:
        """Push out sends the library may still hold back (only the raw baseline coalesces)."""

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        """Echo every request on ``listening`` in the background; returns what stops that."""
        raise NotImplementedError

    def serve_echo_polling(self, listening: Any, timed_out: type[BaseException]) -> \
            Callable[[], None]:
        """:meth:`serve_echo` for sockets whose recv was given a short timeout, raising
        ``timed_out``: a flag stops the loop (native threads cannot be killed)."""
        stop = threading.Event()
        task = self.rt.spawn(echo_until, stop, listening.send, listening.recv, timed_out)

        def halt() -> None:
            stop.set()
            self.rt.join(task)
        return halt

    def pipes(self, listening: Any) -> int | None:
        """Connections attached to a listening socket, if the library can tell."""
        return None

    # The roles: push/pull throughput.

    def thr_recv(self, ctl: Control, url: str, size: int, count: int) -> None:
        s, bound = self.listen("pull", url)
        with closing(s):
            ctl.ready(url=bound)
            ctl.result(**recv_count(self.peer(s).recv, count, ctl.started))

    def thr_send(self, ctl: Control, url: str, size: int, count: int) -> None:
        with closing(self.dial("push", url)) as s:
            c0 = 0.0

            def go() -> None:  # the first message goes out alone; the rest once it is in
                nonlocal c0
                self.flush(s)
                ctl.wait("go")
                c0 = cpu_seconds()
            send_n(s.send, payload(size), count, go)
            self.flush(s)
            ctl.wait("measure")  # the receiver has them all: what it took to send is spent
            ctl.result(cpu=cpu_seconds() - c0)
            ctl.wait("stop")

    def inproc_thr(self, ctl: Control, size: int, count: int) -> None:
        pull, url = self.listen("pull", f"inproc://bench-thr-{os.getpid()}")
        with closing(pull), closing(self.dial("push", url)) as push:
            ev = self.rt.event()
            task = self.rt.spawn(send_n, push.send, payload(size), count, ev.wait)
            figures = recv_count(pull.recv, count, ev.set)
            self.rt.join(task)
        ctl.result(**figures)

    # Req/rep latency.

    def lat_server(self, ctl: Control, url: str, size: int, count: int, warmup: int = 0) -> None:
        """Echo ``count`` requests (the client's warm-up ones included); the result is the CPU
        seconds of all but the first ``warmup`` (the round trips the client times)."""
        s, bound = self.listen("rep", url)
        with closing(s):
            ctl.ready(url=bound)
            p = self.peer(s)
            ctl.result(cpu=echo_timed(p.send, p.recv, count - warmup, warmup))
            ctl.wait("stop")

    def lat_client(self, ctl: Control, url: str, size: int, count: int, warmup: int) -> None:
        with closing(self.dial("req", url)) as s:
            ctl.result(**round_trips(s.send, s.recv, size, count, warmup))

    def inproc_lat(self, ctl: Control, size: int, count: int, warmup: int) -> None:
        rep, url = self.listen("rep", f"inproc://bench-lat-{os.getpid()}")
        with closing(rep), closing(self.dial("req", url)) as req:
            task = self.rt.spawn(echo_n, rep.send, rep.recv, count + warmup)
            figures = round_trips(req.send, req.recv, size, count, warmup)
            self.rt.join(task)
        ctl.result(**figures)

    # Pub/sub fan-out.

    def pub(self, ctl: Control, url: str, size: int, count: int) -> None:
        s, bound = self.listen("pub", url)
        with closing(s):
            ctl.ready(url=bound)
            publish(ctl, s.send, self.rt.sleep, size, count)

    def subs(self, ctl: Control, url: str, n: int, count: int) -> None:
        """``n`` subscribers in this process, one task each."""
        with ExitStack() as stack:
            socks = [opened(stack, self.dial("sub", url)) for _ in range(n)]
            fan = Fanin(n)
            tasks = [self.rt.spawn(sub_loop, fan, i, s.recv) for i, s in enumerate(socks)]
            await_warm(ctl, fan, self.rt.sleep)
            for t in tasks:
                self.rt.join(t)
            ctl.result(**fan.figures(n * count))

    # Req/rep with concurrent clients.

    def rep_server(self, ctl: Control, url: str) -> None:
        """Echo in the background; on "measure", the CPU seconds spent since it was ready."""
        s, bound = self.listen("rep", url)
        with closing(s):
            stop = self.serve_echo(s)
            c0 = cpu_seconds()
            ctl.ready(url=bound)
            ctl.wait("measure")
            ctl.result(cpu=cpu_seconds() - c0)
            ctl.wait("stop")
            stop()

    def requesters(self, stack: ExitStack, url: str, clients: int) -> list[Any]:
        """The ``clients`` concurrent requesters of :meth:`req_clients` (anything with send and
        recv), closed by ``stack``: a REQ socket each, unless a library writes it otherwise."""
        return [opened(stack, self.dial("req", url, block=True)) for _ in range(clients)]

    def req_clients(self, ctl: Control, url: str, size: int, clients: int, count: int) -> None:
        self._ask_concurrently(ctl, url, size, clients, count)

    def _ask_concurrently(self, ctl: Control, url: str, size: int, clients: int,
                          count: int) -> None:
        """``clients`` :meth:`requesters` asking ``count`` round trips between them, at once;
        reports the requests, the time and the process's CPU time."""
        with ExitStack() as stack:
            socks = self.requesters(stack, url, clients)
            per = max(1, count // clients)
            c0 = cpu_seconds()
            t0 = perf_counter()
            tasks = [self.rt.spawn(round_trips, s.send, s.recv, size, per, 0, False)
                     for s in socks]
            for t in tasks:
                self.rt.join(t)
            ctl.result(requests=per * clients, elapsed=perf_counter() - t0,
                       cpu=cpu_seconds() - c0)

    def inproc_reqrep(self, ctl: Control, size: int, clients: int, count: int) -> None:
        """:meth:`rep_server` and :meth:`req_clients` in one process over inproc; the CPU time
        is both sides'."""
        rep, url = self.listen("rep", f"inproc://bench-reqrep-{os.getpid()}")
        with closing(rep):
            stop = self.serve_echo(rep)
            try:
                self._ask_concurrently(ctl, url, size, clients, count)
            finally:
                stop()

    # Req/rep with concurrent clients, the server in several processes (``reqrep --procs``).

    def rep_server_procs(self, ctl: Control, url: str, procs: int) -> None:
        """The server of ``reqrep --procs``: gsp runs ``procs`` processes on one address
        (gsp.prefork); a library without that serves from one process, with its own threads
        if it has any (pyzmq's and nng's I/O threads use every core as they can). Its CPU time
        from "go" to "measure" is its result."""
        s, bound = self.listen("rep", url)
        with closing(s):
            stop = self.serve_echo(s)
            ctl.ready(url=bound)
            cpu_between(ctl, cpu_seconds, lambda: self.rt.sleep(0.005))
            stop()

    def spread_requesters(self, stack: ExitStack, url: str, clients: int,
                          conns: int) -> list[Any]:
        """The requesters of :meth:`req_clients_go`: a REQ socket each (``conns`` is for
        libraries with contexts, which spread ``clients`` over that many sockets)."""
        return [opened(stack, self.dial("req", url, block=True)) for _ in range(clients)]

    def req_clients_go(self, ctl: Control, url: str, size: int, clients: int,
                       count: int, conns: int | None = None) -> None:
        """``clients`` concurrent requesters over ``conns`` connections (default: a REQ socket
        each; connections, not requests, are spread over a server's processes), timed from "go"
        with a clock shared by every process; their CPU time too."""
        with ExitStack() as stack:
            socks = self.spread_requesters(stack, url, clients, conns or clients)
            per = max(1, count // clients)
            ctl.ready(clients=clients)
            ctl.wait("go")
            t0, c0 = monotonic(), cpu_seconds()
            tasks = [self.rt.spawn(round_trips, s.send, s.recv, size, per, 0, False)
                     for s in socks]
            for t in tasks:
                self.rt.join(t)
            ctl.result(requests=per * clients, t0=t0, t1=monotonic(), cpu=cpu_seconds() - c0)
            ctl.wait("stop")

    # Many connections on one listener.

    def conns_server(self, ctl: Control, url: str) -> None:
        """The listener: its RSS before any dialer and once all are served."""
        s, bound = self.listen("rep", url)
        with closing(s):
            stop = self.serve_echo(s)
            if self.settle:
                self.rt.sleep(self.settle)
            gc.collect()
            before = rss()
            ctl.ready(url=bound)
            ctl.wait("measure")
            gc.collect()
            ctl.result(rss_before=before, rss_after=rss(), pipes=self.pipes(s))
            ctl.wait("stop")
            stop()

    def conns_dialers(self, ctl: Control, url: str, n: int) -> None:
        """``n`` req sockets, all dialed at once in the background, each sending one request
        (queued until its connection is up) and then waiting for the reply: the shape for
        libraries with their own I/O threads."""
        t0 = perf_counter()
        with ExitStack() as stack:
            socks = [opened(stack, self.dial("req", url, block=False, timeout=60.0))
                     for _ in range(n)]
            for s in socks:
                s.send(b"x")
            for s in socks:
                s.recv()
            ctl.ready(elapsed=perf_counter() - t0, served=n)
            ctl.wait("stop")

    def conns_dialers_pooled(self, ctl: Control, url: str, n: int) -> None:
        """:meth:`conns_dialers` as a pool of greenlets, :data:`POOL` dialing at a time, each
        dialing, sending and receiving in turn: the shape for libraries on gevent."""
        import gevent.pool

        with ExitStack() as stack:
            def one(_: int) -> None:
                s = opened(stack, self.dial("req", url, block=True))
                s.send(b"x")
                s.recv()

            t0 = perf_counter()
            gevent.pool.Pool(POOL).map(one, range(n))
            ctl.ready(elapsed=perf_counter() - t0, served=n)
            ctl.wait("stop")


    # Bad connections: how fast a listener disposes of them.

    def storm_listener(self, url: str) -> tuple[str, Callable[[], int], Callable[[], None]]:
        """A listener on tcp ``url`` for connections that close at once or send garbage: the URL
        it is bound to, a count of the connections it has disposed of (accepted, read and
        closed) so far, and what closes it."""
        raise NotApplicable(f"{self.name} does not count the connections it closes")

    def storm_server(self, ctl: Control, url: str) -> None:
        """:meth:`storm_listener`, reporting from "go" to "measure" the connections it disposed
        of, the seconds and its CPU time."""
        bound, disposed, close = self.storm_listener(url)
        try:
            ctl.ready(url=bound)
            ctl.wait("go")
            n0, t0, c0 = disposed(), monotonic(), cpu_seconds()
            ctl.wait("measure")
            ctl.result(disposed=disposed() - n0, elapsed=monotonic() - t0,
                       cpu=cpu_seconds() - c0)
            ctl.wait("stop")
        finally:
            close()

    def storm_clients(self, ctl: Control, url: str, greenlets: int, seconds: float) -> None:
        """``greenlets`` greenlets connecting to tcp ``url`` over and over for ``seconds`` from
        "go" and closing each connection at once: in turn, closed (a FIN), reset (a RST) and
        closed after sending garbage (plain gevent sockets, whatever the library measured)."""
        import gevent
        from gevent import socket as gsocket

        host, port = url[len("tcp://"):].rsplit(":", 1)
        addr = (host, int(port))
        made, failed = [0], [0]
        junk = bytes(range(1, 33))  # not an SP header: its first byte is not 0

        def one(i: int, end: float) -> None:
            while monotonic() < end:
                s = gsocket.socket(gsocket.AF_INET, gsocket.SOCK_STREAM)
                s.settimeout(1.0)
                try:
                    s.connect(addr)
                    if i % 3 == 1:
                        s.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_LINGER, RESET)
                    elif i % 3 == 2:
                        s.sendall(junk)
                    made[0] += 1
                except OSError:
                    failed[0] += 1  # (a full backlog: the SYN is dropped, the connect times out)
                finally:
                    s.close()
                i += 1

        ctl.ready()
        ctl.wait("go")
        end = monotonic() + seconds
        gevent.joinall([gevent.spawn(one, i, end) for i in range(greenlets)])
        ctl.result(made=made[0], failed=failed[0])
        ctl.wait("stop")


def cpu_between(ctl: Control, cpu: Callable[[], float], idle: Callable[[], object]) -> None:
    """Report ``cpu()``'s growth from "go" to "measure" as ``{"cpu": seconds}`` (nothing if
    "stop" comes first), calling ``idle`` while waiting for each word."""
    c0 = 0.0
    for word in ("go", "measure"):
        while (got := ctl.poll()) != word:
            if got == "stop":
                return
            if got is None:
                idle()
        if word == "go":
            c0 = cpu()
    ctl.result(cpu=cpu() - c0)


def opened(stack: ExitStack, sock: Sock) -> Sock:
    """``sock``, closed when ``stack`` exits."""
    stack.callback(sock.close)
    return sock


class SPLib(Lib):
    """A library with SP sockets (gsp, pynng): ``dial(url, block=...)`` and ``subscribe``."""

    def _open(self, kind: str, timeout: float | None = None) -> Any:
        """A new socket of ``kind`` whose recv gives up after ``timeout`` seconds (None: never)."""
        raise NotImplementedError

    def _dial_tls(self, s: Any, url: str) -> dict[str, Any]:
        """tls+tcp and wss: set the bench's certificates up for dialing ``url`` from ``s``;
        returns the options its ``dial`` takes for them (none: plain URLs, or set on ``s``)."""
        return {}

    def _dial_how(self, block: bool | None) -> dict[str, Any]:
        """The arguments of the library's ``dial`` for ``block`` (pynng's spelling: None tries
        now and keeps redialing, True fails fast, False dials in the background)."""
        return {"block": block}

    def dial(self, kind: str, url: str, block: bool | None = None,
             timeout: float | None = None) -> Sock:
        s = self._open(kind, timeout)
        try:
            options = self._dial_tls(s, url)
            if kind == "sub":
                s.subscribe(b"")
            s.dial(url, **self._dial_how(block), **options)
        except BaseException:
            s.close()
            raise
        sock: Sock = s
        return sock


class NngBinding(Lib):
    """A Python binding of C nng (pynng; nng 2.0's ``nng``), on native threads as its users run
    it: the binding's module, each recv's timeout in its milliseconds, and an echo that polls."""

    module = ""  # the binding's import name
    timed_out = ""  # the name of its recv-timeout exception

    def __init__(self) -> None:
        super().__init__(Threads())
        self.nng: Any = importlib.import_module(self.module)

    @staticmethod
    def recv_ms(kind: str, timeout: float | None) -> int | None:
        """The recv timeout of a socket of ``kind`` in milliseconds (None: never): ``timeout``
        seconds, and a sub gives up after a minute rather than hang on an end marker a PUB
        dropped."""
        if kind == "sub" and timeout is None:
            timeout = 60.0
        return None if timeout is None else int(timeout * 1000)

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        listening.recv_timeout = 100
        return self.serve_echo_polling(listening, getattr(self.nng, self.timed_out))
