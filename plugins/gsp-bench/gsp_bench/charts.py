"""The charts of a run (``gsp bench charts``), and the size sweep of ``--plot`` (:func:`plot`).

``gsp bench charts --out DIR`` runs the workloads :func:`plan` lists and writes into ``DIR``:

* ``throughput.svg``: push/pull over tcp, messages and megabytes a second against the message
  size, gsp beside a raw gevent socket, pyzmq, C nng and Go mangos;
* ``round-trip.svg``: the req/rep round trip over tcp (16 B), its distribution for each library
  (box p25 to p75, the line at p50, whiskers p10 to p99, a diamond at p90);
* ``transports-throughput.svg``: push/pull over tcp, ipc, ws and wss at each size, gsp beside
  pynng (nng 1.x) and nng 2.0;
* ``transports-round-trip.svg``: the round trip over each of them (bar p50, whisker to p99);
* ``bench.json``: the run (as ``--json`` prints it, plus which results each chart draws), from
  which ``--from-json`` draws the charts again without running anything.

A library keeps its colour in every chart. The SVG keeps its text as text (no embedded fonts)
and carries no date and no random ids, so the same run draws the same file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .cases import Case, KiB, MiB, cases_of, lat_case, show_size, thr_case
from .report import when

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CHARTS", "RUN_FILE", "files", "plan", "plot", "write"]

#: Each chart's file name (without its extension), in the order they are written.
CHARTS = ("throughput", "round-trip", "transports-throughput", "transports-round-trip")
#: The run's JSON document, beside the charts.
RUN_FILE = "bench.json"

THROUGHPUT_LIBS = ("gsp", "raw-gevent", "pyzmq", "nng", "mangos")
ROUND_TRIP_LIBS = ("gsp", "gsp-spin", "raw-gevent", "pyzmq", "nng", "mangos")
TRANSPORT_LIBS = ("gsp", "pynng", "nng2")
TRANSPORTS = ("tcp", "ipc", "ws", "wss")
SIZES = (16, 256, 4 * KiB, 64 * KiB, MiB)
TRANSPORT_SIZES = (16, KiB, 64 * KiB, MiB)

#: Each library's name on a chart and its colour, the same in every chart.
STYLE = {
    "gsp": ("gsp", "#1f77b4"),
    "gsp-spin": ("gsp, recv_spin", "#7fb8e0"),
    "raw-gevent": ("raw gevent", "#7f7f7f"),
    "pyzmq": ("pyzmq", "#d62728"),
    "zmq.green": ("zmq.green", "#bcbd22"),
    "pynng": ("pynng (nng 1.x)", "#ff7f0e"),
    "nng2": ("nng 2.0", "#8c564b"),
    "nng": ("C nng", "#2ca02c"),
    "mangos": ("Go mangos", "#9467bd"),
}


def name(lib: str) -> str:
    return STYLE.get(lib, (lib, ""))[0]


def colour(lib: str) -> str:
    return STYLE.get(lib, ("", "#000000"))[1]


def files(fmt: str = "svg") -> list[str]:
    """The names :func:`write` writes (and the command's run document)."""
    return [f"{chart}.{fmt}" for chart in CHARTS] + [RUN_FILE]


def plan(sizes: list[int] | None = None, transports: list[str] | None = None,
         transport_sizes: list[int] | None = None, count: int = 100_000,
         sweep_bytes: int = 256 * MiB, lat_count: int = 10_000
         ) -> tuple[list[tuple[Case, list[str]]], dict[str, dict[str, list[str]]]]:
    """What ``gsp bench charts`` runs: each case with its libraries (a case two charts share
    runs once, with the libraries of both), and each chart's cases and libraries (saved in the
    run's JSON as ``charts``). A throughput run sends ``sweep_bytes`` of messages, at least 200
    and at most ``count`` of them."""
    def thr(transport: str, size: int) -> Case:
        return thr_case(transport, size, max(200, min(count, sweep_bytes // size)))

    over = list(transports or TRANSPORTS)
    chart_cases = {
        "throughput": [thr("tcp", s) for s in sizes or SIZES],
        "round-trip": [lat_case("tcp", 16, lat_count)],
        "transports-throughput": [thr(t, s) for t in over for s in transport_sizes or TRANSPORT_SIZES],
        "transports-round-trip": [lat_case(t, 16, lat_count) for t in over],
    }
    chart_libs = {"throughput": THROUGHPUT_LIBS, "round-trip": ROUND_TRIP_LIBS,
                  "transports-throughput": TRANSPORT_LIBS, "transports-round-trip": TRANSPORT_LIBS}
    runs: dict[str, tuple[Case, list[str]]] = {}
    for chart, cases in chart_cases.items():
        for case in cases:
            _, libs = runs.setdefault(case.label, (case, []))
            libs.extend(x for x in chart_libs[chart] if x not in libs)
    layout = {chart: {"cases": [c.label for c in cases], "libs": list(chart_libs[chart])}
              for chart, cases in chart_cases.items()}
    return list(runs.values()), layout


@contextmanager
def style() -> Iterator[None]:
    """matplotlib as the charts are drawn: text as text, ids from a fixed salt (the same run
    draws the same SVG), no top and right frame."""
    import matplotlib
    matplotlib.use("Agg")
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gsp-bench",
                                "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False, "axes.titlesize": 10,
                                "legend.fontsize": 8, "legend.frameon": False}):
        yield


def save(fig: Figure, path: str) -> None:
    """Write ``fig`` as its extension says (svg, png, …) with no date or version in it."""
    import matplotlib.pyplot as plt
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    metadata: dict[str, dict[str, Any]] = {"svg": {"Date": None, "Creator": "gsp bench"},
                                           "png": {"Software": "gsp bench"}}
    meta = metadata.get(fmt, {})
    fig.savefig(path, format=fmt, metadata=meta)
    plt.close(fig)


def caption(info: dict[str, Any]) -> str:
    """The machine, the run's date and load, and how each figure was taken."""
    gsp = f"gsp {info.get('gsp')}" + (f" ({info['build']})" if info.get("build") else "")
    repeat = info.get("repeat")
    return (f"{info.get('nproc')} × {info.get('cpu')}, Linux {info.get('kernel')}, "
            f"Python {info.get('python')}, {gsp}"
            + (f"; {when(info)}" if when(info) else "")
            + (f"; each figure the median of {repeat} runs" if repeat and repeat > 1 else ""))


def figures_by(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each (case, library)'s figures, for the results that have them."""
    return {(r["case"], r["lib"]): r["figures"] for r in results if r.get("figures")}


def sweep(ax: Axes, sizes: dict[str, int], libs: list[str],
          by: dict[tuple[str, str], dict[str, Any]], metric: str, ylabel: str) -> None:
    """One line per library of ``metric`` against the size (log-log); ``sizes``: case label
    to message size."""
    for lib in libs:
        pts = sorted((size, by[label, lib][metric]) for label, size in sizes.items()
                     if (label, lib) in by and by[label, lib].get(metric))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name(lib),
                    color=colour(lib), linewidth=2.2 if lib == "gsp" else 1.4)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    shown = sorted(set(sizes.values()))
    ax.set_xticks(shown, [show_size(x) for x in shown])
    ax.minorticks_off()
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def _throughput(cases: list[Case], libs: list[str], by: dict[tuple[str, str], dict[str, Any]],
                info: dict[str, Any]) -> Figure:
    import matplotlib.pyplot as plt
    sizes = {c.label: c.params["size"] for c in cases}
    transport = cases[0].params["transport"] if cases else "tcp"
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.4))
    sweep(left, sizes, libs, by, "msg_s", "messages a second (receiver)")
    sweep(right, sizes, libs, by, "mb_s", "MB a second (receiver)")
    left.set_title("messages a second")
    right.set_title("megabytes a second")
    return _finish(fig, f"push/pull over {transport}, one process a side: throughput by "
                        "message size (higher is better)", info, left)


def _round_trip(cases: list[Case], libs: list[str], by: dict[tuple[str, str], dict[str, Any]],
                info: dict[str, Any]) -> Figure:
    import matplotlib.pyplot as plt
    case = cases[0]
    shown = [lib for lib in libs if (case.label, lib) in by]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(shown) + 1.8))
    stats = []
    for lib in shown:
        f = by[case.label, lib]
        p50 = f["p50_us"]
        stats.append({"label": name(lib), "med": p50, "q1": f.get("p25_us", p50),
                      "q3": f.get("p75_us", p50), "whislo": f.get("p10_us", p50),
                      "whishi": f["p99_us"], "fliers": []})
    pos = list(range(len(shown), 0, -1))  # the first library at the top
    art = ax.bxp(stats, positions=pos, orientation="horizontal", patch_artist=True,
                 widths=0.55, medianprops={"color": "black", "linewidth": 1.6})
    for box, lib in zip(art["boxes"], shown):
        box.set_facecolor(colour(lib))
        box.set_alpha(0.85)
    right = max(s["whishi"] for s in stats) if stats else 1.0
    for y, lib in zip(pos, shown):
        f = by[case.label, lib]
        if "p90_us" in f:
            ax.plot([f["p90_us"]], [y], marker="D", color="black", markersize=4)
        ax.annotate(f"p50 {f['p50_us']:.0f} · p90 {f.get('p90_us', float('nan')):.0f} · "
                    f"p99 {f['p99_us']:.0f} µs", (right * 1.15, y), va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(right=right * 6)
    ax.set_xlabel("round trip (µs, log scale)")
    ax.grid(True, axis="x", which="major", alpha=0.3)
    transport, size = case.params["transport"], show_size(case.params["size"])
    return _finish(fig, f"req/rep round trip over {transport}, {size}: box p25–p75, line p50, "
                        "◆ p90, whiskers p10–p99 (lower is better)", info)


def _bars(ax: Axes, groups: list[str], libs: list[str], value: Any) -> None:
    """Bars by group (x) and library; ``value(group, lib)`` gives (height, whisker top) or
    None (not measured: an n/a under the group)."""
    width = 0.8 / max(len(libs), 1)
    for i, lib in enumerate(libs):
        xs, hs, tops = [], [], []
        for g, group in enumerate(groups):
            v = value(group, lib)
            x = g - 0.4 + width * (i + 0.5)
            if v is None:
                ax.annotate("n/a", (x, 0), xycoords=("data", "axes fraction"), ha="center",
                            va="bottom", fontsize=7, color=colour(lib))
                continue
            xs.append(x)
            hs.append(v[0])
            tops.append(v[1] - v[0] if v[1] is not None else 0.0)
        ax.bar(xs, hs, width, label=name(lib), color=colour(lib))
        if any(tops):
            ax.errorbar(xs, hs, yerr=[[0.0] * len(tops), tops], fmt="none", ecolor="black",
                        elinewidth=0.8, capsize=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_yscale("log")
    ax.grid(True, axis="y", which="major", alpha=0.3)


def _index(cases: list[Case]) -> dict[tuple[str, int], str]:
    """(transport, size) → case label."""
    return {(c.params["transport"], c.params["size"]): c.label for c in cases}


def _transports_throughput(cases: list[Case], libs: list[str],
                           by: dict[tuple[str, str], dict[str, Any]],
                           info: dict[str, Any]) -> Figure:
    import matplotlib.pyplot as plt
    index = _index(cases)
    transports = list(dict.fromkeys(t for t, _ in index))
    sizes = sorted({s for _, s in index})
    cols = 2 if len(sizes) > 1 else 1
    rows = -(-len(sizes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(10, 3.4 * rows + 0.8), squeeze=False)
    for ax, size in zip(axes.flat, sizes):
        def msg_s(t: str, lib: str, size: int = size) -> tuple[float, None] | None:
            f = by.get((index.get((t, size), ""), lib))
            return (f["msg_s"], None) if f else None
        _bars(ax, transports, libs, msg_s)
        ax.set_title(f"{show_size(size)} messages")
        ax.set_ylabel("messages a second")
    for ax in list(axes.flat)[len(sizes):]:
        ax.set_visible(False)
    return _finish(fig, "push/pull over each transport, each library to itself: "
                        "messages a second (higher is better)", info, axes.flat[0])


def _transports_round_trip(cases: list[Case], libs: list[str],
                           by: dict[tuple[str, str], dict[str, Any]],
                           info: dict[str, Any]) -> Figure:
    import matplotlib.pyplot as plt
    index = _index(cases)
    transports = [t for t, _ in index]
    fig, ax = plt.subplots(figsize=(10, 4.2))

    def rt(t: str, lib: str) -> tuple[float, float] | None:
        f = by.get((index[t, cases[0].params["size"]], lib))
        return (f["p50_us"], f["p99_us"]) if f else None
    _bars(ax, transports, libs, rt)
    ax.set_ylabel("round trip (µs): bar p50, whisker to p99")
    size = show_size(cases[0].params["size"])
    return _finish(fig, f"req/rep round trip over each transport, {size}, each library to "
                        "itself (lower is better)", info, ax)


DRAW = {"throughput": _throughput, "round-trip": _round_trip,
        "transports-throughput": _transports_throughput,
        "transports-round-trip": _transports_round_trip}


def _finish(fig: Figure, title: str, info: dict[str, Any], legend: Axes | None = None) -> Figure:
    """The title on top, the libraries of ``legend``'s lines or bars in one row under it, the
    caption (:func:`caption`) at the foot."""
    height = fig.get_figheight()
    top = 1 - 0.3 / height  # inches kept for the title
    fig.suptitle(title, fontsize=11, y=1 - 0.08 / height, va="top")
    if legend is not None:
        handles, labels = legend.get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncols=len(labels),
                   bbox_to_anchor=(0.5, top))
        top -= 0.12 / height
    fig.text(0.01, 0.08 / height, caption(info), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.22 / height, 1, top))
    return fig


def write(out: str, layout: dict[str, dict[str, list[str]]], results: list[dict[str, Any]],
          info: dict[str, Any], fmt: str = "svg") -> list[str]:
    """Draw each chart of ``layout`` (:func:`plan`'s, or a saved run's ``charts``) from
    ``results`` into ``out``: the paths written."""
    by_label = {c.label: c for c in cases_of(results)}
    by = figures_by(results)
    written = []
    with style():
        for chart in CHARTS:
            if chart not in layout:
                continue
            cases = [by_label[x] for x in layout[chart]["cases"] if x in by_label]
            if not cases:
                continue
            path = os.path.join(out, f"{chart}.{fmt}")
            save(DRAW[chart](cases, layout[chart]["libs"], by, info), path)
            written.append(path)
    return written


def plot(path: str, cases: list[Case], libs: list[str], results: list[dict[str, Any]],
         info: dict[str, Any]) -> None:
    """msg/s against message size, one panel per transport swept (tcp, ipc), one line per
    library (log-log), drawn as the charts are (PNG or SVG, as ``path`` ends)."""
    import matplotlib.pyplot as plt

    sizes_of: dict[str, dict[str, int]] = {}  # transport -> {case label: size}
    for c in cases:
        if c.workload == "thr":
            sizes_of.setdefault(c.params["transport"], {})[c.label] = c.params["size"]
    swept = [t for t, labels in sizes_of.items() if len(labels) > 1] or list(sizes_of)[:1]
    by = figures_by(results)
    with style():
        fig, axes = plt.subplots(1, len(swept), figsize=(8 * len(swept), 5), dpi=110,
                                 squeeze=False)
        for ax, transport in zip(axes[0], swept):
            sweep(ax, sizes_of[transport], libs, by, "msg_s", "messages per second (receiver)")
            ax.set_title(f"push/pull over {transport}")
            ax.legend()
        fig.suptitle(caption(info), fontsize=9)
        fig.tight_layout()
        save(fig, path)
