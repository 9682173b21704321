"""The ``gsp`` PySpark data source class and its registration."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ._config import SourceConfig
from ._sink import BatchWriter, StreamWriter
from ._source import StreamReader
from ._types import DEFAULT_SOURCE_SCHEMA


def _need_pyarrow() -> None:
    # Without pyarrow Spark's Python worker dies and Spark reports only that it crashed.
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError("the gsp data source needs pyarrow: pip install gevent-sp-spark") from None


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
