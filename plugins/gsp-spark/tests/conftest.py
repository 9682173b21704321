"""What every gsp-spark test shares: the JVMs' options, and the background jobs.

Spark's JVMs here live seconds to a minute, and most of that is their start — class loading and
JIT compiling, with up to a dozen JVMs (drivers, a master, workers, executors) starting on the
project's 2-core machines. Tiered compilation's C2 compiler and the parallel collector's threads
pay off only in long-running JVMs, so every JVM these tests start (directly, or through Spark's
launcher, or in a subprocess's Spark) runs with the C1 compiler only and the serial collector:
``JAVA_TOOL_OPTIONS``, which every JVM reads, unless the environment sets it already.

Every JVM also gets ``-Djava.io.tmpdir``: a directory of the session's own, removed at its end.
A Spark JVM keeps its scratch files there (a driver's ``blockmgr-*``, ``spark-*`` and
``artifacts-*``, an executor's unless its worker says otherwise), and removes them only when it
exits on its own: the JVMs these tests SIGKILL (a whole driver, a worker's executor) would leave
them in ``/tmp`` for good.

When the first gsp-spark test starts, so do the background jobs (``jobs.py``) of the modules
selected: tests that run processes of their own only wait for them later. Under pytest-xdist
(the suite's ``--dist loadgroup``) every worker collects every test but runs only its share: a
worker starts the jobs of an ``xdist_group``'s modules when it runs the group's first test (the
whole group runs on that worker), so each job runs once, not once per worker.
(docs/spark.md, "What it costs CI", has the figures.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Iterator

import background
import jobs
import pytest
import spark_fixtures

JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _group(item: Any) -> str | None:
    """The ``xdist_group`` of a test, if it has one."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _start_jobs(items: Any) -> None:
    """Start the background jobs that the modules of ``items`` need (each once)."""
    for module in dict.fromkeys(item.path.name for item in items):
        for name in jobs.NEEDED_BY.get(module, ()):
            background.get(name)


_groups_started: set[str] = set()


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "stops_shared_session: the test stops spark_fixtures.shared_session's "
        "session; it runs after every other test of its xdist_group, which share that session")


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Move each test marked ``stops_shared_session`` after the last test of its group: the
    group's other tests then share one session, not one started before it and another after."""
    for item in [i for i in items if i.get_closest_marker("stops_shared_session")]:
        group = _group(item)
        items.remove(item)
        last = max((k for k, other in enumerate(items) if _group(other) == group), default=-1)
        items.insert(last + 1, item)


#: Spark's defaults (spark-defaults.conf) for every JVM the tests start. A Python worker connects
#: back to its executor's JVM and waits for it at most spark.python.authenticate.socketTimeout
#: (15 s by default); on a 2-core machine busy with a dozen JVMs the executor can take longer to
#: accept, and the task fails with CANNOT_OPEN_SOCKET. Spark promises nothing tighter.
SPARK_DEFAULTS = "spark.python.authenticate.socketTimeout 120s\n"


def _defaults(scratch: str) -> str:
    conf = os.path.join(scratch, "conf")
    os.makedirs(conf)
    with open(os.path.join(conf, "spark-defaults.conf"), "w") as f:
        f.write(SPARK_DEFAULTS)
    return conf


@pytest.fixture(scope="session", autouse=True)
def spark_tests(request: Any) -> Iterator[None]:
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    scratch = tempfile.mkdtemp(prefix="gsp-spark-jvm-")
    # Before any JVM starts, the background jobs' too.
    os.environ["JAVA_TOOL_OPTIONS"] = (JAVA_OPTIONS if before is None else before) + \
        f" -Djava.io.tmpdir={scratch}"
    conf_before = os.environ.get("SPARK_CONF_DIR")
    if conf_before is None:  # Spark's defaults for every JVM these tests start
        os.environ["SPARK_CONF_DIR"] = _defaults(scratch)
    try:
        if "PYTEST_XDIST_WORKER" not in os.environ:  # one process runs every test selected
            _start_jobs(request.session.items)
        yield
    finally:
        spark_fixtures.stop_shared_session()
        background.close_all()
        if conf_before is None:
            os.environ.pop("SPARK_CONF_DIR", None)
        if before is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = before
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def group_jobs(request: Any) -> None:
    """Under pytest-xdist: at a group's first test on this worker, start the jobs its modules
    need (a test waiting for a job it finds not started starts it then: ``background.get``)."""
    group = _group(request.node)
    if "PYTEST_XDIST_WORKER" in os.environ and group and group not in _groups_started:
        _groups_started.add(group)
        _start_jobs(item for item in request.session.items if _group(item) == group)
