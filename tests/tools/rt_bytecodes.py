"""What one tcp request/reply round trip runs in Python: bytecodes and calls, by function.

    python tests/tools/rt_bytecodes.py [--raw | --pushpull] [--top N] [--clients C] [--wrap [N]] [--json]

A REQ and a REP (or, with ``--raw``, the bench's raw gevent connections, an echo; with
``--pushpull``, a PUSH sending to a PULL, a message at a time) in one process over loopback tcp.
After a warm-up, every greenlet is traced with ``f_trace_opcodes`` for 200 round trips (with
``--clients C``: C REQ contexts at once, counted per request), and the counts are printed per
round trip, the functions with most bytecodes first. Unlike a timing, the count does not move with
the machine's load: a change that takes work off the round trip shows here exactly. Code compiled
with mypyc (and gevent's own Cython) is not counted.

``--wrap [N]`` sends and receives through N (1) more Python functions each (what an undone inline
costs: ``tests/project/test_budget.py`` checks that the budget catches it); ``--json`` prints the totals
per round trip as one JSON object (``tests/project/test_budget.py`` reads it).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from typing import Any, Callable

import gevent
import greenlet

ROUNDS = 200
MSG = b"x" * 16

Ends = list[tuple[Callable[..., Any], Callable[..., Any]]]


def gsp_pair(clients: int) -> tuple[Ends, Any]:
    import gsp
    rep = gsp.socket("rep", listen="tcp://127.0.0.1:0", recv_max_size=0)
    req = gsp.socket("req", dial=rep.listeners[0].url, recv_max_size=0)

    def echo() -> None:
        while True:
            rep.send(rep.recv())

    ends = [(req.send, req.recv)] if clients == 1 else \
        [(c.send, c.recv) for c in (req.open_context() for _ in range(clients))]
    return ends, gevent.spawn(echo)


def pushpull_pair() -> tuple[Ends, Any]:
    """A PUSH and a PULL: a round trip is one message sent and received (no reply)."""
    import gsp
    pull = gsp.socket("pull", listen="tcp://127.0.0.1:0", recv_max_size=0)
    push = gsp.socket("push", dial=pull.listeners[0].url, recv_max_size=0)
    return [(push.send, pull.recv)], gevent.spawn(gevent.sleep, 1e9)


def raw_pair() -> tuple[Ends, Any]:
    from work_count import raw_conns  # (this directory: the script's own, first on sys.path)

    from gsp_bench.libs.lib_raw import RawConn
    client, accepted = raw_conns()
    a, c = RawConn(accepted), RawConn(client)

    def echo() -> None:
        while True:
            a.send(a.recv())

    return [(c.send, c.recv)], gevent.spawn(echo)


def wrapped(ends: Ends, depth: int) -> Ends:
    """Each send and recv through ``depth`` more Python functions: undone inlines on each side."""
    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any) -> Any:
            return f(*a)
        return call
    for _ in range(depth):
        ends = [(wrap(s), wrap(r)) for s, r in ends]
    return ends


def measure(mode: str = "gsp", clients: int = 1, wrap: int = 0,
            ) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Bytecodes and calls by function over ROUNDS round trips, and the number of round trips."""
    ends, server = {"raw": raw_pair, "pushpull": pushpull_pair}.get(
        mode, lambda: gsp_pair(clients))()
    ends = wrapped(ends, wrap)

    def run(n: int) -> None:
        def one(send: Callable[..., Any], recv: Callable[..., Any]) -> None:
            for _ in range(n):
                send(MSG)
                recv()
        gevent.joinall([gevent.spawn(one, s, r) for s, r in ends], raise_error=True)

    run(500)
    ops: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename.rsplit('site-packages/', 1)[-1]}:{code.co_name}"
        calls[key] += 1

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                ops[key] += 1
            return local
        return local

    greenlet.settrace(lambda event, args: sys.settrace(tracer))
    sys.settrace(tracer)
    try:
        run(ROUNDS)
    finally:
        sys.settrace(None)
        greenlet.settrace(None)
    server.kill()
    return ops, calls, ROUNDS * len(ends)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", action="store_true", help="the raw gevent echo instead of gsp")
    ap.add_argument("--pushpull", action="store_true", help="a PUSH sending to a PULL")
    ap.add_argument("--top", type=int, default=30, help="functions to list")
    ap.add_argument("--clients", type=int, default=1, help="REQ contexts at once (gsp only)")
    ap.add_argument("--wrap", type=int, nargs="?", const=1, default=0, metavar="N",
                    help="send and recv each through N (1) more calls")
    ap.add_argument("--json", action="store_true", help="the totals a round trip, as JSON")
    a = ap.parse_args()
    mode = "raw" if a.raw else "pushpull" if a.pushpull else "gsp"
    ops, calls, per = measure(mode, a.clients, a.wrap)
    if a.json:
        from gsp._mypyc import compiled
        print(json.dumps({"bytecodes": sum(ops.values()) / per,
                          "calls": sum(calls.values()) / per, "compiled": compiled()}))
        return
    what = {"raw": "raw gevent echo", "pushpull": "gsp push/pull, a message"}.get(
        mode, f"gsp req/rep, {a.clients} client(s)")
    print(f"{what}: {sum(ops.values()) / per:.0f} bytecodes, "
          f"{sum(calls.values()) / per:.1f} Python calls a round trip")
    for key, n in ops.most_common(a.top):
        print(f"{n / per:8.1f} {calls[key] / per:6.2f}  {key}")


if __name__ == "__main__":
    main()
