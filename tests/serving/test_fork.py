"""Fork safety (gsp._core.fork, docs/serving.md) and gsp.per_process, each scenario in a fresh
interpreter that forks (tests/apps/fork_scenario.py), with and without gevent.monkey.patch_all().
The gunicorn and uWSGI cases are in tests/serving/test_serving.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "apps", "fork_scenario.py")


@pytest.mark.parametrize("monkey", [False, True], ids=["gevent", "monkey"])
@pytest.mark.parametrize("scenario", [
    "fork",  # the child uses the inherited REQ; the parent's pipes go on; the REP raises
    # tls+tcp, ws, wss: no close_notify, no close frame reaches the parent's peers
    pytest.param("transports", marks=pytest.mark.plugins("gsp_ws")),
    "mixed",  # a socket that listens and dials: its dialer works in the child
    "copies_closed",  # the child closed its copies of pipes and listeners at once
    "midflight",  # dials and handshakes under way at fork
    "multiprocessing",  # the "fork" start method
    "per_process",  # 50 greenlets, one socket; the child makes its own
    "adopted",  # socket:// and listen_fd: the parent's stay; the child listens on its copy
])
def test_fork(scenario: str, monkey: bool) -> None:
    run_scenario(scenario, monkey)


def test_fork_with_a_socket_of_another_thread() -> None:
    """A gsp.blocking socket (its hub runs in another OS thread) is closed in the child, where
    that thread does not exist; its copies are closed with nothing sent, the parent's pipe goes
    on. (Under patch_all gsp.blocking's calls run in the caller's hub: the "fork" case.)"""
    run_scenario("other_thread", False)


def run_scenario(scenario: str, monkey: bool) -> None:
    """Run the scenario with a temporary directory of its own (short: ipc paths go there), which
    it must leave empty: its ipc files and certificates removed, by the parent and the child."""
    argv = [sys.executable, SCRIPT, scenario] + (["--monkey"] if monkey else [])
    with tempfile.TemporaryDirectory(prefix="gsp-fork-", dir="/tmp") as scratch:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, TMPDIR=scratch))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert out.splitlines()[-1].startswith("OK"), out
        assert "Traceback" not in out, out
        assert os.listdir(scratch) == []


def test_per_process_in_one_process(gsp_free_url) -> None:  # type: ignore[no-untyped-def]
    """Concurrent first calls share one factory call, and its exception; a later call tries
    again; close() closes the object and refuses more."""
    import gevent

    import gsp

    calls: list[int] = []
    made: list[gsp.Socket] = []

    def factory() -> gsp.Socket:
        calls.append(1)
        gevent.sleep(0.05)  # a factory that yields, as gsp.socket(dial=...) does
        if len(calls) == 1:
            raise gsp.InvalidAddress("first attempt fails")
        sock = gsp.socket("req")
        made.append(sock)
        return sock

    holder = gsp.per_process(factory)
    jobs = [gevent.spawn(holder.get) for _ in range(20)]
    gevent.joinall(jobs)
    assert len(calls) == 1
    assert all(isinstance(j.exception, gsp.InvalidAddress) for j in jobs)
    jobs = [gevent.spawn(holder.get) for _ in range(20)]
    gevent.joinall(jobs, raise_error=True)
    assert len(calls) == 2 and len(made) == 1 and all(j.value is made[0] for j in jobs)
    assert holder.made and "made" in repr(holder)
    holder.close()
    assert made[0].closed and not holder.made
    with pytest.raises(gsp.Closed):
        holder.get()
