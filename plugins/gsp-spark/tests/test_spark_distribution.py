"""What the gevent-sp-spark distribution installs, and what it does at interpreter start.

* The start-up hook: ``gevent_sp_spark.pth`` runs ``pyspark_gsp._startup`` in every interpreter,
  which wraps ``SparkSession.__init__`` once pyspark is imported; ``GSP_SPARK_STARTUP=0`` (or
  ``false``, ``no``, ``off``) turns it off.
* The packaging: the sdist carries the ``.pth``; the wheel built from it has the ``.pth`` at its
  top and no test harness nor benchmark (only the deprecated modules that point to them).
* The deprecated modules: ``gsp_spark.standalone`` (the harness is ``spark_standalone.py`` of
  these tests) and ``gsp_spark.bench`` (``gsp bench spark``, in gevent-sp-bench) warn, naming
  the new place, and keep working for one version.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
import spark_fixtures

pytestmark = [pytest.mark.spark]
no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test

PROJECT = pathlib.Path(__file__).resolve().parents[1]  # plugins/gsp-spark

#: Whether SparkSession's __init__ (classic, and Spark Connect's) is gsp's wrapper, and whether
#: the start-up hook's import hook is waiting, in a fresh interpreter.
WRAPPED = """
import sys
import pyspark.sql.session as classic
import pyspark.sql.connect.session as connect
print(getattr(classic.SparkSession.__init__, "_gsp_startup", False),
      getattr(connect.SparkSession.__init__, "_gsp_startup", False),
      "gsp_spark" in sys.modules)
"""


def _python(code: str, env: dict[str, str] | None = None,
            cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in changes}
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def test_the_startup_hook_wraps_sparksession_in_every_interpreter() -> None:
    r = _python(WRAPPED, _env(GSP_SPARK_STARTUP=None))
    assert r.returncode == 0, r.stderr
    # Wrapped, and nothing of gsp_spark imported until a session is made.
    assert r.stdout.split() == ["True", "True", "False"]


@pytest.mark.parametrize("value", ["0", "false", "No", "off"])
def test_gsp_spark_startup_off_leaves_sparksession_alone(value: str) -> None:
    r = _python(WRAPPED, _env(GSP_SPARK_STARTUP=value))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False"]


def test_gsp_spark_startup_off_leaves_no_import_hook() -> None:
    r = _python("import sys, pyspark_gsp._startup as s; "
                "print(s.enabled(), [type(f).__name__ for f in sys.meta_path if "
                "type(f).__module__ == s.__name__])", _env(GSP_SPARK_STARTUP="0"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False []"


@pytest.mark.timeout(240)  # two builds by setuptools, offline: a few seconds each
def test_the_wheel_from_the_sdist_has_the_pth_and_no_test_harness(tmp_path: pathlib.Path) -> None:
    project = tmp_path / "project"  # a copy: a build writes into the tree it is given
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "tests"))
    build = "import sys; from setuptools import build_meta as b; print(b.build_{}(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", build.format("sdist"), str(tmp_path / "dist")],
                       capture_output=True, text=True, timeout=120, cwd=project)
    assert r.returncode == 0, r.stderr[-3000:]
    sdist = tmp_path / "dist" / r.stdout.split()[-1]
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "unpacked", filter="data")
    top = names[0].split("/")[0]
    assert f"{top}/src/gevent_sp_spark.pth" in names, names
    # The wheel pip builds from that sdist.
    r = subprocess.run([sys.executable, "-c", build.format("wheel"), str(tmp_path / "wheel")],
                       capture_output=True, text=True, timeout=120,
                       cwd=tmp_path / "unpacked" / top)
    assert r.returncode == 0, r.stderr[-3000:]
    with zipfile.ZipFile(tmp_path / "wheel" / r.stdout.split()[-1]) as whl:
        files = {n: whl.read(n).decode() for n in whl.namelist() if ".dist-info/" not in n}
    assert files["gevent_sp_spark.pth"].strip() == "import pyspark_gsp._startup"
    assert {n.split("/")[0] for n in files} == {"gevent_sp_spark.pth", "gsp_spark", "pyspark_gsp"}
    sources = {n: text for n, text in files.items() if n.endswith(".py")}
    for marker in ("gsp.testing", "kill_tree", "class StandaloneCluster", "def bench_"):
        assert not [n for n, text in sources.items() if marker in text], marker
    # What is left of the moved modules only points to their new places.
    for name in ("gsp_spark/standalone.py", "gsp_spark/bench.py"):
        assert "DeprecationWarning" in sources[name]


def test_the_standalone_module_warns_and_gives_the_harness() -> None:
    r = _python("import warnings\n"
                "with warnings.catch_warnings(record=True) as got:\n"
                "    warnings.simplefilter('always')\n"
                "    from gsp_spark import standalone\n"
                "print(standalone.StandaloneCluster.__module__, standalone.PATHS)\n"
                "print(' | '.join(f'{w.category.__name__}: {w.message}' for w in got))\n")
    assert r.returncode == 0, r.stderr
    names, warned = r.stdout.splitlines()
    assert names == "spark_standalone ('sink-push', 'sink-req', 'source-pull', 'source-rep')"
    assert warned.startswith("DeprecationWarning: gsp_spark.standalone is deprecated: ")
    assert "plugins/gsp-spark/tests/spark_standalone.py" in warned


def test_the_standalone_module_without_a_checkout_names_the_harness(tmp_path: pathlib.Path
                                                                     ) -> None:
    # gsp_spark as a wheel installs it: no tests beside it.
    import gsp_spark

    shutil.copytree(pathlib.Path(gsp_spark.__file__).parent, tmp_path / "site" / "gsp_spark",
                    ignore=shutil.ignore_patterns("__pycache__"))
    r = _python("import gsp_spark.standalone", _env(PYTHONPATH=str(tmp_path / "site")),
                cwd=str(tmp_path))
    assert r.returncode == 1
    assert "ImportError: gsp_spark.standalone is deprecated: the standalone-cluster harness is " \
           "test code, plugins/gsp-spark/tests/spark_standalone.py in gsp's repository" \
           in r.stderr, r.stderr[-3000:]


@pytest.mark.plugins("gsp_bench")
def test_the_bench_module_warns_and_gives_gsp_bench_spark() -> None:
    r = _python("import warnings\n"
                "with warnings.catch_warnings(record=True) as got:\n"
                "    warnings.simplefilter('always')\n"
                "    from gsp_spark import bench\n"
                "import gsp_bench.spark\n"
                "print(bench.run is gsp_bench.spark.run, list(bench.PATHS) == "
                "list(gsp_bench.spark.PATHS))\n"
                "print(' | '.join(f'{w.category.__name__}: {w.message}' for w in got))\n"
                "try:\n"
                "    bench.bench_decode\n"
                "except AttributeError as exc:\n"
                "    print(exc)\n")
    assert r.returncode == 0, r.stderr
    same, warned, missing = r.stdout.splitlines()
    assert same == "True True"
    assert warned.startswith("DeprecationWarning: gsp_spark.bench is deprecated: the benchmark "
                             "is gsp_bench.spark (gsp bench spark; ")
    assert "plugins/gsp-spark/tests/spark_bench_internals.py" in missing


@pytest.mark.plugins("gsp_bench")
def test_python_m_gsp_spark_bench_runs_gsp_bench_spark() -> None:
    # A bad path fails in gsp bench spark's parser, before any Spark starts.
    r = subprocess.run([sys.executable, "-m", "gsp_spark.bench", "--paths", "no-such-path"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "DeprecationWarning: gsp_spark.bench is deprecated" in r.stderr
    assert "gsp bench spark: error: unknown path(s) no-such-path; choose from ceiling-sink" \
        in r.stderr, r.stderr
