"""Receive throughput of one push -> pull pair in one process, best of 3 runs.

    python tools/recv_throughput.py --scheme tcp --size 1048576 -n 300
    python tools/recv_throughput.py --scheme tls+tcp --size 1048576 -n 300
    python tools/recv_throughput.py --scheme tcp --size 16 -n 200000

Prints MB/s (or messages/s) of wall time and of CPU time; CPU time is the steadier figure on a
shared machine. Run it with two interpreters (two checkouts) alternately to compare them.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gevent

import gsp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="tcp", choices=["tcp", "ipc", "tls+tcp"])
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("-n", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        lopts: dict[str, object] = {}
        dopts: dict[str, object] = {}
        if args.scheme == "tls+tcp":
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("localhost", "127.0.0.1")
            cert.cert_chain_pems[0].write_to_path(f"{d}/server.pem")
            cert.private_key_pem.write_to_path(f"{d}/server.key")
            ca.cert_pem.write_to_path(f"{d}/ca.pem")
            lopts = {"tls_cert_file": f"{d}/server.pem", "tls_key_file": f"{d}/server.key"}
            dopts = {"tls_ca_file": f"{d}/ca.pem", "tls_server_name": "localhost"}
        url = f"ipc://{d}/s" if args.scheme == "ipc" else f"{args.scheme}://127.0.0.1:0"
        payload = b"x" * args.size
        wall = cpu = 0.0
        for _ in range(3):
            with gsp.socket("pull") as pull, gsp.socket("push") as push:
                bound = pull.listen(url, **lopts).url
                push.dial(bound, fail_fast=True, **dopts)
                push.send(payload)
                pull.recv()
                t, c = time.perf_counter(), time.process_time()
                def send_all() -> None:
                    for _ in range(args.n):
                        push.send(payload)

                sender = gevent.spawn(send_all)
                for _ in range(args.n):
                    if len(pull.recv()) != args.size:
                        raise SystemExit("a message arrived with the wrong size")
                dt, dc = time.perf_counter() - t, time.process_time() - c
                sender.get()
                wall, cpu = max(wall, args.n / dt), max(cpu, args.n / dc)
    scale, unit = (args.size / 1e6, "MB/s") if args.size >= 1024 else (1e-3, "k msgs/s")
    print(f"{args.scheme} {args.size} B x {args.n}: {wall * scale:.0f} {unit} wall, "
          f"{cpu * scale:.0f} {unit} CPU (best of 3, gsp from {gsp.__file__})")


if __name__ == "__main__":
    main()
