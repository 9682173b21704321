"""Names a package loads on first use (PEP 562), each written once: in the package's
``if TYPE_CHECKING:`` imports, which a type checker and a reader read as the package's names.

:func:`attach` reads those imports from the package's source and makes its ``__getattr__``
(which imports the name's module on first use, then keeps the name) and ``__dir__``. So
``import gsp`` alone neither imports gevent nor creates a hub, and a name added to the block is
all there is to add (``__all__`` stays a literal list for the tools that read it; a test checks
that it names the same).

:func:`moved` makes the ``__getattr__`` of a package's renamed or moved names: the old spelling
still works, with a ``DeprecationWarning`` that names the new one (docs/api-guide.md, "Renamed
names").
"""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from typing import Any, Callable, Iterable, Mapping

__all__ = ["attach", "lazy_names", "moved"]


def lazy_names(source: str) -> dict[str, tuple[str, str | None]]:
    """Name -> (the module it comes from, relative as written: ``"._core.socket"``; the
    attribute of it, or None for a submodule: ``from . import wire``), for every import under
    ``if TYPE_CHECKING:`` at the top of ``source``."""
    names: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and \
                node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    module = "." * imp.level + (imp.module or "")
                    for alias in imp.names:
                        names[alias.asname or alias.name] = \
                            (module, alias.name) if imp.module else (module + alias.name, None)
    return names


def attach(package: str, submodules: Iterable[str] = (),
           renamed: Mapping[str, tuple[str, str]] | None = None,
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (call from its ``__init__``); its
    ``submodules`` (names) load on first use as attributes too, and its ``renamed`` names as
    :func:`moved` has them (``__dir__`` leaves them out)."""
    old = dict(renamed or {})
    module = sys.modules[package]
    with open(module.__file__ or "", encoding="utf-8") as f:
        lazy = lazy_names(f.read())
    lazy.update({name: ("." + name, None) for name in submodules})
    namespace = vars(module)

    def __getattr__(name: str) -> Any:
        where = lazy.get(name)
        if where is None:
            if name in old:
                return _renamed(package, name, old[name])
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(where[0], package)
        value = imported if where[1] is None else getattr(imported, where[1])
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(lazy))

    return __getattr__, __dir__


def moved(package: str, names: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``'s old spellings: ``names`` maps each to its new home
    (a module) and its name there. Each access warns (``DeprecationWarning``, naming the new
    spelling) and returns the new name's value; any other name raises ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return _renamed(package, name, where)

    return __getattr__


def _renamed(package: str, name: str, where: tuple[str, str]) -> Any:
    """An old spelling's value, with its warning (pointing at the line that named it: the
    caller of the module's ``__getattr__``, which calls this)."""
    module, new = where
    warnings.warn(f"{package}.{name} is deprecated: use {module}.{new}", DeprecationWarning,
                  stacklevel=3)
    return getattr(importlib.import_module(module), new)
