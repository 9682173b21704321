"""A plain Python UDF for a session or DataFrame of either kind, classic or Spark Connect."""

from __future__ import annotations

from typing import Any, Callable


def python_udf(of: Any, fn: Callable[..., Any], return_type: Any) -> Any:
    """A Python UDF (not Arrow) for DataFrames of ``of``'s kind (a session or DataFrame, classic
    or Spark Connect: pyspark's own ``udf`` picks by the environment, not by the session).
    ``return_type`` is a ``DataType`` (a Connect client alone cannot parse a DDL string)."""
    if type(of).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.functions import builtin

        return builtin.udf(fn, return_type, useArrow=False)
    from pyspark.sql.functions import udf

    return udf(fn, return_type, useArrow=False)
