"""gsp as a PySpark data source named ``gsp``: a streaming source and batch/streaming sinks.

The ``gsp-spark`` distribution (``pip install -e plugins/gsp-spark``; pyspark >= 4.1 and pyarrow).
Spark finds the source by itself through the ``pyspark_gsp`` module this distribution ships
(PySpark's convention: a top-level ``pyspark_*`` module exposing ``DefaultSource``);
:func:`register` does the same by hand::

    gsp_spark.register(spark)
    spark.readStream.format("gsp").option("url", "tcp://127.0.0.1:5555").load()
    df.write.format("gsp").option("url", "tcp://127.0.0.1:5556").mode("append").save()

See docs/spark.md for the options and the wire format.
"""

from __future__ import annotations

from typing import Any

try:
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import StructType
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"gsp_spark needs pyspark >= 4.1 and pyarrow: pip install gsp-spark "
                      f"({exc})") from exc

from ._config import SinkConfig, SourceConfig
from ._hubthread import HubThread
from ._local import local_session
from ._sink import BatchWriter, SinkCommit, SinkError, StreamWriter
from ._source import SourceError, StreamReader
from ._spool import SpoolBusy
from ._types import DEFAULT_SOURCE_SCHEMA, SchemaMismatch
from ._wire import KEY, Deduplicator, packer, unpack


def _need_pyarrow() -> None:
    # Without pyarrow Spark's Python worker dies and Spark reports only that it crashed.
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError("the gsp data source needs pyarrow: pip install gsp-spark") from None


class GspDataSource(DataSource):
    """``format("gsp")``: a streaming source (pull, sub, rep) and sinks (push, pub, req)."""

    @classmethod
    def name(cls) -> str:
        return "gsp"

    def schema(self) -> str:
        # Only reads without a declared schema call this, at load(): a chance to reject bad
        # options there instead of when the query starts.
        SourceConfig.parse(self.options)
        return DEFAULT_SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> StreamReader:
        _need_pyarrow()
        return StreamReader(SourceConfig.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        _need_pyarrow()
        return BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        _need_pyarrow()
        return StreamWriter(self.options, schema)


def register(spark: Any) -> None:
    """Register the ``gsp`` format with a SparkSession (not needed where auto-discovery works)."""
    spark.dataSource.register(GspDataSource)


__all__ = [
    "GspDataSource", "register", "Deduplicator", "KEY", "packer", "unpack",
    "SinkError", "SourceError", "SchemaMismatch", "SpoolBusy", "SinkCommit",
    "SourceConfig", "SinkConfig", "HubThread", "local_session",
]
