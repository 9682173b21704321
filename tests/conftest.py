"""Shared fixtures. Set GSP_TEST_MONKEY=1 to run under gevent.monkey.patch_all()."""

from __future__ import annotations

import os

if os.environ.get("GSP_TEST_MONKEY"):
    from gevent import monkey

    monkey.patch_all()

import gc
import shutil
import tempfile
import time

import gevent
import pytest

MONKEY = bool(os.environ.get("GSP_TEST_MONKEY"))


def _socket_fds() -> set[tuple[int, str]]:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            out.add((int(name), target))
    return out


def live_greenlets() -> list[gevent.Greenlet]:
    """gevent Greenlets that are scheduled or running (found independently of gsp, via gc)."""
    return [o for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead]


@pytest.fixture(autouse=True)
def no_leaks(request):
    """Every test must leave no live greenlet and no socket fd behind."""
    before_fds = _socket_fds()
    before_glets = {id(g) for g in live_greenlets()}
    yield
    if request.node.get_closest_marker("allow_leaks"):
        return
    deadline = time.monotonic() + 3.0
    while True:
        gevent.sleep(0.01)
        glets = [g for g in live_greenlets() if id(g) not in before_glets]
        fds = _socket_fds() - before_fds
        # nng closes its sockets on its own threads, a moment after pynng's close() returns.
        if not glets and not fds or time.monotonic() > deadline:
            break
    assert not glets, f"greenlets left running: {glets}"
    assert not fds, f"socket fds left open: {sorted(fds)}"


@pytest.fixture
def ipc_dir():
    """A short directory for ipc socket files (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="gsp-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ipc_url(ipc_dir):
    return f"ipc://{ipc_dir}/s.sock"


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_leaks: skip the greenlet/fd leak check")
