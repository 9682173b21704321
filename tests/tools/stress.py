"""Run the test suite again and again, quiet and beside a CPU hog, and list every test that failed.

A test that fails only now and then is a bug in the test or in gsp; this finds them before a
contributor's run does. Each run is a whole ``python -m pytest`` (the suite's own options: two
xdist workers) writing a JUnit XML report; a hogged run first starts a busy loop pinned to CPU 0
(Debian's ``stress-ng --cpu 1 --taskset 0`` where installed, else a Python loop pinned with
``sched_setaffinity``), so one of a 2-core machine's cores is taken for the whole run.

    python tests/tools/stress.py --quiet 3 --hog 2                # the whole suite, 5 runs
    python tests/tools/stress.py --quiet 0 --hog 3 -- tests/core  # one folder, 3 hogged runs

It prints one line per run (its outcome counts and time), then a table of every test that failed
in any run (how often, quiet and hogged, and the first line of its failure), and writes the
table, each failure's full text and the slowest tests (median seconds) as JSON to ``--out``. It exits 1 if any test failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


BUSY = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def start_hog() -> subprocess.Popen[bytes]:
    """A process that keeps CPU 0 busy until it is killed."""
    stress_ng = shutil.which("stress-ng")
    if stress_ng:
        cmd = [stress_ng, "--cpu", "1", "--taskset", "0", "--timeout", "0", "--quiet"]
    else:
        cmd = [sys.executable, "-c", BUSY]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop_hog(hog: subprocess.Popen[bytes]) -> None:
    os.killpg(hog.pid, signal.SIGKILL)  # its own session: stress-ng's workers too
    hog.wait(timeout=30)


def run_once(pytest_args: list[str], report: Path, timeout: float) -> tuple[dict[str, int], float]:
    """One whole run; its outcome counts and how long it took."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           f"--junitxml={report}", *pytest_args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    took = time.monotonic() - t0
    tail = proc.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
    counts = {"rc": proc.returncode}
    for part in tail[0].strip("= ").split(" in ")[0].split(", "):
        n, _, what = part.partition(" ")
        if n.isdigit():
            counts[what] = int(n)
    return counts, took


def durations(report: Path) -> dict[str, float]:
    """Each test case's seconds in a JUnit XML report."""
    if not report.exists():
        return {}
    return {f"{c.get('classname', '')}::{c.get('name', '')}": float(c.get("time") or 0)
            for c in ET.parse(report).getroot().iter("testcase")}


def failures(report: Path) -> dict[str, str]:
    """Each failed or errored test case of a JUnit XML report, with its failure text."""
    out: dict[str, str] = {}
    if not report.exists():
        return out
    for case in ET.parse(report).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            el = case.find(kind)
            if el is not None:
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                out[name] = ((el.get("message") or "") + "\n" + (el.text or "")).strip()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quiet", type=int, default=3, help="runs on a quiet machine")
    ap.add_argument("--hog", type=int, default=2, help="runs beside a CPU hog on CPU 0")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds a run may take")
    ap.add_argument("--out", type=Path, default=Path("stress-report.json"))
    ap.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: all)")
    args = ap.parse_args(argv)
    seen: dict[str, dict[str, Any]] = defaultdict(lambda: {"quiet": 0, "hog": 0, "texts": []})
    runs = []
    took_by_test: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="gsp-stress-") as tmp:
        for i, kind in enumerate(["quiet"] * args.quiet + ["hog"] * args.hog):
            report = Path(tmp) / f"run{i}.xml"
            hog = start_hog() if kind == "hog" else None
            try:
                counts, took = run_once(args.pytest_args, report, args.timeout)
            finally:
                if hog is not None:
                    stop_hog(hog)
            failed = failures(report)
            for name, s in durations(report).items():
                took_by_test[name].append(s)
            runs.append({"run": i + 1, "kind": kind, "seconds": round(took), **counts})
            print(f"run {i + 1} ({kind}): {counts} in {took:.0f} s", flush=True)
            for name, text in failed.items():
                seen[name][kind] += 1
                seen[name]["texts"].append(text)
    if seen:
        width = max(len(n) for n in seen)
        print(f"\n{'test':<{width}}  quiet  hog  first line of the failure")
        for name, s in sorted(seen.items()):
            first = s["texts"][0].splitlines()[0][:100] if s["texts"] else ""
            print(f"{name:<{width}}  {s['quiet']:>5}  {s['hog']:>3}  {first}")
    else:
        print("\nno test failed in any run")
    slowest = sorted(((statistics.median(v), k) for k, v in took_by_test.items()), reverse=True)
    args.out.write_text(json.dumps({"runs": runs, "failed": seen,
                                    "slowest": [(k, round(s, 1)) for s, k in slowest[:60]]},
                                   indent=1))
    return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(main())
