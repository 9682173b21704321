"""Fixtures for the gsp-spark tests, self-contained (the repository's tests/conftest.py does not
reach this folder): the leak check every test gets, ``ipc_dir``, and the plugin's directory for
``PYTHONPATH``. Test modules import the fixtures they need by name."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
from typing import Iterator

import gevent
import pytest

#: plugins/gsp-spark: where the pyspark_gsp and gsp_spark packages are.
PLUGIN_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _live_greenlets() -> list[gevent.Greenlet]:
    """gevent Greenlets that are scheduled or running (found independently of gsp, via gc)."""
    return [o for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead]


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every test must leave no live greenlet and no socket fd behind."""
    before_fds = _socket_fds()
    before_glets = {id(g) for g in _live_greenlets()}
    yield
    deadline = time.monotonic() + 3.0
    while True:
        gevent.sleep(0.01)
        glets = [g for g in _live_greenlets() if id(g) not in before_glets]
        fds = _socket_fds() - before_fds
        if not glets and not fds or time.monotonic() > deadline:
            break
    assert not glets, f"greenlets left running: {glets}"
    assert not fds, f"socket fds left open: {sorted(fds)}"


@pytest.fixture
def ipc_dir() -> Iterator[str]:
    """A short directory for ipc socket files (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="gsp-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class PluginOnPythonPath:
    """Puts :data:`PLUGIN_ROOT` first on ``PYTHONPATH`` until :meth:`restore`.

    Spark's Python workers look for ``pyspark_*`` modules on their sys.path; an editable install
    maps packages through an import hook they cannot list, so the plugin's directory must be on
    ``PYTHONPATH`` before the JVM starts (it hands its environment to the workers).
    """

    def __init__(self) -> None:
        self._old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PLUGIN_ROOT, self._old) if p)

    def restore(self) -> None:
        if self._old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = self._old
