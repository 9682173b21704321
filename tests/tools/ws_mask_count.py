"""Instructions one WebSocket masking of 64 KiB costs, by way of doing it, counted by callgrind.

    python tests/tools/ws_mask_count.py [--size 65536]

Ways: wsproto's ``XorMaskerSimple`` (what gsp-ws used before), websockets' pure-Python
``apply_mask`` (XOR through one big integer: its fallback without the C extension), websockets'
C ``apply_mask`` (what gsp-ws uses), and a plain copy of the same bytes for scale. Each runs
``n`` then ``3 n`` times in a process of its own under ``valgrind --tool=callgrind``; the
difference over the extra runs is one masking, start-up cancelled out (as tests/tools/work_count.py
counts a message).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

WAYS = {
    "wsproto XorMaskerSimple": "from wsproto.frame_protocol import XorMaskerSimple as M\n"
                               "f = lambda: M(k).process(d)",
    "websockets apply_mask, pure Python": "from websockets.utils import apply_mask as m\n"
                                          "f = lambda: m(d, k)",
    "websockets apply_mask, C": "from websockets.speedups import apply_mask as m\n"
                                "f = lambda: m(d, k)",
    "a copy of the bytes": "f = lambda: d[1:]",
}


def _instructions(code: str, size: int, n: int) -> int:
    script = f"import os\nd = os.urandom({size}); k = os.urandom(4)\n{code}\n" \
             f"for _ in range({n}):\n    f()\n"
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("-n", type=int, default=10)
    a = ap.parse_args()
    for name, code in WAYS.items():
        short, long = (_instructions(code, a.size, k) for k in (a.n, 3 * a.n))
        print(f"{name:36} {(long - short) / (2 * a.n):12,.0f} instructions", flush=True)


if __name__ == "__main__":
    main()
