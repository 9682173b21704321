"""gsp's pytest plugin (entry point ``pytest11``: ``gsp = "gsp.testing.plugin"``).

Fixtures:

* ``gsp_socket`` — a factory, ``gsp_socket("pair", listen=url, recv_timeout=1)``, taking what
  :func:`gsp.socket` takes; every socket it made is closed at teardown.
* ``gsp_spawn`` — a factory like :func:`gevent.spawn`; greenlets still running at teardown are
  killed.
* ``gsp_free_url`` — a factory, ``gsp_free_url("tcp")``: a URL of that scheme nothing listens
  on yet (see :func:`gsp.testing.free_url`); ipc socket files go in a short temporary
  directory removed at teardown.
* ``gsp_leak_check`` — opt in (or make it autouse in a conftest): the test fails if it leaves
  greenlets running or socket fds open. Sockets and greenlets of ``gsp_socket``/``gsp_spawn``
  are cleaned up before it looks. A test marked ``gsp_allow_leaks`` is not checked.

Loading this module costs nothing: it imports neither gevent nor gsp's core (the fixtures do,
when a test uses them), patches nothing and creates no gevent hub.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import pytest

if TYPE_CHECKING:
    import gevent

    import gsp

_CLEANUPS = pytest.StashKey[list[Callable[[], None]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gsp_allow_leaks: gsp_leak_check does not fail this test")


def _on_cleanup(request: pytest.FixtureRequest, fn: Callable[[], None]) -> None:
    """Have ``gsp_leak_check`` run ``fn`` before it looks (whatever the fixture order)."""
    request.node.stash.setdefault(_CLEANUPS, []).append(fn)


@pytest.fixture
def gsp_socket(request: pytest.FixtureRequest) -> Iterator[Callable[..., gsp.Socket]]:
    """A factory of gsp sockets (arguments as :func:`gsp.socket`), all closed at teardown."""
    import gsp

    made: list[gsp.Socket] = []

    def make(protocol: str, *, raw: bool = False, listen: str | Iterable[str] | None = None,
             dial: str | Iterable[str] | None = None, **options: Any) -> gsp.Socket:
        s = gsp.socket(protocol, raw=raw, listen=listen, dial=dial, **options)
        made.append(s)
        return s

    def close_all() -> None:
        while made:
            made.pop().close()

    _on_cleanup(request, close_all)
    yield make
    close_all()


@pytest.fixture
def gsp_spawn(request: pytest.FixtureRequest) -> Iterator[Callable[..., gevent.Greenlet]]:
    """A factory like :func:`gevent.spawn`; what is still running at teardown is killed."""
    import gevent

    glets: list[gevent.Greenlet] = []

    def spawn(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
        g = gevent.spawn(fn, *args, **kwargs)
        glets.append(g)
        return g

    def kill_all() -> None:
        gevent.killall(glets, block=True)
        glets.clear()

    _on_cleanup(request, kill_all)
    yield spawn
    kill_all()


def _short_tmp() -> str | None:
    # Unix socket paths are limited to ~107 bytes; some platforms' temp dirs are long.
    return "/tmp" if os.path.isdir("/tmp") else None


@pytest.fixture
def gsp_free_url() -> Iterator[Callable[[str], str]]:
    """A factory: ``gsp_free_url(scheme)`` is a URL of ``scheme`` nothing listens on yet."""
    from gsp.testing._helpers import free_url

    dirs: list[str] = []

    def make(scheme: str) -> str:
        if not dirs:
            dirs.append(tempfile.mkdtemp(prefix="gsp-", dir=_short_tmp()))
        return free_url(scheme, dirs[0])

    yield make
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def gsp_leak_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves gevent greenlets running or socket fds open."""
    from gsp.testing._helpers import LeakSnapshot

    before = LeakSnapshot()
    yield
    for fn in reversed(request.node.stash.get(_CLEANUPS, [])):
        fn()
    if request.node.get_closest_marker("gsp_allow_leaks") is None:
        before.check()
