"""``format("gsp")`` behaves the same however it was found (issue 28): a driver that never imports
``gsp_spark`` nor registers anything — PySpark finds the format through ``pyspark_gsp`` by itself —
writes from the main thread, a plain ``threading.Thread``, a ``ThreadPoolExecutor`` and
``foreachBatch``, and every write reaches a PULL socket here.

Without the distribution's ``gevent_sp_spark.pth`` (``pyspark_gsp._startup``) the plain thread and
the thread pool failed with ``DATA_SOURCE_NOT_FOUND``: the any-thread hook was installed only by
``import gsp_spark``, and PySpark imports ``pyspark_gsp`` in a Python worker, never in the driver.

One subprocess (its own Spark, ``local[1]``) runs every case; it needs no session here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import spark_fixtures

from gsp_spark import unpack

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test

CASES = ("main", "thread", "pool", "foreachBatch")

JOB = """
import os, re, sys, threading
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers: this interpreter
from pyspark.sql import SparkSession

url, tmp = sys.argv[1], sys.argv[2]
assert "gsp_spark" not in sys.modules, "gsp_spark imported before the job began"
spark = (SparkSession.builder.master("local[1]").appName("gsp-any-thread")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")


def write(case, df=None):
    df = spark.range(3, numPartitions=1) if df is None else df
    (df.selectExpr(f"'{case}' AS case", "id AS n").write.format("gsp").option("url", url)
     .option("connect_timeout", "30").mode("append").save())


def report(case, fn):
    try:
        fn()
        print("ok", case, flush=True)
    except Exception as exc:
        text = str(exc).splitlines() or [""]
        line = next((ln for ln in text if re.search(r"\\[[A-Z_]+\\]", ln)), text[0])
        print("failed", case, type(exc).__name__, line.strip()[:300], flush=True)


def stream():
    src = os.path.join(tmp, "in")
    os.makedirs(src)
    with open(os.path.join(src, "rows.txt"), "w") as f:
        f.write("0\\n1\\n2\\n")
    q = (spark.readStream.format("text").load(src).selectExpr("CAST(value AS BIGINT) AS id")
         .writeStream.foreachBatch(lambda batch, _: write("foreachBatch", batch))
         .option("checkpointLocation", os.path.join(tmp, "ck")).trigger(availableNow=True)
         .start())
    if not q.awaitTermination(120):
        q.stop()
        raise TimeoutError("foreachBatch query still running after 120 s")
    if q.exception() is not None:
        raise q.exception()


try:
    report("main", lambda: write("main"))
    t = threading.Thread(target=report, args=("thread", lambda: write("thread")), daemon=True)
    t.start()
    t.join(120)
    with ThreadPoolExecutor(1, thread_name_prefix="user-pool") as pool:
        pool.submit(report, "pool", lambda: write("pool")).result(120)
    report("foreachBatch", stream)
finally:
    spark.stop()
"""


@pytest.mark.timeout(240)  # one Spark start and four small jobs, bounded by the subprocess timeout
def test_format_gsp_from_any_thread_without_importing_gsp_spark(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    with spark_fixtures.Receiver("pull") as rx:
        try:
            out = subprocess.run([sys.executable, str(job), rx.url, str(tmp_path)], cwd=tmp_path,
                                 env=env, capture_output=True, text=True, timeout=200)
        except subprocess.TimeoutExpired as exc:  # run() has killed it
            pytest.fail(f"the job did not end within 200 s: {exc.stdout!r}")
        lines = out.stdout.splitlines()
        assert out.returncode == 0, out.stderr[-3000:]
        assert [ln for ln in lines if ln.startswith("failed")] == [], out.stdout
        assert sorted(ln for ln in lines if ln.startswith("ok")) == sorted(f"ok {c}" for c in CASES)
        rx.wait_until(lambda: len(rx.messages) >= 3 * len(CASES), 30)
    got = sorted((m["case"], m["n"]) for m in map(unpack, rx.messages))
    assert got == sorted((c, n) for c in CASES for n in range(3))
