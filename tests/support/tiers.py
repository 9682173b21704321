"""The suite's tiers: what a test needs beyond ``pip install -e ".[test]"``.

A test that needs a tool outside Python's package index, or a package kept out of the test
extra, carries the marker of its tier (registered in pyproject.toml, ``--strict-markers``):

========== ====================================================== ==========================
marker     needs (by default)                                     from
========== ====================================================== ==========================
interop    real nng peers: pynng (and, named in the marker, nng   PyPI; Debian's nng-utils,
           2.0's ``nng``, ``nngcat``, ``nanocat``)                 nanomsg-utils
browser    Debian's Chromium, driven by Playwright (and ``node``)  Debian; PyPI
spark      Java 17+ and PySpark                                    Debian; PyPI
native     a C compiler (and, named in the marker, ``valgrind``,   Debian
           ``strace``, ``libnng`` headers)
netns      ``unshare -rn`` and iproute2's ``tc``                   Debian (util-linux,
                                                                   iproute2)
plugins    gsp's plugin distributions (``gsp_ws``, ``gsp_star``,    requirements-dev.txt
           ``gsp_bench``, the examples'), named in the marker
slow       nothing more: longer than about 20 s
========== ====================================================== ==========================

A marker may name its needs instead of the defaults: ``@pytest.mark.interop("nngcat")``. A test
of tests/ parametrized over a plugin's scheme or protocol (a parameter ``"ws"``, ``"wss"``,
``"star"``, or a ``ws://``/``wss://`` URL) gets ``plugins`` with that plugin by itself, at
collection (:func:`pytest_collection_modifyitems`): only those of its cases need the plugin.
Where something a test needs is missing, the test is skipped with what is missing and how to
get it. With ``GSP_REQUIRE_ALL=1`` (CI sets it) such a test fails instead: a run that should
test everything can never skip silently.

Two switches serve the interpreter matrix (noxfile.py). ``GSP_UNAVAILABLE="need: why; ..."``
names needs that cannot exist on this interpreter (nng-ssl has no wheel for 3.10): the tests
that need them are deselected at collection, and the run's header and summary say which and
why. ``GSP_EXPECT_BUILD=compiled`` stops the run before it starts unless the imported gsp is that
build (``gsp._mypyc.build()``); the header always names the build and where it came from.

The core tier, which needs nothing but ``pip install -e ".[test]"``, is what the markers leave::

    python -m pytest tests -m "not interop and not browser and not spark and not native and not netns and not plugins"
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

#: The tiers, and what each needs unless its marker names something else.
TIERS: dict[str, tuple[str, ...]] = {
    "interop": ("pynng",),
    "browser": ("chromium", "playwright"),
    "spark": ("java", "pyspark"),
    "native": ("cc",),
    "netns": ("unshare", "tc"),
    "plugins": ("gsp_ws", "gsp_star", "gsp_bench", "gsp_examples"),
}

_SBIN = "/usr/sbin:/sbin"


def _module(name: str) -> Callable[[], bool]:
    return lambda: importlib.util.find_spec(name) is not None


def _program(name: str, sbin: bool = False) -> Callable[[], bool]:
    path = os.environ.get("PATH", "") + (":" + _SBIN if sbin else "")
    return lambda: shutil.which(name, path=path) is not None


def _java17() -> bool:
    java = shutil.which("java")
    if java is None:
        return False
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        return False
    return major >= 17


def _unshare() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run(
        [unshare, "-rn", "true"], capture_output=True, timeout=60).returncode == 0


#: Each need: how to tell it is here, and where it comes from.
NEEDS: dict[str, tuple[Callable[[], bool], str]] = {
    "pynng": (_module("pynng"), "pip install pynng (the test extra has it)"),
    "nng": (_module("nng"), "pip install nng-ssl==0.2.0 (nng 2.0; the test extra has it)"),
    "nngcat": (_program("nngcat"), "apt-get install nng-utils"),
    "nanocat": (_program("nanocat"), "apt-get install nanomsg-utils"),
    "chromium": (_program("chromium"), "apt-get install chromium"),
    "playwright": (_module("playwright"), "pip install playwright (the test extra has it; "
                                          "no browser download: it drives Debian's Chromium)"),
    "node": (_program("node"), "apt-get install nodejs"),
    "npm": (_program("npm"), "apt-get install npm"),
    "java": (_java17, "apt-get install openjdk-17-jre-headless"),
    "pyspark": (_module("pyspark"), "pip install -e 'plugins/gsp-spark[test]'"),
    "cc": (_program("cc"), "apt-get install build-essential python3-dev"),
    "valgrind": (_program("valgrind"), "apt-get install valgrind"),
    "strace": (_program("strace"), "apt-get install strace"),
    "libnng": (lambda: os.path.exists("/usr/include/nng/nng.h"), "apt-get install libnng-dev"),
    "unshare": (_unshare, "util-linux's unshare, with user namespaces allowed"),
    "tc": (_program("tc", sbin=True), "apt-get install iproute2"),
    "gsp_ws": (_module("gsp_ws"), "pip install -e plugins/gsp-ws"),
    "gsp_star": (_module("gsp_star"), "pip install -e plugins/gsp-star"),
    "gsp_bench": (_module("gsp_bench"), "pip install -e plugins/gsp-bench"),
    "gsp_spark": (_module("gsp_spark"), "pip install -e 'plugins/gsp-spark[test]'"),
    "gsp_examples": (lambda: _module("gsp_example_zlib")() and _module("gsp_example_gather")(),
                     "pip install -e examples/plugins/gsp-example-zlib "
                     "-e examples/plugins/gsp-example-gather"),
}

#: A test parameter that is a plugin's scheme or protocol, and the plugin it needs.
PLUGIN_PARAMS = {"ws": "gsp_ws", "wss": "gsp_ws", "star": "gsp_star"}


@functools.lru_cache(maxsize=None)
def have(need: str) -> bool:
    """Whether ``need`` (a key of :data:`NEEDS`) is on this machine."""
    return NEEDS[need][0]()


def missing(item: pytest.Item) -> list[str]:
    """What ``item``'s tier markers need that this machine lacks, each with where it comes from."""
    out = []
    for tier, default in TIERS.items():
        for marker in item.iter_markers(tier):
            for need in marker.args or default:
                if need not in NEEDS:
                    raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{tier}({need!r}): "
                                            f"unknown need; known: {', '.join(NEEDS)}")
                if not have(need):
                    out.append(f"{need} ({NEEDS[need][1]})")
    return out


def _plugin_of(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    if value.startswith(("ws://", "wss://")):
        return "gsp_ws"
    return PLUGIN_PARAMS.get(value)


def unavailable() -> dict[str, str]:
    """``GSP_UNAVAILABLE``'s needs, each with why it cannot be had here."""
    out = {}
    for part in filter(None, (p.strip() for p in os.environ.get("GSP_UNAVAILABLE", "").split(";"))):
        need, _, why = part.partition(":")
        if need.strip() not in NEEDS:
            raise pytest.UsageError(f"GSP_UNAVAILABLE names {need.strip()!r}; known: {', '.join(NEEDS)}")
        out[need.strip()] = why.strip() or "unavailable here"
    return out


#: The needs that are Python modules a test file may import at its top.
_MODULES = {"pynng": "pynng", "nng": "nng", "playwright": "playwright", "pyspark": "pyspark"}

#: Test files left out because they import an unavailable module (GSP_UNAVAILABLE), for the header.
IGNORED: list[str] = []


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave out a test file that imports, at its top, a module GSP_UNAVAILABLE names: it could
    not be imported (its tests that need the module are deselected anyway)."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    gone = {_MODULES[n] for n in unavailable() if n in _MODULES}
    if not gone:
        return None
    text = collection_path.read_text(encoding="utf-8", errors="replace")
    if any(re.search(rf"^(import {m}\b|from {m} import)", text, re.M) for m in gone):
        IGNORED.append(str(collection_path))
        return True
    return None


def gsp_build() -> tuple[str, str]:
    """The build of the gsp this run imports (``pure`` or ``compiled``), and where from."""
    import gsp
    from gsp._mypyc import build

    return build(), str(gsp.__file__)


def pytest_configure(config: pytest.Config) -> None:
    expected = os.environ.get("GSP_EXPECT_BUILD")
    build, where = gsp_build()
    if expected and build != expected:
        raise pytest.UsageError(f"GSP_EXPECT_BUILD={expected}, but this run imports the {build} "
                                f"build of gsp ({where})")
    unavailable()  # a misspelt need stops the run here


def pytest_report_header() -> list[str]:
    build, where = gsp_build()
    lines = [f"gsp: the {build} build, from {where}"]
    lines += [f"unavailable here, its tests deselected: {need} ({why}); files that import it "
              "are not collected" for need, why in unavailable().items()]
    return lines


def _needs(item: pytest.Item) -> set[str]:
    return {need for tier, default in TIERS.items()
            for marker in item.iter_markers(tier) for need in marker.args or default}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each case of tests/ parametrized over a plugin's scheme or protocol ``plugins``;
    deselect the tests that need what ``GSP_UNAVAILABLE`` names."""
    _mark_plugin_params(items)
    gone = unavailable()
    if not gone:
        return
    keep, drop = [], []
    for item in items:
        (drop if _needs(item) & gone.keys() else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"GSP_UNAVAILABLE: {len(drop)} tests deselected "
                                f"({'; '.join(f'{k}: {v}' for k, v in gone.items())})")


def _mark_plugin_params(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or not item.nodeid.startswith("tests/"):
            continue
        needs = {p for p in map(_plugin_of, callspec.params.values()) if p}
        if needs:
            item.add_marker(pytest.mark.plugins(*sorted(needs)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    lacking = missing(item)
    if not lacking:
        return
    why = "needs " + "; ".join(dict.fromkeys(lacking))
    if os.environ.get("GSP_REQUIRE_ALL"):
        pytest.fail(f"{why} — GSP_REQUIRE_ALL is set, so a missing tool fails the run",
                    pytrace=False)
    pytest.skip(why)
