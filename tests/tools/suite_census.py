"""What the test suite leans on that it should not: sleeps, unscaled time bounds, internals.

    python tests/tools/suite_census.py [--list sleeps|clocks|private|sockets] [--json]

Counted over every test file (``test_*.py``) of tests/, plugins/*/tests and
examples/plugins/*/tests, from their syntax trees:

- **sleeps**: calls of ``sleep`` (``gevent.sleep``, ``time.sleep``, ...) with a constant of 0.1 s
  or more;
- **clocks**: assertions that compare with a constant under 1 s and read a clock or a duration
  (a name such as ``elapsed``, ``took``, ``dt``, ``seconds``, or a ``monotonic()``/``time()``/
  ``perf_counter()`` call) without scaling it (:func:`tests.support.scaled`);
- **private**: reads of a private attribute (``x._name``) and imports of a private module
  (``gsp._core``), per file, with the white-box files (tests/support/whitebox.py) apart;
- **sockets**: the ways tests make sockets: the ``mk`` and ``gsp_socket`` fixtures, the
  ``sockets()`` and ``pair_up()`` helpers, ``gsp.socket(...)`` calls.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.whitebox import WHITE_BOX  # noqa: E402

CLOCK_NAMES = ("elapsed", "took", "dt", "seconds", "duration", "waited", "spent", "delay",
               "latency", "age", "used")
CLOCK_CALLS = ("monotonic", "time", "perf_counter")


def test_files() -> list[Path]:
    dirs = [ROOT / "tests", *ROOT.glob("plugins/*/tests"), *ROOT.glob("examples/plugins/*/tests")]
    return sorted(p for d in dirs for p in d.rglob("test_*.py"))


def _const(n: ast.AST) -> float | None:
    if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) \
            and not isinstance(n.value, bool):
        return float(n.value)
    return None


def _reads_clock(n: ast.AST) -> bool:
    for x in ast.walk(n):
        if isinstance(x, ast.Name) and any(c in x.id.lower() for c in CLOCK_NAMES):
            return True
        if isinstance(x, ast.Call):
            f = x.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
                else ""
            if name in CLOCK_CALLS:
                return True
            if name == "scaled":
                return False
    return False


def _scaled(n: ast.AST) -> bool:
    return any(isinstance(x, ast.Call) and (getattr(x.func, "id", None) == "scaled"
                                            or getattr(x.func, "attr", None) == "scaled")
               for x in ast.walk(n))


def _call(n: ast.Call, out: dict[str, Any]) -> None:
    f = n.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name == "sleep" and n.args and (_const(n.args[0]) or 0) >= 0.1:
        out["sleeps"].append(n.lineno)
    if name in ("mk", "gsp_socket", "sockets", "pair_up") and isinstance(f, ast.Name):
        out["sockets"][name] += 1
    if name == "socket" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
            and f.value.id == "gsp":
        out["sockets"]["gsp.socket"] += 1


def _clock_bound(n: ast.Assert) -> bool:
    """An upper bound under 1 s on a time, not scaled."""
    if not isinstance(n.test, ast.Compare) or _scaled(n.test):
        return False
    sides = [n.test.left, *n.test.comparators]
    for left, op, right in zip(sides, n.test.ops, sides[1:]):
        if isinstance(op, (ast.Lt, ast.LtE)):
            clock, bound = left, _const(right)
        elif isinstance(op, (ast.Gt, ast.GtE)):
            clock, bound = right, _const(left)
        else:
            continue
        if bound is not None and 0 < bound < 1 and _reads_clock(clock):
            return True
    return False


def _private_module(name: str | None) -> bool:
    parts = (name or "").split(".")
    return parts[0].startswith("gsp") and any(p.startswith("_") for p in parts[1:])


def census(path: Path) -> dict[str, Any]:
    tree = ast.parse(path.read_text())
    out: dict[str, Any] = {"sleeps": [], "clocks": [], "private": [], "sockets": Counter()}
    # The file's own private names (a test's transport calling its own helpers): not gsp's.
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
         and isinstance(n.value, ast.Name) and n.value.id == "self"}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            _call(n, out)
        elif isinstance(n, ast.Assert) and _clock_bound(n):
            out["clocks"].append(n.lineno)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) \
                and n.attr.startswith("_") and not n.attr.startswith("__") \
                and not (n.attr in own and isinstance(n.value, ast.Name) and n.value.id == "self"):
            out["private"].append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and _private_module(n.module) \
                or isinstance(n, ast.Import) and any(_private_module(a.name) for a in n.names):
            out["private"].append(n.lineno)
    return out


def totals() -> dict[str, Any]:
    files = {str(p.relative_to(ROOT)): census(p) for p in test_files()}
    sockets: Counter[str] = Counter()
    for c in files.values():
        sockets.update(c["sockets"])
    private = {f: len(c["private"]) for f, c in files.items() if c["private"]}
    return {
        "sleeps": sum(len(c["sleeps"]) for c in files.values()),
        "clocks": sum(len(c["clocks"]) for c in files.values()),
        "private": sum(private.values()),
        "private_outside_white_box": sum(n for f, n in private.items() if f not in WHITE_BOX),
        "sockets": dict(sockets),
        "files": files,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", choices=["sleeps", "clocks", "private", "sockets"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t = totals()
    if a.json:
        print(json.dumps({k: v for k, v in t.items() if k != "files"}))
        return
    for k in ("sleeps", "clocks", "private", "private_outside_white_box", "sockets"):
        print(f"{k}: {t[k]}")
    if a.list:
        for f, c in t["files"].items():
            got = c[a.list]
            if got:
                where = dict(got) if a.list == "sockets" else got
                mark = " (white box)" if f in WHITE_BOX else ""
                print(f"  {f}{mark}: {where}")


if __name__ == "__main__":
    main()
