"""mypyc's class marker for the modules the wheel compiles (setup.py's ``COMPILED``), in one
place: ``@mypyc_attr(allow_interpreted_subclasses=True)`` on a class of such a module lets code
that is not compiled (another gsp module, a plugin) subclass it. mypyc reads the marker when it
compiles; at run time it does nothing, and where ``mypy_extensions`` is not installed (gsp does
not depend on it) it is this module's no-op."""

from __future__ import annotations

from typing import Any

__all__ = ["mypyc_attr"]

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # a pure install: nothing reads the marker
    def mypyc_attr(*attrs: str, **kwattrs: object) -> Any:  # type: ignore[misc]
        return lambda cls: cls
