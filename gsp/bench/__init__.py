"""``python -m gsp.bench`` / ``gsp bench``: gsp's performance, side by side with other libraries.

Workloads (senders and receivers are separate processes for tcp and ipc):

* ``thr``     push/pull throughput: the receiver times first..last message (nng local_thr/remote_thr)
* ``lat``     req/rep round trips: mean, p50, p99 µs (nng local_lat/remote_lat)
* ``pubsub``  1 PUB → N SUB, messages delivered per second over all subscribers
* ``reqrep``  one REP serving C concurrent REQ clients, requests per second
* ``conns``   N dialers on one REP listener: time until all are served, RSS per pipe
* ``suite``   all of the above at the documented sizes (``--plot`` adds a message-size sweep)
* ``local_thr``/``remote_thr``/``local_lat``/``remote_lat`` URL SIZE COUNT: nng's perf tools,
  one side each, for runs across machines

``--compare`` runs each workload with pynng, pyzmq (native threads), zmq.green and a raw gevent
socket baseline as well, and prints each figure with its ratio to gsp's. ``--json`` prints the
results as JSON instead of the table; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any, Sequence

from ._run import BenchError, NotApplicable, measure
from .libs import LIBS

__all__ = ["main"]

KiB, MiB = 1024, 1024 * 1024
SWEEP_SIZES = [16, 64, 256, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB]


class Case:
    """One workload at fixed parameters, shown as one or more table rows (metric, unit)."""

    def __init__(self, label: str, workload: str, params: dict[str, Any],
                 rows: Sequence[tuple[str, str]]) -> None:
        self.label = label
        self.workload = workload
        self.params = params
        self.rows = list(rows)


def _size(text: str) -> int:
    t = text.strip().lower().removesuffix("b").removesuffix("i")  # 16, 4k, 4KiB, 1MB
    mult = {"k": KiB, "m": MiB}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def _sizes(text: str) -> list[int]:
    return [_size(x) for x in text.split(",") if x.strip()]


def _show_size(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


def machine() -> dict[str, Any]:
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
    for mod, attr in (("gsp", "__version__"), ("zmq", "__version__"), ("pynng", "__version__")):
        try:
            info[mod] = getattr(__import__(mod), attr)
        except ImportError:
            info[mod] = None
    try:
        import zmq
        info["libzmq"] = zmq.zmq_version()
    except ImportError:
        pass
    return info


# -- cases ----------------------------------------------------------------------------------------

def _thr_case(transport: str, size: int, count: int) -> Case:
    unit = ("mb_s", "MB/s") if size >= 64 * KiB else ("msg_s", "msg/s")
    return Case(f"push/pull {transport} {_show_size(size)}", "thr",
                {"transport": transport, "size": size, "count": count}, [unit])


def _lat_case(transport: str, size: int, count: int) -> Case:
    return Case(f"req/rep {transport} {_show_size(size)} round trip", "lat",
                {"transport": transport, "size": size, "count": count},
                [("mean_us", "µs mean"), ("p50_us", "µs p50"), ("p99_us", "µs p99")])


def _pub_case(transport: str, size: int, count: int, subs: int) -> Case:
    return Case(f"pub → {subs} sub {transport} {_show_size(size)}", "pubsub",
                {"transport": transport, "size": size, "count": count, "subs": subs},
                [("msg_s", "deliv. msg/s"), ("delivered_pct", "% delivered")])


def _reqrep_case(transport: str, size: int, count: int, clients: int) -> Case:
    return Case(f"req/rep {transport} {clients} clients", "reqrep",
                {"transport": transport, "size": size, "count": count, "clients": clients},
                [("req_s", "req/s")])


def _conns_case(transport: str, n: int) -> Case:
    return Case(f"{n} dialers → 1 rep {transport}", "conns", {"transport": transport, "conns": n},
                [("connect_s", "s all served"), ("rss_kib", "KiB RSS/pipe")])


def _sweep(a: argparse.Namespace, transport: str = "tcp") -> list[Case]:
    return [_thr_case(transport, s, max(200, min(a.count, a.sweep_bytes // max(s, 1))))
            for s in a.sizes or SWEEP_SIZES]


def _cases_of(results: list[dict[str, Any]]) -> list[Case]:
    """The cases of saved results, in their order (to show a table again without running)."""
    make = {"thr": _thr_case, "lat": _lat_case, "pubsub": _pub_case, "reqrep": _reqrep_case,
            "conns": lambda transport, conns: _conns_case(transport, conns)}
    out: dict[str, Case] = {}
    for r in results:
        if r["case"] not in out:
            out[r["case"]] = make[r["workload"]](**r["params"])
    return list(out.values())


def cases_for(a: argparse.Namespace) -> list[Case]:
    cmd = a.cmd
    if cmd == "thr":
        sizes = a.sizes or (SWEEP_SIZES if a.plot else [a.size])
        return [_thr_case(a.transport, s, a.count if len(sizes) == 1 else
                          max(200, min(a.count, a.sweep_bytes // max(s, 1)))) for s in sizes]
    if cmd == "lat":
        return [_lat_case(a.transport, a.size, a.count)]
    if cmd == "pubsub":
        return [_pub_case(a.transport, a.size, a.count, a.subs)]
    if cmd == "reqrep":
        return [_reqrep_case(a.transport, a.size, a.count, a.clients)]
    if cmd == "conns":
        return [_conns_case(a.transport, a.conns)]
    out = [
        _thr_case("tcp", 16, a.count),
        _thr_case("tcp", MiB, a.big_count),
        _thr_case("ipc", 16, a.count),
        _thr_case("inproc", 16, a.count),
        _lat_case("tcp", 16, a.lat_count),
        _lat_case("inproc", 16, a.lat_count),
        _pub_case("tcp", 16, a.pub_count, a.subs),
        _reqrep_case("tcp", 16, a.req_count, a.clients),
        _conns_case("tcp", a.conns),
    ]
    if a.plot:
        out += [c for c in _sweep(a) if c.params["size"] not in (16, MiB)]
    return out


# -- running and reporting ------------------------------------------------------------------------

class Progress:
    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.done = 0
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()

    def show(self, text: str, end: bool = False) -> None:
        if self.quiet:
            return
        line = f"[{self.done + (0 if end else 1)}/{self.total} {time.monotonic() - self.t0:5.0f}s] {text}"
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line + ("\n" if end else ""))
        elif end:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run_cases(cases: list[Case], libs: list[str], a: argparse.Namespace) -> list[dict[str, Any]]:
    prog = Progress(len(cases) * len(libs), a.quiet)
    results = []
    for case in cases:
        for lib in libs:
            prog.show(f"{case.label} · {lib} …")
            rec: dict[str, Any] = {"case": case.label, "workload": case.workload,
                                   "params": case.params, "lib": lib, "figures": None}
            try:
                rec["figures"] = measure(lib, case.workload, case.params, a.timeout, a.repeat)
                shown = ", ".join(f"{_fmt(rec['figures'][k])} {u}" for k, u in case.rows)
            except NotApplicable:
                rec["na"] = True
                shown = "n/a"
            except BenchError as exc:
                rec["error"] = str(exc)
                shown = "error: " + str(exc).splitlines()[0]
            prog.done += 1
            prog.show(f"{case.label} · {lib}: {shown}", end=True)
            results.append(rec)
    return results


def _fmt(v: Any) -> str:
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
    by = {(r["case"], r["lib"]): r for r in results}
    head = ["workload", "metric", *libs]
    rows = [head]
    for case in cases:
        for key, unit in case.rows:
            gsp_rec = by.get((case.label, "gsp"))
            base = gsp_rec["figures"][key] if gsp_rec and gsp_rec["figures"] else None
            row = [case.label, unit]
            for lib in libs:
                r = by.get((case.label, lib))
                if r is None or r.get("na"):
                    row.append("n/a")
                elif r["figures"] is None:
                    row.append("error")
                else:
                    v = r["figures"][key]
                    cell = _fmt(v)
                    if lib != "gsp" and base and v is not None:
                        cell += f" ({v / base:.2f}×)"
                    row.append(cell)
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(path: str, cases: list[Case], libs: list[str], results: list[dict[str, Any]],
         info: dict[str, Any]) -> None:
    """msg/s against message size over tcp, one line per library (log-log)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thr = [c for c in cases if c.workload == "thr" and c.params["transport"] == "tcp"]
    labels = {c.label: c.params["size"] for c in thr}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for lib in libs:
        pts = sorted((labels[r["case"]], r["figures"]["msg_s"]) for r in results
                     if r["lib"] == lib and r["case"] in labels and r["figures"])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted(set(labels.values()))
    ax.set_xticks(sizes, [_show_size(x) for x in sizes], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("messages per second (receiver)")
    ax.set_title(f"push/pull over tcp — {info.get('nproc')} × {info.get('cpu')}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- nng-style one-sided tools ------------------------------------------------------------------

def one_sided(a: argparse.Namespace) -> int:
    from .ctl import ConsoleCtl
    from .libs import make, raise_nofile
    raise_nofile()
    lib = make(a.lib)
    ctl = ConsoleCtl()
    role = {"local_thr": "thr_recv", "remote_thr": "thr_send", "local_lat": "lat_server",
            "remote_lat": "lat_client"}[a.cmd]
    extra = {"warmup": 0} if a.cmd == "remote_lat" else {}
    getattr(lib, role)(ctl, url=a.url, size=a.size, count=a.count, **extra)
    f = ctl.figures
    print(f"message size: {a.size} [B]\nmessage count: {a.count}")
    if a.cmd == "local_thr":
        rate = (f["count"] - 1) / f["elapsed"]
        print(f"throughput: {rate:.0f} [msg/s]\nthroughput: {rate * a.size / 1e6:.3f} [MB/s]")
    elif a.cmd == "remote_lat":
        s = sorted(f["samples"])
        print(f"round trip mean: {sum(s) / len(s) * 1e6:.2f} [us]\n"
              f"round trip p50: {s[len(s) // 2] * 1e6:.2f} [us]\n"
              f"round trip p99: {s[min(len(s) - 1, int(len(s) * 0.99))] * 1e6:.2f} [us]")
    return 0


# -- command line -----------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gsp bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--compare", action="store_true",
                        help="also run pynng, pyzmq, zmq.green and the raw gevent baseline")
    common.add_argument("--libs", type=lambda s: s.split(","),
                        help=f"comma-separated libraries to run (of {', '.join(LIBS)})")
    common.add_argument("--json", action="store_true", help="print JSON instead of the table")
    common.add_argument("--plot", metavar="FILE",
                        help="PNG of msg/s against message size (--sizes), one line per library")
    common.add_argument("--sizes", type=_sizes, default=None,
                        help=f"sizes for the sweep (default {','.join(map(str, SWEEP_SIZES))})")
    common.add_argument("--sweep-bytes", type=int, default=256 * MiB,
                        help="bytes per sweep point (count = this / size, at least 200)")
    common.add_argument("--repeat", type=int, default=1, help="runs per figure; the median is shown")
    common.add_argument("--timeout", type=float, default=300.0, help="seconds a single run may take")
    common.add_argument("--quiet", action="store_true", help="no progress on stderr")
    common.add_argument("--from-json", metavar="FILE",
                        help="run nothing: show the table (and --plot) of an earlier --json run")
    transport = argparse.ArgumentParser(add_help=False)
    transport.add_argument("--transport", choices=("tcp", "ipc", "inproc"), default="tcp")
    transport.add_argument("--size", type=_size, default=16, help="message size in bytes (16, 1k, 1m)")

    s = sub.add_parser("suite", parents=[common], help="every workload (--plot adds the sweep)")
    s.add_argument("--count", type=int, default=200_000, help="messages per 16 B throughput run")
    s.add_argument("--big-count", type=int, default=1000, help="messages per 1 MiB throughput run")
    s.add_argument("--lat-count", type=int, default=20_000, help="timed round trips")
    s.add_argument("--pub-count", type=int, default=20_000, help="messages published")
    s.add_argument("--subs", type=int, default=50, help="subscribers")
    s.add_argument("--req-count", type=int, default=50_000, help="requests over all clients")
    s.add_argument("--clients", type=int, default=16, help="concurrent req clients")
    s.add_argument("--conns", type=int, default=10_000, help="dialers on one rep")
    for name, hlp, defaults in (
            ("thr", "push/pull throughput", {"count": 200_000}),
            ("lat", "req/rep round-trip latency", {"count": 20_000}),
            ("pubsub", "1 pub → N sub fan-out", {"count": 20_000, "subs": 50}),
            ("reqrep", "req/rep with concurrent clients", {"count": 50_000, "clients": 16}),
            ("conns", "many dialers on one rep", {"conns": 10_000})):
        p = sub.add_parser(name, parents=[common, transport], help=hlp)
        if "count" in defaults:
            p.add_argument("--count", type=int, default=defaults["count"])
        if "subs" in defaults:
            p.add_argument("--subs", type=int, default=defaults["subs"])
        if "clients" in defaults:
            p.add_argument("--clients", type=int, default=defaults["clients"])
        if "conns" in defaults:
            p.add_argument("--conns", type=int, default=defaults["conns"])
    for name, hlp in (("local_thr", "receive and time COUNT messages (binds URL)"),
                      ("remote_thr", "send COUNT messages (dials URL)"),
                      ("local_lat", "echo COUNT requests (binds URL)"),
                      ("remote_lat", "time COUNT round trips (dials URL)")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("url")
        p.add_argument("size", type=_size)
        p.add_argument("count", type=int)
        p.add_argument("--lib", choices=LIBS, default="gsp")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd in ("local_thr", "remote_thr", "local_lat", "remote_lat"):
        return one_sided(a)
    libs = a.libs or (list(LIBS) if a.compare else ["gsp"])
    unknown = [x for x in libs if x not in LIBS]
    if unknown:
        print(f"gsp bench: unknown library {unknown[0]!r}; choose from {', '.join(LIBS)}",
              file=sys.stderr)
        return 2
    if "gsp" not in libs:
        libs.insert(0, "gsp")  # every ratio is to gsp
    if a.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("gsp bench: --plot needs matplotlib (pip install 'gsp[bench]')", file=sys.stderr)
            return 2
    if a.from_json:
        with open(a.from_json) as f:
            doc = json.load(f)
        info, libs, results = doc["machine"], doc["libs"], doc["results"]
        cases = _cases_of(results)
    else:
        cases = cases_for(a)
        info = machine()
        results = run_cases(cases, libs, a)
    if a.plot:
        plot(a.plot, cases, libs, results, info)
    if a.json:
        json.dump({"machine": info, "argv": argv if argv is not None else sys.argv[1:],
                   "libs": libs, "results": results}, sys.stdout, indent=1)
        print()
        if not a.quiet:  # the table too, beside the progress: one run gives both
            print("\n" + table(cases, libs, results), file=sys.stderr)
    else:
        print(f"gsp bench: {info['nproc']} × {info['cpu']}, Linux {info['kernel']}, "
              f"Python {info['python']}, gevent {info['gevent']}, pyzmq {info.get('zmq')} "
              f"(libzmq {info.get('libzmq')}), pynng {info.get('pynng')}")
        print("ratio = library ÷ gsp (for msg/s, MB/s, req/s higher is better; "
              "for µs, s and KiB lower is better)\n")
        print(table(cases, libs, results))
    failed = [r for r in results if r.get("error")]
    return 1 if failed else 0
