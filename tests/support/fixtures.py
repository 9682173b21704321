"""The fixtures every test shares, in tests/ and in each plugin's tests (their conftest.py
files import them from here).

Most build on gsp's own pytest plugin (gsp.testing.plugin): ``gsp_spawn`` and ``gsp_leak_check``,
which every test runs under. Sockets are made with that plugin's ``gsp_socket``, the one socket
fixture: each is closed at teardown, before the leak check looks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

if TYPE_CHECKING:
    import gevent

    from tests.support.browser_support import Browser
    from tests.support.certs import PKI

__all__ = ["browser", "ipc_dir", "ipc_url", "no_fork_beside_threads", "no_leaks", "pki", "spawn"]


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> None:
    """Every test must leave no live greenlet and no socket fd behind."""
    if request.node.get_closest_marker("allow_leaks") is None:
        request.getfixturevalue("gsp_leak_check")


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


#: The OS threads this process had when the running test started (the harness's, such as
#: pytest-xdist's I/O thread, and any an earlier test left, such as gsp.blocking's shared hub),
#: and the forks since then that met more.
_THREADS_AT_START = [_os_threads()]
_FORKS_BESIDE_THREADS: list[str] = []


def _before_fork() -> None:
    more = _os_threads() - _THREADS_AT_START[0]
    if more > 0:
        _FORKS_BESIDE_THREADS.append(f"{os.environ.get('PYTEST_CURRENT_TEST', '(no test)')}: "
                                     f"forked beside {more} thread(s) the test started")


os.register_at_fork(before=_before_fork)


@pytest.fixture(autouse=True)
def no_fork_beside_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """A fork in this process meets no thread that the test started: the child would get only
    the forking one (Python 3.12+ warns, DeprecationWarning). gsp starts no thread before it
    forks (gsp.prefork, gsp.per_process); a test that forks beside one on purpose is marked
    ``forks_beside_threads``."""
    _THREADS_AT_START[0] = _os_threads()
    del _FORKS_BESIDE_THREADS[:]
    yield
    if _FORKS_BESIDE_THREADS and request.node.get_closest_marker("forks_beside_threads") is None:
        pytest.fail("\n".join(_FORKS_BESIDE_THREADS), pytrace=False)


@pytest.fixture
def spawn(gsp_spawn: Callable[..., gevent.Greenlet]) -> Callable[..., gevent.Greenlet]:
    """Spawn greenlets that are killed at teardown if a failing test left them running."""
    return gsp_spawn


@pytest.fixture
def ipc_dir() -> Iterator[str]:
    """A short directory for ipc socket files (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="gsp-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ipc_url(ipc_dir: str) -> str:
    return f"ipc://{ipc_dir}/s.sock"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    """A throwaway CA with server and client certificates (tests/support/certs.py)."""
    from tests.support.certs import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for a test module (tests/support/browser_support.py); each test opens its
    own pages."""
    from tests.support.browser_support import Browser

    b = Browser()
    try:
        yield b
    finally:
        b.close()
