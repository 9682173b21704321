"""tests/tools/stress.py: the whole-suite stress runner lists every test that failed, by run kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

TOOL = ROOT / "tests" / "tools" / "stress.py"

SUITE = '''
def test_passes():
    pass


def test_passes_too():
    pass


def test_always_fails():
    assert 1 == 2, "always"
'''


def test_the_runner_lists_each_failure_with_how_often_it_failed(tmp_path: Path) -> None:
    (tmp_path / "test_tiny.py").write_text(SUITE)
    ini = tmp_path / "pytest.ini"  # the tiny suite's own root and options, not the repository's
    ini.write_text("[pytest]\n")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(TOOL), "--quiet", "1", "--hog", "1",
                           "--out", str(out), "--", "-c", str(ini), "--rootdir", str(tmp_path),
                           str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert [(r["kind"], r["passed"], r["failed"]) for r in report["runs"]] == \
        [("quiet", 2, 1), ("hog", 2, 1)], report["runs"]
    failed = report["failed"]
    assert list(failed) == ["test_tiny::test_always_fails"], failed
    assert failed["test_tiny::test_always_fails"]["quiet"] == 1
    assert failed["test_tiny::test_always_fails"]["hog"] == 1
    assert "always" in failed["test_tiny::test_always_fails"]["texts"][0]
    assert "test_tiny::test_always_fails" in proc.stdout and "no test failed" not in proc.stdout
