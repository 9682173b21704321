"""Fixtures for the gsp-spark tests (the repository's tests/conftest.py does not reach this
folder; this folder's conftest.py sets the JVMs' options and starts the background jobs of
``jobs.py``): the leak check every test gets, ``ipc_dir``, helpers that run Spark calls from
other threads, a sink's receiver, and checks that more than one module (local and
standalone-cluster sessions) runs. Test modules import the fixtures they need by name."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import gevent
import pytest
import spark_standalone as standalone
from pyspark.errors import StreamingQueryException
from rep_driver import rep_query

import gsp
from gsp_spark import HubThread, local_session, unpack


def _socket_fds() -> set[tuple[int, str]]:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            out.add((int(name), target))
    return out


def _callback_server_fds(fds: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """Those of ``fds`` that are py4j's callback server's (its listener and the JVM's connections
    to it): Spark's, opened by the first ``foreachBatch`` and kept for the session."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    server = getattr(getattr(sc, "_gateway", None), "_callback_server", None)
    port = getattr(server, "port", None)
    if not port:
        return set()
    out = set()
    for fd, target in fds:
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                name = s.getsockname()
        except OSError:
            continue
        if isinstance(name, tuple) and name[1] == port:
            out.add((fd, target))
    return out


def _live_greenlets() -> list[gevent.Greenlet]:
    """gevent Greenlets that are scheduled or running (found independently of gsp, via gc)."""
    return [o for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead]


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every test must leave no live greenlet and no socket fd behind (Spark's py4j callback
    server aside)."""
    before_fds = _socket_fds()
    before_glets = {id(g) for g in _live_greenlets()}
    yield
    deadline = time.monotonic() + 3.0
    while True:
        gevent.sleep(0.01)
        glets = [g for g in _live_greenlets() if id(g) not in before_glets]
        fds = _socket_fds() - before_fds
        fds -= _callback_server_fds(fds)
        if not glets and not fds or time.monotonic() > deadline:
            break
    assert not glets, f"greenlets left running: {glets}"
    assert not fds, f"socket fds left open: {sorted(fds)}"


@pytest.fixture
def ipc_dir() -> Iterator[str]:
    """A short directory for ipc socket files (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="gsp-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def in_thread(fn: Callable[[], Any], timeout: float = 240) -> Any:
    """``fn()`` in a new plain ``threading.Thread`` (a JVM thread of its own under PySpark's pinned
    threads, with no active session); returns its result or raises its exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, name="user-thread")
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} still running after {timeout} s"
    if "error" in box:
        raise box["error"]
    return box.get("result")


def through_gsp(spark: Any, run: Callable[[Callable[[], Any]], Any], url: str, tmp: str,
                name: str, rows: int = 100) -> list[int]:
    """A streaming query reading ``format("gsp")`` at ``url`` into memory table ``name``, and a
    batch write of ``rows`` rows with ``format("gsp")`` into it, each started through ``run``
    (which runs a function in some thread); returns the column ``n`` the query received."""
    def read() -> Any:
        return (spark.readStream.format("gsp").schema("n BIGINT").option("url", url)
                .option("spool", os.path.join(tmp, "spool")).load()
                .writeStream.format("memory").queryName(name)
                .option("checkpointLocation", os.path.join(tmp, "ck"))
                .trigger(processingTime="300 milliseconds").start())

    def write() -> None:
        (spark.range(rows, numPartitions=2).selectExpr("id AS n").write.format("gsp")
         .option("url", url).mode("append").save())

    q = run(read)
    try:
        run(write)
        wait_for(lambda: spark.sql(f"SELECT count(*) AS c FROM {name}").first().c >= rows, 60,
                 f"{rows} rows in {name}")
    finally:
        q.stop()
    return sorted(r.n for r in spark.sql(f"SELECT n FROM {name}").collect())


class Receiver(standalone.Receiver):
    """spark_standalone's receiver, with a bounded wait for what the test expects."""

    def wait_until(self, cond: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out with {len(self.got)} messages"
            time.sleep(0.05)


def table_count(spark: Any, name: str) -> int:
    """The rows of table (or memory sink) ``name``."""
    return int(spark.sql(f"SELECT count(*) AS n FROM {name}").first().n)


def pushed_rows(df: Any, n: int) -> list[Any]:
    """Write ``df`` (``n`` rows of ``id`` and ``name`` 'row-<id>') with ``format("gsp")`` to a
    PULL receiver; its messages, unpacked, once every id arrived (each once, with its name)."""
    with Receiver("pull") as rx:
        df.write.format("gsp").option("url", rx.url).mode("append").save()
        rx.wait_until(lambda: len(rx.messages) >= n, 30)
        time.sleep(0.3)  # anything extra would show up now
    rows = [unpack(m) for m in rx.messages]
    assert sorted(r["id"] for r in rows) == list(range(n))
    assert all(r["name"] == f"row-{r['id']}" for r in rows)
    return rows


def publisher(messages: Callable[[int], Iterable[bytes]], pause: float) -> tuple[HubThread, str]:
    """A PUB socket on a free loopback port, in a thread and hub of its own: it sends
    ``messages(k)`` for k = 0, 1, 2, ..., ``pause`` s apart, until the thread is joined (PUB
    drops until a subscriber has dialed in). Returns the thread and the url it listens on."""
    ready = threading.Event()
    box: dict[str, str] = {}

    def publish(stop: threading.Event) -> None:
        with gsp.socket("pub", listen="tcp://127.0.0.1:0") as pub:
            box["url"] = pub.listeners[0].url
            ready.set()
            k = 0
            while not stop.is_set():
                for message in messages(k):
                    pub.send(message)
                k += 1
                gevent.sleep(pause)

    thread = HubThread(publish, "publisher")
    if not ready.wait(10):
        thread.join(10)
        raise AssertionError("the publisher did not listen within 10 s")
    return thread, box["url"]


def _req_producers(url: str, total: int, producers: int, window: int, acked: set[str],
                   hold_at: int, resume: threading.Event) -> Callable[[threading.Event], None]:
    """A HubThread body: ``producers`` REQ sockets, each with ``window`` contexts in flight,
    send ``p<k>-<n>`` for n < ``total`` and add each to ``acked`` once the source answered.
    Once ``hold_at`` are acknowledged, no new message is sent until ``resume`` is set: the test
    kills the receiver meanwhile, however fast the first ``hold_at`` went, with some of
    ``total`` still to come (at most ``producers * window`` more are acknowledged)."""
    def produce(stop: threading.Event) -> None:
        def one(p: int) -> None:
            with gsp.socket("req", dial=url, resend_time=0.5) as s:
                def lane(ctx: Any, ns: range) -> None:
                    for n in ns:
                        while len(acked) >= hold_at and not resume.is_set() and not stop.is_set():
                            gevent.sleep(0.01)
                        body = f"p{p}-{n}"
                        ctx.send(body.encode())
                        ctx.recv()  # waits (resending) until the source has spooled it
                        acked.add(body)
                mine = range(p, total, producers)
                gevent.joinall([gevent.spawn(lane, s.open_context(), mine[k::window])
                                for k in range(window)], raise_error=True)
        gevent.joinall([gevent.spawn(one, p) for p in range(producers)], raise_error=True)
    return produce


def _no_acknowledged_message_lost(spark: Any, out: str, acked: set[str], total: int,
                                  acked_at_kill: int) -> None:
    rows = spark.read.parquet(out).collect()
    got = {r.v for r in rows}
    assert len(acked) == total
    assert acked - got == set()  # 0 acknowledged messages lost
    assert got == acked  # and nothing that was never sent
    # At-least-once: a REQ resent across the kill may be spooled twice, never more than that.
    assert len(rows) - len(got) <= acked_at_kill


def rep_source_survives_kill(spark: Any, url: str, tmp: Any, total: int, kill_after: int,
                             producers: int = 3, window: int = 8) -> None:
    """Producers' REQs are answered only after fsync to the spool; the planner process beside
    the driver that holds the receiver is SIGKILLed once ``kill_after`` are acknowledged, the
    query restarted on the same checkpoint, and every acknowledged message must come out of the
    (exactly-once) parquet sink."""
    spool, out, ck = tmp / "spool", str(tmp / "out"), str(tmp / "ck")
    acked: set[str] = set()

    def start() -> Any:
        return rep_query(spark, url, str(spool), out, ck)

    # Supervised: a query Spark killed because its Python worker did not connect back in time
    # (a loaded machine) starts again from its checkpoint; the producers resend meanwhile.
    q1 = Supervised(start)
    resume = threading.Event()
    prod = HubThread(_req_producers(url, total, producers, window, acked, kill_after, resume),
                     "req-producers")
    try:
        q1.wait(lambda: len(acked) >= kill_after, 60, f"{kill_after} acknowledged messages")
        # The receiver lives in Spark's Python planner process; the spool lock names its pid.
        os.kill(int((spool / "LOCK").read_text()), signal.SIGKILL)
        with pytest.raises(StreamingQueryException):
            q1.query.awaitTermination(60)  # the query dies with its source process
        acked_at_kill = len(acked)
        # Producers are still at it: some messages wait for the restart.
        assert acked_at_kill < total, f"all {total} were acknowledged before the kill landed"
        resume.set()
        q2 = Supervised(start)
        try:
            q2.wait(lambda: not prod.is_alive(), 90, f"all {total} messages acknowledged")
            prod.join(5)
            q2.wait(lambda: _parquet_rows(spark, out, distinct="v") >= total, 90,
                    "every message in the sink")
        finally:
            q2.stop()
    finally:
        q1.stop()
        prod.stop.set()
    _no_acknowledged_message_lost(spark, out, acked, total, acked_at_kill)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rep_source_survives_driver_kill(spark: Any, master: str, url: str, tmp: Any, total: int,
                                    kill_after: int, producers: int = 3, window: int = 8,
                                    config: dict[str, str] | None = None) -> None:
    """As :func:`rep_source_survives_kill`, but the whole driver is SIGKILLed — its Python
    process and its JVM, which a crashed machine or an OOM kill takes down at once: the query
    runs in a driver process of its own (``rep_driver.py``, on ``master`` with Spark
    configuration ``config``), and another driver — ``spark``, this process's session, a
    standby that was running all along — restarts it on the same checkpoint and spool."""
    spool, out, ck = tmp / "spool", str(tmp / "out"), str(tmp / "ck")
    acked: set[str] = set()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rep_driver.py")
    pids, log = tmp / "pids", tmp / "driver.log"
    with open(log, "wb") as out_log:
        p1 = subprocess.Popen([sys.executable, script, master, url, str(spool), out, ck,
                               str(pids), *(f"{k}={v}" for k, v in (config or {}).items())],
                              stdin=subprocess.PIPE, stdout=out_log, stderr=subprocess.STDOUT)
    resume = threading.Event()
    prod: HubThread | None = None
    try:
        wait_for(lambda: pids.exists() or p1.poll() is not None, 120, "the driver's query")
        assert p1.poll() is None, f"the driver exited: {log.read_text()[-3000:]}"
        jvm1 = int(pids.read_text().split()[1])
        prod = HubThread(_req_producers(url, total, producers, window, acked, kill_after,
                                        resume), "req-producers")
        wait_for(lambda: len(acked) >= kill_after, 90, f"{kill_after} acknowledged messages")
        source = int((spool / "LOCK").read_text())  # the receiver's process, the JVM's child
        os.kill(jvm1, signal.SIGKILL)
        os.kill(p1.pid, signal.SIGKILL)
        p1.wait(30)
        acked_at_kill = len(acked)
        assert acked_at_kill < total, f"all {total} were acknowledged before the kill landed"
        resume.set()
        # Orphaned, the source process sees its JVM connection close and exits, freeing the
        # spool (and the address) for the next driver.
        wait_for(lambda: not _alive(jvm1) and not _alive(source), 60,
                 "the killed driver's JVM and source process to be gone")
        q2 = Supervised(lambda: rep_query(spark, url, str(spool), out, ck))
        try:
            q2.wait(lambda: not prod.is_alive(), 120, f"all {total} messages acknowledged")
            prod.join(5)
            q2.wait(lambda: _parquet_rows(spark, out, distinct="v") >= total, 120,
                    "every message in the sink")
        finally:
            q2.stop()
    finally:
        if prod is not None:
            prod.stop.set()
        if p1.poll() is None:
            p1.kill()
            p1.wait(30)
    _no_acknowledged_message_lost(spark, out, acked, total, acked_at_kill)


#: pytest-xdist's loadgroup (the suite's ``--dist``) runs each group's tests on one worker, in
#: collection order. Ungrouped, a module's tests spread over both workers, and each worker built
#: the module's session (and a standalone cluster, a Connect server) of its own: twice the JVMs
#: on a 2-core machine. The modules that share :func:`shared_session`, and the driver scripts of
#: ``test_spark_user_scripts.py`` (its background jobs start with the group's first test, and
#: run beside the group's tests, not at their end):
LOCAL_GROUP = pytest.mark.xdist_group("spark-local")
#: The modules on the standalone cluster (the ``standalone-cluster`` job of ``jobs.py``: started
#: once, by the worker that runs the group; ``conftest.py``).
CLUSTER_GROUP = pytest.mark.xdist_group("spark-cluster")

_shared: dict[str, Any] = {}


def shared_session() -> Any:
    """The classic local session the local-mode modules share (sink, source, lifecycle, and the
    Spark Connect module as its server's clients): ``local[2,4]`` (two cores, and up to 4
    attempts per task — local mode ignores ``spark.task.maxFailures`` — so a task failing once
    is retried), serving Spark Connect on the loopback (a port of its own), with ``gsp`` not
    registered (PySpark's auto-discovery of ``pyspark_gsp`` finds it). Started at its first
    use, with the accumulator-server connection (made by the first Python UDF task, then open
    for good) opened up front, not inside a test's leak check; started again if a test stopped
    it; stopped by ``conftest.py`` at the end of the test session, or by a module that needs a
    session of another master (one SparkContext per process). One session for them all: each
    module started and stopped one of its own, a SparkContext and a Python worker daemon each."""
    from pyspark import SparkContext
    from pyspark.sql.functions import udf

    from gsp_spark._local import CONNECT_PLUGIN

    session = _shared.get("session")
    if session is None or SparkContext._active_spark_context is None:
        session = _shared["session"] = local_session(
            "local[2,4]", "gsp-spark-tests", register=False, config={
                "spark.plugins": CONNECT_PLUGIN,
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": "0"})
        session.range(1).select(udf(lambda x: x, "long", useArrow=False)("id")).collect()
    return session


def stop_shared_session() -> None:
    """Stop :func:`shared_session`'s session, if one was started (a no-op if it was stopped)."""
    session = _shared.pop("session", None)
    if session is not None:
        session.stop()


def ipc_listening(path: str) -> bool:
    """Whether something accepts connections on the Unix socket at ``path`` now."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
            return True
        except (FileNotFoundError, ConnectionRefusedError):
            return False


#: Spark gives a Python worker a fixed 10 s to connect back to its JVM (PythonWorkerFactory; no
#: setting changes it). On a CI machine whose two cores the other test worker also uses, a
#: streaming query can die of that before its first batch, through no fault of the source.
WORKER_STARTUP_FAILURE = "Python worker failed to connect back"


class Supervised:
    """A streaming query ``start()`` started, and started again from its checkpoint, once, if
    Spark killed it because its Python worker did not connect back in time, as a supervisor
    restarts a failed query; any other end of the query fails the wait at once with its error."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self.start, self.restarts = start, 0
        self.query = start()

    def healthy(self, what: str) -> bool:
        """Whether the query runs (after its one restart, if that was due now); raises if it
        ended otherwise."""
        if self.query.isActive:
            return True
        err = str(self.query.exception())
        if self.restarts == 0 and WORKER_STARTUP_FAILURE in err:
            self.restarts += 1
            self.query.stop()
            self.query = self.start()
            return False
        raise AssertionError(f"the query ended before {what}: {err}")

    def wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait until ``cond()`` (at most ``timeout`` s, counted again after a restart)."""
        deadline = time.monotonic() + timeout
        while not cond():
            if not self.healthy(what):
                deadline = time.monotonic() + timeout
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    def stop(self) -> None:
        self.query.stop()


def run_until(start: Callable[[], Any], cond: Callable[[], bool], timeout: float,
              what: str) -> None:
    """Start a streaming query (:class:`Supervised`: started again once if its Python worker
    did not connect back in time) and wait until ``cond()``; the query is stopped before this
    returns."""
    q = Supervised(start)
    try:
        q.wait(cond, timeout, what)
    finally:
        q.stop()


# --- the checks every standalone-cluster driver runs (classic, and through Spark Connect) -------

def rows_with_executor_jvm(spark: Any, n: int) -> Any:
    """``n`` rows of ``id`` and ``jvm``: the pid of the executor JVM whose Python worker made the
    row (0 if none)."""
    from pyspark.sql.types import LongType

    executor_jvm = standalone.executor_jvm  # the lambda takes the function, not the module
    jvm = standalone.python_udf(spark, lambda _: executor_jvm(), LongType())
    return spark.range(n, numPartitions=4).select("id", jvm("id").alias("jvm"))


def assert_from_both_executors(rows: list[dict[str, Any]], n: int) -> None:
    assert sorted(r["id"] for r in rows) == list(range(n))
    jvms = {r["jvm"] for r in rows}
    assert len(jvms) == 2 and 0 not in jvms  # two executor JVMs, neither the driver


def sink_and_source_on_the_cluster(spark: Any, tmp_path: Any) -> None:
    """The push sink's rows come from both executors; the source (receiver beside the driver,
    decoding in the executors) delivers every message once."""
    import msgpack

    from gsp_spark import unpack

    # Sink: every executor dials the receiver (here, in this process).
    with Receiver("pull") as rx:
        rows_with_executor_jvm(spark, 2000).write.format("gsp").option("url", rx.url) \
            .mode("append").save()
        rx.wait_until(lambda: len(rx.messages) >= 2000, 30)
    assert_from_both_executors([unpack(m) for m in rx.messages], 2000)

    # Source: the receiver listens beside the driver; producers dial it.
    url = standalone.free_tcp_url()

    def produce(stop: threading.Event) -> None:
        with gsp.socket("push", dial=url, send_timeout=60) as s:
            for n in range(2000):
                s.send(msgpack.packb({"n": n}))

    # Into Spark's parquet sink, whose checkpoint a query can restart from: run_until starts it
    # again once if Spark's Python worker did not connect back in time (a loaded machine), and
    # the spool replays its uncommitted batch byte for byte (every message once all the same).
    out = str(tmp_path / "out")
    prod = HubThread(produce, "producer")  # PUSH waits while no receiver listens
    try:
        run_until(lambda: (spark.readStream.format("gsp").schema("n BIGINT").option("url", url)
                           .option("spool", str(tmp_path / "spool")).load()
                           .writeStream.format("parquet").option("path", out)
                           .option("checkpointLocation", str(tmp_path / "ck"))
                           .trigger(processingTime="300 milliseconds").start()),
                  lambda: _parquet_rows(spark, out) >= 2000, 120, "2,000 rows from the source")
    finally:
        prod.join(90)
    assert sorted(r.n for r in spark.read.parquet(out).collect()) == list(range(2000))


def _parquet_rows(spark: Any, out: str, distinct: str | None = None) -> int:
    """Rows (with ``distinct``: distinct values of that column) in the parquet sink at ``out``
    so far (0 before its first file)."""
    from pyspark.errors import AnalysisException

    try:
        df = spark.read.parquet(out)
        return int((df if distinct is None else df.select(distinct).distinct()).count())
    except Exception as exc:  # no file yet: the schema cannot be inferred
        # (Spark Connect reports it as a gRPC INTERNAL error carrying the same condition.)
        if isinstance(exc, AnalysisException) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return 0
        raise


def req_and_pub_sinks_on_the_cluster(spark: Any) -> None:
    """The acknowledged req sink and the pub sink send from both executors, every row."""
    from gsp_spark import Deduplicator, unpack

    # req: save() returns only once every message was acknowledged, so all are here by then.
    with Receiver("rep") as rep:
        rows_with_executor_jvm(spark, 2000).write.format("gsp").option("url", rep.url) \
            .option("protocol", "req").mode("append").save()
        acked = list(rep.messages)
    dedup = Deduplicator()
    assert_from_both_executors([r for m in acked for r in dedup.rows(m)], 2000)

    # pub: each task waits for the subscriber before publishing; 50 rows per message.
    with Receiver("sub") as sub:
        rows_with_executor_jvm(spark, 2000).write.format("gsp").option("url", sub.url) \
            .option("protocol", "pub").option("batch_rows", 50).mode("append").save()
        sub.wait_until(lambda: len(sub.messages) >= 40, 30)
    assert_from_both_executors([r for m in sub.messages for r in unpack(m)], 2000)
