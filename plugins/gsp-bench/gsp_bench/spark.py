"""``gsp bench spark``: rows per second through the gsp sink and source on a local Spark, beside
Spark's own ceiling (needs gevent-sp-spark: ``pip install 'gevent-sp-bench[spark]'``).

    gsp bench spark [--rows N] [--repeat R] [--master local[2]] [--paths a,b,...]
                    [--connect] [--source-option KEY=VALUE ...]

Every path moves N rows of ``(id BIGINT, user STRING, amount DOUBLE)`` (the source: ``user``,
``amount``) and prints the median of R runs, with all runs:

* ``ceiling-sink``: ``spark.range(N)`` → the same columns → Spark's ``noop`` sink, a batch job
  that never leaves the JVM: what the machine allows a batch write at best.
* ``sink-push`` (and ``sink-push-100``, ``sink-req``, ``sink-req-100``): the same DataFrame
  written with ``format("gsp")`` to a PULL socket (``req``: a raw REP that acknowledges every
  message), the receiver in its own thread and hub in this process; timed from the job's start
  to the last message received. ``-100`` is ``batch_rows=100``.
* ``ceiling-source``: Spark's ``rate-micro-batch`` source (N rows in micro-batches of
  ``max_batch_rows``) → the same columns → ``noop``; timed from the end of the first micro-batch
  to the one that completes the count.
* ``source``: two gevent PUSH producers (their own thread and hub) send N msgpack maps to a
  streaming query ``format("gsp")`` → ``noop``; timed from the first message sent to the
  micro-batch that brings the query's input count to N.

``--source-option`` sets one of the source's options (``partitions=2``) for the ``source`` path.
``--connect`` runs every path through Spark Connect: a Connect server on ``--master`` in this
process (:func:`gsp_spark.local_connect_session`), the benchmark its client.

Only gsp_spark's public names are used here. The source's two halves without Spark (its
receiver spooling, an executor's decoding) are measured with gsp_spark's internals, by a tool
of its tests: ``python plugins/gsp-spark/tests/spark_bench_internals.py`` in gsp's repository.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any, Callable, Mapping

import gevent
import msgpack

import gsp
from gsp_spark import HubThread, local_connect_session, local_session

_COLUMNS = ("id", "concat('user-', id % 1000) AS user", "cast(id AS double) * 0.25 AS amount")


def _free_tcp_url() -> str:
    import socket as pysock

    with pysock.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _frame(spark: Any, n: int) -> Any:
    return spark.range(n, numPartitions=2).selectExpr(*_COLUMNS)


def bench_ceiling_sink(spark: Any, n: int) -> float:
    df = _frame(spark, n)
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return n / (time.perf_counter() - t0)


def bench_sink(spark: Any, n: int, batch_rows: int = 1, protocol: str = "push") -> float:
    ready, done = threading.Event(), threading.Event()
    state: dict[str, Any] = {"count": 0, "last": 0.0}

    def receive(stop: threading.Event) -> None:
        ack = protocol == "req"
        with gsp.socket("rep" if ack else "pull", raw=ack, listen="tcp://127.0.0.1:0",
                        recv_timeout=0.1, recv_buffer=4096) as s:
            state["url"] = s.listeners[0].url
            ready.set()
            count, recv, recv_msg, send_msg = 0, s.recv, s.recv_msg, s.send_msg
            while count < n and not stop.is_set():
                try:
                    if ack:
                        msg = recv_msg()
                        send_msg(gsp.Message(b"", msg.header))
                        data = msg.body
                    else:
                        data = recv()
                except gsp.Timeout:
                    continue
                # Count rows without decoding every map: a batch message is a msgpack array.
                count += 1 if batch_rows == 1 else len(msgpack.unpackb(data))
            state["count"], state["last"] = count, time.perf_counter()
            done.set()

    rx = HubThread(receive)
    try:
        ready.wait(10)
        df = _frame(spark, n)
        t0 = time.perf_counter()
        (df.write.format("gsp").option("url", state["url"]).option("batch_rows", batch_rows)
         .option("protocol", protocol).mode("append").save())
        done.wait(60)
    finally:
        rx.join(10)
    if state["count"] != n:
        raise RuntimeError(f"sink bench: received {state['count']} of {n} rows")
    return n / (float(state["last"]) - t0)


def _count_rows(q: Any, n: int, timeout: float, after: Callable[[], None] | None = None,
                skip_first: bool = False) -> tuple[int, float]:
    """Poll ``q``'s progress until its input rows reach ``n``; the rows and the time reached.
    With ``skip_first``, the first micro-batch is not counted and the clock starts at its end.

    Every 20 ms only ``lastProgress`` is read (two py4j calls); the whole ``recentProgress``
    list — a py4j call and a JSON document per micro-batch so far — only when that changed.
    (With 13 micro-batches, ``recentProgress`` took 2.4 ms of this process's CPU per call, 12 %
    of a core at 50 calls a second, beside the JVM's share; ``lastProgress`` 0.26 ms.)"""
    done, seen, t0 = 0, set(), time.perf_counter()
    deadline = time.monotonic() + timeout
    last: Any = None
    while done < n and time.monotonic() < deadline:
        lp = q.lastProgress
        # Attributes, not keys: through Spark Connect the progress' dict lacks the totals.
        mark = None if lp is None else (lp.batchId, lp.timestamp)
        if mark != last:
            last = mark
            for p in q.recentProgress:
                if p.batchId in seen:
                    continue
                seen.add(p.batchId)
                if skip_first and len(seen) == 1:
                    t0 = time.perf_counter()
                else:
                    done += p.numInputRows
        if after is not None:
            after()
        time.sleep(0.02)
    return done, time.perf_counter() - t0


def bench_ceiling_source(spark: Any, n: int, batch: int = 200_000) -> float:
    tmp = tempfile.mkdtemp(prefix="gsp-bench-")
    q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", batch)
         .option("numPartitions", 2).load().selectExpr("value AS id").selectExpr(*_COLUMNS[1:])
         .writeStream.format("noop").option("checkpointLocation", os.path.join(tmp, "ck"))
         .start())
    try:
        done, secs = _count_rows(q, n, 120, skip_first=True)
    finally:
        q.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if done < n:
        raise RuntimeError(f"ceiling bench: the query read {done} of {n} rows")
    return done / secs


def bench_source(spark: Any, n: int, producers: int = 2,
                 options: Mapping[str, str] | None = None) -> float:
    """The source's query, with ``options`` (``--source-option``) beside its url and spool."""
    url = _free_tcp_url()
    tmp = tempfile.mkdtemp(prefix="gsp-bench-")
    q = (spark.readStream.format("gsp").schema("user STRING, amount DOUBLE")
         .option("url", url).option("spool", os.path.join(tmp, "spool"))
         .options(**(options or {})).load()
         .writeStream.format("noop").option("checkpointLocation", os.path.join(tmp, "ck"))
         .trigger(processingTime="200 milliseconds").start())
    prod: HubThread | None = None
    try:
        # Wait for the receiver's listener (the first offset call opens it).
        while q.lastProgress is None:
            time.sleep(0.05)
        started: dict[str, float] = {}
        prod = HubThread(lambda stop: produce(
            url, n, producers, lambda: started.setdefault("t", time.perf_counter())))
        done, _ = _count_rows(q, n, 120)
        if done < n:
            raise RuntimeError(f"source bench: the query read {done} of {n} rows")
        return n / (time.perf_counter() - started["t"])
    finally:
        if prod is not None:
            prod.join(30)
        q.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def produce(url: str, n: int, producers: int = 2, connected: Callable[[], Any] | None = None,
            linger: float = 0.0) -> None:
    """``producers`` PUSH sockets in greenlets of this thread's hub dial ``url`` and send ``n``
    msgpack maps ``{"user": "user-<k>", "amount": 1.25}`` between them; ``connected`` is
    called as each has its socket, ``linger`` seconds are left for the last writes to go out
    before the sockets close."""
    def one(k: int) -> None:
        with gsp.socket("push", dial=url, send_timeout=60) as s:
            if connected is not None:
                connected()
            body = msgpack.packb({"user": f"user-{k}", "amount": 1.25})
            for _ in range(k, n, producers):
                s.send(body)
            gevent.sleep(linger)
    gevent.joinall([gevent.spawn(one, k) for k in range(producers)], raise_error=True)


#: path name → (what it runs, its description)
PATHS: dict[str, tuple[Callable[[Any, int], float], str]] = {
    "ceiling-sink": (bench_ceiling_sink, "Spark alone: range → noop (batch)"),
    "sink-push": (bench_sink, "sink, push, one message per row"),
    "sink-push-100": (lambda s, n: bench_sink(s, n, 100), "sink, push, batch_rows=100"),
    "sink-req": (lambda s, n: bench_sink(s, n, 1, "req"), "sink, req, one message per row"),
    "sink-req-100": (lambda s, n: bench_sink(s, n, 100, "req"), "sink, req, batch_rows=100"),
    "ceiling-source": (bench_ceiling_source, "Spark alone: rate-micro-batch → noop (stream)"),
    "source": (bench_source, "source, pull, msgpack maps → 'user STRING, amount DOUBLE'"),
}
DEFAULT_PATHS = "ceiling-sink,sink-push,sink-push-100,sink-req-100,ceiling-source,source"


#: A table of paths: name → (what it runs, given a session and a row count; its description).
Paths = Mapping[str, tuple[Callable[[Any, int], float], str]]


def run(spark: Any, rows: int, repeat: int, paths: list[str],
        out: Callable[[str], None] = print,
        source_options: Mapping[str, str] | None = None,
        table: Paths = PATHS) -> dict[str, list[float]]:
    """Each path (of ``table``) ``repeat`` times, interleaved (so load that comes and goes hits
    all of them); prints one line per path and returns every rate. ``source_options``: more
    options of the ``source`` path's query."""
    runners = {p: table[p][0] for p in paths}
    if source_options and "source" in runners:
        runners["source"] = lambda s, n: bench_source(s, n, options=source_options)
    rates: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(repeat):
        for p in paths:
            rates[p].append(runners[p](spark, rows))
    for p in paths:
        runs = ", ".join(f"{r:,.0f}" for r in rates[p])
        out(f"{p:<15} {statistics.median(rates[p]):>11,.0f} rows/s  median of "
            f"{len(rates[p])} ({runs})  {table[p][1]}")
    return rates


def main(argv: list[str] | None = None) -> int:
    assert __doc__
    ap = argparse.ArgumentParser(prog="gsp bench spark", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--paths", default=DEFAULT_PATHS,
                    help=f"comma-separated, from: {', '.join(PATHS)}")
    ap.add_argument("--connect", action="store_true",
                    help="through Spark Connect (a server on --master in this process)")
    ap.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of the source path's query (repeatable): partitions=1")
    args = ap.parse_args(argv)
    source_options: dict[str, str] = {}
    for kv in args.source_option:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            ap.error(f"--source-option takes KEY=VALUE, not {kv!r}")
        source_options[key] = value
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        ap.error(f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")

    from pyspark import SparkContext

    if args.connect:
        spark = local_connect_session(args.master, "gsp-bench")
    else:
        spark = local_session(args.master, "gsp-bench")
    # Stopping the ceiling's endless stream cancels a running micro-batch, which Spark logs at
    # ERROR with stack traces: nothing went wrong. (The classic context is this process's own,
    # the Connect server's too.)
    SparkContext.getOrCreate().setLogLevel("FATAL")
    try:
        bench_sink(spark, 20_000)  # warm up: Python workers, JIT
        bench_ceiling_sink(spark, 20_000)
        print(f"{args.master}{' through Spark Connect' if args.connect else ''}, "
              f"{args.rows:,} rows per run, {os.cpu_count()} CPUs", flush=True)
        run(spark, args.rows, args.repeat, paths, lambda s: print(s, flush=True), source_options)
    finally:
        spark.stop()
    return 0
