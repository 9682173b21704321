"""The gsp source's two halves without Spark, in rows per second: its receiver spooling and an
executor's decoding. They are gsp_spark's internals, so this tool is with its tests, beside
``gsp bench spark`` (gevent-sp-bench), which measures the sink and the source through Spark.

    python plugins/gsp-spark/tests/spark_bench_internals.py [--rows N] [--repeat R]
                                                            [--paths receive,decode]

* ``receive``: the source's receiver (a PULL spooling to disk, in its own thread and hub) fed N
  msgpack maps by two PUSH producers in another process (``gsp_bench.spark.produce``), timed
  from the first message spooled to the last.
* ``decode``: ``decode_chunk`` on N of the source's maps (varied users), spooled and cut into
  one chunk as the planner cuts one: what an executor's Python worker does with a micro-batch.

Each prints the median of R runs, with all runs (``gsp_bench.spark.run``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import msgpack
from pyspark.sql.types import DoubleType, StringType, StructField, StructType
from spark_standalone import free_tcp_url

from gsp_bench.spark import run
from gsp_spark._config import SourceConfig
from gsp_spark._decode import _Chunk, decode_chunk
from gsp_spark._source import _Receiver
from gsp_spark._spool import Spool, pack_records


def _source_maps(n: int) -> list[bytes]:
    return [msgpack.packb({"user": f"user-{k}", "amount": k * 0.25}) for k in range(n)]


def bench_decode(spark: Any, n: int) -> float:
    """``decode_chunk`` on N of the source's maps (varied users), spooled and cut into one
    chunk as the planner cuts one: what an executor's Python worker does with a micro-batch."""
    data, offsets = pack_records(_source_maps(n), None, time.time())
    chunk = _Chunk(0, data, offsets[:-1].tobytes())
    schema = StructType([StructField("user", StringType()), StructField("amount", DoubleType())])
    t0 = time.perf_counter()
    batch = decode_chunk(chunk, schema, False, "fail")
    secs = time.perf_counter() - t0
    if batch.num_rows != n:
        raise RuntimeError(f"decode bench: decoded {batch.num_rows} of {n} rows")
    return n / secs


# The producers in a process of their own (the receive path): produce() from the command line.
_PRODUCERS = "import sys; from gsp_bench.spark import produce; " \
             "produce(sys.argv[1], int(sys.argv[2]), linger=1.0)"


def bench_receive(spark: Any, n: int) -> float:
    """The source's receiver (a PULL spooling to disk, in its own thread and hub) fed N maps by
    two PUSH producers in another process: no Spark, no decoding."""
    url = free_tcp_url()
    tmp = tempfile.mkdtemp(prefix="gsp-bench-")
    cfg = SourceConfig.parse({"url": url, "spool": os.path.join(tmp, "spool")})
    spool = Spool(cfg.spool)
    spool.open()
    rx = _Receiver(cfg, spool, pipes=False)
    prod: subprocess.Popen[bytes] | None = None
    try:
        rx.start()
        rx.ready.wait(10)
        if rx.error is not None:
            raise rx.error
        prod = subprocess.Popen([sys.executable, "-c", _PRODUCERS, url, str(n)])
        deadline = time.monotonic() + 120
        while rx.durable == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        t0 = time.perf_counter()
        while rx.durable < n and time.monotonic() < deadline:
            time.sleep(0.002)
        secs = time.perf_counter() - t0
        if rx.durable < n:
            raise RuntimeError(f"receive bench: spooled {rx.durable} of {n} messages")
        return n / secs
    finally:
        if prod is not None:
            try:
                prod.wait(30)
            except subprocess.TimeoutExpired:
                prod.kill()
                prod.wait()
        rx.stop()
        spool.close()
        shutil.rmtree(tmp, ignore_errors=True)


#: path name → (what it runs, given no session and a row count; its description)
PATHS: dict[str, tuple[Callable[[Any, int], float], str]] = {
    "receive": (bench_receive, "the source's receiver alone: pull → spool (no Spark)"),
    "decode": (bench_decode, "an executor's decoding alone: spooled maps → Arrow (no Spark)"),
}


def main(argv: list[str] | None = None) -> int:
    assert __doc__
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--paths", default=",".join(PATHS),
                    help=f"comma-separated, from: {', '.join(PATHS)}")
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        ap.error(f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    bench_decode(None, 1_000)  # imports (pyspark's Arrow types)
    print(f"{args.rows:,} rows per run, {os.cpu_count()} CPUs", flush=True)
    run(None, args.rows, args.repeat, paths, lambda s: print(s, flush=True), table=PATHS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
