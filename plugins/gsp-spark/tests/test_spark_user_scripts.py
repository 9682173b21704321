"""Driver scripts as users run them, each in a subprocess with its own Spark: ``format("gsp")``
behaves the same however it was found, and Spark's Python workers have gsp, however the script is
started and the plugin installed.

* Any thread: a driver that never imports ``gsp_spark`` nor registers anything —
  PySpark finds the format through ``pyspark_gsp`` by itself — writes from the main thread, a
  plain ``threading.Thread``, a ``ThreadPoolExecutor`` and ``foreachBatch``, and every write
  reaches a PULL socket. That takes the distribution's ``gevent_sp_spark.pth``
  (``pyspark_gsp._startup``): ``import gsp_spark`` alone would leave the plain thread and the
  thread pool failing with ``DATA_SOURCE_NOT_FOUND``, as PySpark imports ``pyspark_gsp`` in a
  Python worker, never in the driver.
* A regular install, python by path: a wheel of plugins/gsp-spark installed into a directory of
  its own, first on the path, with the editable install's path taken away (in the driver and in
  Spark's Python workers alike): Spark's lookup must find ``pyspark_gsp`` among installed
  modules. The script runs from another directory with the virtualenv's python by its path, the
  virtualenv not activated (PATH without its bin directory, no PYSPARK_PYTHON): the workers must
  run that python (the first ``python3`` on PATH has no gsp) and import gsp.

* Spark Connect: a user's first script — ``remote("local[1]")``, ``format("gsp")``
  written with no registration — and its streaming counterpart, from the virtualenv's python by
  its path, not activated: the server's workers must run that python. And a Connect server
  whose workers' Python lacks the plugin: the write fails with
  ``gsp_spark.DataSourceNotInstalled``, which names that interpreter and ``PYSPARK_PYTHON``.

The scripts run as background jobs (``jobs.py``), started with the first gsp-spark test so that
their Spark starts overlap the other tests; these tests wait for them and check what they did.
"""

from __future__ import annotations

import sys

import background
import jobs
import pytest
import spark_fixtures

pytestmark = [pytest.mark.spark, spark_fixtures.LOCAL_GROUP]
no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test


@pytest.mark.timeout(300)  # the job: one Spark start and four small jobs, bounded by its timeouts
def test_format_gsp_from_any_thread_without_importing_gsp_spark():
    outcome = background.get("any-thread").result(280)
    out = outcome["job"]
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr[-3000:]
    assert [ln for ln in lines if ln.startswith("failed")] == [], out.stdout
    assert sorted(ln for ln in lines if ln.startswith("ok")) == \
        sorted(f"ok {c}" for c in jobs.CASES)
    assert sorted(outcome["received"]) == sorted((c, n) for c in jobs.CASES for n in range(3)), \
        outcome["receiver_stderr"][-3000:]


@pytest.mark.timeout(720)  # the job: a wheel build (pip fetches setuptools), an install, a Spark
def test_format_gsp_is_found_with_a_regular_install_and_python_by_path():
    steps = background.get("regular-install").result(700)
    for step in ("built", "installed", "ran"):
        assert steps[step].returncode == 0, (step, steps[step].stderr[-3000:])
    site = steps["site"]
    lines = steps["ran"].stdout.splitlines()
    assert "schema struct<value:binary,_received:timestamp,_pipe:bigint,_seq:bigint>" in lines
    for side in ("driver", "worker"):
        (line,) = [ln for ln in lines if ln.startswith(side + " ")]
        mod, hook, editable, gsp_name, python = line.split()[1:]
        assert mod == str(site / "gsp_spark" / "__init__.py"), line
        assert hook == str(site / "pyspark_gsp" / "__init__.py"), line
        assert editable == "editable-on-path=False", line
        assert (gsp_name, python) == ("gsp", sys.executable), line  # the driver's interpreter


@pytest.mark.timeout(480)  # the job: one Spark start, a batch write and a streaming query
def test_connect_snippet_and_its_streaming_counterpart_from_a_venv_not_activated():
    # remote("local[1]") from the virtualenv's python by its path (PATH without its
    # bin directory, no PYSPARK_PYTHON), no registration: the server's workers run this
    # interpreter, and format("gsp") writes and reads.
    out = background.get("connect-venv").result(460)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "session pyspark.sql.connect.session" in lines, out.stdout
    assert f"workers {sys.executable} {sys.version.split()[0]} True" in lines, out.stdout
    assert "batch 1000 1000" in lines, (out.stdout, out.stderr[-3000:])
    assert "stream 1000 1000" in lines, (out.stdout, out.stderr[-3000:])


@pytest.mark.timeout(480)  # the job: one Spark start, a failing write and a probe
def test_connect_server_without_the_plugin_names_the_interpreter_and_the_fix():
    outcome = background.get("connect-missing").result(460)
    out = outcome["job"]
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "raised gsp_spark._missing.DataSourceNotInstalled" in lines, \
        (out.stdout, out.stderr[-3000:])
    (message,) = [ln for ln in lines if ln.startswith("message ")]
    # The workers' virtualenv: pyspark without the plugin.
    assert f"Spark's Python workers ran {outcome['python']} (Python " \
           f"{sys.version.split()[0]}), which has no gevent-sp-spark" in message, message
    assert "PYSPARK_PYTHON=/path/to/python" in message and "docs/spark.md" in message
