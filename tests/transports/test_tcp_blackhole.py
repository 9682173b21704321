"""tcp and tls+tcp notice a peer black-holed at the packet level within the configured TCP
keepalive, and the dialer redials once the network heals.

A user-space proxy cannot show this (its own kernel answers the probes), so
tests/tools/blackhole_probe.py runs in a network namespace of its own (``unshare -rn``: as root on
CI, or in a user namespace elsewhere) and drops every packet on its loopback with a tc filter.
It reports JSON, asserted on here. The namespace, its filter and the probe's sockets die with the
process, whatever happens.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import PKI

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "tools" / "blackhole_probe.py"


def run_probe(pki: PKI) -> dict[str, Any]:
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) is needed to build the black hole"
    out = subprocess.run([unshare, "-rn", sys.executable, str(PROBE), "--tls", pki.ca_file,
                          pki.server_cert_file, pki.server_key_file],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"the probe failed (rc {out.returncode}):\n{out.stderr}"
    report: dict[str, Any] = json.loads(out.stdout)
    return report


@pytest.mark.timeout(90)
def test_a_black_holed_peer_is_noticed_by_the_configured_keepalive_and_redialed(
        pki: PKI) -> None:
    report = run_probe(pki)
    assert report["keepalive"] == {"tcp_keepalive_idle": 1, "tcp_keepalive_interval": 1,
                                   "tcp_keepalive_count": 2}
    for scheme in ("tcp", "tls+tcp"):
        got = report[scheme]
        # 1 s idle, then 2 unanswered probes 1 s apart: ~3 s. The defaults (30 s + 3 x 10 s)
        # would take a minute, and without keepalive nothing ends it (below).
        assert got["ended_after"] is not None and 1 < got["ended_after"] < 10, got
        # The kernel's verdict, also on tls+tcp (where OpenSSL reports it as an EOF).
        assert got["error"][0] == "ConnectionBroken", got
        assert got["error"][1] == f"recv on {got['remote']}: Connection timed out", got
        assert got["server_pipe_ended"], got  # the listener's end (same options) noticed too
        assert got["redial_after"] is not None and got["redial_after"] < 5, got
        # The same black hole, the same moment: a pipe without keepalive noticed nothing.
        assert report[f"{scheme} keepalive off"] == {"open_when_detected": True}
