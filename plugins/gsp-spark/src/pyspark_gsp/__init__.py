"""PySpark's auto-registration hook for gsp: Spark imports every top-level ``pyspark_*`` module it
finds and registers its ``DefaultSource``, so ``format("gsp")`` works without a manual
``spark.dataSource.register``.

``DefaultSource`` is loaded on first use (importing :mod:`gsp_spark`, which installs its session
hooks), so that :mod:`pyspark_gsp._startup`, which the distribution's ``gevent_sp_spark.pth`` runs
at every interpreter start, imports nothing of pyspark or gsp."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: nothing but sys at interpreter start
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DefaultSource"]


def __getattr__(name: str) -> Any:
    if name == "DefaultSource":
        from gsp_spark import GspDataSource

        return GspDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
