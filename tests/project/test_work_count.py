"""tests/tools/work_count.py: the workloads it counts run against today's API, and it counts.

The tool compares two versions of gsp by the instructions and system calls a message costs
(docs/measuring.md, "Counting the work"), which a loaded machine does not move. These tests keep
its workloads runnable and check that a count is exact and sees work added.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "work_count.py"
sys.path.insert(0, str(TOOL.parent))
import work_count  # noqa: E402

pytestmark = pytest.mark.native("valgrind", "strace")


@pytest.mark.parametrize("workload", sorted(work_count.WORKLOADS))
def test_each_workload_runs_to_its_end(workload: str) -> None:
    subprocess.run([sys.executable, str(TOOL), "--inner", workload, "100"], check=True,
                   timeout=60, env=work_count.run_env(None))


def test_the_build_line_names_the_tree_counted_even_from_a_checkout(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # From a checkout's root, ``python -c`` imported the checkout's gsp ahead of --tree's, so
    # the header named the wrong gsp (the counts, run elsewhere, were the tree's). A tree whose
    # gsp predates gsp._mypyc.compiled is named too.
    (tmp_path / "gsp").mkdir()
    (tmp_path / "gsp" / "__init__.py").write_text("")
    (tmp_path / "gsp" / "chan.py").write_text("")
    monkeypatch.chdir(TOOL.parents[2])
    assert work_count.build_of(sys.executable, str(tmp_path)) == \
        f"pure {tmp_path / 'gsp' / '__init__.py'}"
    assert work_count.build_of(sys.executable, None).endswith(str(TOOL.parents[2] / "gsp" / "__init__.py"))


def test_the_system_call_total_is_read_with_or_without_an_errors_column() -> None:
    head = "% time     seconds  usecs/call     calls    errors syscall\n------ ---\n"
    assert work_count.strace_calls(head + "100.00    0.123456          12     10203       601 total\n") \
        == 10203
    assert work_count.strace_calls(head + "100.00    0.123456          12     10203           total\n") \
        == 10203


# valgrind runs the workload 20-50 times slower than Python alone, and a loaded 2-core machine
# slower again: pytest-timeout's 120 s is too short for its five runs there.
@pytest.mark.timeout(600)
def test_a_count_is_exact_and_a_round_trip_costs_system_calls() -> None:
    for tool in ("valgrind", "strace"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: apt-get install {tool} (.ci/run does)")
    # the same binary, input and environment: the same instructions, whatever the load
    once = work_count.instructions(sys.executable, None, "raw-push16", 300)
    again = work_count.instructions(sys.executable, None, "raw-push16", 300)
    assert abs(once - again) <= 0.001 * once, (once, again)
    rt = work_count.count(sys.executable, None, "raw-rt", n=100)
    # a send and a receive on each side, at the least; the interpreter's work is tens of
    # thousands of instructions (start-up cancels out: the tool counts the difference of 2 runs)
    assert rt["syscalls"] >= 4, rt
    assert 10_000 < rt["instructions"] < 1_000_000, rt


def test_a_served_workload_counts_its_server_alone() -> None:
    """rep16's clients run in a process of their own, which neither valgrind nor strace follows:
    what a request costs is the server's work alone. Raw gevent's echo of a request is some 30 k
    instructions; 16 gsp REQ sockets' sends and receives would add more than as much again."""
    if not shutil.which("valgrind"):
        pytest.fail("valgrind not found: apt-get install valgrind (.ci/run does)")
    short = work_count.instructions(sys.executable, None, "raw-rep16", 300)
    long = work_count.instructions(sys.executable, None, "raw-rep16", 900)
    per = (long - short) / 600
    assert 10_000 < per < 55_000, per


def test_the_bytecode_loops_lines_are_summed_and_nothing_else() -> None:
    """``--interpreter`` sums callgrind_annotate's lines for CPython's bytecode loop, however the
    report names its file (a header inlined into it) or its recursion (``'2``); a function that
    merely starts with the same letters, and the totals line, are not counted."""
    report = "\n".join([
        "1,000,000 (100.0%)  PROGRAM TOTALS",
        "  168,276 (16.73%)  /tmp/b/Python/ceval.c:_PyEval_EvalFrameDefault'2 [/lib/libpython3.11.so]",
        "    4,521 ( 0.45%)  /tmp/b/./Include/object.h:_PyEval_EvalFrameDefault'2",
        "      900 ( 0.09%)  /tmp/b/Python/ceval.c:_PyEval_EvalFrameDefault [/lib/libpython3.11.so]",
        "   45,881 ( 4.56%)  /tmp/b/Objects/dictobject.c:unicodekeys_lookup_unicode [/lib/x.so]",
        "      101 ( 0.01%)  /tmp/b/Python/ceval.c:_PyEval_EvalFrameDefaultish [/lib/x.so]",
        "       40 ( 0.00%)  /tmp/b/Python/ceval.c:_PyEval_Vector [/lib/libpython3.11.so]",
    ])
    assert work_count.interpreter_share(report) == 168_276 + 4_521 + 900


def test_the_interpreters_share_of_a_round_trip_is_counted() -> None:
    """The raw round trip is Python framing its messages by hand: a real share of its work is
    the bytecode loop's, and never all of it (the system calls, the hub and the allocator are
    not)."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        pytest.fail("valgrind not found: apt-get install valgrind (.ci/run does)")
    rt = work_count.count(sys.executable, None, "raw-rt", n=100, interpreter=True)
    assert 0.05 * rt["instructions"] < rt["interpreter"] < 0.8 * rt["instructions"], rt
