"""The sink and the source through a Spark Connect server in front of a standalone cluster that
loses a worker.

The cluster is ``test_spark_standalone.py``'s (a background job, ``jobs.py``: a master and two
workers on 127.0.0.1). In front of it, pyspark's own ``sbin/start-connect-server.sh --wait``
(``spark_standalone.ConnectServer``) runs a Spark Connect server — a process of its own, the
driver of an application on the cluster, one 1 GiB executor per worker, as the classic module's
session — and this process is only its client (``SparkSession.builder.remote("sc://...")``): the
gsp source's receiver runs beside the server's driver, the sinks and the decoding in the
executors, and the client sends plans.

* the same checks as the classic cluster tests: push, acknowledged req and pub sinks sending from
  Python workers under both executor JVMs; the pull source delivering every message once;
* a worker SIGKILLed mid-stream (its Worker JVM, executor and Python workers, by the pids this
  suite started) while the rep source feeds Spark's exactly-once parquet sink: a micro-batch task
  of the killed worker runs again on the survivor, and the sink holds every message sent, each
  spool record (``_seq``) exactly once.

Run alone: ``python -m pytest -n 0 plugins/gsp-spark/tests/test_spark_standalone_connect.py -s``.
"""

from __future__ import annotations

import tempfile
from typing import Any, Iterator

import background
import pytest
import spark_fixtures
import spark_standalone as standalone

pytestmark = [pytest.mark.spark, pytest.mark.spark_standalone,
              spark_fixtures.CLUSTER_GROUP]

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test

ROWS = 30_000
# The server's application: one 1 GiB executor per worker (each offers 2 cores and 1.5 GiB), so
# a lost executor comes back only on a new worker, as the kill checks expect.
SERVER = {"spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g"}


@pytest.fixture(scope="module")
def cluster() -> standalone.StandaloneCluster:
    c: standalone.StandaloneCluster = background.get("standalone-cluster").result(180)
    return c


@pytest.fixture(scope="module")
def server(cluster: standalone.StandaloneCluster) -> Iterator[standalone.ConnectServer]:
    with standalone.ConnectServer(cluster, SERVER) as s:
        s.start()
        yield s
    assert s.daemon is not None and s.daemon.proc.poll() is not None


@pytest.fixture(scope="module")
def spark(server: standalone.ConnectServer, cluster: standalone.StandaloneCluster
          ) -> Iterator[Any]:
    session = server.session()
    assert type(session).__module__ == "pyspark.sql.connect.session"
    try:
        cluster.ensure_workers(2)
        # The server's first Python UDF opens its accumulator connection for good: here, not in
        # a test's leak check (this process holds only the client's channel).
        spark_fixtures.rows_with_executor_jvm(session, 1).collect()
        yield session
    finally:
        session.stop()


@pytest.fixture
def whole(spark: Any, cluster: standalone.StandaloneCluster) -> Any:
    """The session, on a cluster with two workers each running the server's executor again."""
    cluster.ensure_workers(2)
    return spark


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_sink_and_source_through_connect_on_the_cluster(whole: Any, tmp_path: Any) -> None:
    spark_fixtures.sink_and_source_on_the_cluster(whole, tmp_path)
    spark_fixtures.req_and_pub_sinks_on_the_cluster(whole)


@pytest.mark.timeout(300)  # Spark on 2 shared cores: the kill and its recovery
def test_a_worker_sigkilled_mid_stream_through_connect_loses_nothing(
        whole: Any, server: standalone.ConnectServer, cluster: standalone.StandaloneCluster
        ) -> None:
    workdir = tempfile.mkdtemp(prefix="run-", dir=cluster.workdir)  # removed with the cluster
    run = standalone.run_source(whole, cluster, ROWS, "rep", workdir, sink="parquet")
    print(run.report())
    # Nothing lost, nothing made up; each spool record exactly once in the sink.
    assert (run.missing, run.extra) == (0, 0), run.report()
    assert run.seq_duplicates == 0, run.report()
    # The kill hit a working executor of the server's application, whose micro-batch task ran
    # again on the survivor; the server (its driver, the source's receiver beside it) lived on.
    assert run.retried_tasks, run.report()
    assert run.victim and run.survivors and run.victim not in run.survivors
    assert run.first_task <= run.killed < run.retry_started
    assert server.daemon is not None and server.daemon.proc.poll() is None
