"""gsp's own errors at ``load()``, ``save()`` and ``start()``, on the driver.

Left to Spark, a bad option or a schema that does not fit surfaces as a JVM exception whose text
buries gsp's message in a Python traceback inside a Java one — and for streaming queries only
later, when the query thread fails. So, for ``format("gsp")`` only:

* the options and schema given to PySpark's readers and writers are noted as they are set
  (``option``, ``options``, ``schema``), and ``load()`` / ``save()`` / ``start()`` first check
  them with the very parsers and schema checks the data source uses, raising gsp's own error
  (:class:`gsp.BadOption`, :class:`gsp.InvalidAddress`, :class:`~gsp_spark.SchemaMismatch`)
  before Spark is asked anything;
* an exception Spark raises from those calls that carries a gsp error (a sink task that found no
  peer, ...) is re-raised as that gsp error, chained to Spark's (``raise ... from``); Spark's
  ``DATA_SOURCE_NOT_FOUND`` for ``gsp`` as :class:`~gsp_spark.DataSourceNotInstalled`, which
  names the interpreter Spark's Python workers ran (:mod:`gsp_spark._missing`).

Classic sessions and Spark Connect's alike (the same wrappers on both sets of classes).

:func:`gsp_error` finds gsp's error in any Spark exception, e.g. a streaming query's.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable

import gsp

from ._config import SinkConfig, SourceConfig
from ._missing import explain, is_not_found
from ._types import check_sink_schema, check_source_schema

_GSP = "_gsp_format"  # set on a reader/writer by format(): is it "gsp"?
_OPTS = "_gsp_options"
_SCHEMA = "_gsp_schema"
_MARK = "_gsp_checks"
_DF = "_df"  # the DataFrame a PySpark writer writes
# A traceback's last line, "module.Class: message", for a class in gsp or one of its plugins.
_LINE = re.compile(r"^\s*(gsp[\w.]*\.[A-Z]\w*): (\S.*)$", re.M)


def _error_classes() -> dict[str, type[gsp.GspError]]:
    out: dict[str, type[gsp.GspError]] = {}
    todo: list[type[gsp.GspError]] = [gsp.GspError]
    while todo:
        cls = todo.pop()
        out[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo.extend(cls.__subclasses__())
    return out


def gsp_error(exc: BaseException) -> gsp.GspError | None:
    """The gsp error inside a Spark exception (``AnalysisException``, ``PythonException``,
    ``StreamingQueryException``, a ``Py4JJavaError``, ...): the last traceback line in its text
    naming a gsp error class, rebuilt as that class with that message; ``None`` if there is none.
    A gsp error is returned as is."""
    if isinstance(exc, gsp.GspError):
        return exc
    classes = _error_classes()
    # The last one: a traceback ends with the error raised, after the causes chained to it.
    for m in reversed(list(_LINE.finditer(str(exc)))):
        cls = classes.get(m.group(1))
        if cls is not None:
            try:
                return cls(m.group(2).strip())
            except TypeError:  # a class that is not built from one message
                continue
    return None


def _to_str(value: Any) -> str:
    # As PySpark hands option values to the JVM: booleans lower-cased, None kept out.
    return str(value).lower() if isinstance(value, bool) else str(value)


def _note_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def option(self: Any, key: str, value: Any) -> Any:
        if value is not None:
            self.__dict__.setdefault(_OPTS, {})[str(key).lower()] = _to_str(value)
        return fn(self, key, value)
    return option


def _note_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def options(self: Any, **opts: Any) -> Any:
        noted = self.__dict__.setdefault(_OPTS, {})
        noted.update({str(k).lower(): _to_str(v) for k, v in opts.items() if v is not None})
        return fn(self, **opts)
    return options


def _note_schema(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def schema(self: Any, schema: Any) -> Any:
        self.__dict__[_SCHEMA] = schema
        return fn(self, schema)
    return schema


def note_format(obj: Any, source: str) -> bool:
    """Remember whether ``obj`` (a reader or writer) is for ``format("gsp")``; returns that."""
    is_gsp = isinstance(source, str) and source.strip().lower() == "gsp"
    obj.__dict__[_GSP] = is_gsp
    return is_gsp


def _struct(schema: Any, obj: Any = None) -> Any:
    """``schema`` (a DDL string or a StructType) as a StructType, else None. A Spark Connect
    reader's DDL is parsed by its server: a client alone has no JVM to parse it (where no
    classic SparkContext runs in the process, ``StructType.fromDDL`` fails)."""
    from pyspark.sql.types import StructType

    if isinstance(schema, str):
        if type(obj).__module__.startswith("pyspark.sql.connect"):
            session = _session_of(obj)  # the reader's own, whichever thread made it
            if session is None:
                return None  # nothing to parse with: the server checks the schema itself
            schema = session.createDataFrame([], schema).schema
        else:
            return StructType.fromDDL(schema)
    return schema if isinstance(schema, StructType) else None


def _check_read(obj: Any, call: dict[str, Any]) -> None:
    opts = {**obj.__dict__.get(_OPTS, {}), **{k.lower(): _to_str(v) for k, v in
                                              call.get("options", {}).items() if v is not None}}
    cfg = SourceConfig.parse(opts)
    schema = _struct(call.get("schema") or obj.__dict__.get(_SCHEMA), obj)
    if schema is not None:
        check_source_schema(schema, cfg.format)


def _written_schema(obj: Any) -> Any:
    """The schema of the DataFrame a writer writes: a classic writer holds the DataFrame, a
    Spark Connect one only its plan (and its session)."""
    df = getattr(obj, _DF, None)
    if df is not None and hasattr(df, "schema"):
        return df.schema
    from pyspark.sql.connect.dataframe import DataFrame

    # A Connect DataStreamWriter keeps its plan only in pyspark's WriteStreamOperation, which
    # has no public accessor: pyspark's own attributes, read as pyspark names them.
    plan: Any = df if df is not None else getattr(getattr(obj, "_write_stream", None), "_child", None)
    return DataFrame(plan, _session_of(obj)).schema


def _session_of(obj: Any) -> Any:
    """The session of a reader or writer, classic (``_spark``) or Spark Connect (``_client``
    for readers, ``_spark`` / ``_session`` for writers)."""
    for attr in ("_spark", "_session", "_client"):
        session = getattr(obj, attr, None)
        if session is not None:
            return session
    return None


def _check_write(obj: Any, call: dict[str, Any]) -> None:
    opts = {**obj.__dict__.get(_OPTS, {}), **{k.lower(): _to_str(v) for k, v in
                                              call.get("options", {}).items() if v is not None}}
    cfg = SinkConfig.parse(opts)
    check_sink_schema(_written_schema(obj), cfg.format)


def _spark_error(obj: Any, exc: Exception) -> gsp.GspError | None:
    """gsp's error for what Spark raised from a ``format("gsp")`` call: the gsp error it
    carries, or :class:`DataSourceNotInstalled` for ``DATA_SOURCE_NOT_FOUND``."""
    err = gsp_error(exc)
    if err is None and is_not_found(exc):
        session = _session_of(obj)
        if session is not None:
            err = explain(session, exc)
    return err


def _checked(fn: Callable[..., Any], check: Callable[[Any, dict[str, Any]], None]
             ) -> Callable[..., Any]:
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(self, *args, **kwargs).arguments
        fmt = bound.get("format")
        if not (note_format(self, fmt) if fmt is not None else self.__dict__.get(_GSP, False)):
            return fn(self, *args, **kwargs)
        check(self, bound)  # gsp's own error, before Spark is asked
        try:
            return fn(self, *args, **kwargs)
        except Exception as exc:
            err = _spark_error(self, exc)
            if err is None:
                raise
            raise err from exc
    setattr(call, _MARK, True)
    return call


def install(reader_classes: tuple[Any, ...], writer_classes: tuple[Any, ...]) -> None:
    """Note options/schema on PySpark's readers and writers and check ``load``/``save``/``start``
    for ``format("gsp")`` (idempotent)."""
    for cls in reader_classes + writer_classes:
        if getattr(cls.option, _MARK, False):
            continue
        for name, wrap in (("option", _note_option), ("options", _note_options)):
            wrapped = wrap(getattr(cls, name))
            setattr(wrapped, _MARK, True)
            setattr(cls, name, wrapped)
    for cls in reader_classes:
        if not getattr(cls.schema, _MARK, False):
            wrapped = _note_schema(cls.schema)
            setattr(wrapped, _MARK, True)
            cls.schema = wrapped
        if not getattr(cls.load, _MARK, False):
            cls.load = _checked(cls.load, _check_read)
    for cls in writer_classes:
        for name in ("save", "start"):
            fn = getattr(cls, name, None)
            if fn is not None and not getattr(fn, _MARK, False):
                setattr(cls, name, _checked(fn, _check_write))
