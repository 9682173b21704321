"""The sink and the source on a real Spark standalone cluster that loses a worker.

A master and two workers (2 cores, 1.5 GiB each: see below) run as processes of their own,
started with the ``bin/spark-class`` of the pip-installed pyspark, all on 127.0.0.1
(``spark_standalone.py`` here, which ``examples/spark_standalone.sh lose-worker`` runs by hand). One
cluster (a background job, ``jobs.py``, started with the first gsp-spark test) and one driver
session serve the module. Each path moves 100,000 rows while one worker is SIGKILLed — its Worker JVM,
executor JVM and Python workers, as if its machine died — at a point where its executor is
known to be working (a probe holds its task — sinks: halfway through the partition, once the
receiver has rows from it; source: a micro-batch task with its rows in hand), and a worker is started in its place before the next path:

* at-least-once on every path: every row arrives, none is made up (duplicates counted, printed);
* a task of the killed worker really ran again, on the survivor;
* the deduplicating path (``Deduplicator`` over the sinks' ``_gsp_key``) passes each row once.

Rows/s and recovery times are printed (``pytest -n 0 -m spark_standalone -s``), never asserted.

Then, on the same cluster (whole again), what runs on any cluster:

* each sink's rows (push, acknowledged req, pub) are sent from Python workers under *both*
  executor JVMs, never the driver's; the source (receiver beside the driver, decoding in the
  executors) delivers every message once;
* with ``rep``, SIGKILLing a whole driver (its Python process and JVM, the source's process
  beside it with them) and restarting the query in another driver (this module's session) on
  the same checkpoint and spool loses no acknowledged message (``test_spark_source.py`` kills
  the source's process alone).

Each worker offers 2 cores and 1.5 GiB: the module's session takes one core and 1 GiB on each
(``spark.cores.max`` 2, spread one executor per worker), which leaves room for the driver-kill
test's driver (one 512 MiB executor) but never for a second executor of the session — a
lost executor comes back only on a new worker, as the worker-kill checks expect.

Run alone: ``python -m pytest -n 0 plugins/gsp-spark -m spark_standalone -s``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Iterator

import background
import pytest
import spark_fixtures
import spark_standalone as standalone
from pyspark.sql.functions import udf

pytestmark = [pytest.mark.spark, pytest.mark.spark_standalone,
              spark_fixtures.CLUSTER_GROUP]

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
wait_for = spark_fixtures.wait_for
Receiver = spark_fixtures.Receiver
free_tcp_url = standalone.free_tcp_url

ROWS = 100_000
# The session: one 1 GiB executor per worker. The driver-kill test's driver: one of 512 MiB.
SESSION = {"spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g"}
DRIVER = {"spark.cores.max": "1", "spark.executor.cores": "1", "spark.executor.memory": "512m"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


@pytest.fixture(scope="module")
def cluster() -> standalone.StandaloneCluster:
    # Started with the first gsp-spark test (jobs.py: a master and two workers, each offering 2
    # cores and 1.5 GiB); this module's session waits for the workers.
    c: standalone.StandaloneCluster = background.get("standalone-cluster").result(180)
    return c


@pytest.fixture(scope="module")
def spark(cluster: standalone.StandaloneCluster) -> Iterator[Any]:
    # One SparkContext per process: the local modules' shared session (if running) stops first.
    spark_fixtures.stop_shared_session()
    session = standalone.session(cluster, "gsp-standalone-tests", config=SESSION)
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


@pytest.fixture
def whole(spark: Any, cluster: standalone.StandaloneCluster) -> Any:
    """The module's session, on a cluster with two workers each running its executor again (a
    worker-kill test leaves a replacement starting)."""
    cluster.ensure_workers(2)
    return spark


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_sink_and_source_on_the_cluster(whole: Any, tmp_path: Any) -> None:
    spark_fixtures.sink_and_source_on_the_cluster(whole, tmp_path)


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_req_and_pub_sinks_on_the_cluster(whole: Any) -> None:
    spark_fixtures.req_and_pub_sinks_on_the_cluster(whole)


@pytest.mark.timeout(300)  # one more driver and its executor: Spark on 2 shared cores
def test_rep_source_keeps_acknowledged_messages_across_a_driver_sigkill_on_the_cluster(
        whole: Any, cluster: standalone.StandaloneCluster, tmp_path: Any) -> None:
    # The whole driver (its Python process and its JVM; the master removes its application and
    # the workers kill its executor), then this session restarts the query on the same
    # checkpoint and spool.
    spark_fixtures.rep_source_survives_driver_kill(whole, cluster.url, free_tcp_url(), tmp_path,
                                                   total=4000, kill_after=1000, config=DRIVER)


def test_the_executors_scratch_space_is_in_the_clusters_workdir(
        whole: Any, cluster: standalone.StandaloneCluster) -> None:
    # A worker gives its executor the directories it writes shuffle and block files to
    # (SPARK_EXECUTOR_DIRS, made under the worker's SPARK_LOCAL_DIRS). A SIGKILLed executor,
    # as close() makes every one, never removes them: they must not be in /tmp, but in the
    # cluster's workdir, which its owner removes.
    root = os.path.realpath(cluster.local_dir) + os.sep
    executors = cluster.wait_executors()
    assert len(executors) == 2
    for pid in executors:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        dirs = env[b"SPARK_EXECUTOR_DIRS"].decode().split(os.pathsep)
        assert dirs and all(os.path.realpath(d).startswith(root) for d in dirs), dirs
        assert all(os.path.isdir(d) for d in dirs)


def test_the_example_script_runs_this_module() -> None:
    # examples/spark_standalone.sh lose-worker runs spark_standalone.py from a checkout: a bad path
    # name fails in its argument parser (naming the paths this module runs) before any cluster.
    script = os.path.join(ROOT, "examples", "spark_standalone.sh")
    r = subprocess.run(["bash", script, "lose-worker", "10", "no-such-path"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHON=sys.executable))
    assert r.returncode == 2, r.stderr
    assert "unknown path(s) no-such-path; choose from " + ", ".join(standalone.PATHS) in r.stderr
