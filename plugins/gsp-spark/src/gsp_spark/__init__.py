"""gsp as a PySpark data source named ``gsp``: a streaming source and batch/streaming sinks.

The ``gevent-sp-spark`` distribution (``pip install -e plugins/gsp-spark``; pyspark >= 4.1 and pyarrow).
Spark finds the source by itself through the ``pyspark_gsp`` module this distribution ships
(PySpark's convention: a top-level ``pyspark_*`` module exposing ``DefaultSource``);
:func:`register` does the same by hand::

    gsp_spark.register(spark)
    spark.readStream.format("gsp").option("url", "tcp://127.0.0.1:5555").load()
    df.write.format("gsp").option("url", "tcp://127.0.0.1:5556").mode("append").save()

Importing this package also makes ``format("gsp")`` work from any Python thread (see
:mod:`gsp_spark._session`); the distribution's ``gevent_sp_spark.pth`` has the first SparkSession
of every driver import it (:mod:`pyspark_gsp._startup`), so that holds without an import too
(``GSP_SPARK_STARTUP=0`` turns that start-up hook off). See docs/spark.md for the options and the
wire format.
"""

from __future__ import annotations

try:
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"gsp_spark needs pyspark >= 4.1 and pyarrow: pip install gevent-sp-spark "
                      f"({exc})") from exc

from ._checks import gsp_error
from ._config import SinkConfig, SourceConfig
from ._datasource import GspDataSource, register
from ._decode import SourceError
from ._hubthread import HubThread
from ._local import local_connect_session, local_session, worker_python
from ._missing import DataSourceNotInstalled
from ._session import activate, install, stop_queries
from ._sink import BatchWriter, SinkCommit, SinkError, StreamWriter
from ._source import StreamReader
from ._spool import SpoolBusy
from ._types import DEFAULT_SOURCE_SCHEMA, SchemaMismatch
from ._wire import KEY, Deduplicator, packer, unpack

__all__ = [
    "GspDataSource", "register", "Deduplicator", "KEY", "packer", "unpack",
    "SinkError", "SourceError", "SchemaMismatch", "SpoolBusy", "SinkCommit",
    "SourceConfig", "SinkConfig", "HubThread", "local_session",
    "BatchWriter", "StreamWriter", "StreamReader", "DEFAULT_SOURCE_SCHEMA", "activate",
    "worker_python", "gsp_error", "stop_queries", "DataSourceNotInstalled", "install",
    "local_connect_session",
]

# format("gsp") from any thread: see _session (wrapping PySpark's format methods is idempotent).
install()
