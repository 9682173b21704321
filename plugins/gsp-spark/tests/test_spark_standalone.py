"""The sink and the source on a real Spark standalone cluster that loses a worker (issue 28).

A master and two workers (1 core, 1 GiB each) run as processes of their own, started with the
``bin/spark-class`` of the pip-installed pyspark, all on 127.0.0.1 (``gsp_spark.standalone``, which
``examples/spark_standalone.sh lose-worker`` runs by hand). One cluster and one driver session
serve the module. Each path moves 100,000 rows while one worker is SIGKILLed — its Worker JVM,
executor JVM and Python workers, as if its machine died — at a point where its executor is
known to be working (a probe holds its task — sinks: halfway through the partition, once the
receiver has rows from it; source: a micro-batch task with its rows in hand), and a worker is started in its place before the next path:

* at-least-once on every path: every row arrives, none is made up (duplicates counted, printed);
* a task of the killed worker really ran again, on the survivor;
* the deduplicating path (``Deduplicator`` over the sinks' ``_gsp_key``) passes each row once.

Rows/s and recovery times are printed (``pytest -m spark_standalone -s``), never asserted.
Run alone: ``python -m pytest plugins/gsp-spark -m spark_standalone -s``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Iterator

import pytest
import spark_fixtures
from pyspark.sql.functions import udf

from gsp_spark import standalone

pytestmark = pytest.mark.spark_standalone

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test

ROWS = 100_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Iterator[standalone.StandaloneCluster]:
    with standalone.StandaloneCluster(str(tmp_path_factory.mktemp("standalone"))) as c:
        c.start(2, wait=False)  # the session's driver starts while the workers do
        yield c
    assert not [d for d in [c.master, *c.workers] if d and d.proc.poll() is None]


@pytest.fixture(scope="module")
def spark(cluster: standalone.StandaloneCluster) -> Iterator[Any]:
    session = standalone.session(cluster, "gsp-standalone-tests")
    # The accumulator-server connection the first Python UDF task opens stays open for good:
    # open it here, not inside a test's leak check.
    session.range(1).select(udf(lambda x: x, "long", useArrow=False)("id")).collect()
    yield session
    session.stop()


@pytest.mark.timeout(300)  # Spark on 2 shared cores: the cluster's start and its own waits
@pytest.mark.parametrize("path", standalone.PATHS)
def test_a_worker_sigkilled_midway(spark: Any, cluster: standalone.StandaloneCluster,
                                   path: str, tmp_path: Any) -> None:
    run = standalone.run_path(spark, cluster, path, ROWS, str(tmp_path))
    print(run.report())
    # At-least-once: every row arrived, and nothing that was never sent.
    assert (run.missing, run.extra) == (0, 0), run.report()
    assert run.received >= ROWS
    # The kill hit a working executor, whose task ran again on the survivor, which delivered.
    assert run.retried_tasks, run.report()
    assert run.victim and run.survivors and run.victim not in run.survivors
    assert run.first_task <= run.killed < run.retry_started
    if path.startswith("sink"):
        # The receiver had rows from the victim's task before the kill, and the rows that task
        # never sent came only from its retry; the retry re-sent the others (duplicates), and
        # Deduplicator passes each row exactly once.
        assert run.rows_before_kill > 0 and run.recovered > 0, run.report()
        assert run.deduplicated == ROWS


def test_the_example_script_runs_this_module() -> None:
    # examples/spark_standalone.sh lose-worker is `python -m gsp_spark.standalone`: a bad path
    # name fails in its argument parser (naming the paths this module runs) before any cluster.
    script = os.path.join(ROOT, "examples", "spark_standalone.sh")
    r = subprocess.run(["bash", script, "lose-worker", "10", "no-such-path"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHON=sys.executable))
    assert r.returncode == 2, r.stderr
    assert "unknown path(s) no-such-path; choose from " + ", ".join(standalone.PATHS) in r.stderr
