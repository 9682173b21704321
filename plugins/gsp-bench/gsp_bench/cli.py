"""``python -m gsp_bench`` / ``gsp bench``: gsp's performance, side by side with other libraries.

Workloads (senders and receivers are separate processes for tcp and ipc):

* ``thr``     push/pull throughput: the receiver times first..last message (nng local_thr/remote_thr)
* ``lat``     req/rep round trips: mean, p50, p99 µs (nng local_lat/remote_lat)
* ``pubsub``  1 PUB → N SUB, messages delivered per second over all subscribers
* ``reqrep``  one REP serving C concurrent REQ clients, requests per second (``--procs N``: also
  the REP in N processes on one address, gsp.prefork)
* ``conns``   N dialers on one REP listener: time until all are served, RSS per pipe
* ``storm``   client processes opening connections to one listener as fast as they go and
  closing them at once (a FIN, a RST, or after sending garbage): the connections it disposes of
  per second, beside gevent's StreamServer accepting, reading once and closing (the
  ``raw-gevent`` library, run by default beside gsp here)
* ``suite``   all of the above at the documented sizes (``--plot`` adds the size sweep over tcp and ipc)
* ``transports``  push/pull at each of ``--sizes`` and req/rep round trips over each of
  ``--transport`` (default: all six, tcp, ipc, inproc, tls+tcp, ws, wss)
* ``charts``  the charts of the performance page (:mod:`.charts`): throughput by size against
  the anchors, the round trip's distribution, the transports side by side; SVG files and the
  run's JSON in ``--out DIR`` (``--from-json DIR/bench.json`` draws them again)
* ``local_thr``/``remote_thr``/``local_lat``/``remote_lat`` URL SIZE COUNT: nng's perf tools,
  one side each, for runs across machines
* ``spark``   the gsp PySpark data source's sink and source, rows per second beside Spark's own
  ceiling on a local Spark (:mod:`.spark`; ``gsp bench spark --help``; needs gevent-sp-spark)

``--transport`` takes a comma-separated list (``--transport ws,wss``): each transport is a case
of its own; a library that does not speak one shows n/a there (pyzmq and zmq.green speak tcp,
ipc and inproc; the raw baseline tcp and ipc; C nng all but inproc; mangos tcp, ipc and ws).
tls+tcp and wss run with a throwaway CA and certificate (``trustme``).

``--compare`` runs each workload with pynng (nng 1.x), nng2 (nng 2.0, the ``nng`` package),
pyzmq (native threads), zmq.green, a raw gevent socket baseline, C nng and Go mangos as well,
and prints each figure with its ratio to gsp's.
``--json`` prints the results as JSON instead of the table; progress goes to stderr.
The native two run small tools built on first use (:mod:`.native`); where one cannot be built
(no compiler, no ``libnng-dev``, no Go or mangos module) it is skipped and the bench says why.

This module is the command line only: what to run is :mod:`.cases`, running it
:mod:`.runner` (worker processes: :mod:`.worker`, :mod:`.libs`), showing it :mod:`.report`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import charts, report
from .cases import (
    SWEEP_SIZES,
    THR_BYTES,
    THR_COUNT,
    TRANSPORTS,
    MiB,
    cases_for,
    cases_of,
    parse_size,
    parse_sizes,
    parse_transports,
)
from .libs import LIBS
from .native import NATIVE, Unavailable, available
from .runner import run_cases, run_plan

__all__ = ["main", "parser"]

ONE_SIDED = {"local_thr": ("thr_recv", "receive and time COUNT messages (binds URL)"),
             "remote_thr": ("thr_send", "send COUNT messages (dials URL)"),
             "local_lat": ("lat_server", "echo COUNT requests (binds URL)"),
             "remote_lat": ("lat_client", "time COUNT round trips (dials URL)")}


def parser() -> argparse.ArgumentParser:
    assert __doc__
    ap = argparse.ArgumentParser(prog="gsp bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--compare", action="store_true",
                        help="also run pynng, nng2, pyzmq, zmq.green, the raw gevent baseline, "
                             "C nng and Go mangos (those two where their tools can be built)")
    common.add_argument("--libs", type=lambda s: s.split(","),
                        help=f"comma-separated libraries to run (of {', '.join(LIBS)})")
    common.add_argument("--json", action="store_true", help="print JSON instead of the table")
    common.add_argument("--plot", metavar="FILE",
                        help="PNG of msg/s against message size (--sizes), one line per library")
    common.add_argument("--sizes", type=parse_sizes, default=None,
                        help=f"sizes for the sweep (default {','.join(map(str, SWEEP_SIZES))})")
    common.add_argument("--sweep-bytes", type=int, default=256 * MiB,
                        help="bytes per sweep point (count = this / size, at least 200)")
    common.add_argument("--repeat", type=int, default=1, help="runs per figure; the median is shown")
    common.add_argument("--timeout", type=float, default=300.0, help="seconds a single run may take")
    common.add_argument("--quiet", action="store_true", help="no progress on stderr")
    common.add_argument("--malloc", choices=("default", "tuned"), default="default",
                        help="tuned: every library's worker processes call gsp.tune_allocator() "
                             "first (glibc keeps big messages' memory mapped); see docs")
    common.add_argument("--from-json", metavar="FILE",
                        help="run nothing: show the table (and --plot) of an earlier --json run")
    common.add_argument("--spin", type=float, default=None, metavar="SECONDS",
                        help="recv_spin of the gsp-spin library (gsp's low-latency mode, run "
                             "with --libs ...,gsp-spin; default 200e-6)")
    transport = argparse.ArgumentParser(add_help=False)
    transport.add_argument("--transport", type=parse_transports, default=None,
                           metavar=",".join(TRANSPORTS),
                           help="transports, comma-separated: each is a case of its own "
                                "(default tcp; transports: all six)")
    transport.add_argument("--size", type=parse_size, default=16,
                           help="message size in bytes (16, 1k, 1m)")

    s = sub.add_parser("suite", parents=[common], help="every workload (--plot adds the size sweep over tcp and ipc)")
    s.add_argument("--count", type=int, default=200_000, help="messages per 16 B throughput run")
    s.add_argument("--big-count", type=int, default=1000, help="messages per 1 MiB throughput run")
    s.add_argument("--lat-count", type=int, default=20_000, help="timed round trips")
    s.add_argument("--pub-count", type=int, default=20_000, help="messages published")
    s.add_argument("--subs", type=int, default=50, help="subscribers")
    s.add_argument("--req-count", type=int, default=50_000, help="requests over all clients")
    s.add_argument("--clients", type=int, default=16, help="concurrent req clients")
    s.add_argument("--conns", type=int, default=10_000, help="dialers on one rep")
    for name, hlp, defaults in (
            ("thr", "push/pull throughput", {}),
            ("lat", "req/rep round-trip latency", {"count": 20_000}),
            ("pubsub", "1 pub → N sub fan-out", {"count": 20_000, "subs": 50}),
            ("reqrep", "req/rep with concurrent clients", {"count": 50_000, "clients": 16}),
            ("conns", "many dialers on one rep", {"conns": 10_000})):
        p = sub.add_parser(name, parents=[common, transport], help=hlp)
        for flag, default in defaults.items():
            p.add_argument(f"--{flag}", type=int, default=default)
        if name == "thr":  # None: by size (cases.thr_count)
            p.add_argument("--count", type=int, default=None,
                           help=f"messages (default: {THR_BYTES // MiB // 1024} GiB of them, at least "
                                f"200, at most {THR_COUNT:,})")
        if name == "reqrep":
            p.add_argument("--procs", type=_positive, default=None,
                           help="serve from N processes (gsp.prefork; tcp only), "
                                "beside one process serving the same clients")
            p.add_argument("--client-procs", type=_positive, default=None,
                           help="with --procs: client processes (default: N, at least 2), "
                                "a REQ socket per client")
            p.add_argument("--conns", type=_positive, default=None,
                           help="with --procs: gsp's and mangos' clients are contexts over "
                                "this many REQ sockets in all (default: a socket each, as the "
                                "others')")
    p = sub.add_parser("storm", parents=[common, transport],
                       help="closed and garbage connections: the rate a listener disposes of them")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of storm")
    p.add_argument("--clients", type=_positive, default=2, help="client processes")
    p.add_argument("--greenlets", type=_positive, default=32, help="greenlets per client process")
    t = sub.add_parser("transports", parents=[common, transport],
                       help="push/pull at each of --sizes and req/rep round trips, over each "
                            "--transport")
    t.add_argument("--count", type=int, default=None,
                   help=f"messages per throughput run (default: by size, at most {THR_COUNT:,})")
    t.add_argument("--lat-count", type=int, default=5_000, help="timed round trips")
    t.add_argument("--lat-size", type=parse_size, default=16, help="round trips' message size")
    # Listed here; its arguments are gsp_bench.spark's own (main hands them over unparsed).
    sub.add_parser("spark", add_help=False,
                   help="the gsp PySpark data source, beside Spark's own ceiling "
                        "(gsp bench spark --help; needs gevent-sp-spark)")
    c = sub.add_parser("charts", help="run what the performance page draws and write its "
                                      "charts and the run's JSON into --out")
    c.add_argument("--out", required=True, metavar="DIR",
                   help=f"where to write {', '.join(charts.files())} (made if missing)")
    c.add_argument("--from-json", metavar="FILE",
                   help="run nothing: draw the charts of an earlier charts run (its "
                        f"{charts.RUN_FILE})")
    c.add_argument("--format", choices=("svg", "png"), default="svg", help="the charts' format")
    c.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is drawn")
    c.add_argument("--sizes", type=parse_sizes, default=None,
                   help="sizes of the throughput chart (default "
                        f"{','.join(map(str, charts.SIZES))})")
    c.add_argument("--transport", type=parse_transports, default=None,
                   help=f"transports side by side (default {','.join(charts.TRANSPORTS)})")
    c.add_argument("--transport-sizes", type=parse_sizes, default=None,
                   help="sizes of the transports chart (default "
                        f"{','.join(map(str, charts.TRANSPORT_SIZES))})")
    c.add_argument("--count", type=int, default=100_000,
                   help="most messages a throughput run sends")
    c.add_argument("--sweep-bytes", type=int, default=256 * MiB,
                   help="bytes a throughput run sends (count = this / size, at least 200, "
                        "at most --count)")
    c.add_argument("--lat-count", type=int, default=10_000, help="timed round trips")
    c.add_argument("--timeout", type=float, default=300.0, help="seconds a single run may take")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.add_argument("--malloc", choices=("default", "tuned"), default="default",
                   help="as the other commands' --malloc")
    for name, (_, hlp) in ONE_SIDED.items():
        p = sub.add_parser(name, help=hlp)
        p.add_argument("url")
        p.add_argument("size", type=parse_size)
        p.add_argument("count", type=int)
        p.add_argument("--lib", choices=LIBS, default="gsp")
    return ap


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def one_sided(a: argparse.Namespace) -> int:
    """nng's perf tools: one role in this process, figures printed the way nng prints them."""
    from .ctl import ConsoleCtl
    from .libs import make, raise_nofile
    raise_nofile()
    try:
        lib = make(a.lib)
    except Unavailable as exc:
        print(f"gsp bench: {a.lib}: {exc}", file=sys.stderr)
        return 2
    ctl = ConsoleCtl()
    extra = {"warmup": 0} if a.cmd == "remote_lat" else {}
    getattr(lib, ONE_SIDED[a.cmd][0])(ctl, url=a.url, size=a.size, count=a.count, **extra)
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


def spark(argv: list[str]) -> int:
    """``gsp bench spark ARGS``: :func:`gsp_bench.spark.main`, if gevent-sp-spark is here."""
    try:
        from . import spark as spark_bench
    except ImportError as exc:
        print(f"gsp bench spark: needs gevent-sp-spark and pyspark: pip install "
              f"'gevent-sp-bench[spark]' ({exc})", file=sys.stderr)
        return 2
    return spark_bench.main(argv)


def skip_native(libs: list[str], info: dict[str, Any], quiet: bool) -> None:
    """Build the native libraries' tools among ``libs`` (C nng, Go mangos); drop each that cannot
    be, saying why on stderr and in ``info["skipped"]`` (the table's header shows it too)."""
    info["native"], info["skipped"] = {}, {}
    for name in [x for x in libs if x in NATIVE]:
        try:
            info["native"][name] = available(name)
        except Unavailable as exc:
            libs.remove(name)
            info["skipped"][name] = str(exc)
            if not quiet:
                print(f"gsp bench: {name}: skipped ({exc})", file=sys.stderr)


def draw_charts(a: argparse.Namespace, argv: list[str]) -> int:
    """``gsp bench charts``: run :func:`.charts.plan` (or read an earlier run), then write its
    charts and its JSON into ``--out``."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("gsp bench: charts need matplotlib (pip install 'gevent-sp-bench[plot]')",
              file=sys.stderr)
        return 2
    run_file = os.path.join(a.out, charts.RUN_FILE)
    if a.from_json:
        doc = report.load_doc(a.from_json)
        if "charts" not in doc:
            print(f"gsp bench: {a.from_json} is not a run of gsp bench charts (it has no "
                  "\"charts\")", file=sys.stderr)
            return 2
        info, libs, results, layout = doc["machine"], doc["libs"], doc["results"], doc["charts"]
        argv = doc["argv"]
    else:
        plan, layout = charts.plan(a.sizes, a.transport, a.transport_sizes, a.count,
                                   a.sweep_bytes, a.lat_count)
        libs = list(dict.fromkeys(lib for _, each in plan for lib in each))
        info = report.machine()
        info.update(malloc=a.malloc, repeat=a.repeat)
        skip_native(libs, info, a.quiet)
        plan = [(case, [lib for lib in each if lib in libs]) for case, each in plan]
        results = run_plan(plan, a.timeout, a.repeat, a.quiet, a.malloc)
        report.run_ended(info)
    os.makedirs(a.out, exist_ok=True)
    written = charts.write(a.out, layout, results, info, a.format)
    if not (a.from_json and os.path.abspath(a.from_json) == os.path.abspath(run_file)):
        with open(run_file, "w") as f:
            report.dump(f, info, argv, libs, results, charts=layout)
        written.append(run_file)
    print(report.header(info))
    print(report.table(cases_of(results), libs, results))
    print("\n" + "\n".join(f"wrote {p}" for p in written))
    return 1 if any(r.get("error") for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["spark"]:
        return spark(args[1:])
    a = parser().parse_args(argv)
    if a.cmd in ONE_SIDED:
        return one_sided(a)
    if a.cmd == "charts":
        return draw_charts(a, argv if argv is not None else sys.argv[1:])
    return workloads(a, argv)


def workloads(a: argparse.Namespace, argv: list[str] | None) -> int:
    """The workload commands (``thr``, ``lat``, ``suite``, ...): run them and print the table
    (or ``--json``); exit status 1 if a run failed."""
    libs: list[str] = a.libs or ([x for x in LIBS if x != "gsp-spin"] if a.compare else
                                 ["gsp", "raw-gevent"] if a.cmd == "storm" else ["gsp"])
    if a.spin is not None:  # to the gsp-spin workers (they inherit the environment)
        os.environ["GSP_BENCH_SPIN"] = repr(a.spin)
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
            print("gsp bench: --plot needs matplotlib (pip install 'gevent-sp-bench[plot]')", file=sys.stderr)
            return 2
    if a.from_json:
        info, libs, results = report.load(a.from_json)
        cases = cases_of(results)
    else:
        cases = cases_for(a)
        info = report.machine()
        info["malloc"] = a.malloc
        skip_native(libs, info, a.quiet)
        results = run_cases(cases, libs, a.timeout, a.repeat, a.quiet, a.malloc)
    if a.plot:
        charts.plot(a.plot, cases, libs, results, info)
    if a.json:
        report.dump(sys.stdout, info, argv if argv is not None else sys.argv[1:], libs, results)
        if not a.quiet:  # the table too, beside the progress: one run gives both
            print("\n" + report.table(cases, libs, results), file=sys.stderr)
    else:
        print(report.header(info))
        print(report.table(cases, libs, results))
    failed = [r for r in results if r.get("error")]
    return 1 if failed else 0
