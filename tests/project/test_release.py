"""What a release publishes (docs/release.md): every distribution of the repository builds an
sdist and a wheel (``python -m build``), both pass ``twine check --strict``, and their metadata
agree: one version, the Python versions CI tests (noxfile.py) as classifiers, requires-python's
floor the oldest of them. gevent-sp's sdist installs in a fresh venv where the C compiler fails
(``CC=false``): pure Python, saying so in one line, and README's first example runs on it.

The builds here are pure (``GSP_PURE=1``): each session of noxfile.py builds the compiled wheel
from gevent-sp's sdist with its interpreter and runs the suite against it.
"""

from __future__ import annotations

import ast
import email
import email.message
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
import trove_classifiers

pytestmark = pytest.mark.allow_leaks  # build processes only; this process opens no sockets

ROOT = Path(__file__).resolve().parents[2]

#: Every distribution in the repository: its directory -> its name.
DISTRIBUTIONS = {
    ".": "gevent-sp",
    "plugins/gsp-star": "gevent-sp-star",
    "plugins/gsp-ws": "gevent-sp-ws",
    "plugins/gsp-spark": "gevent-sp-spark",
    "plugins/gsp-bench": "gevent-sp-bench",
    "examples/plugins/gsp-example-zlib": "gevent-sp-example-zlib",
    "examples/plugins/gsp-example-gather": "gevent-sp-example-gather",
}

#: What a build leaves in a source tree, and the plugins' tests: not copied.
LEFT_OUT = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.so", "*.pyc",
                                  "tests")
TREE_LEFT_OUT = shutil.ignore_patterns(".git", ".nox", "venv", "node", "build", "dist", "site",
                                       "*.egg-info", "__pycache__", "*.so", "*.pyc")


def pythons_tested() -> tuple[str, ...]:
    """noxfile.py's PYTHONS: the interpreters CI tests, read without importing nox."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == \
                ["PYTHONS"]:
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("noxfile.py assigns no PYTHONS")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """distribution name -> its sdist and wheel, built by ``python -m build`` from a copy of
    its directory (the wheel from the sdist, as build does by default)."""
    work = tmp_path_factory.mktemp("release")
    out: dict[str, list[Path]] = {}
    for path, name in DISTRIBUTIONS.items():
        src = work / "src" / name
        # (gevent-sp's directory is the repository: all of it but what git, nox, CI and the
        # docs leave, so that the sdist shows what a checkout's would hold)
        shutil.copytree(ROOT / path, src, ignore=LEFT_OUT if path != "." else TREE_LEFT_OUT)
        dist = work / "dist" / name
        # --no-isolation: the test environment has the build requirements (the test extra's
        # setuptools, mypy; gsp's dependencies), so no fresh build environment is installed.
        p = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                            str(src)], env={**os.environ, "GSP_PURE": "1"},
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        out[name] = sorted(dist.iterdir(), key=lambda f: f.suffix == ".whl")  # the sdist first
    return out


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        [meta] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(meta))


@pytest.mark.timeout(600)
def test_every_distribution_builds_an_sdist_and_a_wheel_that_twine_passes(
        built: dict[str, list[Path]]) -> None:
    for name, files in built.items():
        stem = name.replace("-", "_")
        assert [f.name.endswith(".tar.gz") for f in files] == [True, False], files
        assert files[0].name.startswith(f"{stem}-") and files[1].name.startswith(f"{stem}-")
        assert files[1].suffix == ".whl", files
    everything = [str(f) for files in built.values() for f in files]
    p = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *everything],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PASSED") == len(everything), p.stdout


def test_the_distributions_agree_on_version_pythons_and_classifiers(
        built: dict[str, list[Path]]) -> None:
    """One version (gsp.__version__, which every plugin requires at least), the tested Python
    versions as classifiers and none other, requires-python from the oldest, the long
    description from the README as Markdown, each classifier one the package index knows."""
    import gsp

    pythons = pythons_tested()
    for name, (_, wheel) in built.items():
        meta = wheel_metadata(wheel)
        assert meta["Name"] == name
        assert meta["Version"] == gsp.__version__, (name, meta["Version"])
        assert meta["Requires-Python"] == f">={pythons[0]}", name
        classifiers = meta.get_all("Classifier") or []
        assert not [c for c in classifiers if c not in trove_classifiers.classifiers], name
        versions = [c.rsplit(" :: ", 1)[1] for c in classifiers
                    if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
        assert tuple(versions) == pythons, (name, versions)
        assert meta["Description-Content-Type"] == "text/markdown", name
        assert meta.get_payload().lstrip().startswith("# "), name  # the README, its title first
        if name != "gevent-sp":  # released together: each plugin needs at least its own version
            assert f"gevent-sp>={gsp.__version__}" in (meta.get_all("Requires-Dist") or []), name


@pytest.mark.timeout(600)
def test_the_sdist_installs_pure_without_a_working_c_compiler(
        built: dict[str, list[Path]], tmp_path: Path) -> None:
    """``CC=false``: mypyc writes its C, the compiler fails, the install goes on in pure Python
    and setup.py says so in one line; ``gsp info`` says which build it is and README's first
    example runs."""
    sdist = built["gevent-sp"][0]
    top = sdist.name[:-len(".tar.gz")]
    with tarfile.open(sdist) as t:
        names = [n[len(top) + 1:] for n in t.getnames() if t.getmember(n).isfile()]
    assert {"setup.py", "pyproject.toml", "README.md", "gsp/_mypyc.py", "gsp/py.typed"} <= set(names)
    # the package and what builds it; no tests, docs or tools
    assert not [n for n in names if not n.startswith(("gsp/", "gevent_sp.egg-info/")) and n not in
                ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "PKG-INFO", "MANIFEST.in")], names
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    environ = {k: v for k, v in os.environ.items() if k not in ("GSP_PURE", "VIRTUAL_ENV")}
    p = subprocess.run([str(py), "-m", "pip", "install", "-v", str(sdist)],
                       env={**environ, "CC": "false"}, capture_output=True, text=True, timeout=540)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    notices = [line.strip() for line in out.splitlines() if "gsp setup.py: compiling with mypyc failed" in line]
    assert len(notices) == 1 and notices[0].endswith("building pure Python"), notices
    info = subprocess.run([str(env_dir / "bin" / "gsp"), "info"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert info.returncode == 0 and info.stdout.splitlines()[0].endswith("(pure build)"), info
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```python\n(.*?)```", readme, re.S)
    assert first is not None
    (tmp_path / "first.py").write_text(first.group(1))
    run = subprocess.run([str(py), "first.py"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert run.returncode == 0 and run.stdout == "b'hello, world'\n", run
