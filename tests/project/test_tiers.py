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


def test_gsp_unavailable_deselects_what_needs_it_and_says_why(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter matrix names what an interpreter cannot have (noxfile.py): those tests
    leave the run, counted and explained, and a misspelt need stops it."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("GSP_REQUIRE_ALL", "1")
    monkeypatch.setenv("GSP_UNAVAILABLE", "nowhere: no wheel for this interpreter")
    pytester.makeini("[pytest]\nmarkers =\n    native: a native tool\n")
    pytester.makeconftest(CONFTEST + "from tests.support.tiers import (  # noqa: E402,F401\n"
                          "    pytest_collection_modifyitems, pytest_configure, pytest_report_header)\n")
    pytester.makepyfile(test_tiny=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, deselected=1)
    out = result.stdout.str()
    assert "unavailable here, its tests deselected: nowhere (no wheel for this interpreter)" in out, out
    assert "GSP_UNAVAILABLE: 1 tests deselected" in out, out
    monkeypatch.setenv("GSP_UNAVAILABLE", "nowehre: a typo")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "GSP_UNAVAILABLE names 'nowehre'" in result.stderr.str(), result.stderr.str()


def test_gsp_expect_build_stops_a_run_of_another_build(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A matrix session that meant to test the compiled wheel cannot test another gsp by mistake."""
    from tests.support.tiers import gsp_build

    build = lambda: gsp_build()[0]  # noqa: E731
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    other = "compiled" if build() == "pure" else "pure"
    monkeypatch.setenv("GSP_EXPECT_BUILD", other)
    pytester.makeconftest("from tests.support.tiers import pytest_configure  # noqa: F401\n")
    pytester.makepyfile(test_tiny=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"GSP_EXPECT_BUILD={other}, but this run imports the {build()} build of gsp" in err, err
