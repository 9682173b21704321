"""A small local SparkSession for examples, the benchmark and tests."""

from __future__ import annotations

from typing import Any


def local_session(master: str = "local[2]", app: str = "gsp", register: bool = True) -> Any:
    """A local SparkSession on the loopback only, UI and progress bars off, 2 shuffle partitions
    (Spark's 200 would mean 200 tiny tasks per aggregation on a laptop), ``gsp`` registered
    unless ``register`` is false (to rely on auto-discovery through ``pyspark_gsp``)."""
    from pyspark.sql import SparkSession

    from ._datasource import register as register_gsp

    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if register:
        register_gsp(spark)
    return spark
