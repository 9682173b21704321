"""What to run: a :class:`Case` is one workload at fixed parameters, with the table rows it
shows. :func:`cases_for` turns a command line into cases; :func:`cases_of` rebuilds the cases of
saved results (``--from-json``), so their labels and rows match a fresh run's.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

KiB, MiB = 1024, 1024 * 1024
SWEEP_SIZES = [16, 64, 256, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB]
#: Every transport ``--transport`` takes.
TRANSPORTS = ("tcp", "ipc", "inproc", "tls+tcp", "ws", "wss")
#: The transports ``suite --plot`` sweeps the sizes over (``thr --plot`` sweeps its one).
SWEEP_TRANSPORTS = ("tcp", "ipc")
#: ``gsp bench thr`` without ``--count``: this many bytes of messages, at least 200 and at most
#: THR_COUNT messages (16 B: 200,000; 64 KiB: 32,768; 1 MiB: 2,048).
THR_BYTES, THR_COUNT = 2048 * MiB, 200_000


class Case:
    """One workload at fixed parameters, shown as one or more table rows (metric, unit)."""

    def __init__(self, label: str, workload: str, params: dict[str, Any],
                 rows: Sequence[tuple[str, str]]) -> None:
        self.label = label
        self.workload = workload
        self.params = params
        self.rows = list(rows)


def parse_size(text: str) -> int:
    """Bytes from ``16``, ``4k``, ``4KiB``, ``1m``, ``1MB``."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    mult = {"k": KiB, "m": MiB}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def parse_sizes(text: str) -> list[int]:
    return [parse_size(x) for x in text.split(",") if x.strip()]


def parse_transports(text: str) -> list[str]:
    """``tcp,ws`` -> ["tcp", "ws"]; an unknown one is an error naming the known ones."""
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in TRANSPORTS]
    if bad or not out:
        raise argparse.ArgumentTypeError(
            f"unknown transport {bad[0] if bad else text!r}; choose from {','.join(TRANSPORTS)}")
    return list(dict.fromkeys(out))


def show_size(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


def thr_case(transport: str, size: int, count: int) -> Case:
    # big messages: MB/s too (msg/s stays, the figure comparisons across sizes quote)
    units = [("msg_s", "msg/s"), ("mb_s", "MB/s")] if size >= 64 * KiB else [("msg_s", "msg/s")]
    # CPU time per message (resource.getrusage): progress shows through the machine's noise.
    cpu = [("cpu_ns", "CPU ns/msg")] if transport == "inproc" else \
        [("cpu_ns_send", "CPU ns/msg send"), ("cpu_ns_recv", "CPU ns/msg recv")]
    if size >= 64 * KiB:  # a big body's cost is mostly fresh pages: see gsp.allocator
        cpu.append(("faults", "faults/msg") if transport == "inproc" else
                   ("faults_recv", "faults/msg recv"))
    return Case(f"push/pull {transport} {show_size(size)}", "thr",
                {"transport": transport, "size": size, "count": count}, [*units, *cpu])


def lat_case(transport: str, size: int, count: int) -> Case:
    return Case(f"req/rep {transport} {show_size(size)} round trip", "lat",
                {"transport": transport, "size": size, "count": count},
                [("mean_us", "µs mean"), ("p50_us", "µs p50"), ("p90_us", "µs p90"),
                 ("p99_us", "µs p99"),
                 # CPU time a round trip (user + system, client and server processes): a
                 # latency won by burning a core shows here.
                 ("cpu_us_rt", "CPU µs/rt")])


def pub_case(transport: str, size: int, count: int, subs: int) -> Case:
    return Case(f"pub → {subs} sub {transport} {show_size(size)}", "pubsub",
                {"transport": transport, "size": size, "count": count, "subs": subs},
                [("msg_s", "deliv. msg/s"), ("delivered_pct", "% delivered")])


def reqrep_case(transport: str, size: int, count: int, clients: int, procs: int | None = None,
                client_procs: int = 1, conns: int | None = None) -> Case:
    """``procs`` (``reqrep --procs``): the server in that many processes (gsp.prefork), the
    clients in ``client_procs`` others, a REQ socket (connection) each, or for gsp and mangos
    contexts over ``conns`` sockets."""
    params: dict[str, Any] = {"transport": transport, "size": size, "count": count,
                              "clients": clients}
    label = f"req/rep {transport} {clients} clients"
    if procs is not None:
        params.update(procs=procs, client_procs=client_procs)
        if conns is not None and conns != clients:
            params["conns"] = conns
            label += f" (gsp, mangos: {conns} conns)"
        label += (f" in {client_procs} procs → " + ("1 proc" if procs == 1 else
                  f"{procs} procs (gsp.prefork; others: 1)"))
    rows = [("req_s", "req/s")]
    if procs is None:
        rows.append(("cpu_us_req", "CPU µs/req"))
    else:  # CPU time tells apart a slower library from one with less of the CPU
        rows += [("cpu_us_server", "server CPU µs/req"), ("cpu_us_clients", "client CPU µs/req")]
    return Case(label, "reqrep", params, rows)


def conns_case(transport: str, conns: int) -> Case:
    return Case(f"{conns} dialers → 1 rep {transport}", "conns",
                {"transport": transport, "conns": conns},
                [("connect_s", "s all served"), ("rss_kib", "KiB RSS/pipe")])


def storm_case(transport: str, seconds: float, clients: int, greenlets: int) -> Case:
    return Case(f"closed/garbage conns → 1 listener {transport} ({clients}×{greenlets} "
                f"clients, {seconds:g} s)", "storm",
                {"transport": transport, "seconds": seconds, "clients": clients,
                 "greenlets": greenlets},
                [("conn_s", "conn/s disposed of"), ("cpu_us_conn", "CPU µs/conn")])


MAKERS: dict[str, Callable[..., Case]] = {"thr": thr_case, "lat": lat_case, "pubsub": pub_case,
                                         "reqrep": reqrep_case, "conns": conns_case,
                                         "storm": storm_case}


def thr_count(size: int) -> int:
    """``gsp bench thr``'s count for one ``size`` when no ``--count`` is given: the same bytes
    (:data:`THR_BYTES`) at every size, so a big size takes seconds, not hours."""
    return max(200, min(THR_COUNT, THR_BYTES // max(size, 1)))


def _sweep_count(a: argparse.Namespace, size: int) -> int:
    """Messages per sweep point: ``--sweep-bytes`` worth, at least 200, at most ``--count``."""
    cap = THR_COUNT if a.count is None else int(a.count)
    return max(200, min(cap, int(a.sweep_bytes) // max(size, 1)))


def cases_for(a: argparse.Namespace) -> list[Case]:
    """The cases a parsed command line asks for (``a.cmd`` is the command)."""
    cmd = a.cmd
    if cmd == "suite":
        return _suite(a)
    if cmd == "transports":  # push/pull at each size, then the round trip, per transport
        sizes = a.sizes or [16, KiB, 64 * KiB, MiB]
        return [c for t in a.transport or TRANSPORTS for c in (
            *(thr_case(t, s, thr_count(s) if a.count is None else a.count) for s in sizes),
            lat_case(t, a.lat_size, a.lat_count))]
    return [c for t in a.transport or ["tcp"] for c in _one(a, t)]


def _one(a: argparse.Namespace, transport: str) -> list[Case]:
    """The cases of one workload command over one transport."""
    cmd = a.cmd
    if cmd == "thr":
        sizes = a.sizes or (SWEEP_SIZES if a.plot else [a.size])
        if len(sizes) > 1:
            return [thr_case(transport, s, _sweep_count(a, s)) for s in sizes]
        return [thr_case(transport, sizes[0],
                         thr_count(sizes[0]) if a.count is None else a.count)]
    if cmd == "lat":
        return [lat_case(transport, a.size, a.count)]
    if cmd == "pubsub":
        return [pub_case(transport, a.size, a.count, a.subs)]
    if cmd == "reqrep":
        procs = getattr(a, "procs", None)
        if procs is None:
            return [reqrep_case(transport, a.size, a.count, a.clients)]
        split = a.client_procs or max(procs, 2)  # the single-process figure beside, alike
        return [reqrep_case(transport, a.size, a.count, a.clients, n, split, a.conns)
                for n in dict.fromkeys((1, procs))]
    if cmd == "storm":
        return [storm_case(transport, a.seconds, a.clients, a.greenlets)]
    assert cmd == "conns", cmd
    return [conns_case(transport, a.conns)]


def _suite(a: argparse.Namespace) -> list[Case]:
    out = [
        thr_case("tcp", 16, a.count),
        thr_case("tcp", MiB, a.big_count),
        thr_case("ipc", 16, a.count),
        thr_case("inproc", 16, a.count),
        lat_case("tcp", 16, a.lat_count),
        lat_case("inproc", 16, a.lat_count),
        pub_case("tcp", 16, a.pub_count, a.subs),
        reqrep_case("tcp", 16, a.req_count, a.clients),
        conns_case("tcp", a.conns),
    ]
    if a.plot:  # the size sweep over tcp and ipc, less the points already there
        have = {(c.params["transport"], c.params["size"]) for c in out if c.workload == "thr"}
        out += [thr_case(t, s, _sweep_count(a, s)) for t in SWEEP_TRANSPORTS
                for s in a.sizes or SWEEP_SIZES if (t, s) not in have]
    return out


def cases_of(results: list[dict[str, Any]]) -> list[Case]:
    """The cases of saved results, in their order (to show a table again without running)."""
    out: dict[str, Case] = {}
    for r in results:
        if r["case"] not in out:
            out[r["case"]] = MAKERS[r["workload"]](**r["params"])
    return list(out.values())
