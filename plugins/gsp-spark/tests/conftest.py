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
selected: tests that run processes of their own only wait for them later.
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


@pytest.fixture(scope="session", autouse=True)
def spark_tests(request: Any) -> Iterator[None]:
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    scratch = tempfile.mkdtemp(prefix="gsp-spark-jvm-")
    # Before any JVM starts, the background jobs' too.
    os.environ["JAVA_TOOL_OPTIONS"] = (JAVA_OPTIONS if before is None else before) + \
        f" -Djava.io.tmpdir={scratch}"
    selected = {item.path.name for item in request.session.items}
    try:
        for module, names in jobs.NEEDED_BY.items():
            if module in selected:
                for name in names:
                    background.get(name)
        yield
    finally:
        spark_fixtures.stop_shared_session()
        background.close_all()
        if before is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = before
        shutil.rmtree(scratch, ignore_errors=True)
