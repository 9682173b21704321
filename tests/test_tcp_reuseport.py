"""tcp_reuseport: several listeners, in one process or in several, on one tcp address."""

from __future__ import annotations

import sys
from typing import Any

import gevent
import pytest
from gevent import subprocess

import gsp
from gsp.testing import WAIT, wait_for
from tests.support import TCP

#: A REP in a process of its own on argv[1] with tcp_reuseport, answering each request with its
#: pid; it prints its bound URL, then serves until its stdin closes.
SERVER = """
import os, sys, gevent, gsp
rep = gsp.socket("rep", listen=gsp_url, tcp_reuseport=True)
def serve():
    while True:
        rep.recv()
        rep.send(str(os.getpid()).encode())
gevent.spawn(serve)
print(rep.listeners[0].url, flush=True)
gevent.get_hub().threadpool.spawn(sys.stdin.read).get()
rep.close()
""".replace("gsp_url", "sys.argv[1]")


def _until_both(url: str, seen: set[bytes], want: int) -> None:
    """Ask ``url`` who answers, each time from a new REQ (the kernel picks a listener by a hash
    of the connection's addresses), until ``want`` different ones did."""
    with gevent.Timeout(WAIT * 3, AssertionError(f"only {seen} answered")):
        while len(seen) < want:
            with gsp.socket("req", dial=url, recv_timeout=WAIT, send_timeout=WAIT) as req:
                req.send(b"who")
                seen.add(req.recv())


def test_two_sockets_of_one_process_listen_on_one_port_and_both_accept(mk: Any) -> None:
    a = mk("rep", listen=TCP, tcp_reuseport=True, recv_timeout=WAIT, send_timeout=WAIT)
    url = a.listeners[0].url
    b = mk("rep", listen=url, tcp_reuseport=True, recv_timeout=WAIT, send_timeout=WAIT)
    assert b.listeners[0].url == url
    assert a.get_option("tcp_reuseport") is True  # a socket option: its listeners take it

    def serve(rep: gsp.Socket, name: bytes) -> None:
        while True:
            rep.recv()
            rep.send(name)

    servers = [gevent.spawn(serve, a, b"a"), gevent.spawn(serve, b, b"b")]
    try:
        seen: set[bytes] = set()
        _until_both(url, seen, 2)
        wait_for(lambda: a.listeners[0].stats["accepted"] and b.listeners[0].stats["accepted"])
    finally:
        gevent.killall(servers)


def test_without_the_option_on_both_the_address_is_in_use(mk: Any) -> None:
    a = mk("pull", listen=TCP)
    url = a.listeners[0].url
    b = mk("pull")
    with pytest.raises(gsp.AddressInUse):
        b.listen(url, tcp_reuseport=True)  # a did not set it: the kernel refuses
    c = mk("pull", listen=TCP, tcp_reuseport=True)
    with pytest.raises(gsp.AddressInUse):
        b.listen(c.listeners[0].url)  # this one does not set it
    assert b.listeners == []


def test_bad_values_and_dialers_are_refused(mk: Any) -> None:
    s = mk("pull")
    for bad in (1, "yes", None):
        with pytest.raises(gsp.BadOption, match="tcp_reuseport must be True or False"):
            s.listen(TCP, tcp_reuseport=bad)
    with pytest.raises(gsp.BadOption, match="tcp_reuseport does nothing on a dialer"):
        s.dial("tcp://127.0.0.1:1", tcp_reuseport=True, block=False)


def test_tls_listeners_share_a_port_too(mk: Any, pki: Any) -> None:
    """tls+tcp binds as tcp does, so it takes the option too."""
    a = mk("pull", recv_timeout=WAIT)
    url = a.listen("tls+tcp://127.0.0.1:0", tcp_reuseport=True, **pki.listen_options()).url
    b = mk("pull", recv_timeout=WAIT)
    assert b.listen(url, tcp_reuseport=True, **pki.listen_options()).url == url
    with mk("push", send_timeout=WAIT) as push:
        push.dial(url, block=True, **pki.dial_options())
        push.send(b"over tls")
        got = gevent.wait([gevent.spawn(a.recv), gevent.spawn(b.recv)], count=1)
        assert got[0].get() == b"over tls"


def test_separate_processes_each_listen_on_one_port_and_share_the_connections() -> None:
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str) -> str:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, url],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(proc)
        assert proc.stdout is not None
        with gevent.Timeout(30, AssertionError("the server process did not start")):
            line = proc.stdout.readline().decode().strip()
        assert line.startswith("tcp://127.0.0.1:"), line
        return line

    try:
        url = start(TCP)
        assert start(url) == url  # the second binds the first's port

        seen: set[bytes] = set()
        _until_both(url, seen, 2)
        assert seen == {str(p.pid).encode() for p in procs}
    finally:
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=WAIT)
            proc.stdout.close()  # type: ignore[union-attr]
