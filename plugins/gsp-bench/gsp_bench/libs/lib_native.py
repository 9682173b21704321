"""C nng and Go mangos: each role runs in the library's own native tool (see
:mod:`gsp_bench.native`), built on first use; this worker only relays the control channel.

The tool prints the same JSON lines a worker does (``ready``, ``started``, ``result``,
``error``) and reads the same words, so the figures mean what every other library's do; the
relay passes words on as they arrive (a blocking wait, no polling) and reports each line to the
:class:`~gsp_bench.ctl.Control`. Workloads the tools do not play (inproc, pub/sub, many
connections) are :class:`~gsp_bench.ctl.NotApplicable`.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
from typing import Any, NoReturn

from .. import native
from ..ctl import Control, NotApplicable
from .base import Lib, cpu_between
from .loops import process_cpu
from .runtime import Threads

#: The transports each tool plays (C nng's TLS from the bench's certificates, $GSP_BENCH_TLS;
#: the mangos tool has no TLS configuration).
SCHEMES = {"nng": ("tcp", "ipc", "ws", "tls+tcp", "wss"), "mangos": ("tcp", "ipc", "ws")}

#: Tools whose ``req_clients`` takes a fifth argument, CONNS: its clients are then contexts
#: spread over that many REQ sockets, the layout of gsp's clients under ``--conns``.
CONTEXTS = frozenset({"mangos"})


class Native(Lib):
    def __init__(self, name: str) -> None:
        super().__init__(Threads())
        self.name = name
        self.exe = native.tool(name)  # raises native.Unavailable, saying why

    def _speaks(self, url: str) -> None:
        scheme = url.split("://", 1)[0]
        if scheme not in SCHEMES[self.name]:
            raise NotApplicable(f"the {self.name} tool plays {', '.join(SCHEMES[self.name])}, "
                                f"not {scheme}")

    def _run(self, ctl: Control, role: str, *args: object) -> None:
        """Run ``role`` in the tool, relaying the control channel both ways until it exits."""
        self._speaks(str(args[0]))
        p = subprocess.Popen([self.exe, role, *map(str, args)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)  # its stderr is this worker's
        assert p.stdin is not None and p.stdout is not None
        done = threading.Event()
        relay = threading.Thread(target=_words, args=(ctl, p.stdin, done), daemon=True)
        relay.start()
        error = None
        try:
            for line in p.stdout:
                msg = json.loads(line)
                if "ready" in msg:
                    ctl.ready(**msg["ready"])
                elif "started" in msg:
                    ctl.started()
                elif "result" in msg:
                    ctl.result(**msg["result"])
                elif "error" in msg:
                    error = msg["error"]
        finally:
            rc = p.wait()
            done.set()
            relay.join()
            p.stdout.close()
        if error or rc:
            raise RuntimeError(f"{self.name}_perf {role}: {error or f'exit status {rc}'}")

    def thr_recv(self, ctl: Control, url: str, size: int, count: int) -> None:
        self._run(ctl, "thr_recv", url, size, count)

    def thr_send(self, ctl: Control, url: str, size: int, count: int) -> None:
        self._run(ctl, "thr_send", url, size, count)

    def lat_server(self, ctl: Control, url: str, size: int, count: int, warmup: int = 0) -> None:
        self._run(ctl, "lat_server", url, size, count, warmup)

    def lat_client(self, ctl: Control, url: str, size: int, count: int, warmup: int) -> None:
        self._run(ctl, "lat_client", url, size, count, warmup)

    def rep_server(self, ctl: Control, url: str) -> None:
        self._run(ctl, "rep_server", url)

    def req_clients(self, ctl: Control, url: str, size: int, clients: int, count: int) -> None:
        self._run(ctl, "req_clients", url, size, clients, count)

    # ``reqrep --procs``: the tool serves from one process (its own threads); its CPU time is
    # read from /proc, and its clients start on "go" (the tool dials when it starts: the
    # connections are set up within the timed span, as few as the clients).

    def rep_server_procs(self, ctl: Control, url: str, procs: int) -> None:
        self._speaks(url)
        p = subprocess.Popen([self.exe, "rep_server", url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
        assert p.stdin is not None and p.stdout is not None
        try:
            ctl.ready(**json.loads(p.stdout.readline())["ready"])
            cpu_between(ctl, lambda: process_cpu(p.pid), lambda: time.sleep(0.005))
            ctl.wait("stop")
        finally:
            try:
                p.stdin.write(b"stop\n")
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()

    def req_clients_go(self, ctl: Control, url: str, size: int, clients: int, count: int,
                       conns: int | None = None) -> None:
        ctl.ready(clients=clients)
        ctl.wait("go")
        args = [self.exe, "req_clients", url, str(size), str(clients), str(count)]
        if self.name in CONTEXTS and conns:
            args.append(str(conns))  # contexts over that many sockets, as gsp's clients
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert p.stdout is not None
        result: dict[str, Any] = {}
        cpu = 0.0
        for line in p.stdout:
            msg = json.loads(line)
            if "result" in msg:
                result = msg["result"]
                cpu = process_cpu(p.pid)  # (it closes its sockets and exits next)
            elif "error" in msg:
                result = {}
                break
        rc = p.wait()
        p.stdout.close()
        if not result or rc:
            raise RuntimeError(f"{self.name}_perf req_clients: exit status {rc}")
        t1 = time.monotonic()
        ctl.result(requests=result["requests"], t0=t1 - result["elapsed"], t1=t1, cpu=cpu)
        ctl.wait("stop")

    def _na(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotApplicable(f"the {self.name} tool plays thr, lat and reqrep, not in one process")

    inproc_thr = inproc_lat = inproc_reqrep = pub = subs = conns_server = conns_dialers = _na


def _words(ctl: Control, to: Any, done: threading.Event) -> None:
    """Pass the words ``ctl`` hears on to the tool until it exits. A worker's words come on
    stdin: wait for it to be readable rather than poll (the console's control says "stop" at
    once, so its waits end as a worker's would on "stop")."""
    while not done.is_set():
        word = ctl.poll()
        if word is None:
            select.select([sys.stdin], [], [], 0.1)
            continue
        try:
            to.write(word.encode() + b"\n")
            to.flush()
        except OSError:
            return  # the tool has exited
        if word == "stop":
            break
    try:
        to.close()
    except OSError:
        pass
