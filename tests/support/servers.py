"""Real WSGI servers for tests: gunicorn and uWSGI started as subprocesses (from this venv's
scripts), each on a free 127.0.0.1 port, in its own process group, killed whole at exit.

    with servers.gunicorn("serving_app:application", pythonpath=APPS, preload=True) as srv:
        ... srv.url ... srv.stop(signal.SIGTERM) ... srv.output()

Waits use gevent (a test process may serve a gsp backend in its own hub meanwhile).
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

import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl

#: Where the venv's console scripts are (gunicorn, uwsgi): beside the running interpreter.
BIN = os.path.dirname(sys.executable)
START_TIMEOUT = 30.0


def free_port() -> int:
    s = gsocket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
    finally:
        s.close()


def somaxconn(default: int = 128) -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return default


class Server:
    """A server process (group) started by :func:`gunicorn` or :func:`uwsgi`."""

    def __init__(self, argv: Sequence[str], port: int, env: dict[str, str], *,
                 ready_line: str = "", ready_count: int = 0) -> None:
        self.port = port
        self.argv = list(argv)
        self.tls = "--certfile" in self.argv  # gunicorn serving HTTPS: probed over TLS
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        self.ready_line = ready_line  # wait_ready also waits for ready_count lines holding it
        self.ready_count = ready_count
        self._log: IO[bytes] = tempfile.NamedTemporaryFile(prefix="gsp-server-", suffix=".log")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.pgid = self.proc.pid  # start_new_session: the server leads its own group

    def output(self) -> str:
        """Everything the server wrote so far (stdout and stderr)."""
        self._log.flush()
        with open(self._log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def _ready(self) -> list[str]:
        """The lines in which a worker said it was ready: those holding ``ready_line``, less
        uWSGI's echo of the hook that prints it (``running "print:..." (accepting)...``)."""
        if not self.ready_line:
            return []
        return [line for line in self.output().splitlines()
                if self.ready_line in line and not line.startswith('running "')]

    def ready_pids(self) -> set[int]:
        """The pids of the workers that said they were ready (the pid ends the ready line)."""
        return {int(line.rsplit(" ", 1)[1]) for line in self._ready()}

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until an HTTP request gets an answer (any status) and the output has
        ``ready_count`` lines holding ``ready_line``."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode}:\n"
                                   f"{self.output()}")
            # A probe is never cut short: abandoned in its TLS handshake (a slow machine), it
            # would make the server log an SSLEOFError traceback, which the tests look for.
            left = max(deadline - time.monotonic(), 0.1)
            try:
                with gevent.Timeout(left):
                    if self._answers(left) and self.ready_lines() >= self.ready_count:
                        return
            except (OSError, gevent.Timeout):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.argv[0]} did not answer within {timeout} s:\n"
                                   f"{self.output()}")
            gevent.sleep(0.1)

    def ready_lines(self) -> int:
        """How many times a worker said it was ready (each reload's new workers say it again)."""
        return len(self._ready())

    def _answers(self, timeout: float) -> bool:
        with contextlib.ExitStack() as stack:
            s: Any = stack.enter_context(
                gsocket.create_connection(("127.0.0.1", self.port), timeout=timeout))
            if self.tls:
                ctx = gssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = gssl.CERT_NONE
                s = stack.enter_context(ctx.wrap_socket(s))
            s.sendall(b"GET /ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return bool(s.recv(16).startswith(b"HTTP/"))

    def wait(self, timeout: float) -> int | None:
        """The exit status once the main process exited within ``timeout`` s, else None."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                return None
            gevent.sleep(0.05)
        return self.proc.returncode

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` to the main process and wait for it to exit (SIGKILL to the group after
        ``timeout``); its exit status."""
        self.send_signal(sig)
        code = self.wait(timeout)
        if code is None:
            self.kill()
            code = self.proc.wait()
        return code

    def kill(self) -> None:
        """SIGKILL the whole process group (workers included); idempotent."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.wait(5)

    def close(self) -> None:
        self.kill()
        self._log.close()


def _env(pythonpath: str, extra_env: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra_env or {})
    return env


@contextlib.contextmanager
def _running(argv: list[str], port: int, env: dict[str, str], ready_line: str = "",
             ready_count: int = 0) -> Iterator[Server]:
    srv = Server(argv, port, env, ready_line=ready_line, ready_count=ready_count)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.close()


@contextlib.contextmanager
def gunicorn(app: str, *, pythonpath: str, worker_class: str = "gevent", workers: int = 3,
             preload: bool = False, extra: Sequence[str] = (),
             env: dict[str, str] | None = None, hooks: str = "") -> Iterator[Server]:
    """gunicorn serving ``app`` ("module:callable", found on ``pythonpath``); ready once every
    worker has run ``post_worker_init`` (a config file of ours, ``-c``): a SIGTERM that reaches
    a worker before it has set up its signal handlers goes to the master's inherited handler
    and is lost, and that worker lingers for the whole graceful timeout. ``hooks`` is more
    Python for that file (server hooks such as ``worker_exit``)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gsp-gunicorn-") as tmp:
        config = os.path.join(tmp, "gunicorn_conf.py")
        with open(config, "w") as f:
            f.write("def post_worker_init(worker):\n"
                    f"    worker.log.info('%s %s', {_WORKER_READY!r}, worker.pid)\n"
                    + hooks)
        argv = [os.path.join(BIN, "gunicorn"), "-c", config, "--bind", f"127.0.0.1:{port}",
                "--workers", str(workers), "--worker-class", worker_class,
                "--graceful-timeout", "20", "--backlog", str(min(2048, somaxconn())),
                "--chdir", pythonpath]
        if _gunicorn_has("control_socket_disable"):  # gunicorn 25+: no shared ~/.gunicorn socket
            argv.append("--no-control-socket")
        if preload:
            argv.append("--preload")
        argv += [*extra, app]
        with _running(argv, port, _env(pythonpath, env), _WORKER_READY, workers) as srv:
            yield srv


_WORKER_READY = "tests.support.servers: worker ready"


def _gunicorn_has(setting: str) -> bool:
    from gunicorn.config import KNOWN_SETTINGS

    return any(s.name == setting for s in KNOWN_SETTINGS)


@contextlib.contextmanager
def uwsgi(app: str, *, pythonpath: str, processes: int = 3, gevent: int = 100,
          lazy_apps: bool = False, extra: Sequence[str] = (),
          env: dict[str, str] | None = None) -> Iterator[Server]:
    """uWSGI (master, ``--gevent``) serving ``app`` ("module:callable") over HTTP; SIGTERM
    shuts it down gracefully (``--die-on-term`` with the master's SIGTERM handler set to
    ``gracefully_kill_them_all``: 2.0's default SIGTERM is a brutal reload). Ready once every
    worker has entered its accepting phase (``--hook-accepting``): the port answers as soon as
    the first does, and with ``--lazy-apps`` each worker loads the app itself, so one worker
    could take a whole burst while the others are still importing."""
    port = free_port()
    module, _, callable_ = app.partition(":")
    argv = [os.path.join(BIN, "uwsgi"), "--master", "--http-socket", f"127.0.0.1:{port}",
            "--processes", str(processes), "--gevent", str(gevent), "--module", module,
            "--callable", callable_ or "application", "--pythonpath", pythonpath,
            "--listen", str(min(1024, somaxconn())), "--die-on-term",
            "--hook-master-start", "unix_signal:15 gracefully_kill_them_all",
            "--worker-reload-mercy", "20", "--reload-mercy", "20", "--need-app",
            "--disable-logging", "--hook-accepting", f"print:{_WORKER_READY}"]
    if lazy_apps:
        argv.append("--lazy-apps")
    argv += list(extra)
    with _running(argv, port, _env(pythonpath, env), _WORKER_READY, processes) as srv:
        yield srv
