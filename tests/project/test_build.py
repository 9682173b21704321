"""setup.py's compiled build falls back to pure Python instead of failing: with the opt-out
(``GSP_PURE=1``), without a C compiler, when compiling fails, and in an editable install.

Each test runs setuptools' real PEP 517 hook on a copy of the tree in a temporary directory
and reads the wheel it makes. None compiles for real (that takes half a minute): .ci/run builds
the compiled wheel, installs it and runs the tests against it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from gsp._mypyc import COMPILED

pytestmark = [pytest.mark.native("cc"), pytest.mark.allow_leaks]

ROOT = Path(__file__).resolve().parents[2]


def setup_py() -> ModuleType:
    """setup.py as a module, without running setup() (that only runs as ``__main__``)."""
    spec = importlib.util.spec_from_file_location("gsp_setup", ROOT / "setup.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def source_copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "gsp", src / "gsp", ignore=shutil.ignore_patterns(
        "__pycache__", "*.so", "*.pyc"))
    return src


def hook(tmp_path: Path, name: str, **env: str) -> tuple[list[str], str, Path]:
    """Run setuptools' PEP 517 hook ``name`` (build_wheel or build_editable) on a copy of the
    tree; the wheel's file names, the hook's stderr and the copy."""
    src = source_copy(tmp_path)
    out = tmp_path / "out"
    environ = {k: v for k, v in os.environ.items() if k not in ("GSP_PURE", "CC")}
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         f"print(b.{name}(sys.argv[1]))", str(out)],
        cwd=src, env={**environ, **env}, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stderr[-4000:]
    wheel = out / p.stdout.split()[-1]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    return [wheel.name, *names], p.stderr, src


def modules_in(names: list[str]) -> set[str]:
    """The gsp module paths in a wheel, wherever the wheel puts them (root or .data/purelib)."""
    return {n.split("purelib/", 1)[-1] for n in names if "gsp/" in n}


def test_setup_compiles_the_one_list_of_modules() -> None:
    """setup.py reads gsp._mypyc.COMPILED (what ``gsp info`` and ``gsp bench`` report) from its
    file: one list, and every module on it is there to compile."""
    setup = setup_py()
    assert [p[:-3].replace("/", ".") for p in setup.COMPILED] == list(COMPILED)
    assert all((ROOT / p).is_file() for p in setup.COMPILED)


@pytest.mark.timeout(180)
def test_the_wheel_holds_the_runtime_package_only(tmp_path: Path) -> None:
    """The gevent-sp wheel carries gsp and its metadata: no benchmark (``gsp bench`` is the
    gevent-sp-bench distribution, plugins/gsp-bench), no docs generator (scripts/docgen.py), no C
    or Go source; every file of gsp/ is Python source or py.typed."""
    (_, *names), _, _ = hook(tmp_path, "build_wheel", GSP_PURE="1")
    files = [n for n in names if not n.endswith("/")]
    assert not [n for n in files if "bench" in n.split("/")], files
    assert not [n for n in files if n.endswith((".c", ".h", ".go", ".mod"))], files
    assert "gsp/_core/docs.py" not in files
    dist_info = [n for n in files if n.split("/")[0].endswith(".dist-info")]
    package = [n for n in files if n not in dist_info]
    assert package and all(n.startswith("gsp/") for n in package), package
    assert all(n.endswith(".py") or n == "gsp/py.typed" for n in package), [
        n for n in package if not n.endswith(".py")]


def test_why_pure_decides_from_the_opt_out_the_command_and_the_compiler() -> None:
    why = setup_py().why_pure
    wheel = ["setup.py", "bdist_wheel", "--dist-dir", "x"]
    assert why(wheel, {}) is None  # CI has a C compiler and Python's headers (.ci/run)
    assert why(wheel, {"GSP_PURE": "0"}) is None
    assert why(wheel, {"GSP_PURE": "1"}) == "GSP_PURE=1 is set"
    assert why(wheel, {"GSP_PURE": "yes"}) == "GSP_PURE=yes is set"
    assert why(wheel, {"CC": "/nonexistent/cc -O2"}) == (
        "no C compiler ('/nonexistent/cc -O2' is not on PATH)")
    assert why(["setup.py", "editable_wheel"], {}) == "an editable install stays pure Python"
    assert why(["setup.py", "egg_info"], {}) == "not building"
    assert why(["setup.py", "dist_info"], {}) == "not building"


@pytest.mark.timeout(180)
def test_the_opt_out_builds_a_pure_wheel(tmp_path: Path) -> None:
    (name, *names), err, _ = hook(tmp_path, "build_wheel", GSP_PURE="1")
    assert "gsp setup.py: pure Python: GSP_PURE=1 is set" in err
    assert name.endswith("-py3-none-any.whl"), name
    assert not [n for n in names if n.endswith(".so")]
    assert {"gsp/chan.py", "gsp/transport/wire.py", "gsp/py.typed"} <= modules_in(names)


@pytest.mark.timeout(180)
def test_without_a_c_compiler_the_wheel_is_pure(tmp_path: Path) -> None:
    (name, *names), err, _ = hook(tmp_path, "build_wheel", CC=str(tmp_path / "no-such-cc"))
    assert "gsp setup.py: pure Python: no C compiler" in err
    assert name.endswith("-py3-none-any.whl"), name
    assert not [n for n in names if n.endswith(".so")]
    assert {"gsp/chan.py", "gsp/transport/wire.py"} <= modules_in(names)


@pytest.mark.timeout(180)
def test_a_compiler_that_fails_leaves_a_pure_package(tmp_path: Path) -> None:
    """mypyc runs and writes its C; the compiler (``false``) fails; the build goes on without
    the extension modules (the wheel keeps its platform tag: it was decided before)."""
    false = shutil.which("false")
    assert false
    (name, *names), err, _ = hook(tmp_path, "build_wheel", CC=false)
    assert f"gsp setup.py: compiling with mypyc: {', '.join(setup_py().COMPILED)}" in err
    assert "gsp setup.py: compiling with mypyc failed (CompileError" in err
    assert not [n for n in names if n.endswith(".so")], name
    assert {"gsp/chan.py", "gsp/transport/wire.py", "gsp/__init__.py"} <= modules_in(names)


@pytest.mark.timeout(180)
def test_an_editable_install_stays_pure(tmp_path: Path) -> None:
    """README's ``pip install -e .``: no mypyc run, no extension module beside the sources."""
    (name, *names), err, src = hook(tmp_path, "build_editable")
    assert "gsp setup.py: pure Python: an editable install stays pure Python" in err
    assert "compiling with mypyc" not in err
    assert not [n for n in names if n.endswith(".so")]
    assert not list(src.rglob("*.so")) and not (src / "build").exists()
