"""gsp.tune_allocator: glibc's malloc keeps big message bodies' memory mapped, so draining a
backlog of them stops faulting pages in; bad values are refused; elsewhere it changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gsp
import gsp.allocator
from gsp.allocator import MAX_BIG, tune_allocator

# One process, one push -> pull pair over tcp, in bursts: 40 bodies of 256 KiB are queued (a
# receiver that fell behind) and then taken; the page faults per body over five bursts after a
# first one that lets the heap grow. Run in a fresh interpreter: the setting is the process's.
PROBE = r"""
import json, resource, sys
import gevent
import gsp

tuned = gsp.tune_allocator() if sys.argv[1] == "tuned" else None
size, burst, rounds = 256 * 1024, 40, 6
payload = b"x" * size
with gsp.socket("pull") as pull, gsp.socket("push") as push:
    push.dial(pull.listen("tcp://127.0.0.1:0").url, fail_fast=True)
    for r in range(rounds):
        if r == 1:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        sender = gevent.spawn(lambda: [push.send(payload) for _ in range(burst)])
        with gevent.Timeout(10):
            while pull.stats["recv_queue"] < burst:
                gevent.sleep(0.005)
        for _ in range(burst):
            assert len(pull.recv(timeout=5)) == size
        sender.get(timeout=5)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"tuned": tuned, "faults_per_msg": faults / (burst * (rounds - 1))}))
"""


def probe(mode: str) -> dict[str, float]:
    r = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc: Linux only")
def test_tuned_a_backlog_of_big_messages_is_received_without_page_faults() -> None:
    default, tuned = probe("default"), probe("tuned")
    assert tuned["tuned"] is True
    # glibc's defaults give the drained queue's memory back to the kernel, and every burst
    # faults it in again: about one fault per 4 KiB page of every body
    assert default["faults_per_msg"] > 20, default
    assert tuned["faults_per_msg"] < 1, (default, tuned)


@pytest.mark.parametrize("kwargs", [
    {"big": 0}, {"big": -1}, {"big": MAX_BIG + 1}, {"big": 1.5}, {"big": True},
    {"keep": 0}, {"keep": "128M"}, {"big": 1 << 20, "keep": (1 << 20) - 1},
])
def test_bad_values_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(gsp.BadOption, match="tune_allocator"):
        tune_allocator(**kwargs)  # type: ignore[arg-type]


def test_does_nothing_where_the_c_library_is_not_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gsp.allocator.platform, "libc_ver", lambda: ("musl", "1.2"))

    def no_mallopt(*args: object) -> None:
        raise AssertionError("mallopt must not be looked up without glibc")

    monkeypatch.setattr(gsp.allocator.ctypes, "CDLL", no_mallopt)
    assert tune_allocator() is False


def test_exported_at_the_top() -> None:
    assert gsp.tune_allocator is tune_allocator
    assert "tune_allocator" in gsp.__all__
