"""The interpreter matrix (docs/release.md, "Supported versions"): ``nox -s tests-3.12`` and the
rest.

Each ``tests-X.Y`` session builds gevent-sp's sdist and, from it with CPython X.Y, the compiled
wheel (setup.py compiles gsp's hot modules with mypyc), installs that wheel non-editable into a
fresh venv with the plugins (non-editable too) and the test tools, and runs the suite's tiers
that need no browser, Spark, native tools or network namespaces from a copy of the tree outside
it: the core tier, and the interop tier where that interpreter has wheels for the peers. ``lowest`` does the same on the oldest interpreter with
the lowest versions of the runtime dependencies that the distributions allow.

A session whose interpreter is missing fails, naming it: it never skips. Interpreters are found
on PATH (``python3.12``) or, where PATH has none that runs, in pyenv's versions.

``nox -s tests-3.12 -- tests/test_chan.py`` runs those files only (the marker expression still
applies); ``nox -l`` lists the sessions. The noxfile itself needs Python 3.11+ (tomllib).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).resolve().parent

nox.options.error_on_missing_interpreters = True  # a missing interpreter fails, never skips
nox.options.download_python = "never"  # the interpreters are the machine's own
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "no"  # every run starts from a fresh venv

#: The interpreters tested: requires-python's floor up to the newest this machine has.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")

#: The tiers the matrix runs (pytest markers; tests/conftest.py): all but the browser, Spark,
#: native-tool and network-namespace tiers, whose tools are the machine's, not the interpreter's.
TIERS = "not browser and not spark and not native and not netns"

#: The test tools not installed: PySpark and pyarrow (the spark tier), Playwright and Pillow
#: (the browser tier).
NOT_INSTALLED = {"pyspark", "pyarrow", "playwright", "pillow"}

#: Test tools with no wheel (and no build) for an interpreter, the test files that need them,
#: and why. These files are not collected on that interpreter; every other one is.
NO_WHEEL = {
    "3.10": {
        "nng-ssl": ("nng-ssl 0.2.0 (nng 2.0) requires Python >= 3.11",
                    ["tests/test_interop_nng2.py", "tests/test_admit.py", "tests/test_peer.py",
                     "tests/test_udp.py"]),
    },
}

#: Tests of README's full run on 3.11 that the matrix's venv cannot run (the compiled wheel,
#: installed without PySpark, beside a copy of the tree), and why. Each session names them.
FULL_RUN_ONLY = {
    "tests/test_budget.py": "counts the pure build's bytecodes, against budgets kept for 3.11",
    "tests/test_monkey.py": "runs the core suites under patch_all against the pure build",
    "tests/test_plugin_reference.py": "reads the SDK's docstrings, which mypyc's classes drop",
    "tests/test_architecture.py": "imports every plugin's modules, gsp-spark's with PySpark",
    "tests/test_distribution.py": "needs gevent-sp-spark installed, with PySpark",
    "tests/test_fuzz.py": "atheris instruments the pure modules; two targets import gsp-spark",
    "tests/test_release.py": "builds every distribution; each session builds gevent-sp's sdist "
                             "and, from it, its wheel itself",
    "tests/test_bench.py::test_table_repeat_and_progress":
        "its gsp bench runs from the tree's root, which imports the source gsp",
    "tests/test_bench.py::test_json_repeat_keeps_every_run_and_reports_the_median":
        "its gsp bench runs from the tree's root, which imports the source gsp",
}

#: The plugins installed beside gevent-sp (non-editable), as the suite loads them.
PLUGINS = ["plugins/gsp-star", "plugins/gsp-ws", "plugins/gsp-bench",
           "examples/plugins/gsp-example-zlib", "examples/plugins/gsp-example-gather"]


def find_python(version: str) -> str:
    """The interpreter for ``version``: ``pythonX.Y`` on PATH when it runs (a pyenv shim for a
    version that is not active does not), else pyenv's newest X.Y.*, else the bare version
    (nox then fails the session: "Python interpreter X.Y not found")."""
    on_path = shutil.which(f"python{version}")
    if on_path and subprocess.run([on_path, "-c", ""], capture_output=True).returncode == 0:
        return on_path
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")),
                   key=lambda p: [int(n) for n in re.findall(r"\d+", p.split("/")[-3])])
    return found[-1] if found else version


def project(path: str = ".") -> dict[str, object]:
    with open(ROOT / path / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def test_tools(version: str) -> list[str]:
    """The test extra of gevent-sp, less the tools of the tiers not run here and those with no
    wheel for this interpreter."""
    skip = NOT_INSTALLED | set(NO_WHEEL.get(version, {}))
    tools = project()["optional-dependencies"]["test"]  # type: ignore[index]
    return [r for r in tools if re.match(r"[A-Za-z0-9._-]+", r)[0].lower() not in skip]  # type: ignore[index]


def lowest_pins() -> list[str]:
    """``name==floor`` for every runtime dependency that gevent-sp and the installed plugins
    give a floor (``name>=floor``), gevent-sp itself excepted."""
    pins = {}
    for path in [".", *PLUGINS]:
        for req in project(path)["dependencies"]:  # type: ignore[attr-defined]
            m = re.fullmatch(r"([A-Za-z0-9._-]+)>=([0-9.]+)", req)
            if m and m[1] != "gevent-sp":
                pins[m[1].lower()] = f"{m[1]}=={m[2]}"
    return sorted(pins.values())


def run_matrix_session(session: nox.Session, version: str, pins: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"gsp-nox-{session.name}-"))
    try:
        # The tree, copied outside itself: the wheel is built from the copy (mypyc's C and the
        # build directory stay there), and the suite runs in it, so that nothing of the
        # checkout's is the package tested.
        tree = work / "tree"
        shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
            ".git", ".nox", "venv", "node", "build", "dist", "site", "__pycache__",
            "*.egg-info", "*.so", ".pytest_cache", ".hypothesis"))
        session.chdir(tree)
        pip = ("python", "-m", "pip", "install", "-q", "--prefer-binary")  # (an old wheel
        # rather than a newer release that this interpreter would build from source)
        session.run(*pip, *test_tools(version), *pins)
        # gevent-sp's sdist, then its wheel built from it with this interpreter, as a user's
        # `pip install gevent-sp` builds it where no wheel fits: an isolated build in which
        # mypyc compiles (setup.py says so on stderr).
        session.run("python", "-m", "build", "-q", "--sdist", "--no-isolation", "--skip-dependency-check",
                    "--outdir", str(work), ".")
        sdist = next(work.glob("gevent_sp-*.tar.gz"))
        session.run("python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(sdist))
        wheel = next(work.glob("gevent_sp-*.whl"))
        session.log(f"built {wheel.name} from {sdist.name}")
        session.run(*pip, str(wheel), *PLUGINS, *pins)
        # The suite's pytest puts its rootdir last on sys.path (--import-mode=append), and
        # GSP_EXPECT_BUILD makes tests/conftest.py stop the run unless the compiled build is
        # the one imported; CHECK says so first, for any process of this venv.
        session.run("python", "-I", "-c", CHECK)
        session.run("gsp", "info")
        ignored = []
        for why, files in NO_WHEEL.get(version, {}).values():
            session.warn(f"{session.name}: {why}: not collected: {', '.join(files)}")
            ignored += [f"--ignore={f}" for f in files]
        for test, why in FULL_RUN_ONLY.items():
            session.log(f"in README's full run only: {test}: {why}")
            ignored.append(f"--deselect={test}" if "::" in test else f"--ignore={test}")
        session.run("pytest", "-p", "no:cacheprovider", "--import-mode=append", "-m", TIERS,
                    *ignored, *session.posargs, env={"GSP_EXPECT_BUILD": "compiled"})
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: The installed gsp is the venv's, and every module of gsp._mypyc.COMPILED imported compiled.
CHECK = """
import gsp, sysconfig
from gsp._mypyc import COMPILED, compiled
print('gsp', gsp.__version__, 'from', gsp.__file__, '- compiled:', ', '.join(compiled()))
assert gsp.__file__.startswith(sysconfig.get_paths()['platlib'] + '/'), gsp.__file__
assert compiled() == list(COMPILED), compiled()
"""


for _version in PYTHONS:
    @nox.session(name=f"tests-{_version}", python=find_python(_version))
    def _tests(session: nox.Session, version: str = _version) -> None:
        run_matrix_session(session, version, [])


@nox.session(python=find_python(PYTHONS[0]))
def lowest(session: nox.Session) -> None:
    """The oldest interpreter with the floors of the runtime dependencies (pyproject.toml's
    and the plugins'): gevent, pluggy, msgpack, wsproto, websockets."""
    pins = lowest_pins()
    session.log(f"the floors: {', '.join(pins)}")
    run_matrix_session(session, PYTHONS[0], pins)
