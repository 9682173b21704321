"""Helpers for driving nng 2.0 (the ``nng`` module of the ``nng-ssl`` package) from gevent tests.

The ``nng`` package (Cython bindings bundling an nng 2.0.0 development snapshot with Mbed TLS
4.1) releases the GIL in its blocking calls, so its peer runs in the test process: each blocking
call goes to gevent's native threadpool while the hub keeps serving gsp, as ``tests/support/nng.py`` does
for pynng (nng 1.x). The two bindings are separate libraries and can share the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import gevent
import nng
from gevent.threadpool import ThreadPool

from tests.support.certs import PKI

#: protocol name -> (nng socket class, keyword arguments)
SOCKETS: dict[str, tuple[type[nng.Socket], dict[str, Any]]] = {
    "pair": (nng.PairSocket, {"v0": True}), "pair1": (nng.PairSocket, {}),
    "push": (nng.PushSocket, {}), "pull": (nng.PullSocket, {}),
    "req": (nng.ReqSocket, {}), "rep": (nng.RepSocket, {}),
    "pub": (nng.PubSocket, {}), "sub": (nng.SubSocket, {}),
    "surveyor": (nng.SurveyorSocket, {}), "respondent": (nng.RespondentSocket, {}),
    "bus": (nng.BusSocket, {}),
}


def run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """Run a blocking nng call on a native thread; this greenlet waits, others run."""
    return gevent.get_hub().threadpool.apply(fn, args, kw)


def spawn(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """Start a blocking nng call on a native thread; ``.get()`` the returned AsyncResult."""
    return gevent.get_hub().threadpool.spawn(fn, *args, **kw)


def socket(kind: str, timeout_ms: int = 5000) -> nng.Socket:
    """An nng 2.0 socket of the named protocol with bounded timeouts."""
    cls, kw = SOCKETS[kind]
    s = cls(**kw)
    s.recv_timeout = timeout_ms
    s.send_timeout = timeout_ms
    return s


def recv(sock: nng.Socket) -> bytes:
    return sock.recv().to_bytes()


def recv_many(sock: nng.Socket, count: int) -> list[bytes]:
    """Receive ``count`` messages on one native thread (run it with :func:`spawn`)."""
    return [sock.recv().to_bytes() for _ in range(count)]


def send_many(sock: nng.Socket, messages: list[bytes]) -> None:
    for m in messages:
        sock.send(m)


def server_tls(pki: PKI) -> nng.TlsConfig:
    return nng.TlsConfig.for_server(cert_pem=Path(pki.server_cert_file).read_text(),
                                    key_pem=Path(pki.server_key_file).read_text())


def client_tls(pki: PKI) -> nng.TlsConfig:
    # Mbed TLS matches DNS names; the server certificate carries "localhost" for it.
    return nng.TlsConfig.for_client(server_name="localhost", ca_file=pki.ca_file)


def listen(sock: nng.Socket, url: str, tls: nng.TlsConfig | None = None) -> str:
    """Listen on ``url`` (port 0 allowed); the URL bound, with its real port."""
    lst = sock.add_listener(url, tls=tls)
    run(lst.start)
    scheme, rest = url.split("://", 1)
    if scheme in ("ipc", "abstract", "unix"):
        return url
    hostport, slash, path = rest.partition("/")
    host = hostport.rsplit(":", 1)[0]
    return f"{scheme}://{host}:{lst.port}{slash}{path}"


def dial(sock: nng.Socket, url: str, tls: nng.TlsConfig | None = None) -> None:
    """Dial ``url`` and wait until the connection is up (raises nng's error if it fails)."""
    run(sock.add_dialer(url, tls=tls, reconnect_min_ms=50, reconnect_max_ms=200).start,
        block=True)


def active_pipes(sock: nng.Socket) -> int:
    return sum(1 for p in sock.pipes if p.status == nng.PipeStatus.ACTIVE)


#: Closes run on threads of their own, not on the hub's threadpool: a close that never returns
#: would hold one of its threads for the rest of the process, and enough of them starve what
#: else the hub sends there (gevent's resolver, which every later dial of a name waits on).
_CLOSER = ThreadPool(maxsize=64)


class CloseHung(AssertionError):
    """nng 2.0's close of a socket did not return in time. This snapshot's reap thread can
    wait forever (in ``nni_task_wait``) for a TLS pipe whose peer dropped the connection at
    the moment the socket closed; once it does, no later close in the process returns."""


def close(sock: nng.Socket, timeout: float = 5.0) -> None:
    """Close ``sock`` on a native thread (nng's close waits for its pipes), bounded: raises
    :class:`CloseHung` if it does not return within ``timeout`` seconds."""
    res = _CLOSER.spawn(sock.close)
    try:
        res.get(timeout=timeout)
    except gevent.Timeout:
        raise CloseHung(f"nng 2.0's close of {type(sock).__name__} did not return in "
                        f"{timeout} s (see tests/support/nng2.py: CloseHung)") from None
