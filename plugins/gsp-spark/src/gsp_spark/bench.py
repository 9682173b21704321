"""Rows per second through the gsp sink and source on a local Spark.

    python -m gsp_spark.bench [--rows N] [--master local[2]]

Sink: ``spark.range(N)`` with three columns, written by a batch job to a PULL socket (or, for
``req``, a raw REP that acknowledges every row; receiver in its own thread and hub); timed from
the job's start to the last message received. Source:
PUSH producers send N msgpack maps to a streaming query (``format("gsp")`` → noop sink); timed
from the first message sent to the batch that brings the query's input count to N.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from typing import Any

import gevent
import msgpack

import gsp

from ._hubthread import HubThread
from ._local import local_session


def _free_tcp_url() -> str:
    import socket as pysock

    with pysock.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def bench_sink(spark: Any, n: int, batch_rows: int = 1, protocol: str = "push") -> float:
    ready = threading.Event()
    state: dict[str, Any] = {"count": 0, "last": 0.0}

    def receive(stop: threading.Event) -> None:
        ack = protocol == "req"
        with gsp.socket("rep" if ack else "pull", raw=ack, listen="tcp://127.0.0.1:0",
                        recv_timeout=0.1, recv_buffer=4096) as s:
            state["url"] = s.listeners[0].url
            ready.set()
            while not stop.is_set():
                try:
                    msg = s.recv_msg()
                except gsp.Timeout:
                    continue
                data = msg.body
                if ack:
                    s.send_msg(gsp.Message(b"", msg.header))
                # Count rows without decoding every map: a batch message is a msgpack array.
                state["count"] += 1 if batch_rows == 1 else len(msgpack.unpackb(data))
                state["last"] = time.perf_counter()

    rx = HubThread(receive)
    ready.wait(10)
    df = spark.range(n, numPartitions=2).selectExpr(
        "id", "concat('user-', id % 1000) AS user", "cast(id AS double) * 0.25 AS amount")
    t0 = time.perf_counter()
    (df.write.format("gsp").option("url", state["url"]).option("batch_rows", batch_rows)
     .option("protocol", protocol).mode("append").save())
    deadline = time.monotonic() + 60
    while state["count"] < n and time.monotonic() < deadline:
        time.sleep(0.01)
    rx.join(10)
    if state["count"] != n:
        raise RuntimeError(f"sink bench: received {state['count']} of {n} rows")
    return n / (float(state["last"]) - t0)


def bench_source(spark: Any, n: int, producers: int = 2) -> float:
    url = _free_tcp_url()
    tmp = tempfile.mkdtemp(prefix="gsp-bench-")
    q = (spark.readStream.format("gsp").schema("user STRING, amount DOUBLE")
         .option("url", url).option("spool", os.path.join(tmp, "spool")).load()
         .writeStream.format("noop").option("checkpointLocation", os.path.join(tmp, "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        # Wait for the receiver's listener (the first offset call opens it).
        while not q.recentProgress:
            time.sleep(0.05)
        started: dict[str, float] = {}

        def produce(stop: threading.Event) -> None:
            def one(k: int) -> None:
                with gsp.socket("push", dial=url, send_timeout=60) as s:
                    started.setdefault("t", time.perf_counter())
                    body = msgpack.packb({"user": f"user-{k}", "amount": 1.25})
                    for _ in range(k, n, producers):
                        s.send(body)
            gevent.joinall([gevent.spawn(one, k) for k in range(producers)], raise_error=True)

        prod = HubThread(produce)
        done, seen = 0, set()
        deadline = time.monotonic() + 120
        while done < n and time.monotonic() < deadline:
            for p in q.recentProgress:
                if p["batchId"] not in seen:
                    seen.add(p["batchId"])
                    done += p["numInputRows"]
            time.sleep(0.05)
        prod.join(30)
        if done < n:
            raise RuntimeError(f"source bench: the query read {done} of {n} rows")
        return n / (time.perf_counter() - started["t"])
    finally:
        q.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    spark = local_session(args.master, "gsp-bench")
    try:
        bench_sink(spark, 20_000)  # warm up: Python workers, JIT
        for protocol, rows_per_msg in (("push", 1), ("push", 100), ("req", 1), ("req", 100)):
            rate = bench_sink(spark, args.rows, rows_per_msg, protocol)
            print(f"sink   {args.master}: {rate:>9,.0f} rows/s  ({args.rows:,} rows, "
                  f"protocol={protocol}, batch_rows={rows_per_msg})", flush=True)
        rate = bench_source(spark, args.rows)
        print(f"source {args.master}: {rate:>9,.0f} rows/s  ({args.rows:,} rows, 2 PUSH "
              "producers, msgpack maps into 'user STRING, amount DOUBLE')", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
