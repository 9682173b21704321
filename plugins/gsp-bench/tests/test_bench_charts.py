"""``gsp bench charts``: the charts drawn from a saved run (no benchmark runs here), and the
performance page showing the very files the command writes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gsp_bench import charts, cli
from gsp_bench.runner import PERCENTILES

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "performance.md"
IMAGES = ROOT / "docs" / "images" / "bench"
MACHINE = {"nproc": 2, "cpu": "Test CPU 9000", "kernel": "6.0", "python": "3.11.7",
           "gevent": "25.0", "gsp": "0.1.0", "build": "compiled", "compiled": ["gsp.chan"],
           "date": "2026-01-02 03:04 UTC", "load": [1.5, 2.5], "repeat": 3}


def figures(workload: str, n: float) -> dict[str, Any]:
    """Made-up figures of one workload, growing with ``n``."""
    if workload == "thr":
        return {"msg_s": 1000.0 * n, "mb_s": 0.5 * n, "count": 200}
    pct = {f"{k}_us": 10.0 * n * (1 + 3 * q) for k, q in PERCENTILES.items()}
    return {"mean_us": 12.0 * n, **pct, "count": 50, "cpu_us_rt": 9.0}


def saved_run(path: Path, skip: str | None = None) -> dict[str, Any]:
    """A saved run of two sizes and three transports; ``skip``: a library with no figures
    (n/a everywhere, as a library whose tool could not be built shows)."""
    plan, layout = charts.plan([16, 65536], ["tcp", "ws", "wss"], [16, 1024])
    results = []
    for n, (case, libs) in enumerate(plan, 1):
        for i, lib in enumerate(libs):
            rec: dict[str, Any] = {"case": case.label, "workload": case.workload,
                                   "params": case.params, "lib": lib,
                                   "figures": figures(case.workload, n + i)}
            if lib == skip:
                rec.update(figures=None, na=True)
            results.append(rec)
    libs = list(dict.fromkeys(lib for _, each in plan for lib in each))
    doc = {"machine": MACHINE, "argv": ["charts"], "libs": libs, "results": results,
           "charts": layout}
    path.write_text(json.dumps(doc))
    return doc


def texts(svg: Path) -> list[str]:
    """Every text of an SVG (matplotlib keeps text as text: svg.fonttype 'none')."""
    root = ET.parse(svg).getroot()
    return [" ".join("".join(t.itertext()).split()) for t in root.iter("{http://www.w3.org/2000/svg}text")]


def draw(saved: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["charts", "--from-json", str(saved), "--out", str(out)]) == 0
    return capsys.readouterr().out


def test_charts_of_a_saved_run_name_every_library_and_the_machine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "run.json"
    doc = saved_run(saved)
    out = tmp_path / "charts"
    shown = draw(saved, out, capsys)
    assert sorted(p.name for p in out.iterdir()) == sorted(charts.files())
    assert json.loads((out / charts.RUN_FILE).read_text()) == doc  # the run, beside its charts
    assert "push/pull tcp 64 KiB" in shown and "wrote " + str(out / "throughput.svg") in shown
    expect = {"throughput": charts.THROUGHPUT_LIBS, "round-trip": charts.ROUND_TRIP_LIBS,
              "transports-throughput": charts.TRANSPORT_LIBS,
              "transports-round-trip": charts.TRANSPORT_LIBS}
    for chart, libs in expect.items():
        words = texts(out / f"{chart}.svg")
        for lib in charts.STYLE:  # each library of the chart is named, and no other
            assert (charts.name(lib) in words) is (lib in libs), (chart, lib, words)
        caption = next(w for w in words if "Test CPU 9000" in w)
        assert "2026-01-02 03:04 UTC, load average 1.5 → 2.5" in caption
        assert "median of 3 runs" in caption and "gsp 0.1.0 (compiled)" in caption
    sizes = texts(out / "throughput.svg")
    assert "16 B" in sizes and "64 KiB" in sizes  # the sizes, named on the axis
    rt = " ".join(texts(out / "round-trip.svg"))
    # the round trip's percentiles, as figures beside each box
    gsp = next(r["figures"] for r in doc["results"] if r["workload"] == "lat" and
               r["lib"] == "gsp" and r["params"]["transport"] == "tcp")
    assert f"p50 {gsp['p50_us']:.0f} · p90 {gsp['p90_us']:.0f} · p99 {gsp['p99_us']:.0f} µs" in rt
    bars = texts(out / "transports-throughput.svg")
    assert {"tcp", "ws", "wss", "16 B messages", "1 KiB messages"} <= set(bars)


def test_a_library_without_figures_is_left_out_and_the_rest_drawn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "run.json"
    saved_run(saved, skip="mangos")
    out = tmp_path / "charts"
    draw(saved, out, capsys)
    for chart in ("throughput", "round-trip"):
        words = texts(out / f"{chart}.svg")
        assert "Go mangos" not in words and "C nng" in words, chart


def test_the_same_run_draws_the_same_svg(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "run.json"
    saved_run(saved)
    draw(saved, tmp_path / "a", capsys)
    draw(saved, tmp_path / "b", capsys)
    for name in charts.files():
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        assert a == b, name
        if name.endswith(".svg"):  # small: text as text, no font embedded, no date
            assert b"<dc:date>" not in a and b"@font-face" not in a and len(a) < 200_000


def test_a_run_that_is_not_a_charts_run_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "run.json"
    doc = saved_run(saved)
    del doc["charts"]
    saved.write_text(json.dumps(doc))
    assert cli.main(["charts", "--from-json", str(saved), "--out", str(tmp_path / "x")]) == 2
    assert "not a run of gsp bench charts" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_case_two_charts_share_runs_once_with_the_libraries_of_both() -> None:
    plan, layout = charts.plan([16, 1024], ["tcp", "ws"], [16])
    labels = [case.label for case, _ in plan]
    assert len(labels) == len(set(labels))
    libs = {case.label: each for case, each in plan}
    assert libs["push/pull tcp 16 B"] == [*charts.THROUGHPUT_LIBS, "pynng", "nng2"]
    assert libs["push/pull ws 16 B"] == list(charts.TRANSPORT_LIBS)
    assert libs["req/rep tcp 16 B round trip"] == [*charts.ROUND_TRIP_LIBS, "pynng", "nng2"]
    for chart in charts.CHARTS:  # every case a chart draws is run
        assert set(layout[chart]["cases"]) <= set(labels)


def test_the_performance_page_shows_every_chart_the_command_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The page embeds each chart, says the command that makes them, and its images are what
    that command draws from the run saved beside them."""
    page = PAGE.read_text()
    commands = [cli.parser().parse_args(c.split()[2:])
                for c in re.findall(r"`(gsp bench charts [^`]*)`", page)]
    # the command that writes the page's images, with no --from-json: it runs the workloads
    args = next((a for a in commands if Path(a.out) == Path("docs/images/bench") and
                 not a.from_json), None)
    assert args, "the page gives the command"
    assert sorted(p.name for p in IMAGES.iterdir()) == sorted(charts.files())
    for name in charts.files():
        assert f"images/bench/{name}" in page, name
    saved = json.loads((IMAGES / charts.RUN_FILE).read_text())
    assert saved["argv"][:1] == ["charts"] and saved["machine"].get("repeat") == args.repeat
    draw(IMAGES / charts.RUN_FILE, tmp_path, capsys)
    for chart in charts.CHARTS:
        assert texts(tmp_path / f"{chart}.svg") == texts(IMAGES / f"{chart}.svg"), chart
