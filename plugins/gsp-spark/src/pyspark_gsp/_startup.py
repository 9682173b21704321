"""The same ``format("gsp")`` however it was found: gsp_spark's hooks in every Spark driver.

PySpark finds ``pyspark_gsp`` by itself, but in a Python worker of its own (the data source
lookup), never in the driver's process: a driver script that never imports :mod:`gsp_spark` would
lack what that import installs — ``format("gsp")`` from any Python thread (a plain thread or a
thread pool otherwise fails with ``DATA_SOURCE_NOT_FOUND``), gsp's own errors at
``load()``/``save()``/``start()``, and ``SparkSession.stop()`` stopping running queries first.

The distribution's ``gevent_sp_spark.pth`` imports this module at interpreter start. It imports
only :mod:`sys` and adds an import hook that waits for ``pyspark.sql.session`` and
``pyspark.sql.connect.session``; once one is loaded, its ``SparkSession.__init__`` is wrapped to
import :mod:`gsp_spark` and run its :func:`gsp_spark.install` (idempotent: the classic hooks, and
the Spark Connect ones once Connect is loaded) when a session is made. A process that never makes
a SparkSession — Spark's Python workers, any program without Spark — imports nothing more.

The same hook gives a local Spark the driver's interpreter for its Python workers: when this
process launches Spark's JVM (``SparkContext._ensure_initialized``) for a ``local`` or
``local-cluster`` master — a classic session, or the server that ``SparkSession.builder.remote(
"local[2]")`` starts in-process — and neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` is
set, ``PYSPARK_PYTHON`` is set to ``sys.executable``. The JVM inherits it: Spark's data source
lookup (which lists ``pyspark_*`` modules in a Python process of its own, run with the JVM's
``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else ``python3`` from PATH) and every Python
worker then run the interpreter that has gsp, as ``gsp_spark.local_session`` always did. A
cluster master, a user's own ``PYSPARK_PYTHON``, and a JVM that launched this process
(``spark-submit``) are left alone.

Never raises: a failure to install leaves PySpark as it was (``import gsp_spark`` still installs
the hooks by hand).

This is the one place gsp-spark touches every interpreter. ``GSP_SPARK_STARTUP=0`` in the
environment (or ``false``, ``no``, ``off``) turns it off: the ``.pth`` then imports this module
and nothing else happens — no import hook, no wrapped ``SparkSession``, no ``PYSPARK_PYTHON``.
A driver then gets gsp_spark's hooks by importing :mod:`gsp_spark`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: nothing but sys at interpreter start
if TYPE_CHECKING:
    from typing import Any

_CLASSIC = "pyspark.sql.session"
_CONNECT = "pyspark.sql.connect.session"
_TARGETS = (_CLASSIC, _CONNECT)
_MARK = "_gsp_startup"
#: The environment variable that turns the start-up hook off, and the values that do.
SWITCH = "GSP_SPARK_STARTUP"
_OFF = ("0", "false", "no", "off")


def _install_gsp_spark() -> None:
    try:
        import gsp_spark  # its import installs the hooks

        gsp_spark.install()  # again: Spark Connect's, if Connect was loaded since
    except Exception:
        import logging

        logging.getLogger("gsp.spark").debug("gsp: importing gsp_spark failed", exc_info=True)


def _local_master(conf: Any) -> bool:
    """Whether the JVM about to be launched runs a local master (``local[...]``,
    ``local-cluster[...]``, or none given, which PySpark runs as local)."""
    import os

    master = conf.get("spark.master", None) if conf is not None else None
    if master is None:
        args = os.environ.get("PYSPARK_SUBMIT_ARGS", "").split()
        if "--master" in args[:-1]:
            master = args[args.index("--master") + 1]
    return master is None or str(master).startswith("local")


def default_worker_python(conf: Any) -> bool:
    """Set ``PYSPARK_PYTHON`` to ``sys.executable`` before a local JVM is launched with ``conf``
    (see the module's docstring); returns whether it did."""
    import os

    if (os.environ.get("PYSPARK_PYTHON") or os.environ.get("PYSPARK_GATEWAY_PORT")
            or not sys.executable or not _local_master(conf)
            or (conf is not None and conf.get("spark.pyspark.python", None))):
        return False
    os.environ["PYSPARK_PYTHON"] = sys.executable
    return True


def _dressed(wrapper: Any, real: Any) -> Any:
    """``wrapper`` with ``real``'s name, docstring and ``__wrapped__``, marked as gsp's."""
    import functools  # here, not at interpreter start: PySpark, loading, has imported it

    functools.update_wrapper(wrapper, real)
    setattr(wrapper, _MARK, True)
    return wrapper


def _patch_context(cls: Any) -> None:
    """Wrap ``SparkContext._ensure_initialized`` (which launches the JVM) once."""
    real = cls.__dict__.get("_ensure_initialized")
    func = getattr(real, "__func__", None)
    if func is None or getattr(func, _MARK, False):
        return

    def _ensure_initialized(klass: Any, instance: Any = None, gateway: Any = None,
                            conf: Any = None) -> Any:
        if gateway is None and getattr(klass, "_gateway", None) is None:
            try:
                default_worker_python(conf)
            except Exception:  # never break starting Spark
                pass
        return func(klass, instance, gateway, conf)

    cls._ensure_initialized = classmethod(_dressed(_ensure_initialized, func))


def _patch(module: Any) -> None:
    """Wrap ``SparkSession.__init__`` of ``module`` (pyspark.sql.session, or
    pyspark.sql.connect.session) once; with the classic one, ``SparkContext`` too."""
    if module.__name__ == _CLASSIC:
        context = sys.modules.get("pyspark.core.context")
        if context is not None and getattr(context, "SparkContext", None) is not None:
            _patch_context(context.SparkContext)
    cls = getattr(module, "SparkSession", None)
    init = getattr(cls, "__init__", None)
    if cls is None or init is None or getattr(init, _MARK, False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _install_gsp_spark()

    cls.__init__ = _dressed(__init__, init)


class _Loader:
    """The real loader of a module of ``_TARGETS``, then :func:`_patch`."""

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
    """A meta path finder for the modules of ``_TARGETS``, each once: the other finders' spec,
    with the loader wrapped by :class:`_Loader`; gone from ``sys.meta_path`` once all were
    found."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.names:
            return None
        self.names.discard(name)
        if not self.names and self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None and finder is not self else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Have every SparkSession, classic or Spark Connect, install :mod:`gsp_spark`'s hooks, and
    a local JVM get this interpreter for its workers (idempotent)."""
    waiting: set[str] = set()
    for name in _TARGETS:
        module = sys.modules.get(name)
        if module is not None:
            _patch(module)
        else:
            waiting.add(name)
    if waiting and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(waiting))


def enabled() -> bool:
    """Whether the start-up hook is on: unless :data:`SWITCH` is set to one of ``0``,
    ``false``, ``no``, ``off`` (any case)."""
    import os

    return os.environ.get(SWITCH, "").strip().lower() not in _OFF


if enabled():
    install()
