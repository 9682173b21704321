"""Shared fixtures. Set GSP_TEST_MONKEY=1 to run under gevent.monkey.patch_all().

Most fixtures come from gsp's own pytest plugin (gsp.testing.plugin): ``gsp_socket``,
``gsp_spawn``, ``gsp_free_url`` and ``gsp_leak_check``, which every test here runs under.
"""

from __future__ import annotations

import os

if os.environ.get("GSP_TEST_MONKEY"):
    from gevent import monkey

    monkey.patch_all()

import shutil
import tempfile
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

if TYPE_CHECKING:
    import gevent

    import gsp
    from tests.browser_support import Browser
    from tests.certs import PKI

MONKEY = bool(os.environ.get("GSP_TEST_MONKEY"))

pytest_plugins = ("pytester",)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_leaks: skip the greenlet/fd leak check")
    config.addinivalue_line("markers", "forks_beside_threads: this test's forks meet other "
                            "threads on purpose (no_fork_beside_threads)")
    # GSP_EXPECT_BUILD=compiled (noxfile.py): the run tests that build of gsp, or stops here.
    expected = os.environ.get("GSP_EXPECT_BUILD")
    if expected and _build() != expected:
        raise pytest.UsageError(f"GSP_EXPECT_BUILD={expected}, but this run imports the "
                                f"{_build()} build of gsp ({_gsp_file()})")


def _build() -> str:
    from gsp._mypyc import build

    return build()


def _gsp_file() -> str:
    import gsp

    return str(gsp.__file__)


def pytest_report_header() -> str:
    return f"gsp: the {_build()} build, from {_gsp_file()}"


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


#: The OS threads this process had when the running test started (the harness's, such as
#: pytest-xdist's I/O thread, and any an earlier test left, such as gsp.blocking's shared hub),
#: and the forks since then that met more.
THREADS_AT_START = [_os_threads()]
FORKS_BESIDE_THREADS: list[str] = []


def _before_fork() -> None:
    more = _os_threads() - THREADS_AT_START[0]
    if more > 0:
        FORKS_BESIDE_THREADS.append(f"{os.environ.get('PYTEST_CURRENT_TEST', '(no test)')}: "
                                    f"forked beside {more} thread(s) the test started")


os.register_at_fork(before=_before_fork)


@pytest.fixture(autouse=True)
def no_fork_beside_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """A fork in this process meets no thread that the test started: the child would get only
    the forking one (Python 3.12+ warns, DeprecationWarning). gsp starts no thread before it
    forks (gsp.prefork, gsp.per_process); a test that forks beside one on purpose is marked
    ``forks_beside_threads``."""
    THREADS_AT_START[0] = _os_threads()
    del FORKS_BESIDE_THREADS[:]
    yield
    if FORKS_BESIDE_THREADS and request.node.get_closest_marker("forks_beside_threads") is None:
        pytest.fail("\n".join(FORKS_BESIDE_THREADS), pytrace=False)


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> None:
    """Every test must leave no live greenlet and no socket fd behind."""
    if request.node.get_closest_marker("allow_leaks") is None:
        request.getfixturevalue("gsp_leak_check")


@pytest.fixture
def mk(gsp_socket: Callable[..., gsp.Socket]) -> Callable[..., gsp.Socket]:
    """Make sockets that are closed at teardown (before the leak check runs)."""
    return gsp_socket


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
    """A throwaway CA with server and client certificates (tests/certs.py)."""
    from tests.certs import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for a test module (tests/browser_support.py); each test opens its
    own pages."""
    from tests.browser_support import Browser

    b = Browser()
    try:
        yield b
    finally:
        b.close()
