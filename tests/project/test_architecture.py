"""Architecture rules that import-linter cannot see: no module reads another's private names.

A private name (``_x``, not a dunder) may be read on ``self``/``cls``/``super()``, on a name
imported from outside gsp and its plugins, or on anything when the same *module* defines that
name (a function, class, assignment, ``self._x = ...``, a slot). So a module reading another
class's private attribute across modules is caught: ``reqrep.py`` reading ``proto._pipes`` of
``gsp.protocol.routing.RoundRobin`` is, even though ``survey.py`` has its own ``_pipes``. There is
no exception. ``from m import _x`` stays allowed only inside a *unit*: one
public module of gsp, one private package (``gsp/_core``, ``gsp/_protocols``,
``gsp/_transports``) or one plugin package.

A plugin (``plugins/``, ``examples/plugins/``) builds on gsp's public extension points only: no
class of it overrides, reads or sets, on ``self``/``cls``/``super()``, a private name that a gsp
class it derives from defines.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

pytestmark = pytest.mark.plugins

if TYPE_CHECKING:
    import grimp

ROOT = pathlib.Path(__file__).resolve().parents[2]
# plugins/*/gsp_* (flat layout) and plugins/*/src/gsp_* (src layout: gsp-spark)
PLUGINS = [*sorted((ROOT / "plugins").glob("*/gsp_*")),
           *sorted((ROOT / "plugins").glob("*/src/gsp_*")),
           *sorted((ROOT / "examples" / "plugins").glob("*/gsp_*"))]
PACKAGES = [ROOT / "gsp", *PLUGINS]
PRIVATE_PACKAGES = {"_core", "_protocols", "_transports"}

def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _unit_of(pkg: pathlib.Path, path: pathlib.Path) -> str:
    rel = path.relative_to(pkg)
    if pkg.name == "gsp" and rel.parts[0] not in PRIVATE_PACKAGES and len(rel.parts) == 1:
        return f"gsp/{rel}"  # a public module: a unit of its own
    if pkg.name == "gsp":
        return f"gsp/{rel.parts[0]}"  # a (private or sub-) package
    return pkg.name


def units() -> dict[str, list[pathlib.Path]]:
    """unit name -> its source files."""
    out: dict[str, list[pathlib.Path]] = {}
    for pkg in PACKAGES:
        for path in sorted(pkg.rglob("*.py")):
            out.setdefault(_unit_of(pkg, path), []).append(path)
    return out


def defined_private(tree: ast.AST) -> set[str]:
    """Private names a module (or class) defines: functions, classes, assignments,
    ``self._x = ...``, slots and attribute annotations. (Setting ``obj._x`` on another object
    defines nothing: it is checked as a read of ``obj._x`` is.)"""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                _on_self(node.value):
            names.add(node.attr)  # (``other._x = ...`` writes another's state: a read's like)
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


def _on_self(base: ast.expr) -> bool:
    return isinstance(base, ast.Name) and base.id in ("self", "cls") or \
        isinstance(base, ast.Call) and getattr(base.func, "id", "") == "super"


def private_reads(where: str, tree: ast.AST) -> list[str]:
    """``x._name`` in one module where ``x`` is not self/cls/super() nor a third-party name,
    and the module does not define ``_name``. No exception: each class owns its state, and
    another module asks it (a method, a read-only property) or is given what it needs (e.g.
    :class:`gsp._core.pipe.PipeHost`)."""
    own = defined_private(tree)
    foreign = third_party_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            base = node.value
            if _on_self(base) or isinstance(base, ast.Name) and base.id in foreign:
                continue
            found.append(f"{where}:{node.lineno} reads {ast.unparse(node)}")
    return found


def violations(probe: tuple[pathlib.Path, str] | None = None) -> list[str]:
    """Every private read or import across units; ``probe``: a module (its path in gsp/, its
    source) checked as if it were there, without writing it (tests in parallel read the tree)."""
    found: list[str] = []
    sources: dict[pathlib.Path, str] = {}
    all_units = units()
    if probe is not None:
        path, sources[path] = probe
        all_units.setdefault(_unit_of(ROOT / "gsp", path), []).append(path)
    for files in all_units.values():
        trees = {path: ast.parse(sources.get(path) or path.read_text(), str(path))
                 for path in files}
        in_unit: set[str] = set().union(*(defined_private(t) for t in trees.values()))
        in_unit |= {path.stem for path in files if _private(path.stem)}  # its private modules
        for path, tree in trees.items():
            where = str(path.relative_to(ROOT))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                    bad = [a.name for a in node.names if _private(a.name) and a.name not in in_unit]
                    if bad:
                        found.append(f"{where}:{node.lineno} imports {bad} from {node.module}")
            found += private_reads(where, tree)
    return found


def test_no_module_reads_another_modules_private_names() -> None:
    assert violations() == []


@pytest.mark.parametrize("where, read", [
    ("gsp", "ch._buf"),  # a helper module reading Chan's buffer
    ("gsp/_core", "pipe._conn"),  # no package-wide pass for the core: one of its modules
])
def test_the_check_catches_a_reach_into_another_modules_state(where: str, read: str) -> None:
    # The rule really bites: a module reading another's private state is reported.
    probe = ROOT / where / "_probe_reach.py"
    source = f"def f({read.split('.')[0]}):\n    return {read}\n"
    assert any(f"_probe_reach.py:2 reads {read}" in v for v in violations((probe, source)))
    assert not any("_probe_reach.py" in v for v in violations())


def test_the_check_catches_a_read_of_another_classs_private_attribute_across_modules() -> None:
    # reqrep.py's old read of RoundRobin's pipes (gsp/protocol/routing.py). The old rule (a name some
    # module of the unit defines) let it through: survey.py, in the same unit, has its own
    # _pipes. The rule by module reports it.
    old_reqrep = ("from gsp.protocol.routing import RoundRobin\n\n"
                  "class XReq(RoundRobin):\n"
                  "    def head(self, proto):\n"
                  "        return proto._pipes[0]\n")
    survey = ast.parse((ROOT / "gsp" / "_protocols" / "survey.py").read_text())
    assert "_pipes" in defined_private(survey)  # what let the read through before
    found = private_reads("gsp/_protocols/reqrep.py", ast.parse(old_reqrep))
    assert found == ["gsp/_protocols/reqrep.py:5 reads proto._pipes"]


def test_the_check_catches_a_write_of_another_objects_private_state() -> None:
    # A hand-over of a pipe written from readers.py (gsp/_core/pipe.py's state, set from the
    # readers): the write must not count as readers.py defining _reader.
    old_readers = ("def give(pipe, waiter):\n"
                   "    pipe._reader = waiter.greenlet\n")
    assert private_reads("gsp/_core/readers.py", ast.parse(old_readers)) == [
        "gsp/_core/readers.py:2 reads pipe._reader"]


# -- plugins: public extension points only ---------------------------------------------------------
def _module_name(path: pathlib.Path) -> str:
    for pkg in PLUGINS:
        if path.is_relative_to(pkg):
            parts = path.relative_to(pkg.parent).with_suffix("").parts
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(path)


def _gsp_class(klass: type) -> bool:
    return klass.__module__ == "gsp" or klass.__module__.startswith("gsp.")


def gsp_private_names(klass: type) -> dict[str, str]:
    """Private name -> the gsp class defining it, over the gsp classes ``klass`` derives from
    (methods and class attributes, slots, and what their methods set on ``self``)."""
    names: dict[str, str] = {}
    for base in klass.__mro__:
        if not _gsp_class(base):
            continue
        found = {n for n in vars(base) if _private(n)}
        try:
            tree = ast.parse(inspect.getsource(base).strip())  # (a nested class is indented)
        except (OSError, TypeError):  # compiled (mypyc) or built in: the class dict only
            tree = None
        if tree is not None:
            found |= defined_private(tree.body[0])
        for name in found:
            names.setdefault(name, f"{base.__module__}.{base.__qualname__}")
    return names


def plugin_private_uses(path: pathlib.Path, source: str | None = None,
                        module: object = None) -> list[str]:
    """In one plugin module: ``def _x`` in a class, or ``self._x``/``cls._x``/``super()._x``
    inside it, where ``_x`` is private to a gsp class that class derives from."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    if module is None:
        module = importlib.import_module(_module_name(path))
    found = []
    for cls_node in ast.walk(tree):
        if not isinstance(cls_node, ast.ClassDef):
            continue
        klass = getattr(module, cls_node.name, None)
        if not isinstance(klass, type):
            continue
        private = gsp_private_names(klass)
        for node in ast.walk(cls_node):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in private:
                found.append(f"{path.name}:{node.lineno} {cls_node.name} overrides "
                             f"{private[node.name]}.{node.name}")
            elif isinstance(node, ast.Attribute) and node.attr in private and _on_self(node.value):
                found.append(f"{path.name}:{node.lineno} {cls_node.name} uses "
                             f"{private[node.attr]}.{node.attr}")
    return found


@pytest.mark.parametrize("path", [p for pkg in PLUGINS for p in sorted(pkg.rglob("*.py"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_use_no_private_name_of_gsp(path: pathlib.Path) -> None:
    assert plugin_private_uses(path) == []


def test_the_plugin_check_bites() -> None:
    # A dialer reading SocketDialer's private state, a context reading its base's and
    # overriding one of its private methods: each is reported.
    import types

    from gsp.protocol import ProtocolContext
    from gsp.transport import SocketDialer

    source = ("class D(SocketDialer):\n"
              "    def close(self):\n"
              "        s = self._inflight\n"
              "class C(ProtocolContext):\n"
              "    def do_recv(self, timeout):\n"
              "        if self._closed:\n"
              "            raise Closed('closed')\n"
              "    def _wrong_thread(self):\n"
              "        return None\n")
    module = types.ModuleType("probe")
    module.D = type("D", (SocketDialer,), {})  # type: ignore[attr-defined]
    module.C = type("C", (ProtocolContext,), {})  # type: ignore[attr-defined]
    found = plugin_private_uses(pathlib.Path("probe.py"), source, module)
    assert sorted(found) == ["probe.py:3 D uses gsp.transport.stream.SocketDialer._inflight",
                             "probe.py:6 C uses gsp.context.ProtocolContext._closed",
                             "probe.py:8 C overrides gsp.context.ProtocolContext._wrong_thread"]


def method_identity_checks(tree: ast.AST) -> list[int]:
    """Lines comparing a method with a base class's by identity (``type(c).m is not Base.m``):
    what :func:`gsp.protocol.overrides` does, the one way to find an optional hook."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Attribute) and isinstance(right, ast.Attribute) and \
                    isinstance(right.value, ast.Name) and right.value.id[:1].isupper() and \
                    right.attr.islower() and left.attr == right.attr:
                lines.append(node.lineno)
    return lines


def test_optional_hooks_are_found_one_way() -> None:
    from gsp.protocol import overrides

    found = {}
    for pkg in PACKAGES:
        for path in pkg.rglob("*.py"):
            lines = method_identity_checks(ast.parse(path.read_text()))
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}
    # and it bites: the old socket check is one
    assert method_identity_checks(ast.parse(
        "x = cls.recv_body is not Protocol.recv_body")) == [1]
    # Every hook a table lists exists on its base; a name not listed is refused.
    from gsp.protocol import Protocol, ProtocolContext
    from gsp.transport import Connection, StreamConnection

    for base in (Protocol, Connection, StreamConnection, ProtocolContext):
        for name in base.OPTIONAL_HOOKS:
            assert callable(getattr(base, name)), (base, name)
            assert not overrides(base, base, name)
    with pytest.raises(ValueError, match="not an optional hook of Protocol"):
        overrides(Protocol, Protocol, "send")


def test_import_contracts_hold() -> None:
    # import-linter's contracts (pyproject.toml): layers, the SDK, plugins on public modules only.
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def import_cycles(graph: "grimp.ImportGraph") -> set[tuple[str, str]]:
    """Pairs of modules each of which imports the other, directly or through others."""
    cycles = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.find_shortest_chain(importer=imported, imported=module):
                cycles.add((min(module, imported), max(module, imported)))
    return cycles


def test_no_import_cycles() -> None:
    # Between any two modules of gsp or its plugin distributions, imports go one way only,
    # counting the imports made only for type checking (a reader follows them too).
    import grimp

    graph = grimp.build_graph("gsp", "gsp_ws", "gsp_star", "gsp_spark", "gsp_bench",
                              "gsp_example_zlib", "gsp_example_gather",
                              exclude_type_checking_imports=False, cache_dir=None)
    assert import_cycles(graph) == set()


def test_the_cycle_check_bites() -> None:
    # A type-checking import back into the module that imports the importer is a cycle: the
    # old pipe.py naming its Socket (gsp._core.socket imports gsp._core.pipe).
    import grimp

    graph = grimp.ImportGraph()
    for name in ("gsp._core.socket", "gsp._core.pipe", "gsp._core.readers"):
        graph.add_module(name)
    graph.add_import(importer="gsp._core.socket", imported="gsp._core.pipe")
    graph.add_import(importer="gsp._core.pipe", imported="gsp._core.readers")
    assert import_cycles(graph) == set()
    graph.add_import(importer="gsp._core.pipe", imported="gsp._core.socket")  # (if TYPE_CHECKING)
    assert import_cycles(graph) == {("gsp._core.pipe", "gsp._core.socket")}


@pytest.mark.parametrize("module", ["gsp", "gsp.transport", "gsp.transport.wire", "gsp.errors",
                                    "gsp.transport.interface", "gsp.options", "gsp.hookspecs",
                                    "gsp.handles", "gsp.overrides", "gsp.message"])
def test_sdk_imports_without_gevent(module: str) -> None:
    # The user API's entry point, the transport SDK (its names load on first use) and the sans-IO
    # codec load without gevent: importing them costs no hub, no monkey patch. (The protocol SDK
    # is made of gevent waits throughout, so it imports its helpers at once.)
    code = f"import sys, {module}; assert 'gevent' not in sys.modules, sorted(sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
