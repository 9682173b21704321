"""A budget of Python work per message: an undone inline shows up here, not in a benchmark.

``tests/tools/rt_bytecodes.py`` traces every greenlet of one process for 200 tcp round trips and
counts the bytecodes and the Python calls they run (docs/measuring.md, "Counting the work").
The count is exact: it does not move with the machine's load, only with the code and the
interpreter. So the budget is kept per CPython minor version (CI runs 3.11), for the pure build
(mypyc's compiled ``chan`` and ``wire``, and gevent's Cython hub, are not counted).

A change that adds work to the round trip fails here. If the work is worth it, measure again
(``python tests/tools/rt_bytecodes.py [--pushpull]``), raise the budget below and say why in the
commit; if a change takes calls off, lower the calls budget to the new count (a test checks that
it is that tight).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "rt_bytecodes.py"

# (bytecodes, Python calls) a round trip, per CPython (major, minor). Measured with CPython
# 3.11.7, gevent 26.9.0, the pure build (tests/tools/rt_bytecodes.py [--pushpull]):
#   req/rep (a request and its reply, both sides): 1836 bytecodes, 40 calls;
#   push/pull (a message sent and received):      1337 bytecodes, 42 calls.
# Bytecodes get headroom: 1928 and 1365 are 5.0 % and 2.1 % above those counts. Calls are whole
# numbers and exact, so their budget is the count itself: one more Python call on the path (an
# undone inline, on one side only) fails it; test_the_budget_catches_one_more_call_a_side
# proves that.
BUDGETS: dict[tuple[int, int], dict[str, tuple[float, float]]] = {
    (3, 11): {"reqrep": (1928, 40), "pushpull": (1365, 42)},
}


def count(*args: str) -> dict[str, float]:
    """The tool's totals a round trip, run in a process of its own (no tracer of pytest's)."""
    out = subprocess.run([sys.executable, str(TOOL), "--json", *args], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    result: dict[str, Any] = json.loads(out)
    assert result.pop("compiled") == [], (
        "the budget counts the pure build: remove gsp/chan*.so and gsp/wire*.so")
    return result


def budget(what: str) -> tuple[float, float]:
    version = sys.version_info[:2]
    assert version in BUDGETS, (
        f"no budget for CPython {version[0]}.{version[1]}: measure with "
        f"`python {TOOL.relative_to(TOOL.parents[2])} [--pushpull]` and add it")
    return BUDGETS[version][what]


def over(what: str, got: dict[str, float]) -> list[str]:
    """What of ``got`` is over ``what``'s budget, said for a reader."""
    bytecodes, calls = budget(what)
    return ([f"{got['bytecodes']:.0f} bytecodes a round trip > budget {bytecodes}"]
            if got["bytecodes"] > bytecodes else []) + \
        ([f"{got['calls']:.1f} Python calls a round trip > budget {calls}"]
         if round(got["calls"]) > calls else [])


def test_a_req_rep_round_trip_stays_within_its_budget() -> None:
    got = count()
    assert over("reqrep", got) == [], got
    assert count() == got  # the count is exact: a second run finds the same


def test_a_push_pull_message_stays_within_its_budget() -> None:
    got = count("--pushpull")
    assert over("pushpull", got) == [], got


def test_the_budget_catches_one_more_call_a_side() -> None:
    """What an undone inline costs: send and recv each through one more Python function.
    (``over`` is what the two tests above assert empty.)"""
    for what, args in (("reqrep", ()), ("pushpull", ("--pushpull",))):
        plain, wrapped = count(*args), count("--wrap", *args)
        assert round(wrapped["calls"]) == round(plain["calls"]) + 2  # the counter sees both
        assert wrapped["bytecodes"] > plain["bytecodes"]
        # and the budget is tight enough to catch one call more: it is today's count
        assert budget(what)[1] == round(plain["calls"]), "set the calls budget to the count"
        assert over(what, wrapped) == [
            f"{wrapped['calls']:.1f} Python calls a round trip > budget {budget(what)[1]}"]
