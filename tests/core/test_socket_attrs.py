"""A socket's options and protocol methods are its attributes through its class (gsp._core.attrs),
not through ``__getattr__``, which would make every attribute load on every socket slower."""

from __future__ import annotations

from typing import Callable

import pytest

import gsp
from gsp import Socket

pytestmark = pytest.mark.core


def test_no_class_of_a_socket_looks_attributes_up_through_getattr(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    socks = [gsp_socket("req"), gsp_socket("sub")]
    for s in socks:
        assert isinstance(s, Socket) and type(s).__name__ == "Socket"
        assert not any("__getattr__" in vars(k) for k in type(s).__mro__), type(s).__mro__


def test_options_read_and_set_as_attributes_follow_the_option(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    rep = gsp_socket("rep", recv_timeout=2)
    assert rep.recv_timeout == 2.0 == rep.get_option("recv_timeout")
    rep.recv_timeout = 0.5
    assert rep.recv_timeout == 0.5 == rep.get_option("recv_timeout")
    rep.set_option("recv_timeout", 3)
    assert rep.recv_timeout == 3.0
    with pytest.raises(gsp.BadOption):
        rep.recv_timeout = -1
    with pytest.raises(gsp.BadOption, match="unknown option 'recv_timeot'"):
        rep.recv_timeot = 1  # a typo is refused, not kept
    assert "recv_timeout" in dir(rep) and "ttl" in dir(rep)


def test_protocol_methods_are_bound_to_the_socket_and_other_protocols_raise_not_supported(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    sub = gsp_socket("sub")
    req = gsp_socket("req")
    sub.subscribe(b"a")
    sub.unsubscribe(b"a")
    with pytest.raises(gsp.NotSupported, match="req sockets have no subscribe"):
        req.subscribe(b"a")
    with pytest.raises(AttributeError):
        assert req.no_such_thing is None  # (never reached)
    sub.close()
    with pytest.raises(gsp.Closed):
        sub.subscribe(b"b")


def test_sockets_with_the_same_attributes_share_one_class_and_real_attributes_come_first(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    a = gsp_socket("pull")
    b = gsp_socket("pull")
    c = gsp_socket("sub")
    assert type(a) is type(b) and type(a) is not type(c)  # (sub has its own methods)
    assert type(a).__bases__ == (Socket,)
    assert a.protocol == "pull" and a.raw is False  # attributes, not options or methods
    with pytest.raises(gsp.BadOption):
        a.note = "mine"  # a public name is an option's, and there is no such option
    own = "_note"  # a private name (the test's own, not gsp's): an attribute of its own
    setattr(a, own, "mine")
    assert getattr(a, own) == "mine" and not hasattr(b, own)


def test_a_subclass_of_socket_keeps_its_own_methods() -> None:
    class Mine(Socket):
        def hello(self) -> str:
            return f"hello from {self.protocol}"

    s = Mine("pair")
    try:
        assert isinstance(s, Mine) and s.hello() == "hello from pair"
        assert s.send_timeout is None
    finally:
        s.close()
