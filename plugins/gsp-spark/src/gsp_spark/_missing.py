"""``DATA_SOURCE_NOT_FOUND`` for ``format("gsp")``, explained: which interpreter Spark's Python
workers ran, and how to point Spark at one that has gsp.

Spark finds ``gsp`` by listing the ``pyspark_*`` modules importable in a Python process of its own
(``pyspark.sql.worker.lookup_data_sources``), started by the JVM with the JVM's
``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else ``python3`` from PATH. Where that
interpreter lacks ``gevent-sp-spark`` — a Spark Connect server started without the driver's
virtualenv, a hosted platform's default Python — Spark says only that no data source ``gsp``
exists. :func:`explain` asks the same Spark, through a one-row Python UDF, which interpreter its
workers run and whether ``pyspark_gsp`` is importable there, and builds
:class:`DataSourceNotInstalled` from the answer.
"""

from __future__ import annotations

import re
from typing import Any

import gsp

from ._udf import python_udf

_NOT_FOUND = re.compile(r"DATA_SOURCE_NOT_FOUND\]?[^\n]*?\bgsp\b")

# The probe's source, made into a function of a module that is not importable anywhere
# (``gsp_probe``): cloudpickle ships it by value, so the workers need only pyspark to run it.
_PROBE = '''
def probe(_):
    import importlib.util, sys
    found = importlib.util.find_spec("pyspark_gsp") is not None
    return "%s|%s|%s" % (sys.executable, sys.version.split()[0], found)
'''


class DataSourceNotInstalled(gsp.UnknownPlugin):
    """Spark has no ``gsp`` data source: the Python its JVM runs for the lookup (a Spark
    Connect server's, a cluster's) has no ``gevent-sp-spark``. The message names the
    interpreter Spark's Python workers ran and how to point Spark at the right one."""


def is_not_found(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark's ``DATA_SOURCE_NOT_FOUND`` for ``gsp``."""
    return bool(_NOT_FOUND.search(str(exc)))


def worker_python_of(spark: Any) -> tuple[str, str, bool]:
    """``(sys.executable, Python version, whether pyspark_gsp is importable)`` in a Python
    worker of ``spark`` (classic or Spark Connect): one row through a Python UDF."""
    from pyspark.sql.types import StringType

    namespace: dict[str, Any] = {"__name__": "gsp_probe"}
    exec(compile(_PROBE, "<gsp probe>", "exec"), namespace)
    answer = spark.range(1).select(python_udf(spark, namespace["probe"], StringType())("id"))
    exe, version, found = str(answer.first()[0]).split("|")
    return exe, version, found == "True"


def explain(spark: Any, exc: BaseException) -> DataSourceNotInstalled:
    """:class:`DataSourceNotInstalled` for ``exc`` (Spark's ``DATA_SOURCE_NOT_FOUND``), naming
    what :func:`worker_python_of` finds (or why it could not)."""
    try:
        exe, version, found = worker_python_of(spark)
    except Exception as probe_exc:  # no Python at all, another minor version, ...
        first = next((ln.strip() for ln in str(probe_exc).splitlines() if ln.strip()), "")
        ran = f"Spark's Python workers could not even run a probe ({first[:300]})"
    else:
        if found:
            ran = (f"Spark's Python workers run {exe} (Python {version}), which has it; the "
                   "data source lookup ran another interpreter: the Spark JVM's "
                   "PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else python3 on its PATH")
        else:
            ran = (f"Spark's Python workers ran {exe} (Python {version}), which has no "
                   "gevent-sp-spark")
    return DataSourceNotInstalled(
        "gsp: Spark found no data source 'gsp': the Python that Spark runs (on the Spark "
        f"Connect server, or the cluster's driver) lacks gevent-sp-spark. {ran}. Install "
        "gevent-sp-spark into that interpreter, or point Spark at one that has it: "
        "PYSPARK_PYTHON=/path/to/python (and PYSPARK_DRIVER_PYTHON, if set) in the environment "
        "of the process that starts Spark's JVM (start-connect-server.sh, spark-submit, the "
        "cluster's spark-env.sh), before it starts; a local session from this process gets "
        f"this interpreter by itself. See docs/spark.md, 'Spark Connect'.")
