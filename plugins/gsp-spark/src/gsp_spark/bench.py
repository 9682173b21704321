"""Deprecated: the benchmark is ``gsp bench spark``, module :mod:`gsp_bench.spark` of the
``gevent-sp-bench`` distribution (``pip install 'gevent-sp-bench[spark]'``).

Importing this module raises a :class:`DeprecationWarning` naming the new place; its names are
:mod:`gsp_bench.spark`'s, and ``python -m gsp_spark.bench ARGS`` runs ``gsp bench spark ARGS``,
for one more version. The ``receive`` and ``decode`` paths, which time gsp_spark's internals,
are a tool of gsp-spark's tests: ``plugins/gsp-spark/tests/spark_bench_internals.py`` in gsp's
repository.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

NEW_PLACE = "gsp_bench.spark (gsp bench spark; pip install 'gevent-sp-bench[spark]')"
INTERNALS = "plugins/gsp-spark/tests/spark_bench_internals.py"

# As a script (python -m), this module is __main__: the warning is its own, so it shows.
warnings.warn(f"gsp_spark.bench is deprecated: the benchmark is {NEW_PLACE}; its receive and "
              f"decode paths are {INTERNALS} in gsp's repository", DeprecationWarning,
              stacklevel=1 if __name__ == "__main__" else 2)

try:
    from gsp_bench import spark as _moved
except ImportError as exc:
    raise ImportError(f"gsp_spark.bench moved to {NEW_PLACE}, which is not installed "
                      f"({exc})") from exc


def __getattr__(name: str) -> Any:
    if name in ("bench_receive", "bench_decode"):
        raise AttributeError(f"gsp_spark.bench.{name} is not in {NEW_PLACE}: it times "
                             f"gsp_spark's internals, in {INTERNALS} of gsp's repository")
    return getattr(_moved, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(_moved)))


if __name__ == "__main__":
    sys.exit(_moved.main())
