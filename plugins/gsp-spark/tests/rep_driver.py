"""A Spark driver of its own for the driver-kill test (run as a process, not collected by pytest):
a session on ``master`` whose streaming query (:func:`rep_query`) reads ``format("gsp")`` with
protocol rep into a parquet sink. Once the query runs it writes ``<python pid> <driver JVM pid>``
to ``pids``; then it waits for a line (or the end) on stdin and stops the query and the session.
Each ``KEY=VALUE`` after the six is Spark configuration for the session.

    python rep_driver.py MASTER URL SPOOL OUT CHECKPOINT PIDS [KEY=VALUE ...]
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gsp_spark import local_session


def rep_query(spark: Any, url: str, spool: str, out: str, ck: str) -> Any:
    """Start the query: ``format("gsp")`` with protocol rep at ``url`` (spooling to ``spool``) →
    parquet at ``out``, checkpointed at ``ck``; the kill tests restart it on the same paths."""
    return (spark.readStream.format("gsp").option("url", url).option("protocol", "rep")
            .option("spool", spool).load()
            .selectExpr("CAST(value AS STRING) AS v", "_seq", "_received")
            .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
            .trigger(processingTime="300 milliseconds").start())


def main() -> None:
    master, url, spool, out, ck, pids = sys.argv[1:7]
    config = dict(arg.split("=", 1) for arg in sys.argv[7:])
    spark = local_session(master, "gsp-rep-driver", config=config)
    q = rep_query(spark, url, spool, out, ck)
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    jvm = int(runtime.getName().split("@")[0])  # "<pid>@<host>"
    with open(pids + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {jvm}")
    os.rename(pids + ".tmp", pids)  # whole or not at all for the test polling it
    sys.stdin.readline()
    q.stop()
    spark.stop()


if __name__ == "__main__":
    main()
