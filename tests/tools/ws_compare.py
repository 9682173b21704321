"""ws:// and wss:// side by side: gsp, pynng (nng 1.x) and nng 2.0 (the ``nng`` module of
nng-ssl), each library talking to itself, one process each side, in the same minutes.

    python tests/tools/ws_compare.py [--libs gsp,pynng,nng2] [--transports ws,wss,tcp]
                                     [--sizes 16,1024,65536,1048576] [--runs 3] [--json]

For every transport and size: push/pull throughput (a PULL process listens and times its
messages from the first to the last, a PUSH process dials and sends them), then the round trip of
a 16-byte req/rep (a REP process echoes; the REQ process times ``--rt-count`` requests one after
the other). A figure is the median of ``--runs`` runs; beside it, the CPU time (user + system,
every thread, ``getrusage``) both sides spent a message or round trip, which a loaded machine
changes less than the rates, and the page faults (fresh pages mapped in) both sides took. Run
it from the repository root with the test extra installed (pynng, nng-ssl, trustme).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COUNTS = {16: 60_000, 1024: 40_000, 65536: 4000, 1048576: 400}
RT_COUNT = 5000


# -- one side, in a process of its own ---------------------------------------------------------

def _pki(d: str) -> Any:
    sys.path.append(ROOT)  # (after site-packages: the installed gsp, not the checkout)
    from tests.support.certs import make_pki
    return make_pki(Path(d))


def _gsp_side(role: str, url: str, size: int, count: int, pki: Any) -> None:
    import gsp
    kind = {"pull": "pull", "push": "push", "rep": "rep", "req": "req"}[role]
    s = gsp.socket(kind, max_recv_size=0, recv_timeout=60, send_timeout=60)
    tls = url.startswith("wss")
    if role in ("pull", "rep"):
        lst = s.listen(url, **(pki.listen_options() if tls else {}))
        print(lst.url, flush=True)
    else:
        s.dial(url, fail_fast=True, **(pki.dial_options(tls_server_name="localhost") if tls else {}))
    _loop(role, s.send, s.recv, size, count)
    time.sleep(0.5)
    s.close()


def _pynng_side(role: str, url: str, size: int, count: int, pki: Any) -> None:
    import pynng
    sys.path.append(ROOT)  # (after site-packages: the installed gsp, not the checkout)
    from tests.support.nng_process import tls_config
    cls = {"pull": pynng.Pull0, "push": pynng.Push0, "rep": pynng.Rep0, "req": pynng.Req0}[role]
    s = cls(recv_max_size=0, recv_timeout=60000, send_timeout=60000)
    if url.startswith("wss"):
        s.tls_config = tls_config(pki.nng_server_args() if role in ("pull", "rep")
                                  else pki.nng_client_args())
    if role in ("pull", "rep"):
        lst = s.listen(url)
        print(url.replace(":0", f":{str(lst.local_address).rsplit(':', 1)[1]}", 1), flush=True)
    else:
        s.dial(url, block=True)
    _loop(role, s.send, s.recv, size, count)
    time.sleep(0.5)
    s.close()


def _nng2_side(role: str, url: str, size: int, count: int, pki: Any) -> None:
    import nng
    cls = {"pull": nng.PullSocket, "push": nng.PushSocket, "rep": nng.RepSocket,
           "req": nng.ReqSocket}[role]
    s = cls()
    s.recv_timeout = s.send_timeout = 60000
    tls = None
    if role in ("pull", "rep"):
        if url.startswith("wss"):
            tls = nng.TlsConfig.for_server(cert_pem=Path(pki.server_cert_file).read_text(),
                                           key_pem=Path(pki.server_key_file).read_text())
        lst = s.add_listener(url, tls=tls, recv_max_size=0)
        lst.start()
        print(url.replace(":0", f":{lst.port}", 1), flush=True)
    else:
        if url.startswith("wss"):
            tls = nng.TlsConfig.for_client(server_name="localhost", ca_file=pki.ca_file)
        s.add_dialer(url, tls=tls).start(block=True)
    _loop(role, s.send, lambda: s.recv().to_bytes(), size, count)
    time.sleep(0.5)
    s.close()


def _cpu() -> float:
    """CPU seconds of this process so far (user + system, every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _faults() -> int:
    """Minor page faults of this process so far (pages the kernel mapped in on first touch)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _report(c0: float, f0: int, n: int) -> None:
    print(f"CPU {(_cpu() - c0) / n * 1e6}", flush=True)
    print(f"FAULTS {(_faults() - f0) / n}", flush=True)


def _loop(role: str, send: Any, recv: Any, size: int, count: int) -> None:
    msg = b"x" * size
    if role == "push":
        c0, f0 = _cpu(), _faults()
        for _ in range(count):
            send(msg)
        _report(c0, f0, count)
    elif role == "pull":
        recv()
        t0, c0, f0 = time.perf_counter(), _cpu(), _faults()
        for _ in range(count - 1):
            recv()
        print(f"RESULT {(count - 1) / (time.perf_counter() - t0)}", flush=True)
        _report(c0, f0, count - 1)
    elif role == "rep":
        for _ in range(100):
            send(recv())
        c0, f0 = _cpu(), _faults()
        for _ in range(count):
            send(recv())
        _report(c0, f0, count)
    else:
        for _ in range(100):  # warm
            send(msg)
            recv()
        t0, c0, f0 = time.perf_counter(), _cpu(), _faults()
        for _ in range(count):
            send(msg)
            recv()
        print(f"RESULT {(time.perf_counter() - t0) / count * 1e6}", flush=True)
        _report(c0, f0, count)


SIDES = {"gsp": _gsp_side, "pynng": _pynng_side, "nng2": _nng2_side}


# -- the runs, in the parent -------------------------------------------------------------------

def _pair(lib: str, transport: str, size: int, count: int, rt: bool,
          pki_dir: str) -> tuple[float, float, float]:
    """Start the listening side, then the dialing one; the figure the timing side prints, and
    the CPU µs and the page faults a message (or round trip) cost both sides together."""
    url = f"{transport}://127.0.0.1:0" + ("/sp" if transport.startswith("ws") else "")
    me = os.path.abspath(__file__)
    roles = ("rep", "req") if rt else ("pull", "push")
    server = subprocess.Popen([sys.executable, me, "--side", lib, roles[0], url, str(size),
                               str(count), pki_dir], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        bound = server.stdout.readline().strip()
        client = subprocess.Popen([sys.executable, me, "--side", lib, roles[1], bound, str(size),
                                   str(count), pki_dir], stdout=subprocess.PIPE, text=True,
                                  cwd=ROOT)
        out = client.communicate(timeout=600)[0] + server.communicate(timeout=600)[0]
        result = [float(x.split()[1]) for x in out.splitlines() if x.startswith("RESULT ")]
        cpu = [float(x.split()[1]) for x in out.splitlines() if x.startswith("CPU ")]
        faults = [float(x.split()[1]) for x in out.splitlines() if x.startswith("FAULTS ")]
        if len(result) != 1 or len(cpu) != 2 or len(faults) != 2:
            raise SystemExit(f"{lib} {transport} {size}: no result ({out!r})")
        return result[0], sum(cpu), sum(faults)
    finally:
        for p in (server,):
            if p.poll() is None:
                p.kill()
                p.wait()


def main() -> None:
    if sys.argv[1:2] == ["--side"]:
        lib, role, url, size, count, pki_dir = sys.argv[2:8]
        SIDES[lib](role, url, int(size), int(count), _pki(pki_dir) if "wss" in url else None)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--libs", default="gsp,pynng,nng2")
    ap.add_argument("--transports", default="ws,wss")
    ap.add_argument("--sizes", default="16,1024,65536,1048576")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rt-count", type=int, default=RT_COUNT)
    ap.add_argument("--no-rt", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    libs = a.libs.split(",")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as pki_dir:
        _pki(pki_dir)
        for transport in a.transports.split(","):
            rows = [(f"{transport} push/pull {size} B msg/s", size, COUNTS.get(size, 1000), False)
                    for size in map(int, a.sizes.split(","))]
            if not a.no_rt:
                rows.append((f"{transport} round trip 16 B µs", 16, a.rt_count, True))
            for name, size, count, rt in rows:
                got = {}
                for lib in libs:
                    runs = [_pair(lib, transport, size, count, rt, pki_dir)
                            for _ in range(a.runs)]
                    got[lib] = {"figure": statistics.median(r[0] for r in runs),
                                "cpu_us": statistics.median(r[1] for r in runs),
                                "faults": statistics.median(r[2] for r in runs)}
                out[name] = got
                if not a.json:
                    cells = "  ".join(f"{lib} {v['figure']:,.1f} ({v['cpu_us']:,.1f} µs CPU, "
                                      f"{v['faults']:,.1f} faults)" for lib, v in got.items())
                    print(f"{name:32} {cells}", flush=True)
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
