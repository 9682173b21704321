"""Raw gevent sockets and no library: the floor a library on gevent can approach.

Length-prefixed frames (u64 BE, like SP over tcp and ipc) written by hand the way a careful
programmer would. There is no SP protocol: "rep" echoes whatever arrives, "pub" writes every
message to every accepted connection, and there is no inproc transport.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Callable

from ..ctl import NotApplicable
from .base import Lib, Sock
from .loops import DATA
from .runtime import Greenlets

_LEN = struct.Struct(">Q")
_BIG = 64 * 1024


class RawConn:
    """One connection. Sends are buffered and flushed as one write (at 64 KiB, on demand, or
    after every message when ``eager``: requests and replies), big bodies are written and read in
    place, small frames parsed out of each recv."""

    __slots__ = ("sock", "out", "outn", "limit", "msgs", "pending")

    def __init__(self, sock: Any, eager: bool = True) -> None:
        self.sock = sock
        self.out: list[bytes] = []
        self.outn = 0
        self.limit = 1 if eager else _BIG  # buffered bytes that trigger a flush
        self.msgs: deque[bytes] = deque()
        self.pending = b""

    def send(self, data: bytes, flush: bool = False) -> None:
        n = len(data)
        if n >= _BIG:
            self.out.append(_LEN.pack(n))
            self.flush()
            self.sock.sendall(data)
            return
        self.out.append(_LEN.pack(n))
        self.out.append(data)
        self.outn += n + 8
        if flush or self.outn >= self.limit:
            self.flush()

    def flush(self) -> None:
        if self.out:
            self.sock.sendall(b"".join(self.out))
            self.out.clear()
            self.outn = 0

    def recv(self) -> bytes:
        msgs = self.msgs
        while not msgs:
            chunk = self.sock.recv(256 * 1024)
            if not chunk:
                raise EOFError("peer closed")
            data = self.pending + chunk if self.pending else chunk
            pos, end = 0, len(data)
            unpack = _LEN.unpack_from
            while end - pos >= 8:
                (n,) = unpack(data, pos)
                start = pos + 8
                if end - start < n:
                    if n >= _BIG:  # read the rest of a big body straight into place
                        body = bytearray(n)
                        have = end - start
                        body[:have] = data[start:]
                        view = memoryview(body)
                        while have < n:
                            got = self.sock.recv_into(view[have:])
                            if not got:
                                raise EOFError("peer closed")
                            have += got
                        msgs.append(bytes(body))
                        pos = end
                    break
                pos = start + n
                msgs.append(data[start:pos])
            self.pending = data[pos:]
        return msgs.popleft()

    def close(self) -> None:
        self.sock.close()


class RawListener:
    """A listening socket and the connections it accepted (closed with it)."""

    eager = True  # accepted connections flush every send (replies)

    def __init__(self, lib: Raw, sock: Any) -> None:
        self.lib = lib
        self.sock = sock
        self.conns: list[RawConn] = []
        self.server: Any = None

    def accept(self) -> RawConn:
        s, _ = self.sock.accept()
        if s.family != self.lib.gs.AF_UNIX:
            s.setsockopt(self.lib.gs.IPPROTO_TCP, self.lib.gs.TCP_NODELAY, 1)
        c = RawConn(s, self.eager)
        self.conns.append(c)
        return c

    def serve(self, handler: Callable[[RawConn], None]) -> None:
        """Accept in the background, each connection handled by a greenlet of its own."""
        spawn = self.lib.gevent.spawn

        def loop() -> None:
            while True:
                spawn(handler, self.accept())
        self.server = spawn(loop)

    def stop(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server = None

    def close(self) -> None:
        self.stop()
        for c in self.conns:
            c.close()
        self.sock.close()


class RawPub(RawListener):
    """Every message to every accepted connection; data is coalesced, warm-up and end markers
    go out at once."""

    eager = False

    def __init__(self, lib: Raw, sock: Any) -> None:
        super().__init__(lib, sock)
        self.serve(lambda c: None)

    def send(self, m: bytes) -> None:
        flush = m[0] != DATA
        for c in list(self.conns):
            c.send(m, flush)


class Raw(Lib):
    name = "raw-gevent"
    conns_dialers = Lib.conns_dialers_pooled

    def __init__(self) -> None:
        from gevent import socket as gsocket
        self.greenlets = Greenlets()
        super().__init__(self.greenlets)
        self.gevent = self.greenlets.gevent
        self.gs: Any = gsocket

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        gs = self.gs
        if url.startswith("tcp://"):
            host, port = url[6:].rsplit(":", 1)
            ls = gs.socket(gs.AF_INET, gs.SOCK_STREAM)
            ls.setsockopt(gs.SOL_SOCKET, gs.SO_REUSEADDR, 1)
            ls.bind((host, int(port)))
            bound = f"tcp://{host}:{ls.getsockname()[1]}"
        elif url.startswith("ipc://"):
            ls = gs.socket(gs.AF_UNIX, gs.SOCK_STREAM)
            ls.bind(url[6:])
            bound = url
        else:
            raise NotApplicable("the raw baseline speaks tcp and ipc only")
        ls.listen(1024)
        return (RawPub if kind == "pub" else RawListener)(self, ls), bound

    def dial(self, kind: str, url: str, block: bool | None = None,
             timeout: float | None = None) -> Sock:
        gs = self.gs
        if url.startswith("tcp://"):
            host, port = url[6:].rsplit(":", 1)
            s = gs.create_connection((host, int(port)))
            s.setsockopt(gs.IPPROTO_TCP, gs.TCP_NODELAY, 1)
        else:
            s = gs.socket(gs.AF_UNIX, gs.SOCK_STREAM)
            s.connect(url[6:])
        s.settimeout(timeout)
        return RawConn(s, eager=kind != "push")  # a pusher streams; everyone else waits

    def peer(self, listening: Any) -> Sock:
        conn: RawConn = listening.accept()
        return conn

    def flush(self, sock: Sock) -> None:
        if isinstance(sock, RawConn):
            sock.flush()

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        listening.serve(_echo)
        stop: Callable[[], None] = listening.stop
        return stop

    def pipes(self, listening: Any) -> int | None:
        return len(listening.conns)

    def storm_listener(self, url: str) -> tuple[str, Callable[[], int], Callable[[], None]]:
        """gevent's StreamServer, with gsp's listen backlog: a greenlet per connection that
        reads once; the server closes the connection when it returns."""
        from gevent.server import StreamServer

        if not url.startswith("tcp://"):
            raise NotApplicable("the StreamServer anchor listens on tcp only")
        host, port = url[6:].rsplit(":", 1)
        done = [0]

        def handle(sock: Any, _: Any) -> None:
            try:
                sock.recv(64)
            except OSError:
                pass
            done[0] += 1

        server = StreamServer((host, int(port)), handle, backlog=4096)
        server.start()
        return f"tcp://{host}:{server.server_port}", lambda: done[0], server.stop


def _echo(c: RawConn) -> None:
    try:
        while True:
            c.send(c.recv())
    except (EOFError, OSError):
        c.close()
