"""tests/support/tiers.py: a test whose tool is missing skips, saying what to install, and
under GSP_REQUIRE_ALL=1 (CI) fails instead, so that a run meant to test everything cannot skip."""

from __future__ import annotations

import pytest

from tests.support import ROOT

CONFTEST = '''
from tests.support import tiers

tiers.NEEDS["nowhere"] = (lambda: False, "apt-get install nowhere")
tiers.NEEDS["here"] = (lambda: True, "always here")

from tests.support.tiers import pytest_runtest_setup  # noqa: E402,F401
'''

SUITE = '''
import pytest


@pytest.mark.native("nowhere")
def test_needs_what_is_missing():
    pass


@pytest.mark.native("here")
def test_needs_what_is_here():
    pass


def test_needs_nothing():
    pass
'''


@pytest.mark.parametrize("require_all", [False, True], ids=["developer", "ci"])
def test_a_missing_tool_skips_with_its_fix_or_fails_under_require_all(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require_all: bool) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    if require_all:
        monkeypatch.setenv("GSP_REQUIRE_ALL", "1")
    else:
        monkeypatch.delenv("GSP_REQUIRE_ALL", raising=False)
    pytester.makeini("[pytest]\nmarkers =\n    native: a native tool\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_tiny=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rsf")
    out = result.stdout.str()
    if require_all:
        result.assert_outcomes(passed=2, errors=1)  # failed in its setup: the run is red
        assert "GSP_REQUIRE_ALL is set" in out and "apt-get install nowhere" in out, out
    else:
        result.assert_outcomes(passed=2, skipped=1)
        assert "needs nowhere (apt-get install nowhere)" in out, out
