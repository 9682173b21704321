"""The same ``format("gsp")`` however it was found: gsp_spark's hooks in every Spark driver.

PySpark finds ``pyspark_gsp`` by itself, but in a Python worker of its own (the data source
lookup), never in the driver's process: a driver script that never imports :mod:`gsp_spark` would
lack what that import installs — ``format("gsp")`` from any Python thread (a plain thread or a
thread pool otherwise fails with ``DATA_SOURCE_NOT_FOUND``), gsp's own errors at
``load()``/``save()``/``start()``, and ``SparkSession.stop()`` stopping running queries first.

The distribution's ``gevent_sp_spark.pth`` imports this module at interpreter start. It imports
only :mod:`sys` and adds an import hook that waits for ``pyspark.sql.session``; once that module is
loaded, ``SparkSession.__init__`` is wrapped to import :mod:`gsp_spark` (which installs its hooks,
idempotently) when the first session is made. A process that never makes a SparkSession — Spark's
Python workers, any program without Spark — imports nothing more. Never raises: a failure to
install leaves PySpark as it was (``import gsp_spark`` still does it by hand).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: nothing but sys at interpreter start
if TYPE_CHECKING:
    from typing import Any

_TARGET = "pyspark.sql.session"
_MARK = "_gsp_startup"


def _import_gsp_spark() -> None:
    try:
        import gsp_spark  # noqa: F401  (its import installs the hooks)
    except Exception:
        import logging

        logging.getLogger("gsp.spark").debug("gsp: importing gsp_spark failed", exc_info=True)


def _patch(module: Any) -> None:
    """Wrap ``SparkSession.__init__`` of ``module`` (pyspark.sql.session) once."""
    cls = getattr(module, "SparkSession", None)
    init = getattr(cls, "__init__", None)
    if cls is None or init is None or getattr(init, _MARK, False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if "gsp_spark" not in sys.modules:
            _import_gsp_spark()

    for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__wrapped__"):
        setattr(__init__, attr, init if attr == "__wrapped__" else getattr(init, attr, None))
    setattr(__init__, _MARK, True)
    cls.__init__ = __init__


class _Loader:
    """The real loader of pyspark.sql.session, then :func:`_patch`."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def create_module(self, spec: Any) -> Any:
        return self.real.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.real  # the module keeps its real loader (get_source, ...)
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.real
        self.real.exec_module(module)
        try:
            _patch(module)
        except Exception:  # never break importing pyspark
            pass


class _Finder:
    """A one-shot meta path finder for pyspark.sql.session: the other finders' spec, with the
    loader wrapped by :class:`_Loader`."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Have the first SparkSession import :mod:`gsp_spark` (idempotent)."""
    module = sys.modules.get(_TARGET)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
