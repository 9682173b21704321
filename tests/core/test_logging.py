"""What gsp logs: endpoints, pipes and failures under the ``gsp`` logger hierarchy, each
record naming the socket's protocol and the URL, and nothing per message."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pytest
from gevent import socket as gsocket

import gsp
from gsp._core import log as gsp_log
from gsp.testing import WAIT, free_port, wait_for
from tests.support import TCP, raw_connect

Mk = Callable[..., gsp.Socket]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="gsp")
    return caplog


def found(caplog: pytest.LogCaptureFixture, logger: str, text: str,
          level: int | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and text in r.getMessage()
            and (level is None or r.levelno == level)]


def one(caplog: pytest.LogCaptureFixture, logger: str, text: str, level: int, protocol: str,
        url: str) -> logging.LogRecord:
    """The one record of ``logger`` saying ``text``, at ``level``, for ``protocol`` and ``url``,
    both in its text and in its extra fields."""
    wait_for(lambda: found(caplog, logger, text), what=f"{logger}: {text!r}")
    recs = found(caplog, logger, text)
    assert len(recs) == 1, [r.getMessage() for r in recs]
    rec = recs[0]
    assert rec.levelno == level, rec.getMessage()
    assert rec.gsp_protocol == protocol and rec.gsp_url == url
    assert protocol in rec.getMessage() and url in rec.getMessage()
    return rec


def test_every_record_carries_protocol_url_pipe_and_remote(logs, gsp_socket: Mk):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    push.dial(pull.listen(TCP).url, fail_fast=True)
    wait_for(lambda: pull.pipes and push.pipes, what="the pipe")
    push.close()
    wait_for(lambda: not pull.pipes, what="the pipe to go")
    recs = [r for r in logs.records if r.name.startswith("gsp")]
    assert recs
    for r in recs:
        assert {"gsp_protocol", "gsp_url", "gsp_pipe", "gsp_remote"} <= set(vars(r)), r


def test_listen_dial_accept_attach_and_detach(logs, gsp_socket: Mk):
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    url = pull.listen(TCP).url
    one(logs, "gsp.listener", "listening", logging.INFO, "pull", url)
    push.dial(url, fail_fast=True)
    one(logs, "gsp.dialer", "dialing", logging.INFO, "push", url)
    wait_for(lambda: pull.pipes and push.pipes, what="the pipe")
    [lp], [dp] = pull.pipes, push.pipes
    acc = one(logs, "gsp.listener", "accepted a connection from", logging.DEBUG, "pull", url)
    assert acc.gsp_remote == lp.remote_address
    att = one(logs, "gsp.pipe", f"pipe {lp.id} attached", logging.INFO, "pull", url)
    assert att.gsp_pipe == lp.id and att.gsp_remote == lp.remote_address
    assert one(logs, "gsp.pipe", f"pipe {dp.id} attached", logging.INFO, "push", url).gsp_pipe == dp.id
    push.close()
    # The side that closed says so; the other side names the error that ended its pipe.
    one(logs, "gsp.pipe", f"pipe {dp.id} (peer {dp.remote_address}) detached: closed locally",
        logging.INFO, "push", url)
    gone = one(logs, "gsp.pipe", f"pipe {lp.id} (peer {lp.remote_address}) detached: "
               "ConnectionBroken", logging.INFO, "pull", url)
    assert gone.gsp_pipe == lp.id


def test_redial_failures_are_rate_limited(logs, gsp_socket: Mk, monkeypatch: pytest.MonkeyPatch):
    interval = 0.3
    monkeypatch.setattr(gsp_log, "REPEAT_INTERVAL", interval)
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    push = gsp_socket("push", reconnect_time=0.01, max_reconnect_time=0.01)
    t0 = time.monotonic()
    push.dial(url)  # nothing listens there: refused, again and again (~100 attempts a second)

    def warned() -> list[logging.LogRecord]:
        return found(logs, "gsp.dialer", "dial failed", logging.WARNING)

    wait_for(lambda: len(found(logs, "gsp.dialer", "dial failed")) >= 20 and len(warned()) >= 2,
             what="twenty failed dials, two of them warned")
    failed = found(logs, "gsp.dialer", "dial failed")
    warnings = [r for r in failed if r.levelno == logging.WARNING]
    elapsed = time.monotonic() - t0
    # One WARNING at the first failure, then at most one per interval.
    assert len(warnings) <= 1 + elapsed / interval, (elapsed, [r.getMessage() for r in warnings])
    first = warnings[0]
    assert first is failed[0] and first.gsp_attempts == 1 and first.gsp_suppressed == 0
    assert "ConnectionRefused" in first.getMessage() and "redialing in" in first.getMessage()
    assert first.gsp_protocol == "push" and first.gsp_url == url
    later = warnings[1]
    assert later.gsp_suppressed > 0 and f"{later.gsp_suppressed} more like it" in later.getMessage()
    assert all(r.levelno == logging.DEBUG for r in failed if r not in warnings)
    # The peer comes up: the dialer says how many attempts failed.
    pull = gsp_socket("pull")
    pull.listen(url)
    rec = one(logs, "gsp.dialer", "connected after", logging.INFO, "push", url)
    assert rec.gsp_attempts >= len(failed)


def test_wrong_protocol_is_named_on_both_sides(logs, gsp_socket: Mk):
    pull = gsp_socket("pull")
    pub = gsp_socket("pub", reconnect_time=WAIT)  # one attempt within the test
    url = pull.listen(TCP).url
    pub.dial(url)
    lrec = one(logs, "gsp.listener", "wrong protocol", logging.WARNING, "pull", url)
    assert "the peer speaks pub (0x20), a pull socket needs push" in lrec.getMessage()
    assert isinstance(lrec.gsp_error, gsp.WrongProtocol)
    drec = one(logs, "gsp.dialer", "dial failed", logging.WARNING, "pub", url)
    assert "the peer speaks pull (0x51), a pub socket needs sub" in drec.getMessage()
    assert not pull.pipes and not pub.pipes


def test_handshake_timeout_on_a_listener(logs, gsp_socket: Mk):
    pull = gsp_socket("pull", handshake_timeout=0.2)
    url = pull.listen(TCP).url
    silent = raw_connect(url)  # connects, never sends its SP header
    try:
        rec = one(logs, "gsp.listener", "failed: timed out", logging.WARNING, "pull", url)
        assert isinstance(rec.gsp_error, gsp.Timeout) and rec.gsp_remote is not None
    finally:
        silent.close()


def test_handshake_timeout_on_a_dialer(logs, gsp_socket: Mk):
    server = gsocket.socket()  # accepts in the kernel's backlog and never answers
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        url = "tcp://127.0.0.1:%d" % server.getsockname()[1]
        push = gsp_socket("push", handshake_timeout=0.2, reconnect_time=WAIT)
        push.dial(url)
        rec = one(logs, "gsp.dialer", "dial failed", logging.WARNING, "push", url)
        assert "timed out" in rec.getMessage() and isinstance(rec.gsp_error, gsp.Timeout)
        push.close()
    finally:
        server.close()


def test_tls_handshake_failure(logs, gsp_socket: Mk, pki: Any):
    a = gsp_socket("pair")
    b = gsp_socket("pair", reconnect_time=WAIT)
    url = a.listen("tls+tcp://127.0.0.1:0", **pki.listen_options()).url
    b.dial(url, tls_ca_file=pki.rogue_ca_file)  # b does not trust a's certificate
    rec = one(logs, "gsp.dialer", "dial failed", logging.WARNING, "pair", url)
    assert "TLSHandshakeError" in rec.getMessage()
    assert "certificate verify" in rec.getMessage() or "certificate verification" in rec.getMessage()
    lrec = one(logs, "gsp.listener", "handshake with", logging.WARNING, "pair", url)
    assert "TLSHandshakeError" in lrec.getMessage()


def test_oversize_message_closes_the_receivers_pipe_with_a_warning(logs, gsp_socket: Mk):
    pull = gsp_socket("pull", max_recv_size=1000, recv_timeout=0.3)
    push = gsp_socket("push", reconnect_time=WAIT)
    url = pull.listen(TCP).url
    push.dial(url, fail_fast=True)
    wait_for(lambda: pull.pipes, what="the pipe")
    [pipe] = pull.pipes
    push.send(b"x" * 5000)
    with pytest.raises(gsp.Timeout):  # the receiving user sees no message: only the log says why
        pull.recv()
    rec = one(logs, "gsp.pipe", f"pipe {pipe.id} (peer", logging.WARNING, "pull", url)
    assert "detached: MessageTooLarge" in rec.getMessage()
    assert "5000" in rec.getMessage() and "1000" in rec.getMessage()
    assert "max_recv_size" in rec.getMessage()
    assert (rec.gsp_size, rec.gsp_limit) == (5000, 1000) and rec.gsp_pipe == pipe.id
    assert isinstance(pipe.error, gsp.MessageTooLarge)


def test_pipe_rejected_by_a_callback(logs, gsp_socket: Mk):
    pull = gsp_socket("pull")
    push = gsp_socket("push", reconnect_time=WAIT)
    pull.on_pipe_event(lambda ev, p: ev is gsp.PipeEvent.ATTACHING and p.close())
    url = pull.listen(TCP).url
    push.dial(url)
    rec = one(logs, "gsp.socket", "rejected by a pipe event callback", logging.INFO, "pull", url)
    assert rec.gsp_pipe is not None
    assert not [r for r in found(logs, "gsp.pipe", "attached") if r.gsp_protocol == "pull"]


def test_pipe_rejected_by_the_protocol(logs, gsp_socket: Mk):
    a = gsp_socket("pair")
    b, c = gsp_socket("pair"), gsp_socket("pair", reconnect_time=WAIT)
    url = a.listen(TCP).url
    b.dial(url, fail_fast=True)
    wait_for(lambda: a.pipes, what="the first peer")
    c.dial(url)  # pair takes one peer: a refuses the second
    rec = one(logs, "gsp.socket", "rejected by the pair protocol", logging.INFO, "pair", url)
    assert rec.gsp_pipe is not None


def test_raising_callback_is_logged_once_and_the_pipe_carries_on(logs, gsp_socket: Mk):
    calls: list[gsp.PipeEvent] = []

    def buggy(ev: gsp.PipeEvent, p: gsp.Pipe) -> None:
        calls.append(ev)
        raise RuntimeError("bug in a callback")

    pull = gsp_socket("pull", recv_timeout=WAIT)
    pull.on_pipe_event(buggy)
    url = pull.listen(TCP).url
    pushers = [gsp_socket("push", send_timeout=WAIT, reconnect_time=WAIT) for _ in range(2)]
    for p in pushers:
        p.dial(url, fail_fast=True)
    wait_for(lambda: len(pull.pipes) == 2, what="both pipes attached")
    for i, p in enumerate(pushers):
        p.send(b"%d" % i)
    assert sorted(pull.recv() for _ in pushers) == [b"0", b"1"]
    assert calls.count(gsp.PipeEvent.ATTACHING) == 2 and calls.count(gsp.PipeEvent.ATTACHED) == 2
    raised = found(logs, "gsp.socket", "raised RuntimeError")
    errors = [r for r in raised if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert errors[0].gsp_protocol == "pull" and errors[0].gsp_url == url
    assert "carries on" in errors[0].getMessage()
    assert len(raised) == 4 and all(r.exc_info is None for r in raised if r is not errors[0])
    assert not found(logs, "gsp.socket", "rejected")


@pytest.mark.parametrize("level", [logging.WARNING, logging.DEBUG])
def test_nothing_is_logged_per_message(
        caplog: pytest.LogCaptureFixture, gsp_socket: Mk, level: int):
    caplog.set_level(level, logger="gsp")
    pull = gsp_socket("pull", recv_timeout=WAIT)
    push = gsp_socket("push", send_timeout=WAIT)
    push.dial(pull.listen(TCP).url, fail_fast=True)
    wait_for(lambda: pull.pipes and push.pipes, what="the pipe")
    caplog.clear()
    for i in range(1000):
        push.send(b"%d" % i)
        assert pull.recv() == b"%d" % i
    assert caplog.records == []
