"""The public surface is listed in tests/project/public_api.txt (generated from the source by
scripts/public_api.py), so that a change to it is a deliberate diff of that file; no public
signature shows an internal; a renamed name's old spelling works and warns, naming the new."""

from __future__ import annotations

import difflib
import importlib
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.public_api import COMMAND, LISTING, PACKAGES, Surface, main


@pytest.fixture(scope="module")
def surface() -> Surface:
    return Surface()


def shown(written: str, where: str) -> str:
    """An internal as the failure names it: the dotted name of the object, or "written
    (object)" where the name written in the signature is not the object's."""
    return where if where.rpartition(".")[2] == written else f"{written} ({where})"


def by_internal(found: dict[str, list[tuple[str, str]]]) -> dict[str, list[str]]:
    """Internal -> the listed names whose signatures show it."""
    out: dict[str, list[str]] = {}
    for name, bad in found.items():
        for written, where in bad:
            out.setdefault(shown(written, where), []).append(name)
    return out


def test_the_listing_is_up_to_date(surface: Surface) -> None:
    want = surface.listing()
    have = LISTING.read_text(encoding="utf-8")
    if have != want:
        diff = difflib.unified_diff(have.splitlines(), want.splitlines(),
                                    "tests/project/public_api.txt", "the source", n=0,
                                    lineterm="")
        pytest.fail("The public surface changed: if that is meant, regenerate the listing with "
                    f"`{COMMAND}` at the repository root and commit it (a renamed name keeps "
                    "its old spelling: docs/api-guide.md).\n" + "\n".join(diff), pytrace=False)


def test_no_public_signature_shows_an_internal(surface: Surface) -> None:
    found = by_internal(surface.internals())
    assert not found, ("public signatures show internals (a private name, or a default a user "
                       "cannot import from where the API guide says to): "
                       + "; ".join(f"{k} in {', '.join(v)}" for k, v in sorted(found.items())))


def resolve(dotted: str) -> Any:
    """The object a dotted name names: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def assert_renamed(module: str, old: str, new: str) -> None:
    """``module.old`` gives the object ``new`` names, with a DeprecationWarning naming it."""
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        value = getattr(importlib.import_module(module), old)
    assert value is resolve(new), f"{module}.{old} is not {new}"


def deprecated(surface: Surface) -> Iterator[tuple[str, str, str]]:
    for e in surface.entries():
        if e.kind == "deprecated":
            module, _, old = e.name.rpartition(".")
            yield module, old, e.text.removeprefix(" = ")


@pytest.mark.parametrize("package", [
    "gsp",
    pytest.param("gsp_ws", marks=pytest.mark.plugins("gsp_ws")),
    pytest.param("gsp_star", marks=pytest.mark.plugins("gsp_star")),
    pytest.param("gsp_spark", marks=pytest.mark.spark("pyspark")),
    pytest.param("pyspark_gsp", marks=pytest.mark.spark("pyspark")),
])
def test_every_renamed_name_works_and_warns(surface: Surface, package: str) -> None:
    """Each old spelling a module's rename table declares (the listing's ``deprecated`` lines)
    gives the new name's object and warns, naming it; the new name is a public one."""
    assert set(PACKAGES) == {"gsp", "gsp_ws", "gsp_star", "gsp_spark", "pyspark_gsp"}
    listed = {e.name for e in surface.entries() if e.kind != "deprecated"}
    for module, old, new in deprecated(surface):
        if module.split(".")[0] == package:
            assert new in listed, f"{module}.{old} is renamed {new}, which is not a public name"
            assert_renamed(module, old, new)


DEMO = {
    "__init__.py": '''
        """A package with a surface."""
        from __future__ import annotations

        from . import consts
        from ._impl import Engine, Hidden, _Base
        from ._renamed import renamed

        __all__ = ["Engine", "LIMIT", "Made", "Public", "later", "start"]

        LIMIT = 5
        _SENTINEL = object()


        class Public(_Base):
            def __init__(self, engine: Engine) -> None:
                self._engine = engine

            def run(self, n: int = LIMIT, *, how: Hidden | None = None) -> Engine:
                return self._engine

            @property
            def size(self) -> int:
                return 1

            def __len__(self) -> int:
                return 1

            def _helper(self) -> None:
                pass


        class Made:
            _no_public_constructor = True

            def __init__(self, plumbing: Hidden, n: int = _SENTINEL) -> None:
                self._plumbing = plumbing


        def start(timeout: float = _SENTINEL, /, big: int = consts.BIG) -> None:
            pass

        __getattr__ = renamed(__name__, {"begin": "start"})
    ''',
    "_impl.py": '''
        class _Base:
            def shared(self) -> str:
                return ""

        class Engine:
            pass

        class Hidden:
            pass
    ''',
    "consts.py": '''
        __all__ = ["BIG", "Engine"]
        from ._impl import Engine
        BIG = 1 << 20
    ''',
    "_renamed.py": '''
        import sys
        import warnings

        def renamed(module, names):
            namespace = vars(sys.modules[module])

            def __getattr__(name):
                if name not in names:
                    raise AttributeError(name)
                warnings.warn(f"{module}.{name} is renamed {module}.{names[name]}",
                              DeprecationWarning, stacklevel=2)
                return namespace[names[name]]
            return __getattr__
    ''',
}


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Surface]:
    (tmp_path / "demo_api").mkdir()
    for name, text in DEMO.items():
        (tmp_path / "demo_api" / name).write_text(textwrap.dedent(text), encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield Surface({"demo_api": tmp_path}, ("demo_api",))
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "demo_api" or m.startswith("demo_api.")]:
            del sys.modules[name]


def test_the_listing_lists_names_signatures_aliases_and_renames(demo: Surface) -> None:
    lines = demo.listing().splitlines()
    assert COMMAND in lines[0]
    assert lines[3:] == [
        "module demo_api",
        "deprecated demo_api.begin = demo_api.start",
        "class demo_api.Engine",
        "attribute demo_api.LIMIT = 5",
        "class demo_api.Made (no public constructor)",  # its constructor is not the API
        "class demo_api.Public(engine: Engine) bases _Base",
        "method demo_api.Public.__len__() -> int",
        "method demo_api.Public.run(n: int = LIMIT, *, how: Hidden | None = None) -> Engine",
        "method demo_api.Public.shared() -> str",
        "property demo_api.Public.size: int",
        "name demo_api.later (from the module's __getattr__)",
        "function demo_api.start(timeout: float = _SENTINEL, /, big: int = consts.BIG) -> None",
        "module demo_api.consts",
        "attribute demo_api.consts.BIG = 1 << 20",
        "alias demo_api.consts.Engine = demo_api.Engine",
    ]


def test_the_check_finds_each_kind_of_internal(demo: Surface) -> None:
    assert by_internal(demo.internals()) == {
        "demo_api._impl._Base": ["demo_api.Public"],  # a private base
        "demo_api._impl.Hidden": ["demo_api.Public.run"],  # private, exported by no module
        "demo_api._SENTINEL": ["demo_api.start"],  # a private default
        "demo_api.consts.BIG": ["demo_api.start"],  # a default not importable from a home
    }


@pytest.mark.filterwarnings("ignore:demo_api.begin is renamed:DeprecationWarning")
def test_a_renamed_name_is_checked_at_run_time(demo: Surface) -> None:
    assert list(deprecated(demo)) == [("demo_api", "begin", "demo_api.start")]
    assert_renamed("demo_api", "begin", "demo_api.start")
    with pytest.raises(pytest.fail.Exception, match="did not match"):
        assert_renamed("demo_api", "begin", "demo_api.consts.BIG")  # the warning names another


def test_the_listing_reads_the_source_and_imports_nothing(demo: Surface) -> None:
    demo.listing()
    demo.internals()
    assert "demo_api" not in sys.modules


def test_the_command_writes_the_listing(surface: Surface, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "public_api.txt"
    assert main(["-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == surface.listing()
    assert main(["--internals"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.partition(":")[0] for line in printed] == list(surface.internals())
