"""Old spellings of renamed public names: they keep working for one minor version and warn.

``__getattr__ = renamed(__name__, {"Old": "New"})`` at the bottom of a module makes
``module.Old`` (and ``from module import Old``) give ``module.New`` with a
:class:`DeprecationWarning` that names the new spelling (docs/api-guide.md, "Renamed names").
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Mapping

__all__ = ["renamed", "warn_renamed"]


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` is spelled ``new`` now (a :class:`DeprecationWarning` at the caller's
    line: ``stacklevel`` counts from the function that calls this one's caller)."""
    warnings.warn(f"{old} is renamed {new}; {old} goes in the next minor version",
                  DeprecationWarning, stacklevel=stacklevel)


def renamed(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the old ``names`` of ``module`` (old -> new attribute)."""
    namespace = vars(sys.modules[module])

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn_renamed(f"{module}.{name}", f"{module}.{new}")
        return namespace[new]

    return __getattr__
