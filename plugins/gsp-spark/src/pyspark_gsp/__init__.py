"""PySpark's auto-registration hook for gsp: Spark imports every top-level ``pyspark_*`` module it
finds and registers its ``DefaultSource``, so ``format("gsp")`` works without a manual
``spark.dataSource.register``."""

from gsp_spark import GspDataSource as DefaultSource

__all__ = ["DefaultSource"]
