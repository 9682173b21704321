"""The background jobs of the gsp-spark tests (:mod:`background` runs them; ``conftest.py``
starts those the selected tests need when the first gsp-spark test starts): each does a test's
work with processes of its own and returns what the test checks.

* ``any-thread`` — a driver script that never imports ``gsp_spark`` (PySpark finds the format
  through ``pyspark_gsp``) writes ``format("gsp")`` from the main thread, a plain thread, a
  thread pool and ``foreachBatch`` to a PULL receiver in a process of its own;
* ``regular-install`` — a wheel of plugins/gsp-spark installed into a directory of its own, and a
  driver script run on it from another directory with the virtualenv's python by its path;
* ``connect-venv`` — a batch write with no registration and its streaming counterpart through Spark Connect
  (``SparkSession.builder.remote("local[1]")``), from the virtualenv's python by its path, not
  activated, with no registration and no ``PYSPARK_PYTHON``;
* ``connect-missing`` — a Spark Connect server whose Python workers lack the plugin: the write
  fails with ``gsp_spark.DataSourceNotInstalled``, naming the interpreter;
* ``standalone-cluster`` — a Spark standalone master and two workers (``spark_standalone``).

The checks are in ``test_spark_user_scripts.py`` and ``test_spark_standalone.py``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any, Callable

import spark_standalone as standalone
from background import Job

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


RECEIVER = """
import sys, threading, time
import gsp
from gsp_spark import unpack

expected = int(sys.argv[1])
ended = threading.Event()  # stdin closed: the driver script has ended
threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
got = []
with gsp.socket("pull", listen="tcp://127.0.0.1:0", recv_timeout=0.2) as s:
    print(s.listeners[0].url, flush=True)
    deadline = None
    while len(got) < expected:
        if ended.is_set():
            deadline = deadline or time.monotonic() + 30
            if time.monotonic() > deadline:
                break
        try:
            got.append(s.recv())
        except gsp.Timeout:
            pass
for body in got:
    m = unpack(body)
    print("got", m["case"], m["n"], flush=True)
"""


def any_thread(job: Job) -> dict[str, Any]:
    """Run ``JOB`` (its own Spark, ``local[1]``) against a PULL receiver process; returns the
    script's outcome and the ``(case, n)`` rows the receiver got."""
    script = os.path.join(job.tmp, "job.py")
    with open(script, "w") as f:
        f.write(JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    rx = job.popen([sys.executable, "-c", RECEIVER, str(3 * len(CASES))],
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True)
    assert rx.stdout is not None and rx.stdin is not None
    url = rx.stdout.readline().strip()
    if not url.startswith("tcp://"):
        rx.kill()
        raise RuntimeError(f"the receiver did not start: {rx.communicate()[1][-3000:]}")
    out = job.run([sys.executable, script, url, job.tmp], 200, cwd=job.tmp, env=env)
    rest, err = rx.communicate(timeout=60)  # closes its stdin: it ends within 30 s
    got = [(line.split()[1], int(line.split()[2])) for line in rest.splitlines()
           if line.startswith("got ")]
    return {"job": out, "received": got, "receiver_stderr": err}


REGULAR = """
import sys
import gsp_spark, pyspark_gsp
from pyspark.sql.functions import udf

def where() -> str:
    import gsp, gsp_spark, pyspark_gsp, sys
    editable = any(p.rstrip("/").endswith("gsp-spark/src") for p in sys.path)
    return (f"{gsp_spark.__file__} {pyspark_gsp.__file__} editable-on-path={editable} "
            f"{gsp.__name__} {sys.executable}")

spark = gsp_spark.local_session(register=False)  # format("gsp") must come from auto-discovery
try:
    print("driver", where(), flush=True)
    df = spark.readStream.format("gsp").option("url", "tcp://127.0.0.1:1").load()
    print("schema", df.schema.simpleString(), flush=True)
    print("worker", spark.range(1).select(udf(where)()).first()[0], flush=True)
finally:
    spark.stop()
"""



def regular_install(job: Job) -> dict[str, Any]:
    """Build a wheel of plugins/gsp-spark, install it with ``--target`` into ``site``, hide the
    editable install's path (a sitecustomize, in the driver and Spark's Python workers alike),
    and run ``REGULAR`` from another directory with the virtualenv's python by its path (PATH
    without its bin directory, no PYSPARK_PYTHON); returns the steps' outcomes and ``site``."""
    import gsp_spark

    tmp = pathlib.Path(job.tmp)
    src = pathlib.Path(gsp_spark.__file__).resolve().parents[1]  # the editable install's path
    project = tmp / "project"  # a copy: pip builds in the tree it is given
    shutil.copytree(src, project / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(src.parent / name, project / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    steps: dict[str, Any] = {"site": tmp / "site"}
    steps["built"] = job.run([*pip, "wheel", "--no-deps", "-w", str(tmp / "dist"),
                              str(project)], 180)
    if steps["built"].returncode:
        return steps
    (wheel,) = (tmp / "dist").glob("gevent_sp_spark-*.whl")
    steps["installed"] = job.run([*pip, "install", "--no-deps", "--no-index", "--target",
                                  str(tmp / "site"), str(wheel)], 120)
    if steps["installed"].returncode:
        return steps
    hide = tmp / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        f"import sys\nsys.path[:] = [p for p in sys.path if p.rstrip('/') != {str(src)!r}]\n")
    script = tmp / "job.py"
    script.write_text(REGULAR)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.abspath(p) != venv_bin)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp / "site"), str(hide)])  # workers inherit it
    steps["ran"] = job.run([sys.executable, str(script)], 300, cwd=elsewhere, env=env)
    return steps


CONNECT = """
import os, sys, tempfile, time
from pyspark.sql import SparkSession

assert "PYSPARK_PYTHON" not in os.environ and "gsp_spark" not in sys.modules
spark = (SparkSession.builder.remote("local[1]")
         .config("spark.connect.grpc.binding.address", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "1").getOrCreate())
print("session", type(spark).__module__, flush=True)
import msgpack
import gsp
from gsp_spark import HubThread
from gsp_spark._missing import worker_python_of
sys.path.insert(0, sys.argv[2])  # plugins/gsp-spark/tests, for its harness's receiver
import spark_standalone as standalone

print("workers", *worker_python_of(spark), flush=True)
try:
    # The issue's snippet.
    with standalone.Receiver("pull") as rx:
        (spark.range(1000).selectExpr("cast(id as string) as value")
         .write.format("gsp").option("url", rx.url).option("protocol", "push").mode("append")
         .save())
        deadline = time.monotonic() + 60
        while len(rx.messages) < 1000 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        print("batch", len(rx.messages), len({m for m in rx.messages}), flush=True)
    # Its streaming counterpart: readStream.format("gsp") from a PUSH producer.
    url, tmp = standalone.free_tcp_url(), tempfile.mkdtemp(dir=sys.argv[1])
    q = (spark.readStream.format("gsp").schema("n BIGINT").option("url", url)
         .option("spool", os.path.join(tmp, "spool")).load()
         .writeStream.format("memory").queryName("counterpart")
         .option("checkpointLocation", os.path.join(tmp, "ck"))
         .trigger(processingTime="300 milliseconds").start())

    def produce(stop):
        with gsp.socket("push", dial=url, send_timeout=60) as s:
            for n in range(1000):
                s.send(msgpack.packb({"n": n}))

    HubThread(produce, "producer").join(90)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        got = spark.sql("SELECT count(*) AS c, count(DISTINCT n) AS d FROM counterpart").first()
        if got.c >= 1000:
            break
        time.sleep(0.3)
    q.stop()
    print("stream", got.c, got.d, flush=True)
finally:
    spark.stop()
"""


def _no_venv_env() -> dict[str, str]:
    """This environment without the virtualenv's activation: PATH without its bin directory,
    no PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON, VIRTUAL_ENV nor PYTHONPATH."""
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in (
        "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.abspath(p) != venv_bin)
    return env


def connect_venv(job: Job) -> Any:
    """Run ``CONNECT`` with the virtualenv's python by its path, not activated, in a network
    namespace of its own (``unshare -rn``, its loopback brought up): ``remote("local[1]")``'s
    server takes port 15002, which must not collide with anything else on the machine."""
    script = os.path.join(job.tmp, "connect.py")
    with open(script, "w") as f:
        f.write(CONNECT)
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) runs the Connect job in its own network"
    env = _no_venv_env()
    env["PATH"] += os.pathsep + os.pathsep.join(("/usr/sbin", "/sbin"))  # ip (iproute2)
    return job.run([unshare, "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                    sys.executable, script, job.tmp, os.path.dirname(os.path.abspath(__file__))],
                   400, cwd=job.tmp, env=env)


MISSING = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.argv[1]  # the server's workers: a Python without the plugin
import gsp_spark

spark = gsp_spark.local_connect_session("local[1]", "gsp-connect-missing")
try:
    spark.range(3).write.format("gsp").option("url", "tcp://127.0.0.1:1").mode("append").save()
    print("saved", flush=True)
except Exception as exc:
    print("raised", type(exc).__module__ + "." + type(exc).__qualname__, flush=True)
    print("message", str(exc).replace("\\n", " "), flush=True)
finally:
    spark.stop()
"""


def connect_missing(job: Job) -> dict[str, Any]:
    """Run ``MISSING``: a Connect server whose Python workers run a virtualenv of their own
    that sees this one's site-packages (pyspark, pyarrow) through a path entry, but not what
    their ``.pth`` files add (the editable installs of gsp and gevent-sp-spark): an interpreter
    without gevent-sp-spark, as a server's default Python would be."""
    import site
    import sysconfig

    env_dir = pathlib.Path(job.tmp) / "venv-without-gsp"
    made = job.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], 120)
    if made.returncode:
        return {"job": made, "python": ""}
    python = env_dir / "bin" / "python"
    purelib = job.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                       "['purelib'])"], 60).stdout.strip()
    ours = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (pathlib.Path(purelib) / "spark.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    script = os.path.join(job.tmp, "missing.py")
    with open(script, "w") as f:
        f.write(MISSING)
    out = job.run([sys.executable, script, str(python)], 400, cwd=job.tmp, env=_no_venv_env())
    return {"job": out, "python": str(python)}


def standalone_cluster(job: Job) -> standalone.StandaloneCluster:
    """A master and two workers on 127.0.0.1, returned once the master is up (the module's
    session waits for the workers). Each worker offers 2 cores and 1.5 GiB: see
    ``test_spark_standalone.py``."""
    c = standalone.StandaloneCluster(os.path.join(job.tmp, "cluster"), cores=2, memory="1536m")
    return c.start(2, wait=False)


def close_cluster(c: standalone.StandaloneCluster) -> None:
    c.close()
    assert not [d for d in [c.master, *c.workers] if d and d.proc.poll() is None]


#: Each job by name: its function and its cleanup (given the function's result).
JOBS: dict[str, tuple[Callable[[Job], Any], Callable[[Any], None] | None]] = {
    "any-thread": (any_thread, None),
    "regular-install": (regular_install, None),
    "connect-venv": (connect_venv, None),
    "connect-missing": (connect_missing, None),
    "standalone-cluster": (standalone_cluster, close_cluster),
}

#: The jobs each test module needs: the session starts them if the module's tests are selected.
NEEDED_BY = {
    "test_spark_user_scripts.py": ("any-thread", "regular-install", "connect-venv",
                                   "connect-missing"),
    "test_spark_standalone.py": ("standalone-cluster",),
    "test_spark_standalone_connect.py": ("standalone-cluster",),
}
