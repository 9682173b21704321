"""The interpreter matrix (docs/release.md, "Supported versions"): ``nox -s tests-3.12`` and the
rest.

Each ``tests-X.Y`` session builds gevent-sp's sdist and, from it with CPython X.Y, the compiled
wheel (setup.py compiles gsp's hot modules with mypyc), installs that wheel non-editable into a
fresh venv with the plugins (non-editable too) and the test tools, and runs the suite's tiers
that need no browser, Spark, native tools or network namespaces from a copy of the tree outside
it: the folders of PATHS with the tiers of TIERS (the core tier, the plugins' and the interop
tier, with the peers that interpreter has wheels for). ``lowest`` does the same on the oldest
interpreter with the lowest versions of the runtime dependencies that the distributions allow.

A session whose interpreter is missing fails, naming it: it never skips. Interpreters are found
on PATH (``python3.12``) or, where PATH has none that runs, in pyenv's versions.

``nox -s tests-3.12 -- tests/core/test_chan.py`` runs those files only (the marker expression still
applies); ``nox -l`` lists the sessions. The noxfile itself needs Python 3.11+ (tomllib).
"""

from __future__ import annotations

import atexit
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

#: What each session runs: the files that drive gsp's compiled modules (tests/compiled_drivers.txt,
#: which .ci/run's compiled-wheel stage runs on 3.11), the interop folder (real nng peers), and
#: the fork and prefork tests (Python 3.12+ warns of forks beside threads). README's full run on
#: 3.11 has every other file: what it tests does not change with the interpreter (the
#: repository's checks, the serving and command-line tools' behaviour) or takes longer than the
#: matrix can afford in CI's time.
DRIVERS = [line.strip() for line in (ROOT / "tests" / "compiled_drivers.txt").read_text().splitlines()
           if line.strip() and not line.startswith("#")]
PATHS = [*DRIVERS, "tests/interop", "tests/serving/test_fork.py", "tests/serving/test_prefork.py"]
TIERS = "not browser and not spark and not native and not netns and not slow"

#: What ``lowest`` runs: the same, less the interop folder (the peers' own versions are not the
#: floors under test).
LOWEST_PATHS = [*DRIVERS, "tests/serving/test_fork.py", "tests/serving/test_prefork.py"]

#: Test tools not installed: those of the tiers not run, and the repository checks'.
NOT_INSTALLED = {"playwright", "pillow", "atheris", "matplotlib", "mypy", "import-linter", "ruff"}

#: What an interpreter cannot have, and why (tests/support/tiers.py, GSP_UNAVAILABLE): the
#: tests that need it are deselected, and the run says so.
UNAVAILABLE = {
    "3.10": {"nng": "nng-ssl 0.2.0 (nng 2.0) requires Python >= 3.11"},
}

#: The distributions that give each need of UNAVAILABLE.
PACKAGE_OF = {"nng": "nng-ssl"}

IGNORE = shutil.ignore_patterns(".git", ".nox", ".ci", "venv", "node_modules", "build", "dist",
                                "site", "__pycache__", "*.egg-info", "*.so", ".pytest_cache",
                                ".hypothesis")

#: What the run folder holds: the tests and the files they read, no package.
RUN_FILES = ["pyproject.toml", "README.md", "tests", "examples", "docs",
             "plugins/gsp-ws/tests", "plugins/gsp-star/tests"]

#: Test tools pinned beside the floors: gunicorn 24 and newer refuse gevent before 24.10.1 in
#: their gevent workers, so the serving tests take the last gunicorn that runs gevent 23.9.
OLD_GEVENT_TOOLS = ["gunicorn==23.0.0"]

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
    skip = NOT_INSTALLED | {PACKAGE_OF[n] for n in UNAVAILABLE.get(version, {})}
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


#: The compiled wheel each interpreter built in this run of nox: a later session on the same
#: interpreter (``lowest`` after ``tests-3.10``) installs it instead of compiling it again
#: (the build does not depend on the runtime pins).
_WHEELS: dict[str, Path] = {}
_KEPT: list[Path] = []


def built_wheels() -> Path:
    """The folder that keeps this run's wheels; removed when nox exits."""
    if not _KEPT:
        _KEPT.append(Path(tempfile.mkdtemp(prefix="gsp-nox-wheels-")))
        atexit.register(shutil.rmtree, _KEPT[0], ignore_errors=True)
    return _KEPT[0]


def run_matrix_session(session: nox.Session, version: str, pins: list[str],
                       paths: list[str] = PATHS) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"gsp-nox-{session.name}-"))
    try:
        # The tree, copied outside itself: the wheel and the plugins are built from the copy
        # (mypyc's C and the build directories stay there).
        tree = work / "tree"
        shutil.copytree(ROOT, tree, ignore=IGNORE)
        session.chdir(tree)
        pip = ("python", "-m", "pip", "install", "-q", "--prefer-binary")  # (an old wheel
        # rather than a newer release that this interpreter would build from source)
        session.run(*pip, "build", *test_tools(version), *pins)
        # gevent-sp's sdist, then its wheel built from it with this interpreter, as a user's
        # `pip install gevent-sp` builds it where no wheel fits: an isolated build in which
        # mypyc compiles (setup.py says so on stderr).
        wheel = _WHEELS.get(version)
        if wheel is not None:
            session.log(f"installs {wheel.name}, built from the sdist by an earlier session of "
                        "this run with the same interpreter")
        else:
            session.run("python", "-m", "build", "-q", "--sdist", "--no-isolation",
                        "--skip-dependency-check", "--outdir", str(work), ".")
            sdist = next(work.glob("gevent_sp-*.tar.gz"))
            session.run("python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work),
                        str(sdist))
            built = next(work.glob("gevent_sp-*.whl"))
            session.log(f"built {built.name} from {sdist.name}")
            wheel = _WHEELS[version] = Path(shutil.copy(built, built_wheels()))
        session.run(*pip, str(wheel), *PLUGINS, *pins)
        # The suite runs from a folder of its own that holds the tests and what they read, but
        # no package (the suite's pytest puts its root on sys.path): the installed wheel and
        # plugins are what it imports. CHECK says so first, for any process of this venv, and
        # GSP_EXPECT_BUILD stops the run unless the compiled build is the one imported.
        run = work / "run"
        for part in RUN_FILES:
            copy = shutil.copytree if (tree / part).is_dir() else shutil.copy
            (run / part).parent.mkdir(parents=True, exist_ok=True)
            copy(tree / part, run / part)
        session.chdir(run)
        session.run("python", "-I", "-c", CHECK)
        session.run("gsp", "info")
        unavailable = "; ".join(f"{k}: {v}" for k, v in UNAVAILABLE.get(version, {}).items())
        if unavailable:
            session.warn(f"{session.name}: unavailable here, its tests deselected: {unavailable}")
        session.run("pytest", "-p", "no:cacheprovider", "--durations=15", "-m", TIERS,
                    *(session.posargs or paths),
                    env={"GSP_EXPECT_BUILD": "compiled", "GSP_UNAVAILABLE": unavailable})
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
    pins = lowest_pins() + OLD_GEVENT_TOOLS
    session.log(f"the floors: {', '.join(pins)}")
    run_matrix_session(session, PYTHONS[0], pins, LOWEST_PATHS)
