"""A plain WSGI app as a new user writes it: its REQ socket is made AT IMPORT TIME (so under
gunicorn --preload and uWSGI's default the master makes it, then forks the workers), and each
HTTP request does one REQ round trip on a context of its own. The reply is the backend's answer
and the worker's pid: ``<answer> pid=<pid>``. The backend's URL comes from GSP_SERVING_BACKEND.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterable

import gsp

logging.basicConfig(level=logging.INFO, format="%(process)d %(name)s %(levelname)s %(message)s")

req = gsp.socket("req", dial=os.environ["GSP_SERVING_BACKEND"], recv_timeout=15,
                 send_timeout=15)


def drain() -> None:
    """On worker exit (docs/serving.md): gunicorn's worker_exit hook (tests/serving/test_serving.py's
    config) or uwsgi.atexit, set below."""
    req.drain(timeout=10)
    logging.getLogger("serving_app").info("pid %d drained", os.getpid())


try:
    import uwsgi
except ImportError:
    pass
else:
    uwsgi.atexit = drain


def application(environ: dict[str, Any],
                start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") == "/ready":
        body = b"ready"
    else:
        payload = environ.get("QUERY_STRING", "").encode()
        with req.open_context() as ctx:
            ctx.send(payload)
            body = ctx.recv() + b" pid=%d" % os.getpid()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]
