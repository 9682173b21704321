"""The compiled build, in one place: the modules the wheel compiles with mypyc (:data:`COMPILED`,
which setup.py reads from this file), which of them this process imported compiled
(:func:`compiled`), and mypyc's class marker.

``@mypyc_attr(allow_interpreted_subclasses=True)`` on a class of a compiled module lets code that
is not compiled (another gsp module, a plugin) subclass it. mypyc reads the marker when it
compiles; at run time it does nothing, and where ``mypy_extensions`` is not installed (gsp does
not depend on it) it is this module's no-op."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["COMPILED", "build", "compiled", "mypyc_attr"]

#: The modules the wheel compiles (docs/measuring.md, "The compiled build (mypyc)"). setup.py
#: reads this assignment without importing gsp: keep it a literal tuple of strings.
COMPILED = ("gsp.chan", "gsp.transport.wire", "gsp.protocol.waiting", "gsp.protocol.inbox.queue",
            "gsp._core.readers", "gsp._core.pipe", "gsp.transport.stream",
            "gsp.protocol.backtrace", "gsp.protocol.inbox.ledger", "gsp.protocol.inbox.backlog",
            "gsp.transport.limits", "gsp.transport.parking")


def compiled() -> list[str]:
    """Those of :data:`COMPILED` imported from an extension module, not their ``.py``."""
    return [m for m in COMPILED
            if not str(getattr(importlib.import_module(m), "__file__", "")).endswith(".py")]


def build(modules: list[str] | None = None) -> str:
    """Which build runs, in a word: ``"pure"`` (no module compiled), ``"compiled"`` (all of
    :data:`COMPILED`, as an installed wheel has them) or ``"partly compiled"``. ``modules``:
    the compiled ones (default: :func:`compiled`)."""
    modules = compiled() if modules is None else modules
    if not modules:
        return "pure"
    return "compiled" if set(modules) >= set(COMPILED) else "partly compiled"


try:
    from mypy_extensions import mypyc_attr
except ImportError:  # a pure install: nothing reads the marker
    def mypyc_attr(*attrs: str, **kwattrs: object) -> Any:  # type: ignore[misc]
        return lambda cls: cls
