"""A budget of Python work on gsp's hot paths: an undone inline shows up here, not in a benchmark.

The hot paths budgeted, and nothing else: a tcp request/reply round trip (REQ's and REP's send
and receive fast paths, the tcp reader and writer, the SP frame codec, the channels between them)
and a tcp push/pull message. ``tests/tools/rt_bytecodes.py`` traces every greenlet of one process
for 200 of them and counts the bytecodes and Python calls they run (docs/measuring.md, "Counting
the work"). The count is exact: it does not move with the machine's load, only with the code and
the interpreter, so it is kept per CPython minor version, for the pure build (mypyc's compiled
modules and gevent's Cython hub are not counted).

Each budget is the count measured (``MEASURED``) with a stated headroom: 5 % more bytecodes and
10 % more calls (rounded down: for req/rep, 4 calls) pass, so that moving work around on the
path, or a small feature, needs no budget change; more fails. A change that takes work off the
path by more than the headroom fails too, until ``MEASURED`` is lowered to the new count: the
budget never drifts loose. To measure: ``python tests/tools/rt_bytecodes.py --json [--pushpull]``
with each interpreter, on the pure build.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "rt_bytecodes.py"

#: (bytecodes, Python calls) a round trip, per CPython (major, minor), gevent 25-26, pure build.
MEASURED: dict[tuple[int, int], dict[str, tuple[float, float]]] = {
    (3, 10): {"reqrep": (1860, 40), "pushpull": (1306, 42)},
    (3, 11): {"reqrep": (1836, 40), "pushpull": (1337, 42)},
    (3, 12): {"reqrep": (1697, 40), "pushpull": (1221, 42)},
    (3, 13): {"reqrep": (1716, 40), "pushpull": (1228, 42)},
}
HEADROOM_BYTECODES = 0.05
HEADROOM_CALLS = 0.10


def count(*args: str) -> dict[str, float]:
    """The tool's totals a round trip, run in a process of its own (no tracer of pytest's)."""
    out = subprocess.run([sys.executable, str(TOOL), "--json", *args], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    result: dict[str, Any] = json.loads(out)
    assert result.pop("compiled") == [], (
        "the budget counts the pure build: remove gsp/chan*.so and gsp/wire*.so")
    return result


def measured(what: str) -> tuple[float, float]:
    version = sys.version_info[:2]
    assert version in MEASURED, (
        f"no budget for CPython {version[0]}.{version[1]}: measure with "
        f"`python {TOOL.relative_to(TOOL.parents[2])} --json [--pushpull]` and add it")
    return MEASURED[version][what]


def budget(what: str) -> tuple[float, float]:
    """The most bytecodes and calls ``what`` may run: the measured count and its headroom."""
    bytecodes, calls = measured(what)
    return bytecodes * (1 + HEADROOM_BYTECODES), calls + int(calls * HEADROOM_CALLS)


def over(what: str, got: dict[str, float]) -> list[str]:
    """What of ``got`` is over ``what``'s budget, or so far under it that the budget is stale."""
    bytecodes, calls = budget(what)
    was_bytecodes, was_calls = measured(what)
    out = []
    if got["bytecodes"] > bytecodes:
        out.append(f"{got['bytecodes']:.0f} bytecodes a round trip > budget {bytecodes:.0f}")
    if round(got["calls"]) > calls:
        out.append(f"{got['calls']:.1f} Python calls a round trip > budget {calls}")
    if got["bytecodes"] < was_bytecodes * (1 - HEADROOM_BYTECODES) \
            or round(got["calls"]) < was_calls - int(was_calls * HEADROOM_CALLS):
        out.append(f"{got['bytecodes']:.0f} bytecodes, {got['calls']:.1f} calls: well under "
                   f"MEASURED {measured(what)}; lower it to the new count")
    return out


def test_a_req_rep_round_trip_stays_within_its_budget() -> None:
    got = count()
    assert over("reqrep", got) == [], got
    assert count() == got  # the count is exact: a second run finds the same


def test_a_push_pull_message_stays_within_its_budget() -> None:
    got = count("--pushpull")
    assert over("pushpull", got) == [], got


def test_the_headroom_takes_an_undone_inline_a_side_and_not_three() -> None:
    """Send and recv each through one more Python function (``--wrap``): the counter sees both
    calls and the headroom takes them; through three more each, the budget fails."""
    for what, args in (("reqrep", ()), ("pushpull", ("--pushpull",))):
        plain, one, three = count(*args), count("--wrap", "1", *args), count("--wrap", "3", *args)
        assert round(one["calls"]) == round(plain["calls"]) + 2  # the counter sees both
        assert round(three["calls"]) == round(plain["calls"]) + 6
        assert one["bytecodes"] > plain["bytecodes"]
        assert over(what, one) == [], one
        assert over(what, three) == [
            f"{three['calls']:.1f} Python calls a round trip > budget {budget(what)[1]}"], three
