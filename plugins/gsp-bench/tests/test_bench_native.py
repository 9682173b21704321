"""gsp bench's native libraries: C nng (built here against Debian's libnng-dev; .ci/run installs
it) runs the workloads and speaks nng's wire to gsp; Go mangos, and nng without its compiler or
header, are skipped with the reason. Nothing here times anything: figures only have to exist,
be positive and count the messages sent."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import gsp
from gsp_bench import native
from gsp_bench.libs import LIBS

pytestmark = pytest.mark.native("cc", "libnng")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh build cache for this module's runs (the first one builds the nng tool)."""
    d = str(tmp_path_factory.mktemp("native-cache"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def bench(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gsp", "bench", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env})


def nng_tool(cache: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GSP_BENCH_CACHE", cache)
    for var in ("CC", "CFLAGS", "LDFLAGS"):
        monkeypatch.delenv(var, raising=False)
    try:
        return native.tool("nng")
    except native.Unavailable as exc:
        pytest.fail(f"the nng bench tool does not build here ({exc}); .ci/run installs libnng-dev")


@pytest.mark.allow_leaks  # worker processes only; this process opens no sockets
@pytest.mark.timeout(300)
def test_nng_runs_thr_lat_and_reqrep_and_counts_every_message(cache: str) -> None:
    results = []
    for args in (["thr", "--sizes", "16,1m", "--sweep-bytes", "1"],  # 200 messages each
                 ["lat", "--count", "50"], ["reqrep", "--count", "200", "--clients", "4"],
                 ["thr", "--transport", "ipc", "--count", "300"]):
        p = bench(*args, "--libs", "nng", "--json", "--quiet", "--timeout", "90",
                  env={"GSP_BENCH_CACHE": cache}, timeout=200)
        assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
        doc = json.loads(p.stdout)
        assert doc["libs"] == ["gsp", "nng"] and doc["machine"]["skipped"] == {}
        assert doc["machine"]["native"]["nng"].count(".") == 2  # its version, e.g. 1.5.2
        results += [r for r in doc["results"] if r["lib"] == "nng"]
    assert len(results) == 5
    for r in results:
        where, f, w = r["case"], r["figures"], r["workload"]
        assert not r.get("error") and not r.get("na"), (where, r)
        if w == "thr":
            assert f["count"] == (300 if r["params"]["transport"] == "ipc" else 200), where
            assert f["msg_s"] > 0 and f["mb_s"] > 0 and f["elapsed"] > 0, where
            assert f["cpu_ns_send"] >= 0 and f["cpu_ns_recv"] >= 0 and f["faults_recv"] >= 0
        elif w == "lat":
            assert f["count"] == 50 and 0 < f["p50_us"] <= f["p99_us"] and f["mean_us"] > 0
        else:
            assert f["requests"] == 200 and f["clients"] == 4 and f["req_s"] > 0


@pytest.mark.allow_leaks
@pytest.mark.timeout(120)
def test_missing_compiler_or_go_skips_each_saying_why(tmp_path: Path) -> None:
    env = {"GSP_BENCH_CACHE": str(tmp_path), "CC": str(tmp_path / "no-cc"),
           "GO": str(tmp_path / "no-go")}
    p = bench("lat", "--libs", "nng,mangos", "--count", "20", env=env, timeout=110)
    assert p.returncode == 0, p.stderr
    assert f"nng: skipped (C compiler '{tmp_path / 'no-cc'}' not found" in p.stderr
    assert f"mangos: skipped (Go toolchain '{tmp_path / 'no-go'}' not found" in p.stderr
    head, table = p.stdout.split("\n\n", 1)
    assert "nng: skipped (" in head and "mangos: skipped (" in head  # the header says it too
    assert table.splitlines()[0].split() == ["workload", "metric", "gsp"]
    p = bench("lat", "--libs", "nng", "--json", "--count", "20", "--quiet", env=env, timeout=110)
    doc = json.loads(p.stdout)
    assert doc["libs"] == ["gsp"] and set(doc["machine"]["skipped"]) == {"nng"}
    assert "nng" in LIBS and "mangos" in LIBS  # --compare tries both (plugins/gsp-bench/tests/test_bench.py)
    p = bench("local_lat", "tcp://127.0.0.1:0", "16", "1", "--lib", "nng", env=env, timeout=60)
    assert p.returncode == 2 and "not found" in p.stderr


def script(path: Path, text: str) -> str:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.interop
def test_missing_header_or_module_says_what_to_install(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Stand-ins that fail the way gcc without libnng-dev and go without the module do.
    monkeypatch.setenv("GSP_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", script(tmp_path / "cc", "echo 'nng_perf.c:30:10: fatal error: "
                                    "nng/nng.h: No such file or directory' >&2; exit 1\n"))
    with pytest.raises(native.Unavailable, match=r"^nng.h not found: apt-get install libnng-dev$"):
        native.tool("nng")
    monkeypatch.setenv("GO", script(tmp_path / "go", "cat go.mod >&2; echo 'main.go:22:2: no "
                                    "required module provides package go.nanomsg.org/mangos/v3' "
                                    ">&2; exit 1\n"))
    with pytest.raises(native.Unavailable, match="go build of the mangos tool failed .*"
                       "no required module provides package go.nanomsg.org/mangos/v3"):
        native.tool("mangos")
    # A vendored copy of mangos is used through a replace directive in the tool's go.mod.
    monkeypatch.setenv("GSP_BENCH_MANGOS", str(tmp_path / "mangos"))
    with pytest.raises(native.Unavailable) as info:
        native.tool("mangos")
    assert f"replace go.nanomsg.org/mangos/v3 => {tmp_path / 'mangos'} |" in str(info.value)
    assert os.listdir(tmp_path / "cache") == []  # no half-built tool left behind


def test_the_nng_tool_is_built_once_and_again_when_its_inputs_change(
        cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = nng_tool(cache, monkeypatch)
    built = os.stat(exe).st_mtime_ns
    assert native.tool("nng") == exe and os.stat(exe).st_mtime_ns == built  # cached
    assert native.available("nng").count(".") == 2
    monkeypatch.setenv("CFLAGS", "-DGSP_BENCH_TEST=1")
    other = native.tool("nng")
    assert other != exe and os.access(other, os.X_OK)


def test_gsp_req_and_pull_talk_to_the_nng_tool(
        gsp_socket: Callable[..., gsp.Socket], cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = nng_tool(cache, monkeypatch)
    # C REP (echoes 3 requests) ← gsp REQ.
    with subprocess.Popen([exe, "lat_server", "tcp://127.0.0.1:0", "16", "3"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as srv:
        try:
            assert srv.stdout is not None and srv.stdin is not None
            url = json.loads(srv.stdout.readline())["ready"]["url"]
            req = gsp_socket("req", recv_timeout=10)
            req.dial(url, fail_fast=True)
            for i in range(3):
                req.send(b"ping %d" % i)
                assert req.recv() == b"ping %d" % i
            req.close()
            srv.stdin.write("stop\n")
            srv.stdin.close()
            assert srv.wait(10) == 0
        finally:
            srv.kill()
    # C PUSH (5 messages, the first alone) → gsp PULL.
    pull = gsp_socket("pull", recv_timeout=10)
    pull.listen("tcp://127.0.0.1:0")
    with subprocess.Popen([exe, "thr_send", pull.listeners[0].url, "32", "5"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as push:
        try:
            assert push.stdin is not None and push.stdout is not None
            got: list[Any] = [pull.recv()]
            push.stdin.write("go\n")
            push.stdin.flush()
            got += [pull.recv() for _ in range(4)]
            assert got == [b"D" + b"x" * 31] * 5
            push.stdin.write("measure\nstop\n")
            push.stdin.close()
            assert json.loads(push.stdout.readline())["result"]["cpu"] >= 0
            assert push.wait(10) == 0
        finally:
            push.kill()


def test_the_nng_tool_ends_with_the_worker_that_started_it(
        cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed at the bench's time limit takes its tool along, even one blocked in a
    recv (a REP still waiting for requests), not reading the control channel."""
    exe = nng_tool(cache, monkeypatch)
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen(sys.argv[1:], "
         "stdin=subprocess.PIPE); print(p.pid, flush=True); p.wait()",
         exe, "lat_server", "tcp://127.0.0.1:0", "16", "10"], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        lines = sorted([parent.stdout.readline(), parent.stdout.readline()])  # either first
        child = int(lines[0])  # the tool's pid, and its {"ready": ...} on the same stdout
        assert "ready" in lines[1]
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{child}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                return  # dead, waiting for init to reap it
        time.sleep(0.05)
    os.kill(child, 9)
    pytest.fail("the nng tool outlived its worker")


@pytest.mark.allow_leaks
@pytest.mark.timeout(200)
def test_nng_serves_reqrep_procs_from_one_process_beside_gsp_prefork(cache: str) -> None:
    """``reqrep --procs 2``: the nng tool serves from one process in both rows (its own
    threads), its clients start on "go"; every request is counted, and the CPU rows exist
    (/proc's clock ticks: a short run may read 0)."""
    p = bench("reqrep", "--procs", "2", "--count", "400", "--clients", "4", "--libs", "nng",
              "--json", "--quiet", "--timeout", "90", env={"GSP_BENCH_CACHE": cache},
              timeout=180)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    doc = json.loads(p.stdout)
    assert [(r["params"]["procs"], r["lib"]) for r in doc["results"]] == [
        (1, "gsp"), (1, "nng"), (2, "gsp"), (2, "nng")]
    for r in doc["results"]:
        f = r["figures"]
        assert not r.get("error") and f["requests"] == 400 and f["req_s"] > 0, r
        assert f["cpu_us_server"] >= 0 and f["cpu_us_clients"] >= 0, r


class _Ctl:
    """What a worker's control channel hears, for a role run outside a worker."""

    def __init__(self) -> None:
        self.said: list[tuple[str, dict[str, Any]]] = []

    def ready(self, **info: Any) -> None:
        self.said.append(("ready", info))

    def result(self, **figures: Any) -> None:
        self.said.append(("result", figures))

    def wait(self, word: str, interval: float = 0.005) -> None:
        self.said.append(("wait", {"word": word}))


@pytest.mark.parametrize("name, conns, tail", [("mangos", 2, ["2"]), ("mangos", None, []),
                                               ("nng", 2, [])])
def test_reqrep_conns_reach_the_tools_with_contexts_only(tmp_path: Path, name: str,
                                                         conns: int | None,
                                                         tail: list[str]) -> None:
    """``reqrep --conns K``: mangos' clients become contexts over K sockets, as gsp's (its tool
    takes CONNS as a fifth argument); nng's tool has no such argument and is not given one."""
    from gsp_bench.libs.lib_native import Native
    argv = tmp_path / "argv.json"
    fake = tmp_path / "tool.py"
    fake.write_text(f"import json, sys\njson.dump(sys.argv[1:], open({str(argv)!r}, 'w'))\n"
                    "print(json.dumps({'result': {'requests': 8, 'elapsed': 0.5, 'cpu': 0.1}}))\n")
    exe = script(tmp_path / "tool", f'exec {sys.executable} {fake} "$@"\n')
    lib = Native.__new__(Native)  # no build: the fake tool stands in for it
    lib.name, lib.exe = name, exe
    ctl = _Ctl()
    lib.req_clients_go(ctl, "tcp://127.0.0.1:1", 16, 8, 8, conns=conns)  # type: ignore[arg-type]
    assert json.loads(argv.read_text()) == ["req_clients", "tcp://127.0.0.1:1", "16", "8", "8",
                                           *tail]
    assert [(k, v.get("word", v.get("clients", v.get("requests")))) for k, v in ctl.said] == \
        [("ready", 8), ("wait", "go"), ("result", 8), ("wait", "stop")]
