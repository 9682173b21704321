"""The compiled build: a wheel built from this tree (``python -m build --wheel``, ``pip wheel .``,
``pip install .``) carries gsp's hot modules compiled by mypyc (docs/performance.md, "The
compiled build (mypyc)"); everything else is in pyproject.toml.

It falls back to pure Python, and the build still succeeds, when

- ``GSP_PURE`` is set to anything but ``""`` or ``0`` (the opt-out);
- mypyc cannot be imported, no C compiler is on PATH or Python's headers are missing;
- compiling fails (the C compiler's error is printed, then the extension modules are dropped);
- the install is editable (``pip install -e .``, README's commands): those stay pure, so a source
  checkout never gets extension modules beside its ``.py`` files.

The ``.py`` files of the compiled modules stay in the wheel (an extension module is imported
before a ``.py`` of the same name). ``gsp info``, ``gsp bench`` and ``gsp._mypyc.compiled()`` say
which build runs.
"""

from __future__ import annotations

import ast
import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def compiled_modules() -> list[str]:
    """The modules to compile, as paths: ``gsp._mypyc.COMPILED``, the one list of them, read
    from its file without importing gsp (a build has not installed it)."""
    with open(os.path.join(HERE, "gsp", "_mypyc.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == \
                ["COMPILED"]:
            return [m.replace(".", "/") + ".py" for m in ast.literal_eval(node.value)]
    raise RuntimeError("gsp/_mypyc.py assigns no COMPILED")


#: The modules compiled, as paths.
COMPILED = compiled_modules()

#: The opt-out: GSP_PURE=1 builds a pure-Python wheel.
OPT_OUT = "GSP_PURE"

#: setup.py commands that build the package (and so compile it). pip and ``build`` run setup.py
#: for metadata too (egg_info, dist_info) and editable installs run ``editable_wheel``: those do
#: not compile.
BUILDING = {"bdist_wheel", "build", "build_ext", "install", "bdist"}


def say(msg: str) -> None:
    print(f"gsp setup.py: {msg}", file=sys.stderr, flush=True)


def why_pure(argv: list[str], environ: Mapping[str, str]) -> str | None:
    """Why this build is pure Python, or None if it compiles."""
    if environ.get(OPT_OUT, "") not in ("", "0"):
        return f"{OPT_OUT}={environ[OPT_OUT]} is set"
    if "editable_wheel" in argv or "develop" in argv:
        return "an editable install stays pure Python"
    if not BUILDING.intersection(argv):
        return "not building"  # metadata only: egg_info, dist_info, sdist
    if sys.implementation.name != "cpython":
        return f"mypyc compiles for CPython, not {sys.implementation.name}"
    try:
        import mypyc.build  # noqa: F401
    except ImportError as e:
        return f"mypyc is not available ({e})"
    cc = environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(cc)
    if not words or shutil.which(words[0]) is None:
        return f"no C compiler ({cc!r} is not on PATH)"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"Python's headers are missing (no Python.h in {include})"
    return None


class BuildExtOrPure(build_ext):
    """Builds the extension modules; when compiling fails, says why and drops them, so the
    package is pure Python (its .py files are there either way)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # a compiler's error: CompileError, LinkError, OSError, ...
            say(f"compiling with mypyc failed ({type(e).__name__}: {e}); building pure Python")
            for ext in self.extensions:
                path = self.get_ext_fullpath(ext.name)
                if os.path.exists(path):
                    os.remove(path)
            self.extensions = []
            self.distribution.ext_modules = []


def ext_modules() -> list[Any]:
    pure = why_pure(sys.argv, os.environ)
    if pure is not None:
        if pure != "not building":
            say(f"pure Python: {pure}")
        return []
    from mypyc.build import mypycify
    try:
        exts: list[Any] = mypycify(COMPILED, opt_level="3")
    except BaseException as e:  # mypyc's type check (SystemExit) or its code generation
        if isinstance(e, KeyboardInterrupt):
            raise
        say(f"mypyc failed ({type(e).__name__}: {e}); building pure Python")
        return []
    say(f"compiling with mypyc: {', '.join(COMPILED)}")
    return exts


if __name__ == "__main__":
    setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildExtOrPure})
