"""The layout by audience (docs/architecture.md): what sits at the top of ``gsp/``, what the two SDK
packages export, and that plugins find everything they need at those two entry points.

- The top of ``gsp/`` holds the user API, the two SDK packages (:mod:`gsp.protocol`,
  :mod:`gsp.transport`), the tools (``testing``, ``cat``) and the private packages; a
  new module there is a decision, so it has to be named here with its audience.
- Every name an SDK package exports resolves, from a fresh interpreter (``gsp.transport`` loads
  its names on first use, so a typo in its table would only show when an author asks).
- Plugins (the built-ins in ``gsp._protocols``/``gsp._transports``, ``plugins/`` and
  ``examples/plugins/``) import gsp only from the user API's modules and the two SDK packages,
  never from a module inside an SDK package (``gsp.protocol.routing``): one hop, one place.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GSP = ROOT / "gsp"

#: The top of gsp/, each entry with its audience.
TOP = {
    # the user API
    "__init__": "user", "__main__": "user (the gsp command)", "errors": "user",
    "message": "user", "chan": "user", "context": "user (and the protocol SDK's Context base)",
    "poller": "user", "objects": "user", "options": "user (and option specs for both SDKs)",
    "hookspecs": "user (gsp.register_plugin's hooks) and both SDKs", "blocking": "user",
    "perprocess": "user", "allocator": "user", "prometheus": "user",
    "admit": "user (pipe admission rules for admit=)",
    "handles": "both SDKs (what a protocol sees of its socket: gsp.protocol re-exports them)",
    "overrides": "both SDKs (finding a plugin class's optional hooks)",
    # the two SDK packages
    "protocol": "protocol authors", "transport": "transport authors",
    # tools
    "testing": "plugin authors (the conformance kit)", "cat": "user (gsp cat)",
    # private
    "_core": "private", "_mypyc": "private (the compiled build: its module list, mypyc's class marker)",
    "_lazy": "private (names loaded on first use, for gsp, gsp.transport and gsp.testing)",
    "_renamed": "private (old spellings of renamed names, warning)",
    "_protocols": "private (built-ins)", "_transports": "private (built-ins)",
}

#: What a plugin may import gsp names from.
PLUGIN_IMPORTS = {
    "gsp", "gsp.errors", "gsp.message", "gsp.chan", "gsp.context", "gsp.options", "gsp.hookspecs",
    "gsp.handles", "gsp.overrides",
    "gsp.blocking", "gsp.protocol", "gsp.transport", "gsp.transport.wire", "gsp.testing",
}


def test_the_top_of_gsp_is_the_user_api_the_two_sdks_and_private_packages() -> None:
    here = {p.stem for p in GSP.glob("*.py")} | {
        p.name for p in GSP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert here == set(TOP), (
        f"new at the top of gsp/: {sorted(here - set(TOP))}; gone: {sorted(set(TOP) - here)}"
        " (name it in TOP with its audience, or move it into an SDK package or gsp._core)")


@pytest.mark.parametrize("package", ["gsp.protocol", "gsp.transport"])
def test_every_name_an_sdk_package_exports_resolves(package: str) -> None:
    code = (f"import {package} as p\n"
            "missing = [n for n in p.__all__ if getattr(p, n, None) is None]\n"
            "assert not missing, missing\n"
            "assert len(set(p.__all__)) == len(p.__all__), 'a name listed twice'\n"
            "assert set(p.__all__) <= set(dir(p))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def type_checking_names(package: object) -> set[str]:
    """The names a package imports under ``if TYPE_CHECKING:`` at its top: those it loads on
    first use."""
    path = getattr(package, "__file__", None)
    assert path is not None
    return {alias.asname or alias.name
            for node in ast.parse(pathlib.Path(path).read_text()).body
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
            for imp in node.body if isinstance(imp, ast.ImportFrom) for alias in imp.names}


def test_the_transport_sdk_table_is_its_all() -> None:
    import gsp.transport as t
    assert type_checking_names(t) == set(t.__all__)


def test_an_sdk_package_names_what_it_does_not_have() -> None:
    import gsp.transport
    with pytest.raises(AttributeError, match="gsp.transport.*no_such_name"):
        gsp.transport.no_such_name  # noqa: B018


def _plugin_files() -> list[pathlib.Path]:
    files = [*(GSP / "_protocols").glob("*.py"), *(GSP / "_transports").glob("*.py")]
    for base in (ROOT / "plugins", ROOT / "examples" / "plugins"):
        files += [p for p in base.rglob("*.py")
                  if "tests" not in p.parts and ".egg-info" not in str(p) and "build" not in p.parts]
    return files


def _package_of(path: pathlib.Path) -> str:
    """The package a built-in's relative imports start from ("" outside gsp/)."""
    rel = path.relative_to(ROOT)
    return ".".join(rel.with_suffix("").parts[:-1]) if rel.parts[0] == "gsp" else ""


def _gsp_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every gsp module ``source`` imports, relative imports from ``package``
    resolved."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if not package:
                    continue  # a plugin's own relative import
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if package and module.startswith(package + "."):
                continue  # a built-in's sibling (pair1 builds on pair): its own package
            if module == "gsp" or module.startswith("gsp."):
                # ``from gsp.transport import wire`` imports the submodule: count it by its name
                subs = [f"{module}.{a.name}" for a in node.names
                        if f"{module}.{a.name}" in PLUGIN_IMPORTS]
                out.append((node.lineno, subs[0] if subs and len(node.names) == 1 else module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names
                    if a.name == "gsp" or a.name.startswith("gsp.")]
    return out


#: The one private module a distribution in plugins/ may read, and why: ``gsp bench`` is a tool,
#: not a protocol or transport, and its header says which of gsp's modules run compiled.
TOOL_IMPORTS = {"plugins/gsp-bench/gsp_bench/report.py": {"gsp._mypyc"}}


def test_plugins_import_gsp_only_from_the_user_api_and_the_sdk_packages() -> None:
    files = _plugin_files()
    assert len(files) > 15  # the built-ins, gsp-ws, gsp-star, gsp-spark, both examples
    found = [f"{p.relative_to(ROOT)}:{line} imports {m}"
             for p in files for line, m in _gsp_imports(p.read_text(), _package_of(p))
             if m not in PLUGIN_IMPORTS | TOOL_IMPORTS.get(str(p.relative_to(ROOT)), set())]
    assert found == []


def test_the_plugin_import_check_bites() -> None:
    # What the built-ins wrote before the SDK packages re-exported their helpers.
    source = ("from ..protocol.routing import RoundRobin\n"
              "from gsp.transport.stream import forget_socket\n"
              "from ..protocol import Inbox\n"
              "from gsp.transport import wire\n"
              "from .pair import Pair\n")
    found = _gsp_imports(source, "gsp._protocols")
    assert found == [(1, "gsp.protocol.routing"), (2, "gsp.transport.stream"),
                     (3, "gsp.protocol"), (4, "gsp.transport.wire")]
    assert [m for _, m in found if m not in PLUGIN_IMPORTS] == [
        "gsp.protocol.routing", "gsp.transport.stream"]


def _public_classes(files: list[pathlib.Path]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for p in files:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(str(p.relative_to(ROOT)))
    return found


def _shipped_sources() -> list[pathlib.Path]:
    """The Python files of gsp and of every plugin's installed package (not their tests), the
    example plugins' too."""
    files = list(GSP.rglob("*.py"))
    for plugin in sorted([*(ROOT / "plugins").iterdir(), *(ROOT / "examples/plugins").iterdir()]):
        for top in (plugin, plugin / "src"):
            for package in sorted(top.glob("gsp_*/")):
                files += package.rglob("*.py")
    return files


def test_no_two_public_classes_in_the_repository_share_a_name() -> None:
    # One name, one class (docs/api-guide.md, "Names"), across gsp and its plugins: a reader of
    # a traceback or of the docs cannot tell two classes of one name apart (gsp.admit's refusal
    # record and gsp-ws's refusal exception; the protocol SDK's SocketHandle interface and the
    # core's implementation of it, CoreSocketHandle).
    files = _shipped_sources()
    assert {p.parent.name for p in files} >= {"gsp_ws", "gsp_star", "gsp_spark",
                                               "gsp_example_zlib"}
    found = _public_classes(files)
    assert "SocketHandle" in found and "CoreSocketHandle" in found
    assert {name: where for name, where in found.items() if len(where) > 1} == {}


@pytest.mark.parametrize("package", ["gsp", "gsp.transport", "gsp.testing"])
def test_each_lazy_name_is_written_once_and_exported(package: str) -> None:
    # A package's names that load on first use are its type-checking imports (gsp._lazy reads
    # them): each is in __all__ and loads; __all__ names nothing else that is not already there.
    import importlib

    pkg = importlib.import_module(package)
    lazy = type_checking_names(pkg)
    assert lazy and set(lazy) <= set(pkg.__all__)
    assert [n for n in pkg.__all__ if n not in lazy and n not in vars(pkg)] == []
    for name in lazy:
        assert getattr(pkg, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        pkg.nothing_here  # noqa: B018
