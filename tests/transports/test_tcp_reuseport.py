"""tcp_reuseport: several listeners, in one process or in several, on one tcp address."""

from __future__ import annotations

from typing import Any

import gevent
import pytest

import gsp
from gsp.testing import WAIT, wait_for
from tests.support import TCP, until_answered_by, who_processes


def test_two_sockets_of_one_process_listen_on_one_port_and_both_accept(gsp_socket: Any) -> None:
    a = gsp_socket("rep", listen=TCP, tcp_reuseport=True, recv_timeout=WAIT, send_timeout=WAIT)
    url = a.listeners[0].url
    b = gsp_socket("rep", listen=url, tcp_reuseport=True, recv_timeout=WAIT, send_timeout=WAIT)
    assert b.listeners[0].url == url
    assert a.get_option("tcp_reuseport") is True  # a socket option: its listeners take it

    def serve(rep: gsp.Socket, name: bytes) -> None:
        while True:
            rep.recv()
            rep.send(name)

    servers = [gevent.spawn(serve, a, b"a"), gevent.spawn(serve, b, b"b")]
    try:
        assert until_answered_by(url, 2) == {b"a", b"b"}
        wait_for(lambda: a.listeners[0].stats["accepted"] and b.listeners[0].stats["accepted"])
    finally:
        gevent.killall(servers)


def test_without_the_option_on_both_the_address_is_in_use(gsp_socket: Any) -> None:
    a = gsp_socket("pull", listen=TCP)
    url = a.listeners[0].url
    b = gsp_socket("pull")
    with pytest.raises(gsp.AddressInUse):
        b.listen(url, tcp_reuseport=True)  # a did not set it: the kernel refuses
    c = gsp_socket("pull", listen=TCP, tcp_reuseport=True)
    with pytest.raises(gsp.AddressInUse):
        b.listen(c.listeners[0].url)  # this one does not set it
    assert b.listeners == []


def test_bad_values_and_dialers_are_refused(gsp_socket: Any) -> None:
    s = gsp_socket("pull")
    for bad in (1, "yes", None):
        with pytest.raises(gsp.BadOption, match="tcp_reuseport must be True or False"):
            s.listen(TCP, tcp_reuseport=bad)
    with pytest.raises(gsp.BadOption, match="tcp_reuseport does nothing on a dialer"):
        s.dial("tcp://127.0.0.1:1", tcp_reuseport=True, background=True)


def test_tls_listeners_share_a_port_too(gsp_socket: Any, pki: Any) -> None:
    """tls+tcp binds as tcp does, so it takes the option too."""
    a = gsp_socket("pull", recv_timeout=WAIT)
    url = a.listen("tls+tcp://127.0.0.1:0", tcp_reuseport=True, **pki.listen_options()).url
    b = gsp_socket("pull", recv_timeout=WAIT)
    assert b.listen(url, tcp_reuseport=True, **pki.listen_options()).url == url
    with gsp_socket("push", send_timeout=WAIT) as push:
        push.dial(url, fail_fast=True, **pki.dial_options())
        push.send(b"over tls")
        got = gevent.wait([gevent.spawn(a.recv), gevent.spawn(b.recv)], count=1)
        assert got[0].get() == b"over tls"


def test_separate_processes_each_listen_on_one_port_and_share_the_connections() -> None:
    with who_processes() as start:
        first, url = start(TCP, tcp_reuseport=True)
        second, again = start(url, tcp_reuseport=True)  # the second binds the first's port
        assert again == url
        assert until_answered_by(url, 2) == {str(p.pid).encode() for p in (first, second)}
