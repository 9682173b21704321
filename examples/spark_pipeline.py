"""gsp + Spark Structured Streaming: producers → Spark aggregation → PUB → subscriber.

Three gevent PUSH producers send purchase events (msgpack maps) to a streaming query that reads
them with ``format("gsp")``, sums them per user, and publishes every updated total with the gsp
sink over PUB to a subscriber, which prints them. It stops by itself once the published totals
match what was sent. Needs ``pip install -e . -e plugins/gsp-spark`` and Java 17+. Run:

    python examples/spark_pipeline.py [--events 30000] [--users 8]

Against a standalone cluster (``examples/spark_standalone.sh`` starts one from the pyspark
distribution), with ``--host`` an address of this machine that the cluster's machines reach: the
driver, the source's receiver and the subscriber listen there, and every executor's sink dials
the subscriber::

    python examples/spark_pipeline.py --master spark://10.0.0.5:7077 --host 10.0.0.9

Through Spark Connect: ``--connect`` starts a Spark Connect server on ``--master`` in this process
(``gsp_spark.local_connect_session``, loopback only, a free port) and runs the same query as its
client; ``--connect sc://host:15002`` uses a server already running (its Python workers need
gevent-sp-spark: docs/spark.md, "Spark Connect")::

    python examples/spark_pipeline.py --connect
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time

import gevent
import msgpack

import gsp
from gsp_spark import Deduplicator, HubThread, local_connect_session, local_session


def free_tcp_url(host: str) -> str:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return f"tcp://{host}:{s.getsockname()[1]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=30_000)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=100.0)
    ap.add_argument("--master", default="local[2]", help="e.g. spark://10.0.0.5:7077")
    ap.add_argument("--host", default="127.0.0.1",
                    help="this machine's address as the cluster sees it (driver, source, subscriber)")
    ap.add_argument("--connect", nargs="?", const="local", default=None, metavar="sc://HOST:PORT",
                    help="through Spark Connect: a server of its own on --master, or this one")
    args = ap.parse_args()
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="gsp-spark-demo-")
    events_url = free_tcp_url(args.host)

    # What the producers send, to check what comes out at the end.
    rng = random.Random(7)
    events = [(f"user-{rng.randrange(args.users)}", rng.randrange(1, 10_000) / 100)
              for _ in range(args.events)]
    expect: dict[str, tuple[int, float]] = {}
    for user, amount in events:
        n, total = expect.get(user, (0, 0.0))
        expect[user] = (n + 1, total + amount)

    # -- the subscriber: receives the published totals (its own thread and hub) ----------------
    latest: dict[str, tuple[int, float]] = {}
    ready = threading.Event()
    sub_url: list[str] = []

    def subscribe(stop: threading.Event) -> int:
        dedup = Deduplicator()  # drops rows a retried Spark task published twice
        with gsp.socket("sub", listen=f"tcp://{args.host}:0", recv_timeout=0.1) as sub:
            sub.subscribe(b"")
            sub_url.append(sub.listeners[0].url)
            ready.set()
            while not stop.is_set():
                try:
                    data = sub.recv()
                except gsp.Timeout:
                    continue
                for row in dedup.rows(data):
                    latest[row["user"]] = (row["events"], row["total"])
                    batch = row["_gsp_key"][1]
                    print(f"  subscriber  batch {batch:>3}  {row['user']:<8} "
                          f"{row['events']:>6} events  total {row['total']:>12,.2f}", flush=True)
        return dedup.duplicates

    subscriber = HubThread(subscribe, "subscriber")
    ready.wait(10)

    # -- the Spark job: gsp PULL source → per-user totals → gsp PUB sink ------------------------
    if args.connect is None:
        spark = local_session(args.master, "gsp-spark-pipeline", host=args.host)
    elif args.connect == "local":
        spark = local_connect_session(args.master, "gsp-spark-pipeline", host=args.host)
    else:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        spark = ConnectSession.builder.remote(args.connect).getOrCreate()
    print(f"spark       {type(spark).__module__}.SparkSession", flush=True)
    query = (spark.readStream.format("gsp")
             .schema("user STRING, amount DOUBLE")
             .option("url", events_url).option("spool", os.path.join(tmp, "spool")).load()
             .groupBy("user")
             .agg({"*": "count", "amount": "sum"})
             .withColumnRenamed("count(1)", "events").withColumnRenamed("sum(amount)", "total")
             # Python data source sinks take append and complete mode (not update): every
             # trigger publishes all the totals.
             .writeStream.outputMode("complete").format("gsp")
             .option("url", sub_url[0]).option("protocol", "pub")
             .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
             .trigger(processingTime="1 second").start())
    print(f"spark       reads  PULL {events_url}  publishes  PUB → SUB {sub_url[0]}", flush=True)

    # -- the producers: three PUSH sockets, greenlets in their own thread and hub ----------------
    def produce(stop: threading.Event) -> None:
        def producer(k: int) -> None:
            with gsp.socket("push", dial=events_url, send_timeout=0.5) as push:
                for i in range(k, len(events), 3):
                    user, amount = events[i]
                    data = msgpack.packb({"user": user, "amount": amount, "producer": k})
                    while True:  # PUSH waits for the source; give up only when told to stop
                        try:
                            push.send(data)
                            break
                        except gsp.Timeout:
                            if stop.is_set():
                                return
                    if i % 150 == k:
                        gevent.sleep(0.02)  # spread the events over a few micro-batches
        gevent.joinall([gevent.spawn(producer, k) for k in range(3)], raise_error=True)

    while query.isActive and not query.recentProgress:  # first trigger: the source listens
        time.sleep(0.1)
    producers = HubThread(produce, "producers")
    ok = False
    try:
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and query.isActive:
            if latest.keys() == expect.keys() and all(
                    latest[u][0] == expect[u][0] and abs(latest[u][1] - expect[u][1]) < 1e-6
                    for u in expect):
                ok = True
                break
            time.sleep(0.2)
        producers.join(10)
    finally:
        error = query.exception()
        query.stop()
        spark.stop()
        duplicates = subscriber.join(10)
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - t_start
    got = sum(n for n, _ in latest.values())
    if ok:
        print(f"pipeline OK: {args.events:,} events from 3 producers → Spark → "
              f"{len(expect)} user totals on PUB, all match ({duplicates} duplicates dropped), "
              f"{elapsed:.1f} s")
        return 0
    print(f"pipeline FAILED: the subscriber saw {got:,} of {args.events:,} events "
          f"for {len(latest)} of {len(expect)} users after {elapsed:.1f} s"
          + (f"; the query failed: {error}" if error else ""), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
