"""Running ``gsp cat`` as a subprocess in tests: start, wait for readiness, finish, clean up."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from typing import Iterator

#: The longest any one gsp cat process may run in a test.
LIMIT = 30.0


class Cats:
    """Starts ``python -m gsp cat ...`` processes; kills whatever still runs at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        # A test run started as a background job (``pytest &`` without job control) ignores
        # SIGINT, and its children inherit that: gsp cat then rightly leaves Ctrl-C alone. The
        # tests play a foreground run, so the children start with Ctrl-C's default.
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, "-m", "gsp", "cat", *args], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(p)
        return p

    def run(self, *args: str) -> tuple[int, bytes, str]:
        """Run to the end: (exit status, stdout, stderr)."""
        return finish(self.start(*args))

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=LIMIT)


def finish(p: subprocess.Popen[bytes], timeout: float = LIMIT) -> tuple[int, bytes, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err.decode()


def listening(p: subprocess.Popen[bytes], timeout: float = LIMIT) -> str:
    """The URL a ``gsp cat -v ... --listen`` process says it listens at (waits for the line)."""
    assert p.stderr is not None
    ready, _, _ = select.select([p.stderr], [], [], timeout)
    assert ready, f"gsp cat said nothing on stderr within {timeout} s"
    raw = b""
    while not raw.endswith(b"\n"):  # unbuffered: communicate() later reads the fd directly
        byte = os.read(p.stderr.fileno(), 1)
        if not byte:
            break
        raw += byte
    line = raw.decode()
    assert line.startswith("Listening at: "), line
    return line.split(": ", 1)[1].strip()


def cats_fixture() -> Iterator[Cats]:
    """The body of each test module's ``cats`` fixture."""
    c = Cats()
    yield c
    c.close()
