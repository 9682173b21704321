"""A transport that raises what it should not (not a gsp error, not an OSError) ends the one pipe
it carries: the socket and its other pipes carry on, and the pipe's error says what happened."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import pytest

import gsp
from gsp.message import Message, message_bytes
from gsp.protocol import ProtocolSpec
from gsp.testing import WAIT, wait_for
from gsp.transport import Connection, Transport, TransportDialer, TransportListener
from tests.support import plugged_transports

BOOM_IN = b"boom on receive"
BOOM_OUT = b"boom on send"


class FaultyConnection(Connection):
    """An inproc connection that raises RuntimeError on one particular message either way."""

    def __init__(self, inner: Connection) -> None:
        self.inner = inner
        self.local_address, self.remote_address = inner.local_address, inner.remote_address

    def handshake(self, spec: ProtocolSpec, timeout: float | None) -> None:
        self.inner.handshake(spec, timeout)

    def send_messages(self, messages: Sequence[Message | bytes]) -> None:
        if any(message_bytes(m) == BOOM_OUT for m in messages):
            raise RuntimeError("a bug in the transport's send")
        self.inner.send_messages(messages)

    def recv_messages(self) -> list[bytes]:
        got = self.inner.recv_messages()
        if BOOM_IN in got:
            raise RuntimeError("a bug in the transport's receive")
        return got

    def close(self) -> None:
        self.inner.close()


class FaultyListener(TransportListener):
    def __init__(self, inner: TransportListener) -> None:
        self.inner = inner
        self.url = "faulty://" + inner.url.partition("://")[2]

    def bind(self) -> None:
        self.inner.bind()

    def accept(self) -> Connection:
        return FaultyConnection(self.inner.accept())

    def close(self) -> None:
        self.inner.close()


class FaultyDialer(TransportDialer):
    def __init__(self, inner: TransportDialer) -> None:
        self.inner = inner

    def dial(self) -> Connection:
        return FaultyConnection(self.inner.dial())

    def close(self) -> None:
        self.inner.close()


def inproc_transport() -> Transport:
    inproc: Transport = gsp.registry.transport_for("inproc://x")
    return inproc


class FaultyTransport(Transport):
    schemes = ("faulty",)

    def listener(self, url: str, options: Mapping[str, Any]) -> TransportListener:
        return FaultyListener(inproc_transport().listener(url.replace("faulty", "inproc", 1),
                                                          options))

    def dialer(self, url: str, options: Mapping[str, Any]) -> TransportDialer:
        return FaultyDialer(inproc_transport().dialer(url.replace("faulty", "inproc", 1),
                                                      options))


@pytest.fixture
def faulty() -> Iterator[str]:
    with plugged_transports(FaultyTransport()):
        yield "faulty://containment"


@pytest.mark.parametrize("where", ["receiving", "sending"])
def test_an_unexpected_transport_exception_ends_only_its_pipe(
        gsp_socket: Callable[..., gsp.Socket], faulty: str, where: str) -> None:
    pull = gsp_socket("pull", listen=faulty, recv_timeout=WAIT)
    bad = gsp_socket("push", dial=faulty, send_timeout=WAIT)
    good = gsp_socket("push", dial=faulty, send_timeout=WAIT)
    wait_for(lambda: len(pull.pipes) == 2 and bad.pipes and good.pipes,
             what="both pushers to attach")
    gone: list[gsp.Pipe] = []
    watched = pull if where == "receiving" else bad
    watched.on_pipe_event(
        lambda ev, p: gone.append(p) if ev is gsp.PipeEvent.DETACHED else None)
    bad.send(BOOM_IN if where == "receiving" else BOOM_OUT)
    wait_for(lambda: gone, what="the faulty pipe to close")
    error = gone[0].error
    assert isinstance(error, gsp.ConnectionBroken)
    assert isinstance(error.__cause__, RuntimeError)
    assert f"the transport failed while {where}: RuntimeError" in str(error)
    # The socket and its other pipe carry on.
    assert not pull.closed and len(pull.pipes) == 1
    good.send(b"still here")
    assert pull.recv() == b"still here"
