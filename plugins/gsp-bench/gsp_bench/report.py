"""Showing results: the machine they came from, the table (each figure with its ratio to
gsp's), the JSON document (``--json``, read back by ``--from-json``); :mod:`.charts` draws them.

The JSON document is ``{"machine": {...}, "argv": [...], "libs": [...], "results": [...]}``;
each result is ``{"case", "workload", "params", "lib", "figures"}`` plus ``"na": true`` or
``"error"`` when the library could not run the case (then ``figures`` is null).
"""

from __future__ import annotations

import json
import os
import platform
import time
from typing import IO, Any

from gsp._mypyc import build, compiled

from .cases import Case


def machine() -> dict[str, Any]:
    """CPU, kernel and the versions of everything measured."""
    import gevent
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")
    except OSError:
        pass
    info: dict[str, Any] = {"nproc": os.cpu_count(), "cpu": model or platform.processor(),
                            "kernel": platform.release(), "python": platform.python_version(),
                            "gevent": gevent.__version__}
    info["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    info["load"] = [load_average()]  # and at the end of the run (:func:`run_ended`)
    info["compiled"] = compiled()
    info["build"] = build(info["compiled"])
    for key, mod in (("gsp", "gsp"), ("zmq", "zmq"), ("pynng", "pynng"), ("nng2", "nng")):
        try:  # nng2: the nng package (nng 2.0)
            info[key] = getattr(__import__(mod), "__version__", None)
        except ImportError:
            info[key] = None
    try:
        import zmq
        info["libzmq"] = zmq.zmq_version()
    except ImportError:
        pass
    return info


def load_average() -> float | None:
    """The machine's load average over the last minute (None where the system has none)."""
    try:
        return round(os.getloadavg()[0], 1)
    except OSError:
        return None


def run_ended(info: dict[str, Any]) -> None:
    """Add the load average at the end of the run to ``info`` (the one at its start is there)."""
    info["load"] = [*info.get("load", [])[:1], load_average()]


def when(info: dict[str, Any]) -> str:
    """When the run was and how loaded the machine was (``2026-12-07 20:40 UTC, load average
    17.2 → 16.9``); empty for a saved run that did not record them."""
    load = [x for x in info.get("load") or [] if x is not None]
    parts = [info["date"]] if info.get("date") else []
    if load:
        parts.append("load average " + " → ".join(f"{x:g}" for x in load))
    return ", ".join(parts)


#: The native libraries' languages (as :data:`gsp_bench.native.NATIVE`; the header says which ran).
NATIVE_LANG = {"nng": "C nng", "mangos": "Go mangos"}

def header(info: dict[str, Any]) -> str:
    """The lines above the table: where it ran, and how to read the ratios."""
    return (f"gsp bench: {info['nproc']} × {info['cpu']}, Linux {info['kernel']}, "
            f"Python {info['python']}, gevent {info['gevent']}, pyzmq {info.get('zmq')} "
            f"(libzmq {info.get('libzmq')}), pynng {info.get('pynng')}"
            + (f", nng (nng 2.0) {info['nng2']}" if info.get("nng2") else "") + "\n"
            + ("malloc: tuned (every library's workers called gsp.tune_allocator())\n"
               if info.get("malloc") == "tuned" else "")
            + (f"run: {when(info)}\n" if when(info) else "")
            + build_line(info) +
            "".join(f"{name}: {NATIVE_LANG.get(name, name)} {ver}\n"
                    for name, ver in info.get("native", {}).items()) +
            "".join(f"{name}: skipped ({why})\n" for name, why in info.get("skipped", {}).items()) +
            "ratio = library ÷ gsp (for msg/s, MB/s, req/s higher is better; "
            "for µs, s, KiB and CPU ns lower is better)\n")


def build_line(info: dict[str, Any]) -> str:
    """The header's line on gsp's build (a saved run from before it was recorded has none)."""
    if "compiled" not in info:
        return ""
    if not info["compiled"]:
        return "gsp build: pure Python (no module compiled)\n"
    return f"gsp build: {build(info['compiled'])} with mypyc: {', '.join(info['compiled'])}\n"


def fmt(v: Any) -> str:
    """A figure in at most four significant characters (``1.38M``, ``304.1k``, ``23.1``)."""
    if v is None:
        return "—"
    v = float(v)
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table(cases: list[Case], libs: list[str], results: list[dict[str, Any]]) -> str:
    """One row per case and metric, one column per library; ``n/a``, ``error`` or the figure
    with its ratio to gsp's."""
    by = {(r["case"], r["lib"]): r for r in results}
    head = ["workload", "metric", *libs]
    rows = [head]
    for case in cases:
        figures = [r["figures"] for lib in libs if (r := by.get((case.label, lib))) and
                   r.get("figures")]
        for key, unit in case.rows:
            if figures and not any(key in f for f in figures):
                continue  # a figure this (older, saved) run did not measure
            gsp_rec = by.get((case.label, "gsp"))
            base = gsp_rec["figures"].get(key) if gsp_rec and gsp_rec["figures"] else None
            row = [case.label, unit]
            for lib in libs:
                r = by.get((case.label, lib))
                if r is None or r.get("na"):
                    row.append("n/a")
                elif r["figures"] is None:
                    row.append("error")
                else:
                    v = r["figures"].get(key)
                    cell = fmt(v)
                    if lib != "gsp" and base and abs(base) >= 0.005 and v is not None:
                        # (a ratio to a figure shown as 0.00, e.g. no page faults, says nothing)
                        cell += f" ({v / base:.2f}×)"
                    row.append(cell)
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def dump(out: IO[str], info: dict[str, Any], argv: list[str], libs: list[str],
         results: list[dict[str, Any]], **more: Any) -> None:
    """The ``--json`` document (``more``: other keys, as ``charts``' layout)."""
    json.dump({"machine": info, "argv": argv, "libs": libs, "results": results, **more}, out,
              indent=1)
    out.write("\n")


def load(path: str) -> tuple[dict[str, Any], list[str], list[dict[str, Any]]]:
    """Machine, libraries and results of a saved ``--json`` document."""
    doc = load_doc(path)
    return doc["machine"], doc["libs"], doc["results"]


def load_doc(path: str) -> dict[str, Any]:
    """A saved ``--json`` document, whole."""
    with open(path) as f:
        doc: dict[str, Any] = json.load(f)
    return doc

