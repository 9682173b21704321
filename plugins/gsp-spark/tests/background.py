"""Jobs that run beside the gsp-spark tests: the work of a test that runs processes of its own
(a driver script in a subprocess, a Spark cluster's daemons) starts when the first gsp-spark test
does, and the test only waits for its outcome and checks it.

Spark's tests leave the 2-core machine's CPU idle about half the time (waiting on triggers,
timeouts and other processes), and starting a JVM is most of what such a job does, so the jobs
fill that idle time instead of adding their own. A job runs in a thread of its own (never a
greenlet, so the leak checks of the tests it runs beside see nothing of it); the processes it
starts through :meth:`Job.popen` are killed, and its directory removed, when the session ends.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from typing import Any, Callable

_jobs: dict[str, "Job"] = {}


class Job:
    """One job: ``fn(job)`` in a thread; its outcome is :meth:`result`'s."""

    def __init__(self, name: str, fn: Callable[["Job"], Any],
                 cleanup: Callable[[Any], None] | None = None) -> None:
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix=f"gsp-spark-{name}-")
        self._fn, self._cleanup = fn, cleanup
        self._procs: list[subprocess.Popen[Any]] = []
        self._outcome: tuple[bool, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"job-{name}", daemon=True)

    def _run(self) -> None:
        try:
            self._outcome = (True, self._fn(self))
        except BaseException as exc:  # handed to the test that waits for it
            self._outcome = (False, exc)

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """``subprocess.Popen(args, **kwargs)``, killed at the session's end if still running."""
        p: subprocess.Popen[Any] = subprocess.Popen(args, **kwargs)
        self._procs.append(p)
        return p

    def run(self, args: list[str], timeout: float, **kwargs: Any
            ) -> subprocess.CompletedProcess[str]:
        """:func:`subprocess.run` with text output captured, through :meth:`popen`; killed once
        ``timeout`` s have passed (then its output so far, and returncode -9)."""
        p = self.popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       **kwargs)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += f"\n[killed after {timeout} s]"
        return subprocess.CompletedProcess(args, p.returncode, out, err)

    def result(self, timeout: float) -> Any:
        """Wait (at most ``timeout`` s) for the job; its return value, or its exception raised."""
        self._thread.join(timeout)
        if self._outcome is None:
            raise TimeoutError(f"background job {self.name!r} still running after {timeout} s")
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
        self._thread.join(30)
        if self._cleanup is not None and self._outcome is not None and self._outcome[0]:
            self._cleanup(self._outcome[1])
        shutil.rmtree(self.tmp, ignore_errors=True)


def start(name: str, fn: Callable[[Job], Any],
          cleanup: Callable[[Any], None] | None = None) -> Job:
    """Start job ``name`` (once): ``fn(job)`` in a thread; ``cleanup(result)`` at the end."""
    if name not in _jobs:
        job = _jobs[name] = Job(name, fn, cleanup)
        job._thread.start()
    return _jobs[name]


def get(name: str) -> Job:
    """Job ``name`` of :data:`jobs.JOBS`, started now unless it runs already."""
    import jobs  # the jobs themselves (they import this module)

    return start(name, *jobs.JOBS[name])


def close_all() -> None:
    """End every job: kill its processes, run its cleanup, remove its directory."""
    while _jobs:
        _jobs.popitem()[1].close()
