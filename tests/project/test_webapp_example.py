"""examples/webapp.py (the docs/webapp.md guide's example): its self-test, and the server it runs
answering HTTP and ws:// requests from outside until SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import gevent
import pytest
from gevent import subprocess

import gsp
from tests.support import BLOCK, ROOT, http_get, stop_server

pytestmark = pytest.mark.plugins("gsp_ws")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "webapp.py"




def test_self_test_passes() -> None:
    p = subprocess.run([sys.executable, str(EXAMPLE), "--self-test", "30"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("webapp OK: 30 concurrent HTTP requests answered, SLOW got 504"), (
        p.stdout)


def test_server_answers_http_and_sp_clients_then_stops_on_sigterm(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with gevent.Timeout(30, AssertionError("the example did not start")):
            line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), (line, proc.stderr.read())
        port = int(line.split("/quote")[0].rsplit(":", 1)[1])
        jobs = [gevent.spawn(http_get, port, f"/quote?sym=T{i}") for i in range(10)]
        slow = gevent.spawn(http_get, port, "/quote?sym=SLOW")
        req = gsp_socket("req", dial=f"ws://127.0.0.1:{port}/sp", recv_timeout=10)
        for sym in (b"A", b"B"):
            req.send(sym)
            assert req.recv().startswith(sym + b" ")
        req.close()
        gevent.joinall([*jobs, slow], timeout=15, raise_error=True)
        for i, job in enumerate(jobs):
            status, body = job.value
            assert status == 200 and body.startswith(f"T{i} ".encode()), job.value
        assert slow.value == (504, b"backend too slow\n")
        assert http_get(port, "/nowhere")[0] == 404
    finally:
        code = stop_server(proc)
    assert code == 0


def test_the_guide_quotes_the_example_verbatim() -> None:
    blocks = [(m[1], m[2], m[4]) for m in BLOCK.finditer((ROOT / "docs" / "webapp.md").read_text())]
    assert sum(kind == "snippet" for kind, _, _ in blocks) >= 5
    for kind, where, code in blocks:
        assert kind in ("snippet", "snippet-exempt"), f"a block without a snippet marker:\n{code}"
        if kind == "snippet":
            assert code in (ROOT / where).read_text(), f"not (or no longer) in {where}:\n{code}"
