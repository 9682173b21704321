"""gsp.tune_allocator: glibc's malloc keeps big message bodies' memory mapped, so receiving them
stops faulting pages in; bad values are refused; elsewhere it changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gsp
import gsp.allocator
from gsp.allocator import MAX_BIG, tune_allocator

# One process, one push -> pull pair over tcp: the faults per received 256 KiB message (every
# body a new bytes object, as recv returns them), after a warm-up that lets the heap grow to its
# working size. Run in a fresh interpreter: the setting is the whole process's.
PROBE = r"""
import json, resource, sys
import gevent
import gsp

tuned = gsp.tune_allocator() if sys.argv[1] == "tuned" else None
size, warm, n = 256 * 1024, 100, 300
payload = b"x" * size
with gsp.socket("pull") as pull, gsp.socket("push") as push:
    push.dial(pull.listen("tcp://127.0.0.1:0").url, block=True)
    sender = gevent.spawn(lambda: [push.send(payload) for _ in range(warm + n)])
    for _ in range(warm):
        pull.recv()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        assert len(pull.recv()) == size
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    sender.get(timeout=10)
print(json.dumps({"tuned": tuned, "faults_per_msg": faults / n}))
"""


def probe(mode: str) -> dict[str, float]:
    r = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc: Linux only")
def test_tuned_receives_big_messages_without_page_faults() -> None:
    default, tuned = probe("default"), probe("tuned")
    assert tuned["tuned"] is True
    # glibc's defaults map fresh pages for most 256 KiB bodies (about 40 faults each here)
    assert default["faults_per_msg"] > 4, default
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
