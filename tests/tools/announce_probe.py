"""What hostile announcements cost a gsp server: N peers each complete the handshake, announce a
``max_recv_size`` message (1 MiB by default) and send nothing more.

    python tools/announce_probe.py --scheme tcp -n 1000

The server (a gsp pull socket) runs in a child process; this process opens the connections and
prints the server's RSS: listening, with N handshaken idle peers, and once each announced. Schemes:
tcp, tls+tcp, ws, wss (TLS certificates from trustme, generated on the fly).
"""

from __future__ import annotations

import argparse
import os
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl
from gevent.fileobject import FileObjectPosix

PUSH_HANDSHAKE = b"\x00SP\x00\x00\x50\x00\x00"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def serve(scheme: str, certs: str) -> None:
    import gsp

    opts: dict[str, Any] = {}
    if scheme in ("tls+tcp", "wss"):
        opts = {"tls_cert_file": f"{certs}/server.pem", "tls_key_file": f"{certs}/server.key"}
    path = "/sp" if scheme.startswith("ws") else ""
    with gsp.socket("pull") as s:
        url = s.listen(f"{scheme}://127.0.0.1:0{path}", **opts).url
        print(url, flush=True)
        stdin = FileObjectPosix(sys.stdin.fileno(), "r")  # read without blocking the loop
        for line in stdin:  # "pipes": how many are up; anything else ends
            if line.strip() != "pipes":
                break
            gevent.sleep(0.5)  # let pending handshakes and reads run
            print(len(s.pipes), flush=True)


def open_peer(scheme: str, port: int, ctx: ssl.SSLContext | None) -> Any:
    sock = gsocket.create_connection(("127.0.0.1", port), timeout=30)
    if ctx is not None:
        sock = gssl.SSLSocket(sock=sock, server_hostname="localhost", _context=ctx)
    if scheme.startswith("ws"):
        sock.sendall(b"GET /sp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     b"Sec-WebSocket-Version: 13\r\n"
                     b"Sec-WebSocket-Protocol: pull.sp.nanomsg.org\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head[:80]
    else:
        sock.sendall(PUSH_HANDSHAKE)
        got = b""
        while len(got) < 8:
            got += sock.recv(8 - len(got))
    return sock


def announce(scheme: str, sock: Any, size: int, body: int) -> None:
    if scheme.startswith("ws"):  # a masked binary frame header with a 64-bit length
        sock.sendall(b"\x82\xff" + struct.pack(">Q", size) + b"\x01\x02\x03\x04" + bytes(body))
    else:
        sock.sendall(struct.pack(">Q", size) + bytes(body))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="tcp", choices=["tcp", "tls+tcp", "ws", "wss"])
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--body", type=int, default=0, help="body bytes sent after the announcement")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.scheme, args.serve)
        return
    import trustme

    with tempfile.TemporaryDirectory() as certs:
        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(f"{certs}/server.pem")
        for pem in cert.cert_chain_pems[1:]:
            pem.write_to_path(f"{certs}/server.pem", append=True)
        cert.private_key_pem.write_to_path(f"{certs}/server.key")
        ctx = None
        if args.scheme in ("tls+tcp", "wss"):
            ctx = ssl.create_default_context()
            ca.configure_trust(ctx)
        server = subprocess.Popen([sys.executable, __file__, "--scheme", args.scheme,
                                   "--serve", certs], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdin is not None and server.stdout is not None
        try:
            url = server.stdout.readline().strip()
            port = int(url.rsplit(":", 1)[1].split("/")[0])

            def pipes() -> int:
                assert server.stdin is not None and server.stdout is not None
                server.stdin.write("pipes\n")
                server.stdin.flush()
                return int(server.stdout.readline())

            pipes()
            base = rss_mb(server.pid)
            peers = [open_peer(args.scheme, port, ctx) for _ in range(args.n)]
            up = pipes()
            idle = rss_mb(server.pid)
            for p in peers:
                announce(args.scheme, p, args.size, args.body)
            time.sleep(0.5)
            still = pipes()
            held = rss_mb(server.pid)
            print(f"{args.scheme}: {args.n} peers announcing {args.size} bytes each, sending "
                  f"{args.body} of them "
                  f"(gsp from {os.path.dirname(str(__import__('gsp').__file__))})")
            print(f"  server RSS: listening {base:.0f} MB, {up} idle pipes {idle:.0f} MB, "
                  f"{still} pipes after the announcements {held:.0f} MB "
                  f"(announcements: {held - idle:+.0f} MB)")
            for p in peers:
                p.close()
        finally:
            server.stdin.close()
            server.wait(10)


if __name__ == "__main__":
    main()
