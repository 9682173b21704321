"""send_obj/recv_obj: msgpack bodies on sockets and contexts (docs/objects.md)."""

from __future__ import annotations

from typing import Any, Callable

import gevent
import msgpack
import pytest

import gsp
from gsp.testing import connected
from tests.support import nng

NESTED: Any = {
    "name": "gsp ☃ — ünïcode",
    "blob": bytes(range(256)),
    "nums": [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, -0.0],
    "flags": [True, False, None],
    "deep": {"a": [{"b": [[], {}, [b""]]}]},
    7: "int key",
    b"bytes key": "bytes key",
    "empty": "",
}


@pytest.fixture
def pipeline(gsp_socket: Callable[..., gsp.Socket], gsp_free_url: Callable[[str], str]
             ) -> tuple[gsp.Socket, gsp.Socket]:
    url = gsp_free_url("tcp")
    pull = gsp_socket("pull", listen=url, recv_timeout=5)
    push = gsp_socket("push", send_timeout=5)
    connected(pull, url, push)
    return push, pull


def test_nested_structures_round_trip(pipeline: tuple[gsp.Socket, gsp.Socket]) -> None:
    push, pull = pipeline
    for obj in (NESTED, [], "", b"", 0, None, ["tuple", "becomes", "list"]):
        push.send_obj(obj)
        assert pull.recv_obj() == obj
    push.send_obj(("a", (1, b"x")))
    assert pull.recv_obj() == ["a", [1, b"x"]]  # msgpack has one array type: tuples come back lists


def test_the_body_is_plain_msgpack(pipeline: tuple[gsp.Socket, gsp.Socket]) -> None:
    push, pull = pipeline
    push.send_obj(NESTED)
    body = pull.recv()
    assert body == msgpack.packb(NESTED, use_bin_type=True)
    assert msgpack.unpackb(body, raw=False, strict_map_key=False) == NESTED
    push.send(msgpack.packb({"from": "another library", "b": b"\xff"}, use_bin_type=True))
    assert pull.recv_obj() == {"from": "another library", "b": b"\xff"}


@pytest.mark.parametrize("body", [b"", b"\xc1", b"\x92\x01", b"\x01\x02", b"\xa2\xff\xfe",
                                  b"\x81\x91\x01\x02"],
                         ids=["empty", "never-used-byte", "truncated", "trailing",
                              "bad-utf8", "list-as-key"])
def test_a_body_that_is_not_one_msgpack_object_raises_bad_message(
        pipeline: tuple[gsp.Socket, gsp.Socket], body: bytes) -> None:
    push, pull = pipeline
    push.send(body)
    with pytest.raises(gsp.BadMessage, match="not one msgpack object") as info:
        pull.recv_obj()
    assert isinstance(info.value, gsp.GspError) and isinstance(info.value, ValueError)
    push.send_obj("next")  # the bad message was consumed; the socket serves on
    assert pull.recv_obj() == "next"


def test_objects_msgpack_cannot_encode_raise_before_sending(
        pipeline: tuple[gsp.Socket, gsp.Socket]) -> None:
    push, pull = pipeline
    with pytest.raises(TypeError, match="cannot encode set as msgpack"):
        push.send_obj({1, 2})
    with pytest.raises(ValueError, match="cannot encode int as msgpack"):
        push.send_obj(2**64)
    push.send_obj("only this")
    assert pull.recv_obj() == "only this"


def test_per_call_timeout_overrides_the_option_and_leaves_it_alone(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    pull = gsp_socket("pull", recv_timeout=None)
    push = gsp_socket("push", send_timeout=None)
    with pytest.raises(gsp.Timeout):
        pull.recv_obj(timeout=0.01)
    with pytest.raises(gsp.Timeout):
        push.send_obj("nobody", timeout=0.01)
    assert pull.recv_timeout is None and push.send_timeout is None
    with pytest.raises(gsp.BadOption):
        pull.recv_obj(timeout=-1)
    pull.close()
    with pytest.raises(gsp.Closed):
        pull.recv_obj(timeout=1)
    with pytest.raises(gsp.Closed):
        pull.recv_obj()


def test_contexts_send_and_recv_objects(gsp_socket: Callable[..., gsp.Socket],
                                        gsp_free_url: Callable[[str], str],
                                        spawn: Callable[..., gevent.Greenlet]) -> None:
    url = gsp_free_url("tcp")
    rep = gsp_socket("rep", listen=url, recv_timeout=5)
    req = gsp_socket("req", recv_timeout=5)
    connected(rep, url, req)

    def serve(ctx: gsp.Context) -> None:
        request = ctx.recv_obj()
        ctx.send_obj({"echo": request, "blob": b"\x00\x01"}, timeout=5)

    servers = [spawn(serve, rep.open_context()) for _ in range(3)]
    clients = [req.open_context() for _ in range(3)]
    for i, ctx in enumerate(clients):
        ctx.send_obj(["job", i])
    replies = sorted((c.recv_obj(timeout=5) for c in clients), key=lambda r: r["echo"][1])
    assert replies == [{"echo": ["job", i], "blob": b"\x00\x01"} for i in range(3)]
    gevent.joinall(servers, raise_error=True, timeout=5)
    ctx = rep.open_context()
    with pytest.raises(gsp.Timeout):
        ctx.recv_obj(timeout=0.01)
    ctx.close()
    with pytest.raises(gsp.Closed):
        ctx.send_obj("x", timeout=1)


@pytest.mark.interop
def test_pynng_sends_msgpack_and_gsp_decodes_it_and_back(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    pull = gsp_socket("pull", listen="tcp://127.0.0.1:0", recv_timeout=5)
    url = pull.listeners[0].url
    with nng.socket("push") as npush, nng.socket("pull") as npull:
        nng.run(npush.dial, url, block=True)
        nng.run(npush.send, msgpack.packb(NESTED, use_bin_type=True))
        assert pull.recv_obj() == NESTED
        back = npull.listen("tcp://127.0.0.1:0")
        push = gsp_socket("push", send_timeout=5)
        push.dial(nng.bound_url(back), fail_fast=True)
        push.send_obj(NESTED)
        body = nng.run(npull.recv)
        assert msgpack.unpackb(body, raw=False, strict_map_key=False) == NESTED
