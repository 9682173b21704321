"""A Spark standalone cluster on this machine, from what the pip-installed pyspark ships, and the
gsp sink and source moving rows through it while one of its workers is SIGKILLed: gsp-spark's
test harness (not part of the installed package).

    python plugins/gsp-spark/tests/spark_standalone.py [--rows N] [--paths sink-push,...]

:class:`StandaloneCluster` starts a master and workers as processes of their own with pyspark's
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and ``...worker.Worker``; the pip
distribution has no ``sbin/start-*.sh``), everything bound to 127.0.0.1 on random ports, and
:meth:`StandaloneCluster.kill_worker` SIGKILLs a worker as losing its machine would: the Worker
JVM and everything under it (its executor JVM, that executor's Python daemon and workers).

Every path moves N rows and loses a worker in the middle of the run, at a point where that
worker's executor is known to be working:

* ``sink-push`` / ``sink-req``: ``df.write.format("gsp")`` (2 partitions) with ``protocol`` push
  / req to a PULL / raw REP receiver in this process. A probe (a Python UDF) adds to each row
  the pid of the executor JVM that made it, and holds each task halfway through its partition;
  once the receiver has rows from the first executor to hold, that executor's worker is killed
  and the hold lifted. Spark runs the lost task again on the surviving worker, which sends its
  whole partition again: every row arrives (at-least-once; duplicates counted), the rows the
  lost task never sent only through the retry, and :class:`gsp_spark.Deduplicator` passes each
  row exactly once.
* ``source-pull`` / ``source-rep``: PUSH / REQ producers in this process send N msgpack maps to
  ``spark.readStream.format("gsp")`` (``protocol`` pull / rep) → ``memory`` sink. A third of the
  way in, the next micro-batch's tasks hold at their start (a probe in the query's plan, a file
  they wait on) until one executor's worker is killed; the micro-batch's lost task runs again on
  the survivor. Every row reaches the sink (duplicates counted).

Printed per path: rows/s over the whole run (kill and recovery included), the recovery times
(kill → the lost task's retry started; kill → the run complete), duplicates seen.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import signal
import socket as pysock
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import gevent
import msgpack
from pyspark import cloudpickle

import gsp
from gsp.testing import free_port
from gsp_spark import KEY, Deduplicator, HubThread, local_session, unpack
from gsp_spark._udf import python_udf

# The executors' Python workers cannot import this module (it is not installed, and only the
# driver has the tests on its path): the probe and the functions it calls travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PATHS = ("sink-push", "sink-req", "source-pull", "source-rep")

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")


def spark_home() -> str:
    """pyspark's install directory: the pip distribution's SPARK_HOME (``bin/spark-class``, the
    jars)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (read from /proc), parents first."""
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and its descendants, all stopped first (so none forks meanwhile); returns
    the pids signalled."""
    stopped: list[int] = []
    while True:
        new = [p for p in process_tree(pid) if p not in stopped]
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            stopped.append(p)
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return stopped


@dataclass
class Daemon:
    """A master or worker process started by :class:`StandaloneCluster`, or a
    :class:`ConnectServer`'s."""

    name: str
    proc: subprocess.Popen[bytes]
    log: str
    killed_at: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the process and everything under it (if it still runs); wait for it (30 s)."""
        if self.proc.poll() is None:
            kill_tree(self.pid)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed
            pass

    def executor(self) -> int | None:
        """The pid of the executor JVM this worker runs, if any."""
        for p in process_tree(self.pid)[1:]:
            if b"CoarseGrainedExecutorBackend" in _cmdline(p):
                return p
        return None


class StandaloneCluster:
    """A Spark standalone master and workers on ``host``, each a process of its own started with
    pyspark's ``bin/spark-class``; every port random (the master's URL is read from its log).
    Logs, work directories and the executors' scratch space (``SPARK_LOCAL_DIRS``: shuffle and
    block files, which a killed executor never removes) go under ``workdir``, so removing it
    removes all they wrote. :meth:`close` kills everything it started (also the executors and
    Python workers under the workers)."""

    def __init__(self, workdir: str, host: str = "127.0.0.1", cores: int = 1,
                 memory: str = "1g", python: str | None = None) -> None:
        self.workdir, self.host, self.cores, self.memory = workdir, host, cores, memory
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []
        self.url = ""
        home = spark_home()
        self._spark_class = os.path.join(home, "bin", "spark-class")
        self.local_dir = os.path.join(workdir, "local")
        self._env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP=host,
                         SPARK_LOCAL_DIRS=self.local_dir,
                         PYSPARK_PYTHON=python or os.environ.get("PYSPARK_PYTHON")
                         or sys.executable,
                         SPARK_DAEMON_MEMORY="256m",
                         # No REST submission server (it would take port 6066); a dead worker
                         # is dropped after 15 s without heartbeats (the default is 60 s).
                         SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false "
                                           "-Dspark.worker.timeout=15")
        os.makedirs(self.local_dir, exist_ok=True)

    def _start(self, name: str, *args: str) -> Daemon:
        return self._spawn(name, [self._spark_class, *args], self._env)

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str]) -> Daemon:
        """Run ``argv`` as a daemon of this cluster, its output in ``<workdir>/<name>.log``."""
        log = os.path.join(self.workdir, f"{name}.log")
        with open(log, "wb") as out:
            # A session of its own: a ^C at the terminal reaches the driver, not the daemons.
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return Daemon(name, proc, log)

    @staticmethod
    def _wait_log(d: Daemon, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            m = rx.search(d.log_text())
            if m:
                return m
            if d.proc.poll() is not None:
                raise RuntimeError(f"{d.name} exited ({d.proc.returncode}): "
                                   f"{d.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{d.name} did not log {pattern!r} within {timeout} s; "
                                   f"see {d.log}")
            time.sleep(0.1)

    def start(self, workers: int = 2, wait: bool = True, timeout: float = 120
              ) -> "StandaloneCluster":
        """Start the master, then ``workers`` workers at once; with ``wait``, return when all are
        registered (else once the master is up: a driver can start meanwhile, and
        :meth:`ensure_workers` waits for the workers and its executors)."""
        try:
            self.master = self._start("master", "org.apache.spark.deploy.master.Master",
                                      "--host", self.host, "--port", "0", "--webui-port", "0")
            self.url = self._wait_log(self.master, _MASTER_URL.pattern, timeout).group(1)
            new = [self._launch_worker() for _ in range(workers)]
            for w in new if wait else []:
                self._wait_log(w, "Successfully registered with master", timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _launch_worker(self) -> Daemon:
        n = len(self.workers)
        w = self._start(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.url,
                        "--host", self.host, "--port", "0", "--webui-port", "0",
                        "--cores", str(self.cores), "--memory", self.memory,
                        "--work-dir", os.path.join(self.workdir, f"work-{n}"))
        self.workers.append(w)
        return w

    def add_worker(self) -> Daemon:
        """Start one more worker, without waiting for it (:meth:`ensure_workers` waits)."""
        return self._launch_worker()

    def ensure_workers(self, n: int = 2, timeout: float = 120) -> list[int]:
        """Start workers until ``n`` are alive, wait until all are registered with the master and
        each runs an executor registered with the driver; returns the executor JVM pids."""
        while len(self.live_workers()) < n:
            self._launch_worker()
        for w in self.live_workers():
            self._wait_log(w, "Successfully registered with master", timeout)
        return self.wait_executors(timeout)

    def live_workers(self) -> list[Daemon]:
        return [w for w in self.workers if w.killed_at is None and w.proc.poll() is None]

    def worker_of(self, pid: int) -> Daemon:
        """The live worker whose process tree holds ``pid`` (an executor JVM, a Python worker)."""
        for w in self.live_workers():
            if pid in process_tree(w.pid):
                return w
        raise LookupError(f"pid {pid} is under none of the live workers")

    def kill_worker(self, w: Daemon) -> float:
        """SIGKILL worker ``w`` with its executor and Python workers (its machine lost); returns
        the time (``time.time()``) just before the first signal."""
        w.killed_at = time.time()
        kill_tree(w.pid)
        w.proc.wait(30)
        return w.killed_at

    def wait_executors(self, timeout: float = 120) -> list[int]:
        """Wait until every live worker runs an executor registered with its driver (the
        executor's own log, ``stderr`` in its work directory, says so); returns their pids."""
        deadline = time.monotonic() + timeout
        while True:
            pids = [w.executor() for w in self.live_workers()]
            ready = [p for p in pids if p is not None and _registered(p)]
            if len(ready) == len(pids):
                return ready
            if time.monotonic() > deadline:
                raise RuntimeError(f"executors registered on {len(ready)} of {len(pids)} "
                                   f"workers after {timeout} s")
            time.sleep(0.2)

    def close(self) -> None:
        """Kill every process this cluster started, and all under them."""
        for d in [*self.workers, *([self.master] if self.master else [])]:
            d.stop()

    def __enter__(self) -> "StandaloneCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ConnectServer:
    """A Spark Connect server whose driver runs on ``cluster``: pyspark's own
    ``sbin/start-connect-server.sh --wait`` (the class it runs, ``SparkConnectServer``, through
    ``spark-submit``, in the foreground), a process of its own bound to the cluster's host on a
    free port, with ``config`` as more Spark configuration (``spark.cores.max`` and the like).
    Its log goes to ``<workdir>/connect-server.log``; :meth:`close` kills it and all under it
    (its driver JVM, the Python processes beside it). Clients connect to :attr:`url`
    (``SparkSession.builder.remote(url)``; :meth:`session`)."""

    def __init__(self, cluster: StandaloneCluster, config: Mapping[str, str] | None = None
                 ) -> None:
        self.cluster = cluster
        self.port = free_port(cluster.host)
        self.url = f"sc://{cluster.host}:{self.port}"
        self.config = {
            "spark.connect.grpc.binding.address": cluster.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": cluster.host, "spark.driver.bindAddress": cluster.host,
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": cluster._env["PYSPARK_PYTHON"],
            "spark.log.level": "WARN",
            **(config or {})}
        self.daemon: Daemon | None = None

    def start(self, timeout: float = 180) -> "ConnectServer":
        """Start the server; return once it accepts clients (its gRPC port accepts
        connections)."""
        script = os.path.join(spark_home(), "sbin", "start-connect-server.sh")
        logs = os.path.join(self.cluster.workdir, "connect-server")
        os.makedirs(logs, exist_ok=True)
        conf = [a for k, v in self.config.items() for a in ("--conf", f"{k}={v}")]
        # The cluster's daemons get 256 MiB; Spark's launcher gives the Connect server that too
        # if set, too little for a driver: the driver's memory (1 GiB unless config says).
        env = {k: v for k, v in self.cluster._env.items() if k != "SPARK_DAEMON_MEMORY"}
        env.update(SPARK_LOG_DIR=logs, SPARK_PID_DIR=logs)
        self.daemon = d = self.cluster._spawn(
            "connect-server", ["bash", script, "--wait", "--master", self.cluster.url, *conf], env)
        proc = d.proc
        try:
            # Up once its gRPC port accepts connections (at WARN it logs nothing then).
            _wait(lambda: _accepts(self.cluster.host, self.port) or proc.poll() is not None,
                  timeout, f"the Connect server on port {self.port} (log: {d.log})", every=0.2)
            if proc.poll() is not None:
                raise RuntimeError(f"the Connect server exited ({proc.returncode}): "
                                   f"{d.log_text()[-2000:]}")
        except BaseException:
            self.close()
            raise
        return self

    def session(self) -> Any:
        """A new Spark Connect client session of this server."""
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        return ConnectSession.builder.remote(self.url).create()

    def close(self) -> None:
        """Kill the server and everything under it."""
        if self.daemon is not None:
            self.daemon.stop()

    def __enter__(self) -> "ConnectServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    with pysock.socket() as s:
        s.settimeout(1)
        try:
            s.connect((host, port))
            return True
        except OSError:
            return False


def _registered(executor: int) -> bool:
    """Whether the executor JVM ``executor`` logged its registration with the driver (in
    ``stderr`` of its working directory, where its worker puts its output)."""
    try:
        with open(os.path.join(os.readlink(f"/proc/{executor}/cwd"), "stderr"),
                  errors="replace") as f:
            return "Successfully registered with driver" in f.read()
    except OSError:
        return False


# --- the probe that runs in the executors' Python workers ---------------------------------------

def executor_jvm() -> int:
    """The pid of the executor JVM above this Python worker (0 if none: the driver)."""
    pid = os.getppid()
    while pid > 1:
        if b"CoarseGrainedExecutorBackend" in _cmdline(pid):
            return pid
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return 0
    return 0


_rows: dict[int, int] = {}  # rows this Python worker has tagged, per task attempt (reused worker)
_executor: list[int] = []  # this Python worker's executor JVM, once known


def probe(control: str, hold_row: int, _: Any) -> int:
    """A Python UDF (Spark calls it row by row, in the executors) returning
    :func:`executor_jvm`. At each task attempt's first row it notes the attempt as a file
    ``task-<stage>-<partition>-<attempt>-<executor>`` in ``control`` holding its start time. A
    first attempt that reaches row ``hold_row`` of its partition while ``control/hold`` exists
    writes ``held-...`` too and waits there (at most 120 s) until ``hold`` is gone: the rows
    before it are on their way, the rest not yet."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # not in a task
        return 0
    attempt_id = ctx.taskAttemptId()
    n = _rows.get(attempt_id)
    if n is None:
        n = 0
        if not _executor:
            _executor.append(executor_jvm())
        with open(os.path.join(control, f"task-{_tag(ctx)}"), "w") as f:
            f.write(repr(time.time()))
    _rows[attempt_id] = n + 1
    if n == hold_row and ctx.attemptNumber() == 0:
        hold = os.path.join(control, "hold")
        if os.path.exists(hold):
            with open(os.path.join(control, f"held-{_tag(ctx)}"), "w") as f:
                f.write(repr(time.time()))
            deadline = time.monotonic() + 120
            while os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.01)
    return _executor[0]


def _tag(ctx: Any) -> str:
    return f"{ctx.stageId()}-{ctx.partitionId()}-{ctx.attemptNumber()}-{_executor[0]}"


def probed(df: Any, control: str, hold_row: int = 0) -> Any:
    """``df`` with column ``w``: the executor JVM's pid, from :func:`probe`."""
    from pyspark.sql.types import LongType

    tag = python_udf(df, functools.partial(probe, control, hold_row), LongType())
    return df.withColumn("w", tag.asNondeterministic()(df["id"]))


def _attempts(control: str, prefix: str = "task-") -> list[tuple[int, int, int, int, float]]:
    """(stage, partition, attempt, executor, start time) of every task the probe noted."""
    out = []
    for name in os.listdir(control):
        if name.startswith(prefix):
            stage, part, attempt, w = (int(x) for x in name[len(prefix):].split("-"))
            with open(os.path.join(control, name)) as f:
                out.append((stage, part, attempt, w, float(f.read() or 0)))
    return out


# --- the runs ------------------------------------------------------------------------------------

@dataclass
class Run:
    """One path's outcome: what arrived, where the kill landed and how long recovery took."""

    path: str
    rows: int
    started: float = 0.0  # time.time() of the first row sent (the source) or the job's start
    first_task: float = 0.0  # time.time() the first task of the run started
    killed: float = 0.0  # time.time() just before the SIGKILL
    retry_started: float = 0.0  # time.time() the lost task's retry started on the survivor
    finished: float = 0.0  # time.time() every row had arrived
    received: int = 0  # rows that arrived, duplicates included
    distinct: int = 0  # distinct rows among them
    deduplicated: int | None = None  # rows Deduplicator passed (sinks)
    rows_before_kill: int = 0  # rows from the killed executor that had arrived before the kill
    recovered: int = 0  # sinks: rows that first arrived from a retried task
    retried_tasks: list[tuple[int, int]] = field(default_factory=list)  # (stage, partition)
    victim: int = 0  # the killed executor's JVM pid
    survivors: set[int] = field(default_factory=set)  # executor pids that delivered rows
    seq_duplicates: int | None = None  # source into a file sink: spool records held twice

    missing: int = 0  # rows of range(rows) that never arrived
    extra: int = 0  # distinct rows that arrived but were never sent

    def count(self, ids: list[int]) -> None:
        got = set(ids)
        self.received, self.distinct = len(ids), len(got)
        self.missing = sum(1 for n in range(self.rows) if n not in got)
        self.extra = len(got) - (self.rows - self.missing)

    @property
    def ok(self) -> bool:
        """At-least-once held (no row missing, none made up), a task of the killed worker ran
        again on a survivor, Deduplicator (sinks) passed every row exactly once, and a file
        sink (sources) holds each spool record once."""
        return (self.missing == 0 and self.extra == 0 and bool(self.retried_tasks)
                and self.deduplicated in (None, self.rows) and self.seq_duplicates in (None, 0))

    @property
    def duplicates(self) -> int:
        return self.received - self.distinct

    @property
    def rate(self) -> float:
        return self.rows / (self.finished - self.started)

    def report(self) -> str:
        dedup = "" if self.deduplicated is None else \
            f", after Deduplicator {self.deduplicated:,}" + \
            (" (exactly once)" if self.deduplicated == self.rows == self.distinct else "")
        if self.seq_duplicates is not None:
            dedup += f", {self.seq_duplicates:,} spool records held twice in the sink"
        return (f"{self.path:<11} {self.rows:,} rows in {self.finished - self.started:.2f} s = "
                f"{self.rate:,.0f} rows/s with a worker SIGKILLed (first task after "
                f"{self.first_task - self.started:.2f} s, the kill after "
                f"{self.killed - self.started:.2f} s); recovery: retry started "
                f"{self.retry_started - self.killed:.2f} s after the kill, all rows in "
                f"{self.finished - self.killed:.2f} s; {self.received:,} received, "
                f"{self.duplicates:,} duplicates, {self.missing:,} missing{dedup}; "
                f"{len(self.retried_tasks)} task(s) re-run on the survivor"
                + (f", {self.recovered:,} rows first delivered by it" if self.recovered else ""))


def free_tcp_url(host: str = "127.0.0.1") -> str:
    return f"tcp://{host}:{free_port(host)}"


def _wait(cond: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def _retry_of(control: str, victim: int, killed: float) -> tuple[list[tuple[int, int]], float]:
    """The tasks that ran on ``victim`` and ran again on another executor after ``killed``, and
    when the first such retry started."""
    attempts = _attempts(control)
    if not attempts:
        return [], 0.0
    lost = {(s, p) for s, p, _, w, _ in attempts if w == victim}
    retries = [(s, p, t) for s, p, a, w, t in attempts
               if (s, p) in lost and a > 0 and w != victim and t >= killed]
    return sorted({(s, p) for s, p, _ in retries}), min((t for *_, t in retries), default=0.0)


def _replace_after_retry(cluster: StandaloneCluster, control: str, run: Run,
                         timeout: float = 120) -> None:
    """Once a task of the killed executor has started again on the survivor, start a worker in
    place of the lost one (it registers while the run goes on; the next run waits for it).
    Not before: the retry would be free to wait for the newcomer's executor instead."""
    _wait(lambda: bool(_retry_of(control, run.victim, run.killed)[0]), timeout,
          "the lost task's retry on the surviving worker")
    cluster.add_worker()


class Receiver:
    """A listening gsp socket (``pull``, ``sub`` subscribed to everything, or a raw ``rep``
    acknowledging every message: the peer of a ``req`` sink) in a thread of its own, keeping
    every message with its arrival time; ``options`` go to the socket. The sink runs here use
    it, and so do gsp-spark's tests."""

    def __init__(self, protocol: str, **options: Any) -> None:
        self.got: list[tuple[float, bytes]] = []
        self.url = ""
        ready = threading.Event()
        ack = protocol == "rep"

        def receive(stop: threading.Event) -> None:
            with gsp.socket(protocol, raw=ack, listen="tcp://127.0.0.1:0", recv_timeout=0.05,
                            **options) as s:
                if protocol == "sub":
                    s.subscribe(b"")
                self.url = s.listeners[0].url
                ready.set()
                while not stop.is_set():
                    try:
                        m = s.recv_msg()
                    except gsp.Timeout:
                        continue
                    self.got.append((time.time(), m.body))
                    if ack:
                        s.send_msg(gsp.Message(b"", m.header))

        self._thread = HubThread(receive, f"{protocol}-receiver")
        if not ready.wait(10):
            self.close()
            raise RuntimeError("the receiver did not start")

    @property
    def messages(self) -> list[bytes]:
        """The bodies received so far, oldest first (a copy)."""
        return [body for _, body in list(self.got)]

    def rows_from(self, w: int) -> int:
        """Rows received so far from executor ``w``."""
        return sum(1 for _, body in list(self.got) if unpack(body)["w"] == w)

    def distinct_ids(self, seen: set[int], looked: list[int]) -> int:
        """Add the ids of messages not looked at yet to ``seen``; its size."""
        fresh = self.got[looked[0]:]
        looked[0] += len(fresh)
        seen.update(unpack(body)["id"] for _, body in fresh)
        return len(seen)

    def close(self) -> None:
        self._thread.join(10)

    def __enter__(self) -> "Receiver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_sink(spark: Any, cluster: StandaloneCluster, rows: int, protocol: str,
             workdir: str, partitions: int = 2) -> Run:
    """``rows`` rows written with ``format("gsp")`` (push or req) to a receiver here. Every
    task's first attempt holds halfway through its partition; once the receiver has rows from the
    executor of the first to hold, that executor's worker is killed and the hold lifted."""
    run = Run(f"sink-{protocol}", rows)
    control = tempfile.mkdtemp(prefix="ctl-", dir=workdir)
    rx = Receiver("rep" if protocol == "req" else "pull", recv_buffer=4096)
    job: dict[str, Any] = {}
    try:
        df = (spark.range(rows, numPartitions=partitions)
              .selectExpr("id", "concat('user-', id % 1000) AS user",
                          "cast(id AS double) * 0.25 AS amount")
              .transform(lambda d: probed(d, control, rows // partitions // 2)))

        def write() -> None:
            try:
                (df.write.format("gsp").option("url", rx.url).option("protocol", protocol)
                 .mode("append").save())
            except BaseException as exc:
                job["error"] = exc
            job["done"] = time.time()

        open(os.path.join(control, "hold"), "w").close()
        run.started = time.time()
        writer = threading.Thread(target=write, name=f"{run.path}-job")
        writer.start()
        run.victim = _held(control, lambda: "done" in job)
        # The rows before the hold were sent in Arrow batches of 10,000: the receiver gets some.
        _wait(lambda: rx.rows_from(run.victim) > 0 or "done" in job, 60,
              "rows from the held executor")
        run.rows_before_kill = rx.rows_from(run.victim)
        run.killed = cluster.kill_worker(cluster.worker_of(run.victim))
        os.unlink(os.path.join(control, "hold"))
        _replace_after_retry(cluster, control, run)
        writer.join(180)
        if writer.is_alive() or "error" in job:
            raise RuntimeError(f"{run.path}: the write failed or hung after the kill: "
                               f"{job.get('error')}")
        seen: set[int] = set()
        looked = [0]
        # push: save() returns when the tasks' sockets are flushed; the last rows may still fly.
        _wait(lambda: rx.distinct_ids(seen, looked) >= rows, 60, f"all {rows} rows received")
    finally:
        rx.close()
    # In arrival order: each row's first arrival, and what Deduplicator passes.
    run.retried_tasks, run.retry_started = _retry_of(control, run.victim, run.killed)
    retried = {p for _, p in run.retried_tasks}
    dedup, first_seen, ids = Deduplicator(), dict[int, float](), list[int]()
    for t, body in rx.got:
        row = unpack(body)
        ids.append(row["id"])
        if row["id"] not in first_seen:
            first_seen[row["id"]] = t
            run.recovered += row["w"] != run.victim and row[KEY][2] in retried
        run.survivors.add(row["w"])
        dedup.rows(body)
    run.count(ids)
    run.deduplicated = dedup.accepted
    run.finished = max(first_seen.values())
    run.first_task = min((a[4] for a in _attempts(control)), default=0.0)
    run.survivors.discard(run.victim)
    shutil.rmtree(control, ignore_errors=True)
    return run


def _held(control: str, ended: Callable[[], bool], timeout: float = 120) -> int:
    """Wait for the first task to hold; return its executor."""
    _wait(lambda: bool(_attempts(control, "held-")) or ended(), timeout, "a task holding")
    held = _attempts(control, "held-")
    if not held:
        raise RuntimeError("the job ended with no task holding")
    return min(held, key=lambda a: a[4])[3]


def _producers(url: str, rows: int, protocol: str, sent: list[int],
               producers: int = 2, window: int = 64) -> Callable[[threading.Event], None]:
    """A HubThread body: ``producers`` PUSH sockets (or REQ, ``window`` contexts each, every
    message acknowledged by the source) sending ``{"id": n}`` for n < ``rows``; ``sent[0]``
    counts the messages sent (REQ: acknowledged)."""
    def produce(stop: threading.Event) -> None:
        def push(k: int) -> None:
            with gsp.socket("push", dial=url, send_timeout=60) as s:
                for n in range(k, rows, producers):
                    s.send(msgpack.packb({"id": n}))
                    sent[0] += 1

        def req(k: int) -> None:
            with gsp.socket("req", dial=url, resend_time=5) as s:
                def lane(ctx: Any, ns: range) -> None:
                    for n in ns:
                        ctx.send(msgpack.packb({"id": n}))
                        ctx.recv()  # the source spooled (and fsynced) it
                        sent[0] += 1
                mine = range(k, rows, producers)
                gevent.joinall([gevent.spawn(lane, s.open_context(), mine[j::window])
                                for j in range(window)], raise_error=True)
        one = push if protocol == "pull" else req
        gevent.joinall([gevent.spawn(one, k) for k in range(producers)], raise_error=True)
    return produce


def run_source(spark: Any, cluster: StandaloneCluster, rows: int, protocol: str,
               workdir: str, sink: str = "memory") -> Run:
    """Producers here send ``rows`` messages to a ``format("gsp")`` streaming query on the cluster
    (→ ``sink``: ``memory``, or ``parquet``, Spark's exactly-once file sink, in ``workdir``); a
    third of the way in, the next micro-batch's tasks hold at their start until one executor's
    worker is killed. With ``parquet`` the run also counts the spool records (``_seq``) the sink
    holds more than once (:attr:`Run.seq_duplicates`; exactly once: 0)."""
    run = Run(f"source-{protocol}" + ("" if sink == "memory" else f"-{sink}"), rows)
    control = tempfile.mkdtemp(prefix="ctl-", dir=workdir)
    url, name = free_tcp_url(), f"gsp_standalone_{protocol}_{os.getpid()}"
    out = os.path.join(control, "out")
    schema = "id BIGINT" if sink == "memory" else "id BIGINT, _seq BIGINT"
    w = (spark.readStream.format("gsp").schema(schema).option("url", url)
         .option("protocol", protocol).option("spool", os.path.join(control, "spool")).load()
         .transform(lambda d: probed(d, control))
         .writeStream.option("checkpointLocation", os.path.join(control, "ck"))
         .trigger(processingTime="200 milliseconds"))
    if sink == "memory":
        q = w.format("memory").queryName(name).start()
    else:
        q = w.format(sink).option("path", out).start()
    sent = [0]
    prod: HubThread | None = None

    def table() -> Any:
        return spark.sql(f"SELECT * FROM {name}") if sink == "memory" else \
            spark.read.format(sink).load(out)

    def distinct() -> int:
        try:
            return int(table().select("id").distinct().count())
        except Exception as exc:  # no file in the sink yet: its schema cannot be inferred
            if sink != "memory" and "UNABLE_TO_INFER_SCHEMA" in str(exc):
                return 0
            raise

    try:
        _wait(lambda: q.lastProgress is not None, 120, "the query's first trigger")
        run.started = time.time()
        prod = HubThread(_producers(url, rows, protocol, sent), f"{run.path}-producers")
        _wait(lambda: sent[0] >= rows // 3 or not prod.is_alive(), 120, f"{rows // 3} sent")
        open(os.path.join(control, "hold"), "w").close()
        run.victim = _held(control, lambda: q.exception() is not None)
        run.killed = cluster.kill_worker(cluster.worker_of(run.victim))
        os.unlink(os.path.join(control, "hold"))
        _replace_after_retry(cluster, control, run)

        def all_in() -> bool:
            if q.exception() is not None:
                raise RuntimeError(f"{run.path}: the query failed: {q.exception()}")
            return distinct() >= rows

        # Each look is a Spark job on the driver: not too often, or the query itself slows.
        _wait(all_in, 180, f"all {rows} rows in the {sink} sink", every=0.25)
        run.finished = time.time()
        prod.join(60)
        got = table().select("id", "w", *(["_seq"] if sink != "memory" else [])).collect()
        ids = [r.id for r in got]
        run.survivors = {r.w for r in got}
        if sink != "memory":
            seqs = [r._seq for r in got]
            run.seq_duplicates = len(seqs) - len(set(seqs))
    finally:
        q.stop()
        if prod is not None and prod.is_alive():
            prod.stop.set()
            prod.join(30)
    run.count(ids)
    run.retried_tasks, run.retry_started = _retry_of(control, run.victim, run.killed)
    run.first_task = min((a[4] for a in _attempts(control)), default=0.0)
    run.survivors.discard(run.victim)
    if sink == "memory":
        spark.sql(f"DROP VIEW IF EXISTS {name}")
    shutil.rmtree(control, ignore_errors=True)
    return run


def session(cluster: StandaloneCluster, app: str = "gsp-standalone",
            config: Mapping[str, str] | None = None) -> Any:
    """A driver session on ``cluster`` (driver bound to its host; ``config``: more Spark
    configuration), returned once every worker has an executor registered with it (the workers
    may still be starting when this is called: the driver's start overlaps theirs)."""
    spark = local_session(cluster.url, app, host=cluster.host, config=config)
    try:
        cluster.ensure_workers(len(cluster.workers))
    except BaseException:
        spark.stop()
        raise
    return spark


def run_path(spark: Any, cluster: StandaloneCluster, path: str, rows: int,
             workdir: str) -> Run:
    """Run ``path`` (one of :data:`PATHS`) once on ``cluster``, whole again first (a worker in
    place of one lost before, with its executor up), losing a worker midway."""
    cluster.ensure_workers(2)
    kind, protocol = path.split("-")
    if kind == "sink":
        return run_sink(spark, cluster, rows, protocol, workdir)
    return run_source(spark, cluster, rows, protocol, workdir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--paths", default=",".join(PATHS),
                    help=f"comma-separated, from: {', '.join(PATHS)}")
    ap.add_argument("--workdir", help="logs, work directories, spools (default: a temporary "
                                      "directory, removed at the end)")
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        ap.error(f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    workdir = args.workdir or tempfile.mkdtemp(prefix="gsp-standalone-")
    failed = 0
    t0 = time.monotonic()
    with StandaloneCluster(workdir) as cluster:
        cluster.start(2, wait=False)
        spark = session(cluster)
        print(f"cluster and driver up in {time.monotonic() - t0:.1f} s: master {cluster.url}, workers "
              f"{[w.pid for w in cluster.workers]}; logs in {workdir}", flush=True)
        try:
            for path in paths:
                run = run_path(spark, cluster, path, args.rows, workdir)
                failed += not run.ok
                print(("OK   " if run.ok else "FAIL ") + run.report(), flush=True)
        finally:
            spark.stop()
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
