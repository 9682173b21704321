"""A worker process: ``python -m gsp.bench _worker '{"lib": ..., "role": ..., "args": {...}}'``."""

from __future__ import annotations

import json
import sys
import traceback

from ._ctl import Ctl
from ._libs import NotApplicable, make, raise_nofile


def run(spec_json: str) -> int:
    spec = json.loads(spec_json)
    raise_nofile()
    ctl: Ctl | None = None
    try:
        lib = make(spec["lib"])
        ctl = Ctl(lib.sleep)
        getattr(lib, spec["role"])(ctl, **spec["args"])
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
