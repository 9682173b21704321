"""Session hooks: ``format("gsp")`` from any Python thread, and queries stopped with the session.

Spark's JVM finds a Python data source through the *active session of the JVM thread* making the
call. With PySpark's pinned threads (the default) every Python thread gets a JVM thread of its
own, which has no active session unless something set one: a thread started by the user, a thread
pool, the py4j callback thread that runs ``foreachBatch``. There ``save()`` and ``start()`` of
``format("gsp")`` fail with ``DATA_SOURCE_NOT_FOUND`` even though the source is registered.

:func:`install` (done when ``gsp_spark`` is imported, which the first SparkSession of a driver
does through ``pyspark_gsp._startup``) wraps the ``format`` method of PySpark's four
classic readers and writers: ``format("gsp")`` first makes the reader's or writer's own session the
active session of the calling thread's JVM thread if that thread has none. Other formats are
untouched. ``save(format="gsp")``, ``load(format="gsp")`` and ``start(format="gsp")`` go through
``format`` too.

``SparkSession.stop()`` leaves a running streaming query's Python source process alive (it waits
on its JVM socket until the driver exits), so the gsp source's receiver would keep listening and
its spool stay locked. :func:`install` also wraps ``SparkSession.stop``: it first stops the
session's active streaming queries (which Spark's stop ends anyway), through their ordinary
``stop()``, which ends those processes.
"""

from __future__ import annotations

import functools
import logging
import sys
import weakref
from typing import Any, Callable

from ._checks import install as install_checks
from ._checks import note_format

log = logging.getLogger("gsp.spark")

_MARK = "_gsp_activates"


# The in-process Spark Connect servers gsp_spark.local_connect_session starts, by the client
# session each belongs to: that session's stop() stops its server too.
_SERVERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def own_server(session: Any, server: Any) -> None:
    """Stop ``server`` (a classic session running a Connect server) when ``session`` stops."""
    _SERVERS[session] = server


def jvm_of(spark: Any) -> Any:
    """A classic session's py4j view of its JVM (pyspark's ``_jvm``); None on Spark Connect."""
    return getattr(spark, "_jvm", None)


def activate(spark: Any) -> bool:
    """Make ``spark`` the active session of the calling thread's JVM thread unless it already has
    one; returns whether it set it. A session without a JVM (Spark Connect) is left alone."""
    jvm = jvm_of(spark)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is None or jsession is None:
        return False
    from pyspark.sql import SparkSession

    cls = SparkSession._get_j_spark_session_class(jvm)
    if cls.getActiveSession().isDefined():
        return False
    cls.setActiveSession(jsession)
    return True


def _wrap(fmt: Callable[..., Any], connect: bool = False) -> Callable[..., Any]:
    @functools.wraps(fmt)
    def format(self: Any, source: str) -> Any:
        if note_format(self, source) and not connect:
            activate(self._spark)
        return fmt(self, source)

    setattr(format, _MARK, True)
    return format


def stop_queries(spark: Any) -> int:
    """Stop ``spark``'s active streaming queries; returns how many. A query that fails to stop is
    logged, not raised: the session is being stopped either way."""
    try:
        queries = list(spark.streams.active)
    except Exception:  # a session already stopped has nothing to stop
        return 0
    for q in queries:
        try:
            q.stop()
        except Exception:
            log.warning("gsp: stopping streaming query %s with its session failed", q.id,
                        exc_info=True)
    return len(queries)


def _wrap_stop(stop: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(stop)
    def stop_session(self: Any) -> Any:
        stop_queries(self)
        out = stop(self)
        server = _SERVERS.pop(self, None)  # gsp_spark.local_connect_session's
        if server is not None:
            server.stop()
        return out

    setattr(stop_session, _MARK, True)
    return stop_session


def _hook(readers: tuple[Any, ...], writers: tuple[Any, ...], session: Any,
          connect: bool = False) -> None:
    """The checks, ``format`` and ``stop`` wrappers on one set of PySpark's classes (idempotent)."""
    install_checks(readers, writers)
    for cls in readers + writers:
        if not getattr(cls.format, _MARK, False):
            cls.format = _wrap(cls.format, connect)
    if not getattr(session.stop, _MARK, False):
        session.stop = _wrap_stop(session.stop)


def _install_connect() -> None:
    """The checks and ``stop`` for Spark Connect's readers, writers and session. Their
    ``format`` only notes the format for the checks: a Connect server resolves data sources in
    sessions of its own, with no JVM thread on this side to activate one in."""
    from pyspark.sql.connect.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.connect.session import SparkSession
    from pyspark.sql.connect.streaming.readwriter import DataStreamReader, DataStreamWriter

    _hook((DataFrameReader, DataStreamReader), (DataFrameWriter, DataStreamWriter), SparkSession,
          connect=True)


def install() -> None:
    """Wrap ``format`` of PySpark's classic DataFrameReader/Writer and DataStreamReader/Writer,
    and ``SparkSession.stop``; install the checks of :mod:`gsp_spark._checks` (idempotent).
    Once Spark Connect's client is loaded (``pyspark.sql.connect.session``), its readers,
    writers and session get the checks and ``stop`` too (a later call adds them: every
    SparkSession made calls this, through ``pyspark_gsp._startup``)."""
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.session import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    _hook((DataFrameReader, DataStreamReader), (DataFrameWriter, DataStreamWriter), SparkSession)
    if "pyspark.sql.connect.session" in sys.modules:  # not imported here: grpc, pandas
        _install_connect()
