"""``format("gsp")`` is found, and Spark's Python workers have gsp, however the driver script is
started: from any working directory, and with the virtualenv's python run by its path without
activating the virtualenv (PATH without its bin directory, no PYSPARK_PYTHON, no PYTHONPATH).

The script runs in a subprocess with its own Spark (the other modules' sessions are stopped by
then: module-scoped fixtures end with their module)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import spark_fixtures

no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test

SCRIPT = """
from pyspark.sql.functions import udf
from gsp_spark import local_session

spark = local_session(register=False)  # format("gsp") must come from auto-discovery
try:
    df = spark.readStream.format("gsp").option("url", "tcp://127.0.0.1:1").load()
    print("schema", df.schema.simpleString(), flush=True)
    probe = udf(lambda _: __import__("gsp").__name__ + " " + __import__("sys").executable)
    print("worker", spark.range(1).select(probe("id")).first()[0], flush=True)
finally:
    spark.stop()
"""


@pytest.mark.timeout(180)  # one Spark start and two small jobs, bounded by the subprocess timeout
def test_script_with_venv_python_by_path_from_another_directory(tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.abspath(p) != venv_bin)
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "schema struct<value:binary,_received:timestamp,_pipe:bigint,_seq:bigint>" in lines
    assert f"worker gsp {sys.executable}" in lines  # the worker ran the driver's interpreter
