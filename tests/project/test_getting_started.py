"""docs/getting-started.md cannot rot: every Python block of it is taken from the page (not
copied here) and run as the page says — a script under the name on its first line, whose
printed output must be the ``text`` block the page shows after it — and the page's web service
(``backend.py`` and ``app.py``) runs under real gunicorn with the page's own command line,
answering HTTP through the gsp backend. README's first example runs too."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from pathlib import Path

import gevent
import pytest
from gevent import subprocess
from gunicorn.config import KNOWN_SETTINGS

from tests.support import ROOT, http_get, servers, stop_server

PAGE = ROOT / "docs" / "getting-started.md"
#: A fenced block: its language and its text.
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
#: The first line of each Python block of the page: ``# name.py: what it is``.
NAME = re.compile(r"# (\w+\.py):")
#: The blocks that make the web service, run under gunicorn rather than as scripts.
SERVICE = ("backend.py", "app.py")


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in FENCE.finditer(path.read_text())]


def scripts() -> list[tuple[str, str, str | None]]:
    """(file name, code, the ``text`` block right after it or None) of each Python block."""
    found = blocks(PAGE)
    out = []
    for i, (lang, code) in enumerate(found):
        if lang != "python":
            continue
        m = NAME.match(code)
        assert m, f"a Python block of the page without its file name on its first line:\n{code}"
        after = found[i + 1] if i + 1 < len(found) else ("", "")
        out.append((m[1], code, after[1] if after[0] == "text" else None))
    return out


def run(tmp_path: Path, name: str, code: str) -> str:
    (tmp_path / name).write_text(code)
    p = subprocess.run([sys.executable, name], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, f"{name} failed:\n{p.stderr[-3000:]}"
    return p.stdout


def test_the_page_has_its_blocks() -> None:
    names = [name for name, _, _ in scripts()]
    assert len(names) == len(set(names)), names
    assert {"reqrep.py", "contexts.py", "pubsub.py", *SERVICE} <= set(names), names
    assert "python -m pip install -e ." in PAGE.read_text()


@pytest.mark.parametrize("name", [n for n, _, _ in scripts() if n not in SERVICE])
def test_a_script_of_the_page_runs_and_prints_what_the_page_shows(tmp_path: Path,
                                                                   name: str) -> None:
    code, shown = next((c, t) for n, c, t in scripts() if n == name)
    out = run(tmp_path, name, code)
    assert shown is not None, f"the page shows no output after {name}"
    assert out == shown


def gunicorn_argv() -> list[str]:
    """The page's gunicorn command line, its arguments as the page gives them."""
    shell = "\n".join(code for lang, code in blocks(PAGE) if lang == "shell")
    line = next(ln for ln in shell.splitlines() if ln.startswith("gunicorn "))
    return shlex.split(line.rstrip("& "))[1:]


def test_the_web_service_runs_under_gunicorn_gevent(tmp_path: Path) -> None:
    for name, code, _ in scripts():
        if name in SERVICE:
            (tmp_path / name).write_text(code)
    argv = gunicorn_argv()
    assert argv[:4] == ["-k", "gevent", "-w", "2"], argv
    bind = argv.index("-b")
    port = servers.free_port()
    argv[bind + 1] = f"127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p),
           "PYTHONUNBUFFERED": "1", "BACKEND_URL": f"tcp://127.0.0.1:{servers.free_port()}"}
    backend = subprocess.Popen([sys.executable, "backend.py"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with gevent.Timeout(30, AssertionError("the backend did not start")):
            assert backend.stdout.readline().startswith("serving on tcp://127.0.0.1:")
        gunicorn = [str(Path(servers.BIN) / "gunicorn"), *argv, "--chdir", str(tmp_path)]
        if any(s.name == "control_socket_disable" for s in KNOWN_SETTINGS):  # gunicorn 25+
            gunicorn.append("--no-control-socket")
        with contextlib.closing(servers.Server(gunicorn, port, env)) as srv:
            srv.wait_ready()
            answers = [gevent.spawn(http_get, port, f"/gsp{i}") for i in range(10)]
            gevent.joinall(answers, timeout=30, raise_error=True)
            for i, job in enumerate(answers):
                status, body = job.value
                assert status == 200, job.value
                assert re.fullmatch(rb"hello, gsp%d \(from the backend, pid \d+\)\n" % i, body)
            # The backend stopped: each request ends in a bounded time with an HTTP error.
            stop_server(backend)
            status, body = http_get(port, "/late")
            assert status in (502, 504), (status, body, srv.output()[-2000:])
    finally:
        if backend.poll() is None:
            stop_server(backend)


def test_readme_first_example_runs(tmp_path: Path) -> None:
    lang, code = next(b for b in blocks(ROOT / "README.md") if b[0] == "python")
    readme = (ROOT / "README.md").read_text().splitlines()
    first = next(i for i, ln in enumerate(readme) if ln.startswith("```python"))
    assert first < 40 and len(readme) <= 100, (first, len(readme))
    assert run(tmp_path, "readme.py", code) == "b'hello, world'\n"


def test_readme_set_up_commands_are_what_ci_runs() -> None:
    """README's two set-up commands (the demo's, the tests') are lines of .ci/run, run as such."""
    text = (ROOT / "README.md").read_text()
    setup = text[text.index("## Set up on a fresh machine"):]
    setup = setup[:setup.index("\n## ", 1)]
    commands = [code.strip() for lang, code in FENCE.findall(setup) if lang == ""]
    assert len(commands) == 2, commands
    assert "examples/pipeline_demo.py" in commands[0] and "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert command in ci, f"README's command is not a line of .ci/run: {command}"


def test_the_home_page_example_runs(tmp_path: Path) -> None:
    lang, code = next(b for b in blocks(ROOT / "docs" / "index.md") if b[0] == "python")
    assert run(tmp_path, "home.py", code) == "b'hello'\n"
