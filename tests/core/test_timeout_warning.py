"""An int timeout of 100 s or more (up to the 3600 refused as milliseconds) is likely milliseconds:
taken, and logged once per option name at WARNING on gsp.options with the fix."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

import gsp
import gsp.options


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gsp.options, "_warned", set())  # (once per process: start afresh)


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gsp.options"]


def test_a_likely_millisecond_timeout_is_logged_once_per_option(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gsp")
    with gsp.socket("pull", recv_timeout=5000 // 10) as s:  # 500
        assert s.recv_timeout == 500.0  # taken, as seconds
        s.recv_timeout = 600    # the same option again: not logged again
        s.send_timeout = 250    # another option: logged
        s.linger = 100
        s.recv_timeout = 99     # under the bar: nothing
        s.linger = 100.0        # a float says seconds: nothing
        s.send_timeout = timedelta(seconds=300)
        with pytest.raises(gsp.WouldBlock):
            s.recv(block=False)
        with pytest.raises(gsp.Timeout):
            s.recv(timeout=0.01)
    recs = warnings(caplog)
    assert [r.getMessage().split(" is ")[0] for r in recs] == \
        ["recv_timeout=500", "send_timeout=250", "linger=100"]
    first = recs[0]
    assert first.levelno == logging.WARNING
    assert first.getMessage() == (
        "recv_timeout=500 is 500 seconds (8 minutes); gsp timeouts are seconds: did you mean "
        "0.5 (500 ms)? Pass 500.0 or a timedelta to mean seconds (logged once per option name)")
    assert first.gsp_option == "recv_timeout" and first.gsp_value == 500  # type: ignore[attr-defined]


def test_per_call_timeouts_and_contexts_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gsp")
    with gsp.socket("req") as s:
        with pytest.raises(gsp.BadOption, match="5000 s is 83 minutes"):  # still refused
            s.recv_timeout = 5000
        ctx = s.open_context()
        ctx.recv_timeout = 1000
        with pytest.raises(gsp.ProtocolStateError):
            ctx.recv(timeout=3600)
        ctx.close()
    assert [r.getMessage().split(" is ")[0] for r in warnings(caplog)] == \
        ["recv_timeout=1000", "timeout=3600"]
    assert "did you mean 3.6 (3600 ms)?" in warnings(caplog)[1].getMessage()
