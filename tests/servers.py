"""Real gunicorn and uWSGI servers for tests, each in a process group of its own.

::

    with servers.gunicorn("tests.apps.ws_app:application", pythonpath=ROOT) as srv:
        srv.url        # http://127.0.0.1:PORT, answering already
        srv.proc       # the master's subprocess.Popen
        srv.output()   # everything the server wrote so far (stdout and stderr)
        srv.stop()     # SIGTERM to the master, wait; returns its exit status

Whatever happens, leaving the block kills what is left of the process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, Any, Iterator, Sequence

from gevent import socket as gsocket
from gevent import ssl as gssl

from gsp.testing import free_port

START_TIMEOUT = 30.0  # seconds a server gets to answer its first request
_WORKER_READY = "tests.servers: worker ready"


class Server:
    def __init__(self, args: Sequence[str], port: int, env: dict[str, str] | None = None, *,
                 ready_line: str = "", ready_count: int = 0) -> None:
        self.ready_line = ready_line  # wait_ready also waits for ready_count lines holding it
        self.ready_count = ready_count
        self.args = list(args)
        self.tls = "--certfile" in self.args  # gunicorn serving HTTPS
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        self.port = port
        self._log: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def output(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until an HTTP request gets an HTTP answer (any status)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args[:3]} exited with {self.proc.returncode}:\n"
                                   f"{self.output()}")
            try:
                if self._answers() and self.output().count(self.ready_line) >= self.ready_count:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.args[:3]} did not answer within {timeout:g} s:\n"
                                   f"{self.output()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        with contextlib.ExitStack() as stack:
            s: Any = stack.enter_context(
                gsocket.create_connection(("127.0.0.1", self.port), timeout=2))
            if self.tls:
                ctx = gssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = gssl.CERT_NONE
                s = stack.enter_context(ctx.wrap_socket(s))
            s.sendall(b"GET /__ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return bool(s.recv(16).startswith(b"HTTP/1."))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` to the server's main process and wait for it to exit; killed (the whole
        group) if it has not after ``timeout`` s. Returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
                self.proc.wait(5)
        return self.proc.returncode

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        self._kill_group()  # the workers too, whatever the master did
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self._log.close()


@contextlib.contextmanager
def _serving(args: Sequence[str], port: int, ready_line: str = "",
             ready_count: int = 0) -> Iterator[Server]:
    srv = Server(args, port, ready_line=ready_line, ready_count=ready_count)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.close()


def _gunicorn_has(setting: str) -> bool:
    from gunicorn.config import KNOWN_SETTINGS

    return any(s.name == setting for s in KNOWN_SETTINGS)


@contextlib.contextmanager
def gunicorn(app: str, *, pythonpath: str, worker_class: str = "gevent", workers: int = 3,
             preload: bool = False, extra: Sequence[str] = ()) -> Iterator[Server]:
    """``gunicorn -k worker_class -w workers [--preload] app`` on 127.0.0.1, a free port."""
    port = free_port()
    # Ready means every worker has set up its signal handlers (post_worker_init runs after
    # that): a SIGTERM that reaches a worker earlier goes to the master's inherited handler and
    # is lost, and the worker lingers until the graceful timeout.
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "gunicorn_conf.py")
        with open(config, "w") as f:
            f.write("def post_worker_init(worker):\n"
                    "    worker.log.info('%s %s', " + repr(_WORKER_READY) + ", worker.pid)\n")
        args = [sys.executable, "-m", "gunicorn", "-c", config, "-k", worker_class,
                "-w", str(workers), "-b", f"127.0.0.1:{port}", "--pythonpath", pythonpath,
                "--graceful-timeout", "10"]
        if _gunicorn_has("control_socket_disable"):  # gunicorn 25+: no shared ~/.gunicorn socket
            args.append("--no-control-socket")
        if preload:
            args.append("--preload")
        with _serving([*args, *extra, app], port, _WORKER_READY, workers) as srv:
            yield srv


def uwsgi_binary() -> str:
    return os.path.join(os.path.dirname(sys.executable), "uwsgi")


@contextlib.contextmanager
def uwsgi(app: str, *, pythonpath: str, processes: int = 3, gevent: int = 100,
          lazy_apps: bool = False, extra: Sequence[str] = ()) -> Iterator[Server]:
    """``uwsgi --http-socket 127.0.0.1:PORT --master --processes N --gevent G [--lazy-apps]``
    serving ``module:callable`` with this interpreter's environment; SIGTERM ends it
    (``--die-on-term``)."""
    port = free_port()
    args = [uwsgi_binary(), "--http-socket", f"127.0.0.1:{port}", "--master",
            "--processes", str(processes), "--virtualenv", sys.prefix,
            "--pythonpath", pythonpath, "--module", app, "--need-app", "--die-on-term",
            "--worker-reload-mercy", "10", "--ignore-sigpipe", "--ignore-write-errors",
            "--disable-write-exception", "--gevent", str(gevent)]
    if lazy_apps:
        args.append("--lazy-apps")
    with _serving([*args, *extra], port) as srv:
        yield srv
