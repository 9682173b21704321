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
    "message": "user", "chan": "user", "context": "user (gsp.Context; and gsp.protocol's ProtocolContext)",
    "poller": "user", "objects": "user", "options": "user (and option specs for both SDKs)",
    "hookspecs": "user (gsp.register_plugin's hooks) and both SDKs", "blocking": "user",
    "perprocess": "user", "allocator": "user", "prometheus": "user",
    "admit": "user (pipe admission rules for admit=)",
    "handles": "both SDKs (what a protocol sees of its socket: gsp.protocol re-exports them)",
    "overrides": "deprecated (gsp.overrides.overrides warns: gsp.protocol.overrides is its home)",
    # the two SDK packages
    "protocol": "protocol authors", "transport": "transport authors",
    # tools
    "testing": "plugin authors (the conformance kit)", "cat": "user (gsp cat)",
    # private
    "_core": "private", "_mypyc": "private (the compiled build: its module list, mypyc's class marker)",
    "_lazy": "private (names loaded on first use, for gsp, gsp.transport and gsp.testing)",
    "_overrides": "private (gsp.protocol.overrides, for the core, both SDKs and gsp.context)",
    "_protocols": "private (built-ins)", "_transports": "private (built-ins)",
}

#: What a plugin may import gsp names from.
PLUGIN_IMPORTS = {
    "gsp", "gsp.errors", "gsp.message", "gsp.chan", "gsp.context", "gsp.options", "gsp.hookspecs",
    "gsp.handles",
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


def _public_classes(files: list[pathlib.Path], root: pathlib.Path = ROOT) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for p in files:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(str(p.relative_to(root)))
    return found


def _package_files() -> list[pathlib.Path]:
    """The source of gsp and of every distribution in plugins/ and examples/plugins/ (not their
    tests)."""
    return [*GSP.rglob("*.py"), *(p for p in _plugin_files() if p.is_relative_to(ROOT / "plugins")
                                  or p.is_relative_to(ROOT / "examples"))]


def test_no_two_public_classes_in_the_repository_share_a_name() -> None:
    # One name, one class, in gsp and in every plugin: the core's implementation of the protocol
    # SDK's SocketHandle interface was once a second ``SocketHandle`` (now CoreSocketHandle),
    # which a reader of a traceback or of the docs could not tell apart from the interface.
    found = _public_classes(_package_files())
    assert "SocketHandle" in found and "CoreSocketHandle" in found
    assert "WSConnection" in found and "Scatter" in found  # plugins/ and examples/plugins/
    assert {name: where for name, where in found.items() if len(where) > 1} == {}


def test_the_class_name_check_bites(tmp_path: pathlib.Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("class Refusal:\n    pass\nclass _Private:\n    pass\n")
    b.write_text("class Refusal(Exception):\n    pass\nclass _Private:\n    pass\n")
    found = {name: where for name, where in _public_classes([a, b], tmp_path).items()
             if len(where) > 1}
    assert found == {"Refusal": ["a.py", "b.py"]}


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


def test_the_users_classes_show_no_plumbing() -> None:
    # What the core's modules ask of each other's objects (select wake-ups, a pipe's reads and
    # counters, the steps after a fork) and the hooks a protocol implements are not on the
    # classes a user is given (docs/api-guide.md, "What is user API and what is SDK").
    import gsp

    plumbing = {"can", "wake_cases", "read_loop", "read_lent", "end_read", "reader", "held",
                "parks", "traffic", "send_queue", "writer", "transport_sheds", "closing_case",
                "own_options"}
    for cls in (gsp.Socket, gsp.Context, gsp.Pipe, gsp.Listener, gsp.Dialer):
        public = {n for n in dir(cls) if not n.startswith("_")}
        assert public & plumbing == set(), cls
        hooks = {n for n in public if n.endswith("_after_fork") or n.startswith(("do_", "on_"))}
        assert hooks - {"on_pipe_event"} == set(), cls
    with gsp.socket("req") as sock:  # and on the objects, not only their classes
        ctx = sock.open_context()
        assert not hasattr(sock, "wake_cases") and not hasattr(ctx, "wake_cases")
