"""The runner: starts worker processes for one workload and one library, relays the
go/measure/stop words between them, turns their raw figures into rates and percentiles, and
takes the median of repeated runs (:func:`measure`); :func:`run_cases` does that for every case
and library, with progress on stderr.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import gsp

from . import tls
from .cases import Case
from .ctl import NotApplicable
from .report import fmt

__all__ = ["BenchError", "NotApplicable", "measure", "run_cases", "run_plan"]


class BenchError(Exception):
    """A run failed (a worker crashed, reported an error or overran its time)."""


def _worker_env() -> dict[str, str]:
    """The environment for a worker: it must import the very gsp and gsp_bench this process
    runs, whatever the working directory or the installed copies."""
    env = dict(os.environ)
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(f)))  # pkg/__init__.py, pkg/runner.py
             for f in (gsp.__file__ or "", __file__)]
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys(p for p in (*roots, env.get("PYTHONPATH")) if p))
    return env


class Worker:
    """One ``python -m gsp_bench.worker`` process and its JSON-lines control channel."""

    def __init__(self, lib: str, role: str, deadline: float, malloc: str = "default",
                 **args: Any) -> None:
        self.name = f"{lib} {role}"
        self.deadline = deadline
        self._err = tempfile.TemporaryFile()
        spec = json.dumps({"lib": lib, "role": role, "malloc": malloc, "args": args})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gsp_bench.worker", spec], env=_worker_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        self._buf = b""

    def _stderr_tail(self) -> str:
        self._err.seek(0)
        lines = self._err.read().decode(errors="replace").strip().splitlines()
        return "\n".join(lines[-6:])

    def expect(self, key: str, within: float | None = None) -> Any:
        """Wait for the worker's ``{key: ...}`` line (``ready`` or ``result``). ``within``:
        give up after that many seconds and return None (for a figure a library's worker may
        not report: a server's CPU time)."""
        out = self.proc.stdout
        deadline = self.deadline if within is None else \
            min(self.deadline, time.monotonic() + within)
        assert out is not None
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # stray output from a library
                if "na" in msg:
                    raise NotApplicable(msg["na"])
                if "error" in msg:
                    raise BenchError(f"{self.name}: {msg['error']}\n{self._stderr_tail()}")
                if key in msg:
                    return msg[key]
            left = deadline - time.monotonic()
            if left <= 0:
                if within is not None:
                    return None
                raise BenchError(f"{self.name}: no {key!r} before the time limit")
            ready, _, _ = select.select([out], [], [], left)
            if ready:
                chunk = os.read(out.fileno(), 65536)
                if not chunk:
                    rc = self.proc.wait()
                    raise BenchError(f"{self.name} exited ({rc}) before {key!r}\n"
                                     f"{self._stderr_tail()}")
                self._buf += chunk

    def say(self, word: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(word.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # already gone: finish() reports nothing more useful

    def finish(self, grace: float = 15.0) -> None:
        self.say("stop")
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass  # a stdin the worker never read: its buffered "stop" has nowhere to go
        self._err.close()


class BenchRun:
    """The workers of one measurement; all of them are stopped (or killed) on exit."""

    def __init__(self, lib: str, timeout: float, tmpdir: str, malloc: str = "default") -> None:
        self.lib = lib
        self.deadline = time.monotonic() + timeout
        self.tmpdir = tmpdir
        self.malloc = malloc
        self.workers: list[Worker] = []

    def start(self, role: str, **args: Any) -> Worker:
        w = Worker(self.lib, role, self.deadline, self.malloc, **args)
        self.workers.append(w)
        return w

    def address(self, transport: str) -> str:
        """A URL to listen on: tcp on port 0 (each library reports the port bound); tls+tcp,
        ws and wss on a port free now (not every library can report one it bound)."""
        if transport == "tcp":
            return "tcp://127.0.0.1:0"
        if transport == "ipc":
            return f"ipc://{tempfile.mktemp(prefix='b', suffix='.sock', dir=self.tmpdir)}"
        if transport == "tls+tcp":
            return f"tls+tcp://127.0.0.1:{free_port()}"
        if transport in ("ws", "wss"):
            return f"{transport}://127.0.0.1:{free_port()}/bench"
        raise ValueError(f"no address for {transport!r}")

    def __enter__(self) -> "BenchRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        for w in reversed(self.workers):
            w.finish()


def free_port() -> int:
    """A tcp port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- workloads: each returns a dict of figures ------------------------------------------------------

def thr(run: BenchRun, transport: str, size: int, count: int) -> dict[str, Any]:
    """Push/pull throughput, nng local_thr/remote_thr semantics (receiver times first..last)."""
    n = count - 1  # messages timed (the first one starts the clock)
    if transport == "inproc":  # one process: its CPU time is both sides'
        r = run.start("inproc_thr", size=size, count=count).expect("result")
        cpu = {"cpu_ns": r["cpu"] / n * 1e9, "faults": r["faults"] / n}
    else:
        recv = run.start("thr_recv", url=run.address(transport), size=size, count=count)
        url = recv.expect("ready")["url"]
        send = run.start("thr_send", url=url, size=size, count=count)
        recv.expect("started")
        send.say("go")
        r = recv.expect("result")
        send.say("measure")
        sent = send.expect("result")
        cpu = {"cpu_ns_send": sent["cpu"] / n * 1e9, "cpu_ns_recv": r["cpu"] / n * 1e9,
               "faults_recv": r["faults"] / n}
    rate = n / r["elapsed"]
    return {"msg_s": rate, "mb_s": rate * size / 1e6, "count": count, "elapsed": r["elapsed"],
            **cpu}


def lat(run: BenchRun, transport: str, size: int, count: int, warmup: int = 100) -> dict[str, Any]:
    """Req/rep round trips, nng local_lat/remote_lat semantics plus percentiles."""
    if transport == "inproc":  # one process: its CPU time is both ends'
        r = run.start("inproc_lat", size=size, count=count, warmup=warmup).expect("result")
        cpu = r.get("cpu")
    else:
        srv = run.start("lat_server", url=run.address(transport), size=size,
                        count=count + warmup, warmup=warmup)
        url = srv.expect("ready")["url"]
        r = run.start("lat_client", url=url, size=size, count=count,
                      warmup=warmup).expect("result")
        cpu = _both(r, srv.expect("result", within=10.0))
    s = sorted(r["samples"])
    us = 1e6
    return {"mean_us": statistics.fmean(s) * us,
            **{f"{name}_us": percentile(s, q) * us for name, q in PERCENTILES.items()},
            "count": count, "cpu_us_rt": None if cpu is None else cpu / count * us}


#: The round trips' percentiles ``lat`` records (``p50_us``, …): the distribution the round-trip
#: chart draws (a box from p25 to p75, whiskers from p10 to p99).
PERCENTILES = {"min": 0.0, "p10": 0.10, "p25": 0.25, "p50": 0.50, "p75": 0.75, "p90": 0.90,
               "p99": 0.99, "p999": 0.999, "max": 1.0}


def percentile(ordered: list[float], q: float) -> float:
    """The sample below which a fraction ``q`` of the sorted samples lie (nearest rank: p50 of
    an even count is the upper middle one, as nng's perf tools report it)."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _both(client: dict[str, Any], server: dict[str, Any] | None) -> float | None:
    """CPU seconds of client and server (user + system, each process's every thread), or None
    when either did not say."""
    if server is None or client.get("cpu") is None or server.get("cpu") is None:
        return None
    return float(client["cpu"]) + float(server["cpu"])


def pubsub(run: BenchRun, transport: str, size: int, count: int, subs: int) -> dict[str, Any]:
    """1 PUB → ``subs`` SUBs (in one process): messages delivered per second over all subs."""
    pub = run.start("pub", url=run.address(transport), size=size, count=count)
    url = pub.expect("ready")["url"]
    sub = run.start("subs", url=url, n=subs, count=count)
    sub.expect("ready")  # every subscriber has a warm-up message: subscriptions are in place
    pub.say("go")
    r = sub.expect("result")
    pub.say("stop")
    return {"msg_s": r["delivered"] / r["elapsed"], "delivered": r["delivered"],
            "delivered_pct": 100.0 * r["delivered"] / r["expected"], "subs": subs}


def reqrep(run: BenchRun, transport: str, size: int, count: int, clients: int,
           procs: int | None = None, client_procs: int = 1,
           conns: int | None = None) -> dict[str, Any]:
    """One REP echoing for ``clients`` concurrent REQ clients: requests answered per second.
    With ``procs`` (``--procs``) the REP runs in that many processes (one unless more), the
    clients in ``client_procs`` processes, timed from one "go" to the last one's end."""
    if procs is not None:
        return reqrep_procs(run, transport, size, count, clients, procs, client_procs,
                            conns or clients)
    if transport == "inproc":  # one process: its CPU time is the server's and the clients'
        r = run.start("inproc_reqrep", size=size, clients=clients, count=count).expect("result")
        return {"req_s": r["requests"] / r["elapsed"], "requests": r["requests"],
                "clients": clients, "cpu_us_req": r["cpu"] / r["requests"] * 1e6}
    srv = run.start("rep_server", url=run.address(transport))
    url = srv.expect("ready")["url"]
    r = run.start("req_clients", url=url, size=size, clients=clients,
                  count=count).expect("result")
    srv.say("measure")
    cpu = _both(r, srv.expect("result", within=10.0))
    return {"req_s": r["requests"] / r["elapsed"], "requests": r["requests"], "clients": clients,
            "cpu_us_req": None if cpu is None else cpu / r["requests"] * 1e6}


def together(srv: Worker, workers: list[Worker]) -> tuple[list[Any], Any]:
    """Once every worker is ready, "go" to the server and to them, their results, then
    "measure" to the server: its result."""
    for w in workers:
        w.expect("ready")
    for w in [srv, *workers]:
        w.say("go")
    results = [w.expect("result") for w in workers]
    srv.say("measure")
    return results, srv.expect("result")


def reqrep_procs(run: BenchRun, transport: str, size: int, count: int, clients: int, procs: int,
                 client_procs: int, conns: int) -> dict[str, Any]:
    if procs > 1 and transport != "tcp":
        raise NotApplicable("several processes share a tcp address only (tcp_reuseport)")
    srv = run.start("rep_server_procs", url=run.address(transport), procs=procs)  # see there
    url = srv.expect("ready")["url"]
    def split(n: int) -> list[int]:
        return [n // client_procs + (i < n % client_procs) for i in range(client_procs)]

    workers = [run.start("req_clients_go", url=url, size=size, clients=n,
                         count=count * n // clients, conns=max(c, 1))
               for n, c in zip(split(clients), split(conns)) if n]
    rs, served = together(srv, workers)
    server_cpu = served["cpu"]
    requests = sum(r["requests"] for r in rs)
    elapsed = max(r["t1"] for r in rs) - min(r["t0"] for r in rs)
    return {"req_s": requests / elapsed, "requests": requests, "elapsed": elapsed,
            "cpu_us_server": server_cpu / requests * 1e6,
            "cpu_us_clients": sum(r["cpu"] for r in rs) / requests * 1e6,
            "clients": clients, "procs": procs, "client_procs": len(workers)}


def conns(run: BenchRun, transport: str, conns: int, per_process: int = 2500) -> dict[str, Any]:
    """``conns`` dialers (spread over processes of at most ``per_process``) on one REP: time until
    each has had a reply, and the listener's RSS growth per pipe."""
    srv = run.start("conns_server", url=run.address(transport))
    url = srv.expect("ready")["url"]
    left, dialers = conns, []
    while left > 0:
        n = min(left, per_process)
        dialers.append(run.start("conns_dialers", url=url, n=n))
        left -= n
    reports = [d.expect("ready") for d in dialers]
    srv.say("measure")
    r = srv.expect("result")
    grown = r["rss_after"] - r["rss_before"]
    return {"connect_s": max(x["elapsed"] for x in reports), "rss_kib": grown / conns / 1024,
            "served": sum(x["served"] for x in reports), "pipes": r["pipes"], "conns": conns}


def storm(run: BenchRun, transport: str, seconds: float, clients: int,
          greenlets: int) -> dict[str, Any]:
    """``clients`` processes of ``greenlets`` greenlets each open connections to one listener
    as fast as they go for ``seconds``, closing each at once (a FIN, a RST, or after sending
    garbage): the connections the listener disposed of per second meanwhile (more were made
    than it took: the rest wait in its backlog), and its CPU time per connection."""
    if transport != "tcp":
        raise NotApplicable("the storm is over tcp")
    srv = run.start("storm_server", url=run.address(transport))
    url = srv.expect("ready")["url"]
    workers = [run.start("storm_clients", url=url, greenlets=greenlets, seconds=seconds)
               for _ in range(clients)]
    made, r = together(srv, workers)
    n = max(r["disposed"], 1)
    return {"conn_s": r["disposed"] / r["elapsed"], "cpu_us_conn": r["cpu"] / n * 1e6,
            "disposed": r["disposed"], "made": sum(m["made"] for m in made),
            "failed": sum(m["failed"] for m in made), "elapsed": r["elapsed"]}


WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "thr": thr, "lat": lat, "pubsub": pubsub, "reqrep": reqrep, "conns": conns, "storm": storm}


def measure(lib: str, workload: str, params: dict[str, Any], timeout: float,
            repeat: int, malloc: str = "default") -> dict[str, Any]:
    """Run one case ``repeat`` times; figures are the medians (all runs kept in ``runs``).
    ``malloc="tuned"``: every worker process calls :func:`gsp.tune_allocator` first, whatever its
    library."""
    fn = WORKLOADS[workload]
    tmpdir = tempfile.mkdtemp(prefix="gsp-bench-", dir="/tmp")
    runs: list[dict[str, Any]] = []
    secure = params.get("transport") in tls.SECURE
    try:
        if secure:  # the workers (and native tools) find the certificates through the env
            tls.make(tmpdir)
            os.environ[tls.ENV] = tmpdir
        for _ in range(repeat):
            with BenchRun(lib, timeout, tmpdir, malloc) as run:
                runs.append(fn(run, **params))
    finally:
        if secure:
            os.environ.pop(tls.ENV, None)
        shutil.rmtree(tmpdir, ignore_errors=True)
    med: dict[str, Any] = {}
    for k, v in runs[0].items():
        vals = [r[k] for r in runs]
        med[k] = statistics.median(vals) if all(isinstance(x, (int, float)) for x in vals) else v
    med["runs"] = runs if repeat > 1 else None
    return med


class Progress:
    """``[done/total elapsed] what`` on stderr: rewritten in place on a terminal, one line per
    finished run otherwise."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.done = 0
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()

    def show(self, text: str, end: bool = False) -> None:
        if self.quiet:
            return
        line = f"[{self.done + (0 if end else 1)}/{self.total} {time.monotonic() - self.t0:5.0f}s] {text}"
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line + ("\n" if end else ""))
        elif end:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run_cases(cases: list[Case], libs: list[str], timeout: float, repeat: int,
              quiet: bool = False, malloc: str = "default") -> list[dict[str, Any]]:
    """Every case with every library: one result record each (the JSON ``results``)."""
    return run_plan([(case, libs) for case in cases], timeout, repeat, quiet, malloc)


def run_plan(plan: list[tuple[Case, list[str]]], timeout: float, repeat: int,
             quiet: bool = False, malloc: str = "default") -> list[dict[str, Any]]:
    """Each case with its own libraries: one result record each (the JSON ``results``)."""
    prog = Progress(sum(len(libs) for _, libs in plan), quiet)
    results = []
    for case, libs in plan:
        for lib in libs:
            prog.show(f"{case.label} · {lib} …")
            rec: dict[str, Any] = {"case": case.label, "workload": case.workload,
                                   "params": case.params, "lib": lib, "figures": None}
            try:
                rec["figures"] = measure(lib, case.workload, case.params, timeout, repeat,
                                         malloc)
                shown = ", ".join(f"{fmt(rec['figures'][k])} {u}" for k, u in case.rows)
            except NotApplicable:
                rec["na"] = True
                shown = "n/a"
            except BenchError as exc:
                rec["error"] = str(exc)
                shown = "error: " + str(exc).splitlines()[0]
            prog.done += 1
            prog.show(f"{case.label} · {lib}: {shown}", end=True)
            results.append(rec)
    return results
