"""Machine instructions and system calls a message or round trip costs, counted, not timed.

    python tests/tools/work_count.py [WORKLOAD ...] [--python PY] [--tree DIR] [--json]
                                     [--interpreter]

Each workload runs in one process over loopback (a REQ and a REP, a PUSH and a PULL, ...), first
``n`` then ``3 n`` times. The process runs twice under ``valgrind --tool=callgrind``, which counts
the user-space instructions it executes (interpreter, gevent, gsp, compiled or not), and twice
under ``strace -f -c``, which counts its system calls. The difference between the long and short
run, divided by the extra messages, is the work of one message: start-up and warm-up cancel out.

Unlike a timing, neither count moves with the machine's load, so two versions of gsp can be
compared to a per cent on a busy VM: ``--tree`` puts another checkout first on ``PYTHONPATH``
(compiled or not, as it stands) and ``--python`` picks the interpreter (a venv with an installed
wheel, say). The count leaves out what the kernel does in a system call; the system-call count
says how many there are. Workloads (default: all): rt, rt16, rt-inproc, push16, push64k, pub10,
rep16, req16, rep16c, req16c, ws-rt, wss-rt, ws-push16, ws-push64k, wss-push1k, wss-push64k (the
gsp-ws plugin's transports, over tcp loopback), raw-rt, raw-push16, raw-rep16 (the raw-* ones: the
raw gevent baseline, frames by hand).

rep16 and raw-rep16 count a server alone. Its 16 clients run in a process of their own, not
counted, and are the same whichever gsp is counted: req spoken by hand over raw gevent sockets.
Under valgrind the server is the slow side, so it finds every client waiting, as a loaded server
does. How often a read finds the next request already there still follows the clients' pace: the
raw echo reads on after each answer, while gsp's REP parks after each one. So compare a build
with another on the same machine, and read the system calls of these two as a range (2 to 5 a
request, by load). req16 is the other side: 16 gsp REQ sockets with a context each (as
``gsp bench reqrep --procs N`` makes its clients) asking a raw echo of another process, counted
alone. rep16c and req16c are the same two sides in the layout of ``reqrep --conns``: 16 requests
outstanding on one connection (16 contexts of one REQ socket), so a read may bring several.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable

# workload: (messages of the short run, what one unit is)
WORKLOADS = {
    "rt": (2000, "round trip, req/rep tcp 16 B"),
    "rt16": (2000, "request, 16 REQ contexts on one tcp pipe"),
    "rt-inproc": (2000, "round trip, req/rep inproc 16 B"),
    "push16": (20000, "message, push/pull tcp 16 B"),
    "push64k": (2000, "message, push/pull ipc 64 KiB"),
    "pub10": (2000, "message published, pub to 10 subs over tcp (10 deliveries)"),
    "rep16": (2000, "request served, a rep answering 16 req connections of another process (tcp 16 B)"),
    "req16": (2000, "request asked, 16 REQ sockets of a context each, answered by another process"),
    "rep16c": (2000, "request served, a rep answering 16 requests outstanding on one connection"),
    "req16c": (2000, "request asked, 16 contexts of one REQ socket, answered by another process"),
    "ws-rt": (2000, "round trip, req/rep ws 16 B"),
    "wss-rt": (2000, "round trip, req/rep wss 16 B"),
    "ws-push16": (20000, "message, push/pull ws 16 B"),
    "ws-push64k": (2000, "message, push/pull ws 64 KiB"),
    "wss-push1k": (5000, "message, push/pull wss 1 KiB"),
    "wss-push64k": (1000, "message, push/pull wss 64 KiB"),
    "raw-rt": (2000, "round trip, raw gevent echo over tcp 16 B"),
    "raw-push16": (20000, "message, raw gevent one-way tcp 16 B"),
    "raw-rep16": (2000, "request served, raw gevent echoing rep16's frames by hand"),
}
#: Workloads whose peers run in a process of their own, not counted: strace without -f.
SERVED = ("rep16", "raw-rep16", "req16", "rep16c", "req16c")


# -- the workloads, run inside the counted process ------------------------------------------


def _web(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The listen and dial options of ``url``: for ws:// and wss://, the gsp-ws plugin is
    registered by hand (entry-point autoload is off here); for wss://, a throwaway CA (trustme)
    issues the listener's certificate."""
    if not url.startswith("ws"):
        return {}, {}
    import gsp
    import gsp_ws.transport
    if os.environ.get("GSP_DISABLE_PLUGIN_AUTOLOAD"):
        gsp.register_plugin(gsp_ws.transport, "gsp_ws.transport")
    if not url.startswith("wss"):
        return {}, {}
    import trustme
    d = tempfile.mkdtemp(prefix="work-count-pki-")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        f"{d}/server.pem")
    ca.cert_pem.write_to_path(f"{d}/ca.pem")
    return ({"tls_cert_file": f"{d}/server.pem", "tls_key_file": f"{d}/server.pem"},
            {"tls_ca_file": f"{d}/ca.pem"})


def _gsp_rt(n: int, url: str, clients: int) -> None:
    import gevent

    import gsp
    lo, do = _web(url)
    rep = gsp.socket("rep", recv_max_size=0)
    rep.listen(url, **lo)
    req = gsp.socket("req", recv_max_size=0)
    req.dial(rep.listeners[0].url, **do)

    def echo() -> None:
        while True:
            rep.send(rep.recv())

    server = gevent.spawn(echo)
    ends = [req] if clients == 1 else [req.open_context() for _ in range(clients)]

    def one(end: Any, k: int) -> None:
        for _ in range(k):
            end.send(b"x" * 16)
            end.recv()

    gevent.joinall([gevent.spawn(one, e, n // clients) for e in ends], raise_error=True)
    server.kill()
    req.close()
    rep.close()


def _gsp_push(n: int, size: int, url: str = "tcp://127.0.0.1:0") -> None:
    import gevent

    import gsp
    lo, do = _web(url)
    pull = gsp.socket("pull", recv_max_size=0)
    pull.listen(url, **lo)
    push = gsp.socket("push")
    push.dial(pull.listeners[0].url, **do)
    msg = b"x" * size

    def send() -> None:
        for _ in range(n):
            push.send(msg)

    def recv() -> None:
        for _ in range(n):
            pull.recv()

    gevent.joinall([gevent.spawn(send), gevent.spawn(recv)], raise_error=True)
    push.close()
    pull.close()


def _gsp_pub(n: int, subs: int) -> None:
    import gevent

    import gsp
    pub = gsp.socket("pub", listen="tcp://127.0.0.1:0")
    url = pub.listeners[0].url
    socks = [gsp.socket("sub", dial=url, recv_max_size=0) for _ in range(subs)]
    for s in socks:
        s.subscribe(b"")
    while len(pub.pipes) < subs:
        gevent.sleep(0.01)
    gevent.sleep(0.05)

    def recv(s: Any) -> None:
        while s.recv() != b"end":
            pass

    readers = [gevent.spawn(recv, s) for s in socks]
    for i in range(n):
        pub.send(b"x" * 16)
        if i % 64 == 63:
            gevent.sleep(0)  # a publisher that lets its readers keep up (pub drops, never blocks)
    while not all(r.dead for r in readers):
        pub.send(b"end")
        gevent.sleep(0.01)
    for s in socks:
        s.close()
    pub.close()


#: What both hand-spoken clients below start with: ``connect()``, a connection to the REP at
#: ``argv[1]`` that has spoken the SP handshake as a REQ (raw gevent, no gsp).
_CONNECT = """
import sys, gevent
from gevent import socket
host, port = sys.argv[1].rsplit("/", 1)[1].rsplit(":", 1)
def connect():
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\\x00SP\\x00\\x00\\x30\\x00\\x00")
    got = b""
    while len(got) < 8:
        got += s.recv(8 - len(got))
    return s
"""

#: rep16's clients: 16 connections speaking req by hand (the same clients whichever gsp is
#: counted), each asking again as soon as it is answered.
_CLIENTS = _CONNECT + """
def ask(k):
    s = connect()
    request = (20).to_bytes(8, "big") + (0x80000000 | k).to_bytes(4, "big") + b"x" * 16
    while True:
        s.sendall(request)
        got = b""
        while len(got) < 28:
            part = s.recv(28 - len(got))
            if not part:
                return
            got += part
gevent.joinall([gevent.spawn(ask, k) for k in range(16)])
"""


#: rep16c's client: one connection keeping 16 requests outstanding, as 16 contexts of one REQ
#: socket do: whatever replies a read brings, it asks as many again in one write.
_CLIENT_ONE = _CONNECT + """
s = connect()
request = (20).to_bytes(8, "big") + (0x80000000).to_bytes(4, "big") + b"x" * 16
s.sendall(request * 16)
buf = b""
while True:
    part = s.recv(65536)
    if not part:
        break
    buf += part
    k, rest = divmod(len(buf), 28)
    buf = buf[len(buf) - rest:]
    if k:
        s.sendall(request * k)
"""


def _served(n: int, url: str, serve: Callable[[int], None], script: str = _CLIENTS) -> None:
    """rep16's and raw-rep16's shape: ``serve(n)`` answers ``n`` requests while rep16's clients,
    in a process of their own (neither traced by strace without -f nor run under valgrind),
    keep 16 requests outstanding (``script``: :data:`_CLIENTS`, or rep16c's
    :data:`_CLIENT_ONE`); the server under the tool is the slower side, so it finds every client
    waiting, as a loaded server does."""
    clients = subprocess.Popen([sys.executable, "-c", script, url])
    try:
        serve(n)
    finally:
        clients.kill()
        clients.wait()


def _gsp_rep16(n: int, script: str = _CLIENTS) -> None:
    import gsp
    rep = gsp.socket("rep", listen="tcp://127.0.0.1:0", recv_max_size=0)

    def serve(k: int) -> None:
        for _ in range(k):
            rep.send(rep.recv())

    try:
        _served(n, rep.listeners[0].url, serve, script)
    finally:
        rep.close()


def _raw_echo(sock: Any, left: list[int] | None = None, done: Any = None) -> None:
    """rep spoken by hand over a raw gevent connection: the SP handshake, then every frame
    (8-byte size, the request id, the body) written back as it came, which is what a REP echoing
    the body sends. With ``left`` (one count, shared by every connection) it answers that many
    requests in all, setting the event ``done`` at the last, and then no more."""
    from gevent import socket
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"\x00SP\x00\x00\x31\x00\x00")
    buf = bytearray()
    while len(buf) < 8:
        buf += sock.recv(8 - len(buf))
    buf.clear()
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk
        while len(buf) >= 8:
            size = 8 + int.from_bytes(buf[:8], "big")
            if len(buf) < size:
                break
            if left is not None and left[0] <= 0:
                return  # served all n: no more work than gsp's server does after its last
            sock.sendall(bytes(buf[:size]))
            del buf[:size]
            if left is not None:
                left[0] -= 1
                if left[0] == 0:
                    done.set()


def _echo_server() -> None:
    """req16's server, in a process of its own (``--echo``): prints its port, then answers
    every request on every connection (:func:`_raw_echo`) until killed."""
    import gevent
    from gevent import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    print(server.getsockname()[1], flush=True)
    while True:
        gevent.spawn(_raw_echo, server.accept()[0])


def _gsp_req16(n: int, conns: int = 16) -> None:
    import gevent

    import gsp
    echo = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--echo"],
                            stdout=subprocess.PIPE, text=True)
    socks: list[Any] = []
    try:
        assert echo.stdout is not None
        url = f"tcp://127.0.0.1:{int(echo.stdout.readline())}"
        socks = [gsp.socket("req", dial=url, recv_max_size=0) for _ in range(conns)]
        ctxs = [socks[i % conns].open_context() for i in range(16)]
        left = [n]

        def ask(ctx: Any) -> None:
            while left[0] > 0:
                left[0] -= 1
                ctx.send(b"x" * 16)
                ctx.recv()

        gevent.joinall([gevent.spawn(ask, c) for c in ctxs], raise_error=True)
    finally:
        for s in socks:
            s.close()
        echo.kill()
        echo.wait()


def _raw_rep16(n: int) -> None:
    """rep16 served by hand (:func:`_raw_echo`), ``n`` requests over every connection."""
    import gevent
    from gevent import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    left = [n]
    done = gevent.event.Event()

    def accept() -> None:
        while True:
            gevent.spawn(_raw_echo, server.accept()[0], left, done)

    acceptor = gevent.spawn(accept)
    try:
        _served(n, "tcp://127.0.0.1:%d" % server.getsockname()[1], lambda k: done.wait())
    finally:
        acceptor.kill()
        server.close()


def raw_conns() -> tuple[Any, Any]:
    """A loopback tcp connection's two gevent sockets (client, accepted), Nagle off."""
    from gevent import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    for s in (client, accepted):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server.close()
    return client, accepted


class _Frames:
    """Length-prefixed frames over a gevent socket, by hand (as the bench's raw baseline)."""

    def __init__(self, sock: Any) -> None:
        self.sock, self.buf = sock, bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(len(data).to_bytes(4, "big") + data)

    def recv(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                size = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + size:
                    out = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    return out
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk


def _raw_rt(n: int) -> None:
    import gevent
    c, a = (_Frames(s) for s in raw_conns())

    def echo() -> None:
        for _ in range(n):
            a.send(a.recv())

    server = gevent.spawn(echo)
    for _ in range(n):
        c.send(b"x" * 16)
        c.recv()
    server.join()


def _raw_push(n: int) -> None:
    import gevent
    c, a = (_Frames(s) for s in raw_conns())

    def recv() -> None:
        for _ in range(n):
            a.recv()

    reader = gevent.spawn(recv)
    for _ in range(n):
        c.send(b"x" * 16)
    reader.join()


RUNNERS: dict[str, Callable[[int], None]] = {
    "rt": lambda n: _gsp_rt(n, "tcp://127.0.0.1:0", 1),
    "rt16": lambda n: _gsp_rt(n, "tcp://127.0.0.1:0", 16),
    "rt-inproc": lambda n: _gsp_rt(n, f"inproc://work-count-{os.getpid()}", 1),
    "push16": lambda n: _gsp_push(n, 16),
    # over ipc: tcp's buffer autotuning, which follows the clock, would move how much a read
    # takes (and so the count) by a third between runs; a unix socket's buffers are fixed
    "push64k": lambda n: _gsp_push(n, 65536, f"ipc:///tmp/work-count-{os.getpid()}.sock"),
    "pub10": lambda n: _gsp_pub(n, 10),
    "ws-rt": lambda n: _gsp_rt(n, "ws://127.0.0.1:0/sp", 1),
    "wss-rt": lambda n: _gsp_rt(n, "wss://127.0.0.1:0/sp", 1),
    "ws-push16": lambda n: _gsp_push(n, 16, "ws://127.0.0.1:0/sp"),
    "ws-push64k": lambda n: _gsp_push(n, 65536, "ws://127.0.0.1:0/sp"),
    "wss-push1k": lambda n: _gsp_push(n, 1024, "wss://127.0.0.1:0/sp"),
    "wss-push64k": lambda n: _gsp_push(n, 65536, "wss://127.0.0.1:0/sp"),
    "rep16": _gsp_rep16,
    "req16": _gsp_req16,
    "rep16c": lambda n: _gsp_rep16(n, _CLIENT_ONE),
    "req16c": lambda n: _gsp_req16(n, 1),
    "raw-rt": _raw_rt,
    "raw-push16": _raw_push,
    "raw-rep16": _raw_rep16,
}


# -- the counting, in the parent --------------------------------------------------------------


def run_env(tree: str | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0", GSP_DISABLE_PLUGIN_AUTOLOAD="1")
    if tree:
        env["PYTHONPATH"] = os.path.abspath(tree) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _under(tool: list[str], python: str, tree: str | None, workload: str, n: int) -> str:
    """Run ``workload`` ``n`` times in a process of its own under ``tool`` (its arguments, where
    ``{d}`` is a scratch directory); the tool's report: stderr, or its file ``{d}/out``."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [*(a.format(d=d) for a in tool), python, os.path.abspath(__file__), "--inner",
             workload, str(n)],
            env=run_env(tree), cwd=d, capture_output=True, text=True, timeout=3600)
        if out.returncode:
            raise SystemExit(f"{workload} under {tool[0]} failed:\n{out.stderr[-3000:]}")
        report = os.path.join(d, "out")
        return open(report).read() if tool[0] == "strace" else out.stderr


#: CPython's bytecode loop, as callgrind names it (with a suffix such as ``'2`` for a recursive
#: entry): the instructions a unit spends interpreting Python, which compiling that code removes.
EVAL_LOOP = "_PyEval_EvalFrameDefault"


def interpreter_share(annotated: str) -> int:
    """The instructions of ``callgrind_annotate --inclusive=no``'s report (``annotated``) that
    ran in CPython's bytecode loop: its lines "N (P%)  file:function [object]" whose function is
    :data:`EVAL_LOOP` (some lines name a header whose code was inlined into it)."""
    total = 0
    for line in annotated.splitlines():
        found = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:(\S+)", line)
        if found and found.group(2).split("'")[0] == EVAL_LOOP:
            total += int(found.group(1).replace(",", ""))
    return total


def _callgrind(python: str, tree: str | None, workload: str, n: int,
               annotate: bool = False) -> tuple[int, int]:
    """The instructions of ``n`` units of ``workload`` in a process of their own, and with
    ``annotate`` those that ran in CPython's bytecode loop (:func:`interpreter_share`; else 0)."""
    with tempfile.TemporaryDirectory() as keep:
        out = os.path.join(keep, "cg.out")
        err = _under(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"],
                     python, tree, workload, n)
        found = re.search(r"Collected : (\d+)", err)
        if not found:
            raise SystemExit(f"no instruction count in callgrind's output:\n{err[-2000:]}")
        share = 0
        if annotate:
            report = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                                     out], capture_output=True, text=True, check=True).stdout
            share = interpreter_share(report)
    return int(found.group(1)), share


def instructions(python: str, tree: str | None, workload: str, n: int) -> int:
    return _callgrind(python, tree, workload, n)[0]


def strace_calls(report: str) -> int:
    """The calls of ``strace -c``'s total line: "100.00 secs usecs/call calls [errors] total"
    (the errors column is empty when no call failed)."""
    total = report.strip().splitlines()[-1].split()
    return int(total[3])


def _syscalls(python: str, tree: str | None, workload: str, n: int) -> int:
    follow = [] if workload in SERVED else ["-f"]
    return strace_calls(_under(["strace", *follow, "-c", "-o", "{d}/out"], python, tree, workload,
                               n))


def count(python: str, tree: str | None, workload: str, n: int = 0,
          interpreter: bool = False) -> dict[str, float]:
    """Instructions and system calls a unit of ``workload`` (``n``: the short run's units); with
    ``interpreter``, also the instructions of those that ran in CPython's bytecode loop."""
    n = n or WORKLOADS[workload][0]
    (ir_long, ip_long), (ir_short, ip_short) = (
        _callgrind(python, tree, workload, k, interpreter) for k in (3 * n, n))
    sc = _syscalls(python, tree, workload, 3 * n) - _syscalls(python, tree, workload, n)
    got = {"instructions": (ir_long - ir_short) / (2 * n), "syscalls": sc / (2 * n)}
    if interpreter:
        got["interpreter"] = (ip_long - ip_short) / (2 * n)
    return got


def build_of(python: str, tree: str | None) -> str:
    code = ("import gsp\ntry:\n    from gsp._mypyc import compiled\n    c = compiled() or 'pure'\n"
            "except ImportError:  # a gsp older than gsp._mypyc.compiled: ask gsp.chan\n"
            "    import gsp.chan\n"
            "    c = 'pure' if gsp.chan.__file__.endswith('.py') else 'gsp.chan compiled'\n"
            "print(c, gsp.__file__)")
    # (cwd: not a checkout, whose gsp ``-c`` would import ahead of ``--tree``'s)
    out = subprocess.run([python, "-c", code], env=run_env(tree), capture_output=True, text=True,
                         cwd=tempfile.gettempdir())
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--inner":
        RUNNERS[sys.argv[2]](int(sys.argv[3]))
        return
    if sys.argv[1:] == ["--echo"]:
        _echo_server()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", help=f"of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter (default: this one)")
    ap.add_argument("--tree", help="a gsp checkout to put first on PYTHONPATH")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    ap.add_argument("-n", type=int, default=0, help="units of the short run (default: per workload)")
    ap.add_argument("--interpreter", action="store_true",
                    help="also count the instructions a unit spends in CPython's bytecode loop "
                         "(the interpreted Python's own share; needs callgrind_annotate)")
    a = ap.parse_args()
    for tool in ("valgrind", "strace"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install {tool})")
    chosen = a.workloads or list(WORKLOADS)
    if unknown := set(chosen) - set(WORKLOADS):
        ap.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    got = {w: count(a.python, a.tree, w, a.n, a.interpreter) for w in chosen}
    if a.json:
        print(json.dumps({"build": build_of(a.python, a.tree), "per": got}))
        return
    print(f"gsp: {build_of(a.python, a.tree)}")
    for w, c in got.items():
        share = (f" ({c['interpreter']:.0f} in the bytecode loop)" if "interpreter" in c
                 else "")
        print(f"{w:11} {c['instructions']:10.0f} instructions{share} {c['syscalls']:6.2f} system "
              f"calls a {WORKLOADS[w][1]}")


if __name__ == "__main__":
    main()
