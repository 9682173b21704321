"""What both conformance suites share: their base (:class:`SuiteBase`: the fixture plumbing),
message sizes and small helpers for checks that run greenlets."""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Iterator

import gevent
import pytest

import gsp

from ._helpers import WAIT
from ._watchdog import Watchdog

__all__ = ["SuiteBase", "read_to_eof"]

MiB = 1 << 20
#: Message sizes of :meth:`TransportSuite.test_message_sizes` at the default ``max_recv_size``
#: (1 MiB): the edges of 1-byte, 8-byte, 64 KiB, 256 KiB and 1 MiB buffers.
SIZES = (0, 1, 2, 7, 8, 9, 100, 1023, 1024, 4096, 65535, 65536, 65537, 262143, 262144,
         262145, 1 << 19, MiB - 1, MiB)
BIG = os.urandom(65536)  # fills buffers fast, on transports that compress too


def read_to_eof(sock: Any, timeout: float = WAIT) -> bytes:
    """Everything a plain (gevent) socket receives until the peer closes; a reset counts as a
    close. Fails if the peer has not closed within ``timeout`` seconds."""
    got = bytearray()
    with gevent.Timeout(timeout, AssertionError(f"peer did not close within {timeout} s")):
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return bytes(got)
            if not chunk:
                return bytes(got)
            got += chunk


def _caught(fn: Callable[..., Any], *args: Any) -> BaseException | None:
    """Run ``fn``; return what it raised (None if it returned). Spawned, this keeps expected
    errors out of gevent's "greenlet failed" reports."""
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None


def _outcome(g: gevent.Greenlet, what: str) -> BaseException | None:
    """What a finished :func:`_caught` greenlet caught."""
    assert g.ready(), f"{what} is still running"
    result: BaseException | None = g.get()
    return result


def _detached(ev: gsp.PipeEvent, pipe: gsp.Pipe, into: list[gsp.Pipe]) -> None:
    if ev is gsp.PipeEvent.DETACHED:
        into.append(pipe)


class SuiteBase:
    """What both conformance suites derive from: their fixture plumbing and time limits."""

    _make: Callable[..., gsp.Socket]
    _free_url: Callable[[str], str]
    _spawn: Callable[..., gevent.Greenlet]

    #: Seconds a check may take in all; beyond it, it fails with :class:`KitTimeout` (raised
    #: where it waits) saying so.
    kit_time_limit: ClassVar[float] = 60.0
    #: Seconds the event loop may go without a turn; beyond it, the blocked call is interrupted
    #: with :class:`KitStall`, naming the likely cause (a socket that is not gevent's) and where
    #: it blocked; if it does not end, the process ends (status 3) rather than hang the run.
    kit_stall_limit: ClassVar[float] = 5.0

    @pytest.fixture(autouse=True)
    def _gsp_kit(self, request: pytest.FixtureRequest, gsp_leak_check: None,
                 gsp_socket: Callable[..., gsp.Socket], gsp_free_url: Callable[[str], str],
                 gsp_spawn: Callable[..., gevent.Greenlet]) -> Iterator[None]:
        self._make = gsp_socket
        self._free_url = gsp_free_url
        self._spawn = gsp_spawn
        self._check_description()
        what = f"{type(self).__name__}.{request.node.name}"
        with Watchdog(what, self.kit_time_limit, self.kit_stall_limit) as dog:
            yield
        if dog.stalled is not None:  # (raised in a greenlet other than the check's, maybe)
            pytest.fail(dog.stalled, pytrace=False)

    def _check_description(self) -> None:
        """Fail early, and clearly, on a subclass that leaves out what the suite needs."""

    def socket(self, protocol: str, *, raw: bool = False, **options: Any) -> gsp.Socket:
        """A socket closed at teardown (before the leak check)."""
        return self._make(protocol, raw=raw, **options)

    def spawn(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
        """A greenlet killed at teardown if still running."""
        return self._spawn(fn, *args, **kwargs)


#: What a call may raise instead of blocking when the protocol's state forbids it.
_STATE = (gsp.ProtocolStateError, gsp.NotSupported)
