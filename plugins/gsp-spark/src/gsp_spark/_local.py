"""A small local SparkSession for examples, the benchmark and tests."""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from ._session import jvm_of, own_server


def worker_python() -> str:
    """The interpreter Spark's Python workers should run: ``PYSPARK_PYTHON`` if the user set it,
    else this process's own (``sys.executable``), which has gsp installed.

    Spark's default is whatever ``python3`` comes first on PATH: for a script started with a
    virtualenv's python by its path, without activating the virtualenv, that is an interpreter
    without gsp, and every worker fails with ``No module named 'gsp'``.
    """
    return os.environ.get("PYSPARK_PYTHON") or sys.executable


def local_session(master: str = "local[2]", app: str = "gsp", register: bool = True,
                  host: str = "127.0.0.1", config: Mapping[str, str] | None = None) -> Any:
    """A SparkSession whose driver binds ``host`` only (the loopback by default; with a cluster
    master, an address the executors reach), UI and progress bars off, 2 shuffle partitions
    (Spark's 200 would mean 200 tiny tasks per aggregation on a laptop), ``gsp`` registered
    unless ``register`` is false (to rely on auto-discovery through ``pyspark_gsp``).

    Spark's Python workers run :func:`worker_python`: ``PYSPARK_PYTHON`` is set to it in this
    process's environment (PySpark reads it there, and the JVM and its workers inherit it) unless
    it was set already, and ``spark.pyspark.python`` likewise.

    ``config`` is more Spark configuration (``{"spark.cores.max": "2"}``), set last: it can
    override any of the above.
    """
    from pyspark.sql import SparkSession

    from ._datasource import register as register_gsp

    python = worker_python()
    os.environ.setdefault("PYSPARK_PYTHON", python)
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", host)
               .config("spark.driver.bindAddress", host)
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.pyspark.python", python))
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register:
        register_gsp(spark)
    return spark


#: What makes a classic session's JVM serve Spark Connect (what ``remote("local[2]")`` sets).
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


def local_connect_session(master: str = "local[2]", app: str = "gsp", host: str = "127.0.0.1",
                          config: Mapping[str, str] | None = None) -> Any:
    """A Spark Connect session on a Spark Connect server started in this process, as
    ``SparkSession.builder.remote("local[2]")`` starts one, but bound to ``host`` only (the
    loopback by default) on a port of its own (``remote("local[...]")`` takes 15002 on every
    interface, so two such processes on one machine collide): the server is
    :func:`local_session`'s (same options, the workers' interpreter included) with Spark's
    Connect plugin, and the session returned is a Connect client of it. Stopping the session
    stops the server.

    ``config`` is more Spark configuration for the server, set last.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    server = local_session(master, app, register=False, host=host, config={
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": "0",  # a free one, read back below
        **(config or {})})
    session: Any = ConnectSession.builder.remote(connect_url(server, host)).getOrCreate()
    own_server(session, server)  # stopped with the session
    return session


def connect_url(server: Any, host: str = "127.0.0.1") -> str:
    """The ``sc://`` address of the Spark Connect server that classic session ``server`` runs
    (started with Spark's Connect plugin, as :func:`local_connect_session` starts one)."""
    service = getattr(jvm_of(server), "org.apache.spark.sql.connect.service.SparkConnectService$")
    return f"sc://{host}:{int(getattr(service, 'MODULE$').localPort())}"
