"""Deprecated: the standalone-cluster harness is gsp-spark's test code, not part of the package.

A Spark standalone cluster that loses a worker mid-run (``StandaloneCluster``, ``ConnectServer``,
``run_path``, ``Receiver``...) is ``plugins/gsp-spark/tests/spark_standalone.py`` in gsp's
repository; ``examples/spark_standalone.sh lose-worker`` runs it.

Importing this module raises a :class:`DeprecationWarning` naming that place. From a checkout
(an editable install of ``plugins/gsp-spark``) its names are still that module's, and
``python -m gsp_spark.standalone`` still runs it, for one more version; from an installed
wheel, which holds no test code, the import fails with :class:`ImportError`, naming the same
place.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from types import ModuleType
from typing import Any

#: Where the harness is, from the repository's root.
NEW_PLACE = "plugins/gsp-spark/tests/spark_standalone.py"
_NAME = "spark_standalone"
_MOVED = (f"gsp_spark.standalone is deprecated: the standalone-cluster harness is test code, "
          f"{NEW_PLACE} in gsp's repository (examples/spark_standalone.sh lose-worker runs it)")

# As a script (python -m), this module is __main__: the warning is its own, so it shows.
warnings.warn(_MOVED, DeprecationWarning, stacklevel=1 if __name__ == "__main__" else 2)


def _harness() -> ModuleType:
    """The harness module, loaded from the checkout this package is installed from."""
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    here = os.path.dirname(os.path.abspath(__file__))  # <checkout>/plugins/gsp-spark/src/gsp_spark
    path = os.path.join(here, os.pardir, os.pardir, "tests", "spark_standalone.py")
    spec = importlib.util.spec_from_file_location(_NAME, os.path.normpath(path))
    if not os.path.isfile(path) or spec is None or spec.loader is None:
        raise ImportError(f"{_MOVED}; this installation has no checkout beside it")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # the harness sends its probe by value, by this name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module


_module = _harness()


def __getattr__(name: str) -> Any:
    return getattr(_module, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(_module)))


if __name__ == "__main__":
    sys.exit(_module.main())
