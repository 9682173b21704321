"""Fork safety (gsp._core.fork, docs/serving.md) and gsp.per_process, each scenario in a fresh
interpreter that forks (tests/apps/fork_scenario.py), with and without gevent.monkey.patch_all().
The gunicorn and uWSGI cases are in tests/test_serving.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "apps", "fork_scenario.py")


@pytest.mark.parametrize("monkey", [False, True], ids=["gevent", "monkey"])
@pytest.mark.parametrize("scenario", [
    "fork",  # the child uses the inherited REQ; the parent's pipes go on; the REP raises
    "transports",  # tls+tcp, ws, wss: no close_notify, no close frame reaches the parent's peers
    "copies_closed",  # the child closed its copies of pipes and listeners at once
    "midflight",  # dials and handshakes under way at fork
    "multiprocessing",  # the "fork" start method
    "per_process",  # 50 greenlets, one socket; the child makes its own
])
def test_fork(scenario: str, monkey: bool) -> None:
    argv = [sys.executable, SCRIPT, scenario] + (["--monkey"] if monkey else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.splitlines()[-1].startswith("OK"), out
    assert "Traceback" not in out, out
