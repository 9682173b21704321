"""A worker process, started by the runner (never by hand):
``python -m gsp_bench.worker '{"lib": ..., "role": ..., "malloc": ..., "args": {...}}'``.

It builds the library, runs one role with the control channel on stdin/stdout, and turns a
:class:`~gsp_bench.ctl.NotApplicable` or any other failure into a report line for the runner.
"""

from __future__ import annotations

import json
import sys
import traceback

from gsp import tune_allocator

from .ctl import Ctl, NotApplicable
from .libs import make, raise_nofile


def run(spec_json: str) -> int:
    spec = json.loads(spec_json)
    raise_nofile()
    if spec.get("malloc") == "tuned":  # before the library allocates anything of its own
        tune_allocator()
    try:
        lib = make(spec["lib"])
        getattr(lib, spec["role"])(Ctl(lib.rt.sleep), **spec["args"])
    except NotApplicable as exc:
        print(json.dumps({"na": str(exc)}), flush=True)
        return 0
    except BaseException as exc:
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
