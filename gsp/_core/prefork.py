"""One address served by several processes: :func:`gsp.prefork` and :class:`gsp.Prefork`.

A gevent process uses one core. To serve one tcp address (a REP, a PULL, a SUB fed by many
peers) from every core, the supervisor here forks ``procs`` worker processes, each with its own
socket made after the fork. With ``balance="pipes"`` (the default) the supervisor listens, and
every worker accepts on that one listening socket (``listen_fd``), taking turns so that each
holds as many connections as the others (an accept gate over counts the workers share in
memory): two clients' connections go to two workers. With ``balance="kernel"`` each worker
listens on the address itself with ``tcp_reuseport=True``, and the kernel spreads connections
by a hash of their addresses, blind to what each worker holds. The supervisor (the calling
process) serves nothing: it
restarts a worker that dies (after a short, growing delay; it gives up, raising
:class:`gsp.WorkerFailed`, when one keeps dying right after it starts), and on SIGTERM or SIGINT
it asks every worker to drain its socket (:meth:`gsp.Socket.drain`) and exit, then returns.

Fork before anything runs on the calling process's gevent hub (from the main program, before it
spawns greenlets): a forked child is a copy of the whole process, greenlets included, and a
worker must not run the parent's. The supervisor itself never runs the hub. See
docs/serving.md, "Every core".
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import socket as _stdsocket
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from ..errors import (
    AddressInUse,
    BadOption,
    Closed,
    GspError,
    InvalidAddress,
    Timeout,
    WorkerFailed,
)
from ..transport.urls import parse_host_port, split_url

if TYPE_CHECKING:
    from .socket import Socket

__all__ = ["Prefork", "PreforkWorker", "prefork"]

log = logging.getLogger("gsp.prefork")

#: URL schemes a worker can share: those whose listeners take ``tcp_reuseport``.
SCHEMES = ("tcp", "tls+tcp")
#: A worker that exits sooner than this after it started has failed to start.
MIN_UPTIME = 1.0
#: First and longest delay before a worker that died is started again (doubling in between
#: while it keeps failing to start).
BACKOFF = (0.1, 5.0)
_TICK = 0.05  # how often the supervisor looks at its workers, seconds
#: ``balance`` values: the workers take turns on one listening socket, or the kernel's
#: SO_REUSEPORT hash spreads connections among their own listening sockets.
BALANCES = ("pipes", "kernel")
#: balance="pipes": how often a worker that holds more connections than another looks again,
#: seconds; and how long a connection may wait to be accepted by a less busy worker (one that
#: is stuck in a long computation, say) before a busier one takes it.
TURN_POLL = 0.005
ACCEPT_STALL = 0.05


def _original(module: str, name: str) -> Any:
    """``module.name`` as it was before gevent's monkey patching, if it was patched: the
    supervisor blocks its thread and never runs the hub (forks must not copy a busy hub)."""
    mod = sys.modules.get("gevent.monkey")
    if mod is not None and mod.is_module_patched(module):
        return mod.get_original(module, name)
    return getattr(__import__(module), name)


class PreforkWorker:
    """What a worker process knows of itself, given to ``serve`` beside its socket.

    ``index`` is its slot, 0 to ``procs - 1`` (a restarted worker takes the slot of the one that
    died); ``generation`` counts the starts of that slot (0 for the first); ``pid`` is its
    process id; ``url`` the address every worker listens on (the real port for ``:0``);
    ``socket`` its socket; ``stopping`` is true once it was asked to stop (SIGTERM or SIGINT):
    its socket is draining, and ``recv`` on a draining REP raises :class:`gsp.Closed`.
    """

    def __init__(self, index: int, generation: int, url: str) -> None:
        self.index = index
        self.generation = generation
        self.pid = os.getpid()
        self.url = url
        self.socket: "Socket | None" = None
        self.stopping = False

    def __repr__(self) -> str:
        return (f"<gsp.PreforkWorker {self.index} pid {self.pid} generation {self.generation}"
                f"{' stopping' if self.stopping else ''}>")


class _Slot:
    """One worker slot: its process now, and its history of starts."""

    __slots__ = ("index", "pid", "generation", "started", "ready_fd", "ready", "failures", "due",
                 "last_exit")

    def __init__(self, index: int) -> None:
        self.index = index
        self.pid = 0
        self.generation = -1
        self.started = 0.0
        self.ready_fd = -1
        self.ready = False
        self.failures = 0  # consecutive exits soon after a start
        self.due = 0.0  # when a dead worker is started again (0: now)
        self.last_exit: int | None = None


class Prefork:
    """A supervisor of ``procs`` worker processes serving one tcp address (see :func:`prefork`,
    which runs one until SIGTERM or SIGINT).

    For embedding in a program that handles signals itself: :meth:`start` forks the workers and
    waits until each listens; :meth:`supervise` restarts those that die, for a while or until
    :meth:`stop`; :meth:`stop` drains and ends them all. ``with Prefork(...) as p:`` stops it at
    the end of the block. :attr:`url` is the address (with the real port for ``:0``), :attr:`pids`
    the workers' process ids by slot and :attr:`restarts` the restarts so far.
    """

    def __init__(self, protocol: str, url: str, serve: Callable[["Socket", PreforkWorker], Any],
                 *, procs: int | None = None, drain_timeout: float = 10.0,
                 max_restarts: int = 5, start_timeout: float = 30.0,
                 on_ready: Callable[["Prefork"], Any] | None = None, balance: str = "pipes",
                 **options: Any) -> None:
        if procs is None:
            procs = os.cpu_count() or 1
        if isinstance(procs, bool) or not isinstance(procs, int) or procs < 1:
            raise BadOption(f"procs must be an int of at least 1 (worker processes), "
                            f"not {procs!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise BadOption(f"max_restarts must be an int of at least 0, not {max_restarts!r}")
        for name, value in (("drain_timeout", drain_timeout), ("start_timeout", start_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise BadOption(f"{name} must be a number of seconds above 0, not {value!r}")
        if not callable(serve):
            raise BadOption(f"serve must be a callable (socket, worker), not {serve!r}")
        if balance not in BALANCES:
            raise BadOption(f"balance must be one of {', '.join(map(repr, BALANCES))}, "
                            f"not {balance!r}")
        if "listen" in options or "dial" in options:
            raise BadOption("prefork makes each worker's socket listen on url: give no "
                            "listen= or dial=")
        if options.get("tcp_reuseport", True) is not True:
            raise BadOption("prefork's workers share the address with tcp_reuseport=True: "
                            "it cannot be turned off")
        scheme, _ = split_url(url)
        if scheme not in SCHEMES:
            raise InvalidAddress(
                f"gsp.prefork serves a tcp:// or tls+tcp:// address (several processes listen "
                f"on it with tcp_reuseport), not {url!r}; to fan out over ipc, run a device "
                f"in front of the workers (docs/serving.md, 'Every core')")
        self.protocol = protocol
        self.serve = serve
        self.procs = procs
        self.drain_timeout = float(drain_timeout)
        self.max_restarts = max_restarts
        self.start_timeout = float(start_timeout)
        self.on_ready = on_ready
        self.balance = balance
        self.options = dict(options, tcp_reuseport=True)
        self.url = url
        self.restarts = 0
        self._given = url
        self._hold: _stdsocket.socket | None = None
        # balance="pipes": the connections each worker holds, -1 for a slot with no worker
        # accepting; shared memory, mapped before the forks (see _Turns).
        self._loads: memoryview | None = None
        self._slots = [_Slot(i) for i in range(procs)]
        self._started = False
        self._stopping = False
        self._stopped = False
        self._ppid = os.getpid()
        self._check_protocol()

    def _check_protocol(self) -> None:
        """An unknown protocol or a bad option fails here, in the caller, not in each worker."""
        from .socket import socket  # (a socket that never listens: no hub runs, nothing to fork)
        socket(self.protocol, **self.options).close()

    # -- the caller's side ---------------------------------------------------------------------

    @property
    def pids(self) -> dict[int, int]:
        """The process id of each live worker, by slot."""
        return {s.index: s.pid for s in self._slots if s.pid}

    def start(self) -> "Prefork":
        """Hold the address (its port for ``:0``), fork every worker and wait until each one
        listens (``start_timeout``); a worker that cannot raises :class:`gsp.WorkerFailed` (and
        every worker is stopped)."""
        if self._started:
            raise GspError("this gsp.Prefork was started already")
        self._started = True
        self._hold_address()
        if self.balance == "pipes":
            self._loads = memoryview(mmap.mmap(-1, 8 * self.procs)).cast("q")
            for i in range(self.procs):
                self._loads[i] = -1
        for slot in self._slots:
            self._fork(slot)
        deadline = time.monotonic() + self.start_timeout
        try:
            while not all(s.ready for s in self._slots):
                if self._stopping:  # a signal while starting: supervise() returns at once
                    return self
                self._check(starting=True)
                if time.monotonic() > deadline:
                    slow = [s.index for s in self._slots if not s.ready]
                    raise WorkerFailed(f"gsp.prefork: worker {slow[0]} did not listen on "
                                       f"{self.url} within {self.start_timeout:g} s",
                                       index=slow[0], exitcode=None)
                _original("time", "sleep")(_TICK / 5)
        except BaseException:
            self.stop()
            raise
        log.info("prefork: %d workers listening on %s (pids %s)", self.procs, self.url,
                 ", ".join(map(str, self.pids.values())))
        if self.on_ready is not None:
            self.on_ready(self)
        return self

    def supervise(self, timeout: float | None = None) -> bool:
        """Restart the workers that die until :meth:`stop` (from a signal handler, say) or for
        ``timeout`` seconds; whether it was stopped. Raises :class:`gsp.WorkerFailed` (having
        stopped every worker) when a worker keeps dying right after it starts."""
        sleep = _original("time", "sleep")
        end = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._stopping:
                self._check(starting=False)
                now = time.monotonic()
                if end is not None and now >= end:
                    return False
                nap = _TICK if end is None else min(_TICK, end - now)
                sleep(max(nap, 0.0))
        except WorkerFailed:
            self.stop()
            raise
        self.stop()
        return True

    def request_stop(self) -> None:
        """Ask :meth:`supervise` to stop every worker and return (safe from a signal handler)."""
        self._stopping = True

    def stop(self, timeout: float | None = None) -> None:
        """Ask every worker to drain its socket and exit (SIGTERM), wait for them up to
        ``timeout`` (default: ``drain_timeout`` and 5 s more), kill those still there, and let
        go of the address."""
        self._stopping = True
        if self._stopped:
            return
        self._stopped = True
        if timeout is None:
            timeout = self.drain_timeout + 5.0
        live = [s for s in self._slots if s.pid]
        for s in live:
            _signal(s.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        sleep = _original("time", "sleep")
        while any(s.pid for s in live) and time.monotonic() < deadline:
            for s in live:
                if s.pid and self._reap(s) is not None:
                    if s.last_exit:
                        log.warning("prefork: worker %d (pid %s) stopped with %s", s.index,
                                    s.pid, _how(s.last_exit))
                    self._forget(s)
            sleep(_TICK / 5)
        for s in live:
            if s.pid:
                log.warning("prefork: worker %d (pid %d) did not stop within %g s: killed",
                            s.index, s.pid, timeout)
                _signal(s.pid, signal.SIGKILL)
                _waitpid(s.pid, 0)
                self._forget(s)
        for s in self._slots:
            self._forget(s)
        if self._hold is not None:
            self._hold.close()
            self._hold = None

    def kill(self) -> None:
        """Kill every worker at once (SIGKILL; a second SIGINT does this), and let go."""
        for s in self._slots:
            if s.pid:
                _signal(s.pid, signal.SIGKILL)
        self.stop(timeout=5.0)

    def __enter__(self) -> "Prefork":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<gsp.Prefork {self.protocol} {self.url} procs={self.procs} pids={self.pids}>"

    # -- the supervisor's work -----------------------------------------------------------------

    def _hold_address(self) -> None:
        """Bind the address in the supervisor: ``:0`` gets its real port, and the port stays this
        server's while workers restart. With ``balance="pipes"`` the supervisor listens on it
        too, and the workers accept on that socket (they inherit it); with ``"kernel"`` it only
        binds, with SO_REUSEPORT, and each worker listens with a socket of its own."""
        scheme, rest = split_url(self._given)
        host, port = parse_host_port(self._given, listening=True)
        try:  # (gevent's own resolver and sockets would run the hub before the forks)
            infos = _original("socket", "getaddrinfo")(
                host or None, port, type=_stdsocket.SOCK_STREAM, flags=_stdsocket.AI_PASSIVE)
        except OSError as exc:
            raise InvalidAddress(f"cannot resolve {self._given!r}: {exc}") from None
        family, kind, proto, _, addr = infos[0]
        hold: _stdsocket.socket = _original("socket", "socket")(family, kind, proto)
        shared = self.balance == "pipes"
        try:
            hold.setsockopt(_stdsocket.SOL_SOCKET,
                            _stdsocket.SO_REUSEADDR if shared else _stdsocket.SO_REUSEPORT, 1)
            hold.bind(addr)
            if shared:
                hold.listen(1024)
        except OSError as exc:
            hold.close()
            who = "another listener" if shared else \
                "a listener without tcp_reuseport, or another user's"
            raise AddressInUse(f"gsp.prefork cannot hold {self._given!r}: {exc} ({who} has "
                               f"it)") from None
        self._hold = hold
        hold.set_inheritable(False)  # the workers are forked: they have it without exec
        if port == 0:
            real = hold.getsockname()[1]
            netloc, slash, path = rest.partition("/")
            hostpart = netloc.rsplit(":", 1)[0] if netloc.rsplit(":", 1)[-1].isdigit() else netloc
            self.url = f"{scheme}://{hostpart}:{real}{slash}{path}"

    def _fork(self, slot: _Slot) -> None:
        rfd, wfd = os.pipe()
        slot.generation += 1
        for stream in (sys.stdout, sys.stderr):  # or the child would write the parent's again
            try:
                stream.flush()
            except Exception:
                pass
        pid = _original("os", "fork")()
        if pid == 0:  # the worker: it never returns from here
            os.close(rfd)
            self._child(slot.index, slot.generation, wfd)
        os.close(wfd)
        os.set_blocking(rfd, False)
        slot.pid, slot.ready_fd, slot.ready = pid, rfd, False
        slot.started = time.monotonic()
        log.info("prefork: worker %d started (pid %d, generation %d)", slot.index, pid,
                 slot.generation)

    def _check(self, starting: bool) -> None:
        """Note which workers listen now, reap those that exited, start again those due."""
        now = time.monotonic()
        for s in self._slots:
            if s.pid:
                if not s.ready:
                    s.ready = _read_ready(s.ready_fd)
                status = self._reap(s)
                if status is None:
                    if s.ready and s.failures and now - s.started >= MIN_UPTIME:
                        s.failures = 0  # up and serving a while: it started well
                    continue
                self._died(s, now, starting)
            elif not self._stopping and now >= s.due:
                self.restarts += 1
                self._fork(s)

    def _died(self, s: _Slot, now: float, starting: bool) -> None:
        code, pid, lived, ready = s.last_exit, s.pid, now - s.started, s.ready
        self._forget(s)
        quick = lived < MIN_UPTIME or not ready
        s.failures = s.failures + 1 if quick else 0
        if (starting and not ready) or s.failures > self.max_restarts:
            what = ("before it listened" if not ready else
                    f"{s.failures} times in a row within {MIN_UPTIME:g} s of its start")
            raise WorkerFailed(f"gsp.prefork: worker {s.index} (pid {pid}) exited with "
                               f"{_how(code)} {what}; its traceback, if any, is on stderr",
                               index=s.index, exitcode=code)
        delay = BACKOFF[0] if not s.failures else min(BACKOFF[0] * 2 ** s.failures, BACKOFF[1])
        s.due = now + delay
        log.warning("prefork: worker %d (pid %d) exited with %s after %.1f s: starting it again "
                    "in %.1f s", s.index, pid, _how(code), lived, delay)

    def _reap(self, s: _Slot) -> int | None:
        """The worker's exit status if it exited (a negative signal number if killed)."""
        try:
            pid, status = _waitpid(s.pid, os.WNOHANG)
        except ChildProcessError:
            s.last_exit = -1
            return -1
        if pid == 0:
            return None
        s.last_exit = os.waitstatus_to_exitcode(status)
        return s.last_exit

    def _forget(self, s: _Slot) -> None:
        if s.ready_fd >= 0:
            os.close(s.ready_fd)
            s.ready_fd = -1
        s.pid = 0
        s.ready = False
        if self._loads is not None:
            self._loads[s.index] = -1  # no worker there: the others do not wait for it

    # -- the worker's side ---------------------------------------------------------------------

    def _child(self, index: int, generation: int, ready_fd: int) -> None:
        code = 1
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):  # until the worker's own handlers
                signal.signal(sig, signal.SIG_DFL)
            for s in self._slots:  # the supervisor's ends of the other workers' pipes
                if s.ready_fd >= 0:
                    os.close(s.ready_fd)
            if self._hold is not None and self._loads is None:
                self._hold.close()  # balance="kernel": the worker listens on its own
            _die_with_parent(self._ppid)
            code = self._work(PreforkWorker(index, generation, self.url), ready_fd)
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)

    def _work(self, worker: PreforkWorker, ready_fd: int) -> int:
        import gevent

        from .socket import socket
        gevent.reinit()  # this process's own poller (gsp's fork hook does it only with sockets)
        turns: _Turns | None = None
        if self._loads is None:
            sock = socket(self.protocol, listen=self.url, **self.options)
        else:
            assert self._hold is not None
            sock = socket(self.protocol, **self.options)
            try:
                turns = _Turns(self._loads, worker.index, self._hold.fileno(), sock)
                sock.listen(self.url, listen_fd=self._hold.fileno(), accept_gate=turns)
            except BaseException:
                sock.close()
                raise
        worker.socket = sock
        drainer: list[gevent.Greenlet[Any, Any]] = []

        def stop() -> None:
            if worker.stopping:
                return
            worker.stopping = True
            if turns is not None:
                turns.leave()  # draining: the other workers take the new connections
            drainer.append(gevent.spawn(_drain, sock, self.drain_timeout))

        handlers = [gevent.signal_handler(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)]
        os.write(ready_fd, b"r")
        os.close(ready_fd)
        try:
            self.serve(sock, worker)
        except Closed:
            if not worker.stopping:
                raise
        finally:
            if drainer:
                drainer[0].join()
            for h in handlers:
                h.cancel()
            sock.close()
        return 0


def prefork(protocol: str, url: str, serve: Callable[["Socket", PreforkWorker], Any], *,
            procs: int | None = None, drain_timeout: float = 10.0, max_restarts: int = 5,
            start_timeout: float = 30.0, on_ready: Callable[[Prefork], Any] | None = None,
            balance: str = "pipes", **options: Any) -> None:
    """Serve ``url`` (``tcp://`` or ``tls+tcp://``) from ``procs`` worker processes (default: one
    per CPU) until SIGTERM or SIGINT, then return::

        def serve(rep: gsp.Socket, worker: gsp.PreforkWorker) -> None:
            while True:
                rep.send(handle(rep.recv()))

        gsp.prefork("rep", "tcp://0.0.0.0:5555", serve, procs=4)

    Each worker is forked from the calling process (call it from the main thread, before the
    program runs anything on its gevent hub), makes ``gsp.socket(protocol, **options)`` and calls
    ``serve(socket, worker)``. How the workers share the address is ``balance``'s: with
    ``"pipes"`` (the default) the supervisor listens on it and the workers accept on that one
    socket in turns, each taking a connection only while it holds no more than any other (a
    connection left waiting 50 ms by a busy worker goes to the next); with ``"kernel"`` each
    worker listens with ``tcp_reuseport=True`` and the kernel spreads connections by a hash of
    their addresses (fine for many short connections; a few long ones may all land on one
    worker). A worker that dies is
    started again (after 0.1 s, doubling up to 5 s while it keeps dying within 1 s of its
    start), at most ``max_restarts`` times in a row; when it dies that way once more, or a
    worker cannot listen at start, every worker is stopped and :class:`gsp.WorkerFailed`
    raised. On SIGTERM
    or SIGINT every worker is asked to stop: its socket drains (``drain_timeout``: requests
    taken are answered, queued sends flushed), so ``serve``'s ``recv`` raises
    :class:`gsp.Closed`, which ends the worker cleanly; a second signal kills them. ``on_ready``
    is called with the :class:`Prefork` once every worker listens (its ``url`` has the real
    port of ``:0``). A bad ``procs``, option or protocol, or a URL that is not tcp, raises
    :class:`gsp.BadOption`, :class:`gsp.UnknownPlugin` or :class:`gsp.InvalidAddress` before
    anything forks.
    """
    p = Prefork(protocol, url, serve, procs=procs, drain_timeout=drain_timeout,
                max_restarts=max_restarts, start_timeout=start_timeout, on_ready=on_ready,
                balance=balance, **options)

    def on_signal(signum: int, frame: Any) -> None:
        if p._stopping:  # a second signal: stop waiting for the drain
            for pid in p.pids.values():
                _signal(pid, signal.SIGKILL)
        p.request_stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        p.start()
        p.supervise()
    finally:
        p.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- helpers -------------------------------------------------------------------------------------

class _Turns:
    """A worker's accept gate for ``balance="pipes"``: the workers accept on one listening
    socket, and one accepts its next connection only while it holds no more connections (pipes
    and handshakes) than any other. ``loads`` is the count of each slot, in memory shared by the
    supervisor and every worker (-1: no worker accepting there); each worker writes its own.

    A worker with more than another waits until a connection is in the backlog (its hub watches
    the listening socket: nothing runs while none comes), then looks again every
    :data:`TURN_POLL` seconds while one is there; if a connection waits for
    :data:`ACCEPT_STALL` seconds all the same (the less busy worker is stuck, or gone), it
    accepts it. A count that goes up is written before the next accept; one that goes down, when
    a pipe detaches.
    """

    def __init__(self, loads: memoryview, index: int, fd: int, sock: "Socket") -> None:
        from .events import PipeEvent
        self.loads = loads
        self.index = index
        self.fd = fd  # the shared listening socket (this worker's listener accepts on a dup)
        self.sock = sock
        self._select = _original("select", "select")
        loads[index] = 0
        detached = PipeEvent.DETACHED

        def on_event(event: Any, pipe: Any) -> None:
            if event is detached:  # a count that goes down (one that goes up: at the gate)
                self._publish()

        sock.on_pipe_event(on_event)

    def leave(self) -> None:
        self.loads[self.index] = -1

    def _publish(self) -> int:
        """This worker's connections (pipes and handshakes), written to its slot unless it left."""
        sock = self.sock
        held = len(sock.pipes) + sum(lst.handshakes for lst in sock.listeners)
        if self.loads[self.index] >= 0:
            self.loads[self.index] = held
        return held

    def __call__(self, listener: Any) -> None:
        import gevent
        from gevent.socket import wait_read
        loads, me = self.loads, self.index
        stall_at: float | None = None  # when a connection seen waiting is this worker's to take
        while True:
            if loads[me] < 0:  # leaving (draining): the listener is about to close
                return
            mine = self._publish()
            others = [n for i, n in enumerate(loads) if i != me and n >= 0]
            if not others or mine <= min(others):
                return
            if not self._select([self.fd], [], [], 0)[0]:  # no connection waits: sleep until one
                stall_at = None
                wait_read(self.fd)
                continue
            # (the clock, not a count of sleeps: this worker's hub may be busy with its own
            # connections, so a sleep can last well beyond TURN_POLL)
            now = time.monotonic()
            if stall_at is None:
                stall_at = now + ACCEPT_STALL
            elif now >= stall_at:  # the others have left it there: take it
                return
            gevent.sleep(TURN_POLL)


def _drain(sock: "Socket", timeout: float) -> None:
    try:
        sock.drain(timeout=timeout)
    except Timeout:
        log.warning("prefork: worker %d: the drain did not finish within %g s: closed",
                    os.getpid(), timeout)
    except Closed:
        pass


def _read_ready(fd: int) -> bool:
    try:
        return bool(os.read(fd, 1))
    except BlockingIOError:
        return False


def _waitpid(pid: int, flags: int) -> tuple[int, int]:
    result: tuple[int, int] = _original("os", "waitpid")(pid, flags)
    return result


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _how(code: int | None) -> str:
    if code is None:
        return "no exit"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _die_with_parent(ppid: int) -> None:
    """Linux: the worker gets SIGTERM (and drains) if the supervisor dies without stopping it."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != ppid:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
