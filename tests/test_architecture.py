"""Architecture rules that import-linter cannot see: no module reads another unit's private names.

A *unit* is one public module of gsp (``gsp/chan.py``: its internals are its own), or one private
package (``gsp/_core``, ``gsp/_protocols``, ``gsp/_transports``) or plugin package, whose modules
share their internals. A private name (``_x``, not a dunder) may be read on ``self``/``cls``, or
on anything when that name is defined in the same unit; ``from m import _x`` only inside a unit.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# plugins/*/gsp_* (flat layout) and plugins/*/src/gsp_* (src layout: gsp-spark)
PACKAGES = [ROOT / "gsp", *sorted((ROOT / "plugins").glob("*/gsp_*")),
            *sorted((ROOT / "plugins").glob("*/src/gsp_*")),
            *sorted((ROOT / "examples" / "plugins").glob("*/gsp_*"))]
PRIVATE_PACKAGES = {"_core", "_protocols", "_transports"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def units() -> dict[str, list[pathlib.Path]]:
    """unit name -> its source files."""
    out: dict[str, list[pathlib.Path]] = {}
    for pkg in PACKAGES:
        for path in sorted(pkg.rglob("*.py")):
            rel = path.relative_to(pkg)
            if pkg.name == "gsp" and rel.parts[0] not in PRIVATE_PACKAGES and len(rel.parts) == 1:
                unit = f"gsp/{rel}"  # a public module: a unit of its own
            elif pkg.name == "gsp":
                unit = f"gsp/{rel.parts[0]}"  # a (private or sub-) package
            else:
                unit = pkg.name
            out.setdefault(unit, []).append(path)
    return out


def defined_private(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, assignments, ``self._x = ...``,
    slots and attribute annotations."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries
    return {n for n in names if _private(n)}


def third_party_names(tree: ast.AST) -> set[str]:
    """Names a module binds by importing from outside gsp and its plugins (their privates are
    their business, e.g. gevent's)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names
                         if not a.name.startswith("gsp"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                not node.module.startswith("gsp"):
            names.update(a.asname or a.name for a in node.names)
    return names


def violations() -> list[str]:
    found: list[str] = []
    for files in units().values():
        trees = {path: ast.parse(path.read_text(), str(path)) for path in files}
        own: set[str] = set().union(*(defined_private(t) for t in trees.values()))
        for path, tree in trees.items():
            where = path.relative_to(ROOT)
            foreign = third_party_names(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                    bad = [a.name for a in node.names if _private(a.name) and a.name not in own]
                    if bad:
                        found.append(f"{where}:{node.lineno} imports {bad} from {node.module}")
                elif isinstance(node, ast.Attribute) and _private(node.attr):
                    base = node.value
                    if isinstance(base, ast.Name) and (base.id in ("self", "cls")
                                                       or base.id in foreign):
                        continue
                    if isinstance(base, ast.Call) and getattr(base.func, "id", "") == "super":
                        continue
                    if node.attr not in own:
                        found.append(f"{where}:{node.lineno} reads {ast.unparse(node)}")
    return found


def test_no_module_reads_another_units_private_names() -> None:
    assert violations() == []


def test_the_check_catches_a_reach_into_chan(tmp_path: pathlib.Path) -> None:
    # The rule really bites: a helper module reading Chan's buffer is reported.
    probe = ROOT / "gsp" / "_probe_reach.py"
    probe.write_text("def f(ch):\n    return ch._buf\n")
    try:
        assert any("_probe_reach.py:2 reads ch._buf" in v for v in violations())
    finally:
        probe.unlink()


def test_import_contracts_hold() -> None:
    # import-linter's contracts (pyproject.toml): layers, the SDK, plugins on public modules only.
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_no_import_cycles() -> None:
    # Between any two modules of gsp or its plugin distributions, imports go one way only
    # (imports made only for type checking do not count).
    import grimp

    graph = grimp.build_graph("gsp", "gsp_ws", "gsp_star", "gsp_spark", "gsp_example_zlib",
                              "gsp_example_gather", exclude_type_checking_imports=True)
    cycles = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.find_shortest_chain(importer=imported, imported=module):
                cycles.add(tuple(sorted((module, imported))))
    assert cycles == set()


@pytest.mark.parametrize("module", ["gsp", "gsp.wire", "gsp.errors", "gsp.protocol",
                                    "gsp.transport", "gsp.options", "gsp.hookspecs"])
def test_sdk_imports_without_gevent(module: str) -> None:
    # Interfaces and the codec load without gevent: importing gsp costs no hub, no monkey patch.
    code = f"import sys, {module}; assert 'gevent' not in sys.modules, sorted(sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
