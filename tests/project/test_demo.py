"""README's demo (``examples/pipeline_demo.py``), run as README runs it, only smaller: it must
print OK, and leave nothing behind in the temporary directory (its ipc socket's directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "pipeline_demo.py"


@pytest.mark.timeout(120)
def test_the_demo_answers_every_task_and_leaves_no_file_behind(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))  # where tempfile puts the demo's directory
    r = subprocess.run([sys.executable, str(DEMO), "--workers", "2", "--tasks", "40"],
                       env=env, capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "results     40/40 tasks" in r.stdout and r.stdout.rstrip().endswith("OK")
    assert "workers     2 processes connected" in r.stdout
    assert os.listdir(scratch) == []
