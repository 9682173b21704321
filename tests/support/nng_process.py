"""An nng peer in a process of its own: a pynng socket driven over a pipe, for the interop tests
whose nng side can abort the whole process when it closes.

nng 1.x (1.11, the copy pynng 0.9 bundles) can panic — ``pthread_mutex_lock: Invalid argument``
from ``nni_task_exec`` on one of its threads, an abort of the process — while it tears a
WebSocket-over-TLS pipe down: in ``nng_close`` after a wss exchange with gsp (about once in 25
runs of plugins/gsp-ws/tests/test_wsgi.py's wss test in one process), and when gsp closed its end first (the
wss interop matrix, about once in 20 runs of plugins/gsp-ws/tests/test_ws.py). It is nng's alone: two pynng
sockets in one process, a wss listener and a dialer closed after one message, abort the same way
with no gsp involved (3 processes of 4 within 150 rounds), and gsp's end sending TLS's
close_notify before it closes changes nothing. nanomsg/nng#2110 reports the same panic: a use
after free when a socket or listener closes while a pipe is still being torn down.
In the test process that ends the whole pytest run, however far it got. Here :class:`NngProcess`
runs the pynng socket in a child process (``python tests/support/nng_process.py KIND``); the test calls
``send``/``recv``/``listen``/``dial`` on it as on a pynng socket (from a native thread,
``tests.support.nng.run``, when gsp's end must be served meanwhile), and :meth:`NngProcess.close` ends
the child with ``os._exit``, never through nng's close (the report above: a process that leaves
its sockets to the exit does not crash); a test closes it before gsp's end, so that nng never
tears a wss pipe down. A child that dies any other way fails the test that drives it, with its
output — not the run.

The child speaks one JSON object per line each way: ``{"op": ...}`` in, ``{"ok": ...}`` or
``{"error": "Timeout" | "<message>"}`` out; bytes travel as hex.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pynng

CLASSES = {
    "pair": "Pair0", "pair1": "Pair1", "push": "Push0", "pull": "Pull0", "req": "Req0",
    "rep": "Rep0", "pub": "Pub0", "sub": "Sub0", "surveyor": "Surveyor0",
    "respondent": "Respondent0", "bus": "Bus0",
}


class NngProcess:
    """A pynng socket of protocol ``kind`` in a child process. ``tls``: keyword arguments of
    ``pynng.TLSConfig`` (``mode`` "server" or "client", ``*_string`` PEM texts, ``server_name``,
    ``auth_required``) to set as the socket's TLS configuration; ``options``: more of the pynng
    socket's keyword arguments (JSON values: ``recv_max_size=...``). A context manager: leaving
    it closes the child (:meth:`close`)."""

    def __init__(self, kind: str, recv_timeout: int = 3000, send_timeout: int = 3000,
                 tls: dict[str, Any] | None = None, **options: Any) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), kind, str(recv_timeout),
             str(send_timeout), json.dumps(options)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if tls is not None:
                self._call("tls", **tls)
        except BaseException:
            self._reap()
            raise

    def __enter__(self) -> NngProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, op: str, **args: Any) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            try:
                self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except (OSError, ValueError):  # its pipes are broken, or closed after it died
                line = ""
        if not line:
            self._closed = True  # reported here: close() has nothing more to say
            self._proc.kill()
            try:
                _, err = self._proc.communicate(timeout=30)
            except ValueError:  # read already, after it died
                err = ""
            raise RuntimeError(f"the nng peer process died ({self._proc.returncode}) during "
                               f"{op!r}: {err[-3000:]}")
        reply = json.loads(line)
        if "error" in reply:
            if reply["error"] == "Timeout":
                raise pynng.Timeout(f"nng peer: {op} timed out", 5)  # NNG_ETIMEDOUT
            raise RuntimeError(f"nng peer: {op}: {reply['error']}")
        return reply["ok"]

    def listen(self, url: str) -> str:
        """Listen on ``url``; the URL bound (with its real port for port 0)."""
        return str(self._call("listen", url=url))

    def dial(self, url: str, block: bool = True) -> None:
        self._call("dial", url=url, block=block)

    def subscribe(self, topic: bytes) -> None:
        self._call("subscribe", topic=topic.hex())

    def send(self, data: bytes) -> None:
        self._call("send", data=data.hex())

    def recv(self) -> bytes:
        return bytes.fromhex(self._call("recv"))

    @property
    def pipes(self) -> list[int]:
        """The ids of the socket's pipes now."""
        return list(self._call("pipes"))

    def close(self) -> None:
        """End the child without nng's close path (see the module's doc), in bounded waits: a
        child still running after them is killed (``Popen.kill``: its pid). Fails, with the
        child's output, unless the child ended cleanly on its exit request: one that had
        crashed (nng aborts) or had to be killed fails the test that drives it."""
        if self._closed:
            return
        self._closed = True
        assert self._proc.stdin is not None
        try:
            with self._lock:
                self._proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self._proc.stdin.flush()
        except (OSError, ValueError):  # it died already: its exit status says how
            pass
        finally:
            err = self._reap()
        if self._proc.returncode != 0:
            raise RuntimeError(f"the nng peer process ended with status {self._proc.returncode}"
                               f" instead of exiting: {err[-3000:]}")

    def _reap(self) -> str:
        """Close the child's stdin (it exits at its end), wait for it (bounded), kill it if it
        still runs; the tail of its stderr."""
        for pipe in (self._proc.stdin, self._proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except (OSError, ValueError):  # a broken pipe to a dead child: nothing to flush
                pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
        if self._proc.stderr is None or self._proc.stderr.closed:
            return ""
        with self._proc.stderr:
            return self._proc.stderr.read()


def tls_config(args: dict[str, Any]) -> pynng.TLSConfig:
    """A ``pynng.TLSConfig`` from ``PKI.nng_server_args``/``nng_client_args`` (``mode``
    "server" or "client", ``auth_required``, and ``TLSConfig``'s own keyword arguments)."""
    args = dict(args)
    mode = pynng.TLSConfig.MODE_SERVER if args.pop("mode") == "server" else \
        pynng.TLSConfig.MODE_CLIENT
    if args.pop("auth_required", False):
        args["auth_mode"] = pynng.TLSConfig.AUTH_MODE_REQUIRED
    return pynng.TLSConfig(mode, **args)


def _tls(sock: Any, **args: Any) -> None:
    sock.tls_config = tls_config(args)


def _listen(sock: Any, url: str) -> str:
    lst = sock.listen(url)
    scheme, rest = url.split("://", 1)
    path = rest[rest.find("/"):] if "/" in rest else ""
    return f"{scheme}://{lst.local_address}{path}"  # with the real port for port 0


OPS: dict[str, Any] = {
    "tls": _tls,
    "listen": _listen,
    "dial": lambda sock, url, block: sock.dial(url, block=block) and None,
    "subscribe": lambda sock, topic: sock.subscribe(bytes.fromhex(topic)),
    "send": lambda sock, data: sock.send(bytes.fromhex(data)),
    "recv": lambda sock: sock.recv().hex(),
    "pipes": lambda sock: [p.id for p in sock.pipes],
}


def _serve(kind: str, recv_timeout: int, send_timeout: int, options: dict[str, Any]) -> None:
    sock = getattr(pynng, CLASSES[kind])(recv_timeout=recv_timeout, send_timeout=send_timeout,
                                         **options)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "exit":
            os._exit(0)  # never nng's close path (see the module's doc)
        try:
            reply: dict[str, Any] = {"ok": OPS[op](sock, **cmd)}
        except pynng.Timeout:
            reply = {"error": "Timeout"}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    os._exit(0)  # stdin closed: the test process went away


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]))
