"""Every duration is seconds, an int, a float or a timedelta, however large: no guess at
milliseconds, no warning (docs/api-guide.md, "Time")."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

import gsp


def test_large_int_timeouts_are_seconds_and_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gsp")
    with gsp.socket("pull", recv_timeout=7200) as s:
        assert s.recv_timeout == 7200.0  # two hours, as written
        s.recv_timeout = 3600
        s.send_timeout = 500
        s.linger = 100
        s.max_reconnect_time = 86400
        assert (s.recv_timeout, s.send_timeout, s.linger) == (3600.0, 500.0, 100.0)
        s.send_timeout = timedelta(hours=3)
        assert s.send_timeout == 10800.0
        with pytest.raises(gsp.WouldBlock):
            s.recv(block=False)
        with pytest.raises(gsp.Timeout):
            s.recv(timeout=0.01)
    assert [r for r in caplog.records if r.name == "gsp.options"] == []


def test_per_call_and_context_timeouts_take_large_ints_too() -> None:
    with gsp.socket("req") as s:
        s.recv_timeout = 5000
        assert s.recv_timeout == 5000.0
        ctx = s.open_context()
        ctx.recv_timeout = 100_000
        assert ctx.recv_timeout == 100_000.0
        with pytest.raises(gsp.ProtocolStateError):  # (no request sent: the time is taken)
            ctx.recv(timeout=3600)
        ctx.close()


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), "1", True, timedelta(seconds=-1)])
def test_what_is_not_a_duration_is_refused_naming_the_option(bad: object) -> None:
    with gsp.socket("pull") as s:
        with pytest.raises(gsp.BadOption, match="recv_timeout must be a number of seconds"):
            s.recv_timeout = bad
