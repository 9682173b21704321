"""docs/browsers.md's "From zero" app (examples/ticks.py) is quoted from the file and runs as the
page says: under gevent's WSGIServer and under gunicorn's gevent workers (two, with and without
``--preload``), each serving the page, the browser module and the ticks of its PUB socket; and
its page, opened in Chromium, shows the ticks."""

from __future__ import annotations

import contextlib
import re
import sys
from typing import TYPE_CHECKING, Iterator

import gevent
import pytest
from gevent import subprocess

import gsp
from tests.support import BLOCK, ROOT, http_get, servers, stop_server

if TYPE_CHECKING:
    from tests.support.browser_support import Browser

pytestmark = pytest.mark.plugins("gsp_ws")

EXAMPLE = ROOT / "examples" / "ticks.py"
#: The example publishes a tick a second: a subscriber waits this long for each.
TICK_WAIT = 10.0


def test_the_page_quotes_the_example() -> None:
    page = (ROOT / "docs" / "browsers.md").read_text(encoding="utf-8")
    section = page[page.index("## From zero"):page.index("\n## ", page.index("## From zero") + 1)]
    quoted = [code for kind, where, _, code in BLOCK.findall(section)
              if kind == "snippet" and where == "examples/ticks.py"]
    assert quoted and quoted[0] in EXAMPLE.read_text(encoding="utf-8")
    for needed in ("import gsp", "def app(", "application = mount(", "gevent.spawn(publish"):
        assert needed in quoted[0], needed


def serves_ticks(port: int) -> None:
    """The app on ``port`` answers its page and gsp.js, and a SUB over ws gets two ticks."""
    status, body = http_get(port, "/")
    assert status == 200 and b'import { socket } from "/sp/gsp.js"' in body
    status, js = http_get(port, "/sp/gsp.js")
    assert status == 200 and b"export function socket" in js
    with gsp.socket("sub", dial=f"ws://127.0.0.1:{port}/sp", recv_timeout=TICK_WAIT) as sub:
        sub.subscribe(b"tick ")
        ticks = [sub.recv(), sub.recv()]
    assert all(re.fullmatch(rb"tick \d\d:\d\d:\d\d", t) for t in ticks) and ticks[0] != ticks[1]


@contextlib.contextmanager
def the_example() -> Iterator[int]:
    """``python examples/ticks.py 0`` running; its port."""
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        with gevent.Timeout(30, AssertionError("the example did not start")):
            line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), (line, proc.stderr.read())
        yield int(line.rsplit(":", 1)[1].strip(" /\n"))
    finally:
        stop_server(proc)


def test_it_runs_under_gevents_wsgi_server() -> None:
    with the_example() as port:
        serves_ticks(port)


@pytest.mark.browser
def test_its_page_shows_the_ticks_in_chromium(browser: Browser) -> None:
    """The page itself, as a user opens it: its SUB dials the mount and shows each tick."""
    with the_example() as port:
        page = browser.page(f"http://127.0.0.1:{port}/", ready=False)
        try:
            page.wait_for(r"/^tick \d\d:\d\d:\d\d$/.test(document.getElementById('out')"
                          ".textContent)", timeout=TICK_WAIT * 2)
        finally:
            page.close()


@pytest.mark.parametrize("preload", [False, True], ids=["imported-by-workers", "preload"])
def test_it_runs_under_gunicorn_with_two_gevent_workers(preload: bool) -> None:
    with servers.gunicorn("ticks:application", pythonpath=str(EXAMPLE.parent), workers=2,
                          preload=preload) as srv:
        for _ in range(4):  # new connections, spread over the workers by the kernel
            serves_ticks(srv.port)
