"""The suite's own rules, held by counting (tests/tools/suite_census.py): tests wait on events,
bound time only where it is scaled or promised, go through the public API, and make sockets one
way."""

from __future__ import annotations

import sys

import pytest

from tests.support import ROOT
from tests.support.whitebox import WHITE_BOX

sys.path.insert(0, str(ROOT / "tests" / "tools"))
import suite_census  # noqa: E402

CENSUS = suite_census.totals()


def test_few_sleeps_of_a_tenth_of_a_second_or_more() -> None:
    where = {f: c["sleeps"] for f, c in CENSUS["files"].items() if c["sleeps"]}
    assert CENSUS["sleeps"] <= 30, where


def test_no_unscaled_time_bound_under_a_second() -> None:
    where = {f: c["clocks"] for f, c in CENSUS["files"].items() if c["clocks"]}
    assert CENSUS["clocks"] == 0, where


def test_internals_are_read_only_by_the_white_box_files() -> None:
    outside = {f: c["private"] for f, c in CENSUS["files"].items()
               if c["private"] and f not in WHITE_BOX}
    assert outside == {}, "read through the public API, or list the file in " \
        f"tests/support/whitebox.py with why: {outside}"
    assert CENSUS["private"] <= 40, {f: len(c["private"]) for f, c in CENSUS["files"].items()
                                     if c["private"]}


def test_every_white_box_file_exists_and_says_why() -> None:
    for path, why in WHITE_BOX.items():
        assert (ROOT / path).is_file(), path
        assert len(why) > 20, (path, why)


@pytest.mark.parametrize("helper", ["mk", "sockets", "pair_up"])
def test_sockets_are_made_by_the_one_fixture(helper: str) -> None:
    assert CENSUS["sockets"].get(helper, 0) == 0, (
        f"make sockets with the gsp_socket fixture, not {helper}()")
