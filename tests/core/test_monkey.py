"""The core suites again, in a subprocess under gevent.monkey.patch_all() (GSP_TEST_MONKEY=1)."""

from __future__ import annotations

import os
import sys

import pytest
from gevent import subprocess

from tests.support import TESTS

HERE = str(TESTS)
SUITES = ["core/test_core.py", "core/test_core_endpoints.py", "core/test_core_pipes.py",
          "core/test_core_plugins.py", "transports/test_transports.py", "core/test_smoke.py"]


@pytest.mark.slow  # six suites again, in a process of their own (a minute and more)
@pytest.mark.timeout(600)
def test_core_suites_pass_under_monkey_patching():
    env = dict(os.environ, GSP_TEST_MONKEY="1")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
           *(os.path.join(HERE, s) for s in SUITES)]
    out = subprocess.run(cmd, cwd=os.path.dirname(HERE), env=env, capture_output=True,
                         timeout=560)
    report = out.stdout.decode(errors="replace")
    assert out.returncode == 0, report[-6000:] + out.stderr.decode(errors="replace")[-2000:]
    summary = report.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
