"""The ``gsp`` command's own behaviour, beside ``gsp cat`` (test_cat*.py)."""

from __future__ import annotations

import subprocess
import sys


def test_a_reader_that_stops_early_ends_gsp_info_quietly() -> None:
    """``gsp info | head -1``: the first line, and no traceback from the pipe closing early."""
    proc = subprocess.run(f"{sys.executable} -m gsp info | head -n 1", shell=True,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("gsp ") and proc.stdout.count("\n") == 1, proc.stdout
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
