"""Errors that explain themselves: per-call timeouts and non-blocking calls, timeouts in
seconds (timedelta too, milliseconds refused), messages that state the timeout asked for, name
both protocols of a handshake, speak of the socket the user called, say when a newer call
canceled this one, and refuse an endpoint option that would do nothing."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import gevent
import pytest

import gsp
from gsp.chan import Chan, Recv, select_channels
from gsp.options import Option, boolean, seconds
from gsp.protocol import Deadline
from gsp.testing import WAIT, wait_for
from gsp.transport import wire

T = 0.02  # a timeout that is meant to run out


def esc(text: str) -> str:
    return "^" + re.escape(text) + "$"


# -- per-call timeouts and block=False -----------------------------------------------------------

def test_recv_and_send_timeouts_state_the_timeout_asked_for_and_its_source() -> None:
    with gsp.socket("pull", recv_timeout=T) as pull, gsp.socket("push", send_timeout=T) as push:
        with pytest.raises(gsp.Timeout, match=esc("recv timed out after 0.02 s (recv_timeout=0.02)")) as ei:
            pull.recv()
        assert ei.value.timeout == T and not isinstance(ei.value, gsp.WouldBlock)
        with pytest.raises(gsp.Timeout, match=esc("recv timed out after 0.03 s (timeout=0.03)")):
            pull.recv(timeout=0.03)
        with pytest.raises(gsp.Timeout, match=esc("recv timed out after 0.01 s (timeout=0.01)")):
            pull.recv(0.01)  # positional too
        with pytest.raises(gsp.Timeout, match=esc("recv timed out after 0.01 s (timeout=0.01)")):
            pull.recv_msg(timeout=timedelta(milliseconds=10))
        with pytest.raises(gsp.Timeout, match=esc("send timed out after 0.02 s (send_timeout=0.02)")):
            push.send(b"x")
        with pytest.raises(gsp.Timeout, match=esc("send timed out after 0.01 s (timeout=0.01)")):
            push.send_msg(gsp.Message(b"x"), timeout=0.01)


def test_block_false_and_a_zero_timeout_raise_would_block_in_the_sockets_terms() -> None:
    with gsp.socket("pull", recv_timeout=0) as pull, gsp.socket("push") as push:
        with pytest.raises(gsp.WouldBlock,
                           match=esc("recv would block: no message queued (recv_timeout=0)")) as ei:
            pull.recv()
        assert ei.value.timeout == 0
        with pytest.raises(gsp.WouldBlock,
                           match=esc("recv would block: no message queued (block=False)")):
            pull.recv(block=False)
        with pytest.raises(gsp.WouldBlock,
                           match=esc("recv would block: no message queued (timeout=0)")):
            pull.recv_msg(timeout=0)
        with pytest.raises(gsp.WouldBlock, match=esc(
                "send would block: no peer can take the message now (block=False)")):
            push.send(b"x", block=False)
        with pytest.raises(gsp.WouldBlock, match=esc(
                "send would block: no peer can take the message now (timeout=0)")):
            push.send_msg(gsp.Message(b"x"), timeout=timedelta(0))


def test_block_false_takes_a_queued_message_and_a_per_call_timeout_overrides_the_option() -> None:
    url = "inproc://errors-per-call"
    with gsp.socket("pull", listen=url, recv_timeout=0) as pull, \
            gsp.socket("push", dial=url, send_timeout=WAIT) as push:
        push.send(b"one")
        got: list[bytes] = []

        def take() -> bool:
            try:
                got.append(pull.recv(block=False))
            except gsp.WouldBlock:
                return False
            return True

        wait_for(take, what="the queued message")
        assert got == [b"one"]
        # recv_timeout=0 would raise WouldBlock; timeout=None waits for the late message.
        g = gevent.spawn_later(0.01, push.send, b"two")
        assert pull.recv(timeout=None) == b"two"
        g.join()
        gevent.spawn_later(0.01, push.send_msg, gsp.Message(b"three"), timeout=WAIT)
        assert pull.recv_msg(timeout=timedelta(seconds=WAIT)).body == b"three"


def test_bad_per_call_arguments_are_refused() -> None:
    with gsp.socket("pull") as pull:
        with pytest.raises(gsp.BadOption, match=esc(
                "block=False means timeout 0; it cannot go with timeout=1")):
            pull.recv(block=False, timeout=1)
        with pytest.raises(gsp.BadOption, match=esc("block must be True or False, not 0")):
            pull.recv(block=0)  # type: ignore[arg-type]
        with pytest.raises(gsp.BadOption, match=r"^timeout must be a number of seconds >= 0 or a "
                                                r"timedelta or None, not -1$"):
            pull.recv(timeout=-1)


def test_contexts_take_per_call_timeouts_and_say_the_timeout_is_theirs() -> None:
    with gsp.socket("rep", recv_timeout=WAIT) as rep, gsp.socket("req") as req:
        ctx = rep.open_context()
        ctx.recv_timeout = T
        with pytest.raises(gsp.Timeout, match=esc(
                "recv timed out after 0.02 s (recv_timeout=0.02 on this context)")):
            ctx.recv()
        with pytest.raises(gsp.Timeout, match=esc("recv timed out after 0.01 s (timeout=0.01)")):
            ctx.recv_msg(timeout=0.01)
        with pytest.raises(gsp.WouldBlock,
                           match=esc("recv would block: no message queued (block=False)")):
            ctx.recv(block=False)
        rctx = req.open_context()
        rctx.send_timeout = timedelta(milliseconds=20)
        assert rctx.send_timeout == T
        with pytest.raises(gsp.Timeout, match=esc(
                "send timed out after 0.02 s (send_timeout=0.02 on this context)")):
            rctx.send(b"q")
        with pytest.raises(gsp.WouldBlock, match=esc(
                "send would block: no peer can take the message now (block=False)")):
            rctx.send_msg(gsp.Message(b"q"), block=False)


# -- seconds, not milliseconds --------------------------------------------------------------------

def test_large_int_timeouts_are_seconds_everywhere() -> None:
    """No milliseconds guard: an int is seconds, however large (tests/core/test_durations.py)."""
    with gsp.socket("pull", recv_timeout=5000) as s:
        assert s.recv_timeout == 5000.0
        s.linger = 86_400_000
        d = s.dial("inproc://errors-ms", max_reconnect_time=7200, background=True)
        assert d.options["max_reconnect_time"] == 7200.0
        s.recv_timeout = timedelta(milliseconds=5000)
        assert s.recv_timeout == 5.0
    with gsp.socket("surveyor") as sv:
        sv.survey_time = 4000
        ctx = sv.open_context()
        ctx.recv_timeout = 10000
        assert (sv.survey_time, ctx.recv_timeout) == (4000.0, 10000.0)
        ctx.survey_time = timedelta(minutes=2)
        assert ctx.survey_time == 120.0


def test_seconds_accepts_timedelta_and_refuses_what_is_not_a_duration() -> None:
    assert seconds("t", timedelta(seconds=1.5)) == 1.5
    assert seconds("t", None) is None
    with pytest.raises(gsp.BadOption, match=esc(
            "t must be a number of seconds > 0 or a timedelta, not 0.0")):
        seconds("t", timedelta(0), allow_none=False, allow_zero=False)
    with pytest.raises(gsp.BadOption, match=esc(
            "t must be a number of seconds >= 0 or a timedelta or None, not True")):
        seconds("t", True)


def test_deadlines_take_timedelta_and_name_the_timeout_asked_for() -> None:
    with pytest.raises(gsp.WouldBlock, match=esc("would block (timeout 0)")):
        Deadline(timedelta(0)).remaining()
    d = Deadline(timedelta(milliseconds=1))
    gevent.sleep(0.002)
    with pytest.raises(gsp.Timeout, match=esc("timed out after 0.001 s")) as ei:
        d.remaining()
    assert ei.value.timeout == 0.001 and Deadline(None).remaining() is None


def test_channels_take_timedelta_and_say_what_would_block() -> None:
    ch: Chan[int] = Chan()
    with pytest.raises(gsp.WouldBlock,
                       match=esc("channel recv would block: the channel is empty (timeout 0)")):
        ch.recv(block=False)
    with pytest.raises(gsp.WouldBlock,
                       match=esc("channel send would block: the channel is full (timeout 0)")):
        ch.send(1, timedelta(0))
    with pytest.raises(gsp.Timeout,
                       match=esc("select timed out: no case is ready (timeout -1 s)")):
        select_channels([Recv(ch)], -1)
    with pytest.raises(gsp.Timeout, match=esc("timed out after 0.01 s")) as ei:
        ch.recv(timedelta(milliseconds=10))
    assert ei.value.timeout == 0.01


# -- the messages of protocol states ---------------------------------------------------------------

@pytest.mark.parametrize("proto", ["req", "rep"])
def test_a_second_recv_speaks_of_the_socket_or_of_the_context_the_user_opened(proto: str) -> None:
    with gsp.socket(proto, recv_timeout=WAIT, best_effort=True) as s:
        if proto == "req":
            s.send(b"q")  # queued: no peer
        for target, noun in [(s, "socket"), (s.open_context(), "context")]:
            if proto == "req" and noun == "context":
                target.send(b"q")
            g = gevent.spawn(target.recv)
            gevent.sleep(0)  # it runs until it waits
            assert not g.ready()
            with pytest.raises(gsp.ProtocolStateError,
                               match=esc(f"another recv is already waiting on this {noun}")):
                target.recv()
            g.kill()


def canceled_by_a_newer_send(e: Any, text: str) -> None:
    """A recv waiting on ``e`` (a socket or context) is canceled by a newer send:
    :class:`gsp.Canceled` with ``text``."""
    e.send(b"first")
    g = gevent.spawn(e.recv)
    gevent.sleep(0)
    e.send(b"second")
    with pytest.raises(gsp.Canceled, match=esc(text)):
        g.get()


def test_req_recv_canceled_by_a_newer_request_raises_canceled() -> None:
    with gsp.socket("req", recv_timeout=WAIT, best_effort=True) as req:  # requests stay queued
        req.send(b"first")
        g = gevent.spawn(req.recv)
        gevent.sleep(0)
        req.send(b"second")
        g.join()
        assert isinstance(g.exception, gsp.Canceled)
        assert isinstance(g.exception, gsp.ProtocolStateError)
        assert str(g.exception) == "request canceled by a newer request on this socket"
        canceled_by_a_newer_send(req.open_context(),
                                 "request canceled by a newer request on this context")


def test_survey_canceled_by_a_newer_survey_raises_canceled_and_expiry_names_survey_time() -> None:
    with gsp.socket("surveyor", recv_timeout=WAIT, survey_time=WAIT) as sv:
        canceled_by_a_newer_send(sv, "survey canceled by a newer survey on this socket")
        ctx = sv.open_context()
        ctx.survey_time = T
        ctx.send(b"s")
        with pytest.raises(gsp.Timeout, match=esc(
                "recv: the survey expired (survey_time=0.02 s); send a new survey to receive "
                "again")) as ei:
            ctx.recv()  # recv_timeout (WAIT) outlasts the survey
        assert ei.value.timeout is None  # not a wait that ran out: the survey's time did
        assert not isinstance(ei.value, gsp.WouldBlock)


def test_closing_the_socket_under_a_blocked_recv_speaks_of_the_socket() -> None:
    for proto in ("req", "rep", "surveyor"):
        s = gsp.socket(proto, survey_time=None) if proto == "surveyor" else \
            gsp.socket(proto, best_effort=True)
        if proto != "rep":
            s.send(b"q")
        g = gevent.spawn(s.recv)
        gevent.sleep(0)
        s.close()
        with pytest.raises(gsp.Closed, match=r"^socket (is )?closed$"):
            g.get()
    with gsp.socket("rep") as rep:
        ctx = rep.open_context()
        g = gevent.spawn(ctx.recv)
        gevent.sleep(0)
        ctx.close()
        with pytest.raises(gsp.Closed, match=esc("context closed")):
            g.get()


# -- handshakes name both protocols ---------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["inproc", "tcp"])
def test_wrong_protocol_names_both_protocols(scheme: str) -> None:
    url = "inproc://errors-wrong-proto" if scheme == "inproc" else "tcp://127.0.0.1:0"
    with gsp.socket("rep", listen=url) as rep, gsp.socket("push") as push:
        with pytest.raises(gsp.WrongProtocol, match=esc(
                "peer speaks rep (0x31), this push socket needs pull (0x51)")) as ei:
            push.dial(rep.listeners[0].url, fail_fast=True)
        assert (ei.value.expected, ei.value.got) == (0x51, 0x31)


@pytest.mark.plugins("gsp_star")
def test_wrong_protocol_uses_plugin_names_and_hex_for_unknown_numbers() -> None:
    gsp.registry.protocol("star")  # loads the plugins: their names join the table
    assert wire.protocol_name(0x640) == "star (0x640)"
    with pytest.raises(gsp.WrongProtocol, match=esc(
            "peer speaks 0x99, this star socket needs star (0x640)")):
        wire.parse_handshake(wire.handshake(0x99), 0x640, own=0x640)
    with pytest.raises(gsp.WrongProtocol, match=esc(
            "peer speaks star (0x640), expected 0xabc")) as ei:
        wire.parse_handshake(wire.handshake(0x640), 0xabc)
    assert (ei.value.expected, ei.value.got) == (0xabc, 0x640)
    with pytest.raises(gsp.WrongProtocol, match=esc(
            "peer speaks pair (0x10), this 0x777 protocol socket needs pull (0x51)")):
        wire.parse_handshake(wire.handshake(0x10), 0x51, own=0x777)


# -- endpoint options that would do nothing are refused -------------------------------------------

@pytest.mark.parametrize("kind, url, name, value, other", [
    ("listen", "tls+tcp://127.0.0.1:0", "tls_verify", False, "dialers"),
    ("listen", "tls+tcp://127.0.0.1:0", "tls_server_name", "example.org", "dialers"),
    ("dial", "tls+tcp://127.0.0.1:1", "tls_client_auth", "required", "listeners"),
    ("dial", "ipc:///tmp/gsp-errors-scope.sock", "ipc_file_mode", 0o600, "listeners"),
    ("listen", "ws://127.0.0.1:0/x", "ws_request_headers", {"a": "b"}, "dialers"),
    ("dial", "ws://127.0.0.1:1/x", "ws_response_headers", {"a": "b"}, "listeners"),
    ("dial", "wss://127.0.0.1:1/x", "ws_origins", ["https://a"], "listeners"),
])
def test_an_endpoint_option_for_the_other_kind_of_endpoint_is_refused(
        kind: str, url: str, name: str, value: object, other: str) -> None:
    with gsp.socket("pair") as s:
        call = s.listen if kind == "listen" else s.dial
        with pytest.raises(gsp.BadOption, match=esc(
                f"{name} does nothing on a {kind}er: it is for {other} only "
                f"(pass it to {'dial' if kind == 'listen' else 'listen'}(), or set it on the "
                "socket)")):
            call(url, **{name: value})
        assert s.listeners == [] and s.dialers == []


def test_scoped_options_set_on_the_socket_apply_where_they_fit() -> None:
    with gsp.socket("pair", tls_client_auth="required", tls_verify=False) as s:
        d = s.dial("tls+tcp://127.0.0.1:1", background=True)
        assert d.options["tls_client_auth"] == "required"  # inherited, harmless on a dialer


def test_option_scope_is_checked() -> None:
    assert Option("x", False, boolean, scope="dial").scope == "dial"
    with pytest.raises(ValueError, match=esc("scope must be None, 'dial' or 'listen', not 'both'")):
        Option("x", False, boolean, scope="both")  # type: ignore[arg-type]
