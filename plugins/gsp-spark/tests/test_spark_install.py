"""``format("gsp")`` is found, and Spark's Python workers have gsp, however the driver script is
started and the plugin installed: from any working directory, with the virtualenv's python run by
its path without activating the virtualenv (PATH without its bin directory, no PYSPARK_PYTHON,
no PYTHONPATH), and from a regular (wheel) install as well as the editable one.

Each script runs in a subprocess with its own Spark (the other modules' sessions are stopped by
then: module-scoped fixtures end with their module)."""

from __future__ import annotations

import os
import pathlib
import shutil
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


REGULAR = """
import sys
import gsp_spark, pyspark_gsp
from pyspark.sql.functions import udf

def where() -> str:
    import gsp_spark, pyspark_gsp, sys
    editable = any(p.rstrip("/").endswith("gsp-spark/src") for p in sys.path)
    return f"{gsp_spark.__file__} {pyspark_gsp.__file__} editable-on-path={editable}"

spark = gsp_spark.local_session(register=False)  # format("gsp") must come from auto-discovery
try:
    print("driver", where(), flush=True)
    df = spark.readStream.format("gsp").option("url", "tcp://127.0.0.1:1").load()
    print("schema", df.schema.simpleString(), flush=True)
    print("worker", spark.range(1).select(udf(where)()).first()[0], flush=True)
finally:
    spark.stop()
"""


@pytest.mark.timeout(300)  # a wheel build (pip fetches setuptools), an install, one Spark start
def test_format_gsp_is_found_with_a_regular_install(tmp_path):
    """A wheel of plugins/gsp-spark, installed into a directory of its own and first on the path,
    with the editable install's path taken away (by a sitecustomize, in the driver and in Spark's
    Python workers alike): Spark's lookup must find ``pyspark_gsp`` among installed modules."""
    import gsp_spark

    src = pathlib.Path(gsp_spark.__file__).resolve().parents[1]  # the editable install's path
    project = tmp_path / "project"  # a copy: pip builds in the tree it is given
    shutil.copytree(src, project / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(src.parent / name, project / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"),
                            str(project)], capture_output=True, text=True, timeout=180)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("gevent_sp_spark-*.whl")
    site = tmp_path / "site"
    installed = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site),
                                str(wheel)], capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr[-3000:]
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        f"import sys\nsys.path[:] = [p for p in sys.path if p.rstrip('/') != {str(src)!r}]\n")
    script = tmp_path / "job.py"
    script.write_text(REGULAR)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(hide)])  # workers inherit it
    out = subprocess.run([sys.executable, str(script)], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "schema struct<value:binary,_received:timestamp,_pipe:bigint,_seq:bigint>" in lines
    for side in ("driver", "worker"):
        (line,) = [ln for ln in lines if ln.startswith(side + " ")]
        mod, hook, editable = line.split()[1:]
        assert mod == str(site / "gsp_spark" / "__init__.py"), line
        assert hook == str(site / "pyspark_gsp" / "__init__.py"), line
        assert editable == "editable-on-path=False", line
