"""tests/tools/work_count.py: the workloads it counts run against today's API, and it counts.

The tool compares two versions of gsp by the instructions and system calls a message costs
(docs/performance.md, "Counting the work"), which a loaded machine does not move. These tests keep
its workloads runnable and check that a count is exact and sees work added.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parent / "tools" / "work_count.py"
sys.path.insert(0, str(TOOL.parent))
import work_count  # noqa: E402


@pytest.mark.parametrize("workload", sorted(work_count.WORKLOADS))
def test_each_workload_runs_to_its_end(workload: str) -> None:
    subprocess.run([sys.executable, str(TOOL), "--inner", workload, "100"], check=True,
                   timeout=60, env=work_count._env(None))


def test_the_system_call_total_is_read_with_or_without_an_errors_column() -> None:
    head = "% time     seconds  usecs/call     calls    errors syscall\n------ ---\n"
    assert work_count.strace_calls(head + "100.00    0.123456          12     10203       601 total\n") \
        == 10203
    assert work_count.strace_calls(head + "100.00    0.123456          12     10203           total\n") \
        == 10203


def test_a_count_is_exact_and_a_round_trip_costs_system_calls() -> None:
    for tool in ("valgrind", "strace"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: apt-get install {tool} (.ci/run does)")
    # the same binary, input and environment: the same instructions, whatever the load
    once = work_count._instructions(sys.executable, None, "raw-push16", 300)
    again = work_count._instructions(sys.executable, None, "raw-push16", 300)
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
    short = work_count._instructions(sys.executable, None, "raw-rep16", 300)
    long = work_count._instructions(sys.executable, None, "raw-rep16", 900)
    per = (long - short) / 600
    assert 10_000 < per < 55_000, per
