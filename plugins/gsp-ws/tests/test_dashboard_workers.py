"""examples/dashboard_workers.py under gunicorn with two gevent workers: whichever worker a
page's WebSocket reaches, it receives every worker's updates (the hub that fans them in lives
in one worker, and the others dial it), in a SUB over ws and in Chromium alike."""

from __future__ import annotations

import json
import os
import signal
from typing import TYPE_CHECKING

import pytest

import gsp
from tests.support import BLOCK, ROOT, servers, wait_for

if TYPE_CHECKING:
    from tests.support.browser_support import Browser

EXAMPLE = ROOT / "examples" / "dashboard_workers.py"
#: Each worker sends an update every 0.5 s once the hub is up; a worker claims the hub's
#: addresses within 1 s of starting: a subscriber sees both within this.
WAIT = 30.0


def test_a_subscriber_on_either_worker_gets_both_workers_updates() -> None:
    with servers.gunicorn("dashboard_workers:application", pythonpath=str(EXAMPLE.parent),
                          workers=2) as srv:
        workers = srv.ready_pids()
        assert len(workers) == 2
        for _ in range(4):  # new connections, spread over the workers by the kernel
            with gsp.socket("sub", dial=f"ws://127.0.0.1:{srv.port}/sp", recv_timeout=WAIT) as sub:
                sub.subscribe(b"")
                seen: set[int] = set()
                while seen != workers:
                    update = json.loads(sub.recv())
                    assert update["pid"] in workers, update
                    seen.add(update["pid"])


@pytest.mark.browser
def test_a_page_shows_every_workers_updates_in_chromium(browser: Browser) -> None:
    with servers.gunicorn("dashboard_workers:application", pythonpath=str(EXAMPLE.parent),
                          workers=2) as srv:
        workers = srv.ready_pids()
        assert len(workers) == 2
        expected = ",".join(sorted(f"worker {pid}" for pid in workers))
        page = browser.page(f"{srv.url}/", ready=False)
        try:  # the table lists exactly the two workers, by pid
            page.wait_for("[...document.querySelectorAll('#workers td:first-child')]"
                          f".map(td => td.textContent).sort().join(',') === {expected!r}",
                          timeout=WAIT)
        finally:
            page.close()


def test_the_hub_moves_to_another_worker_when_its_worker_dies() -> None:
    """Each of the two first workers killed in turn (one of them held the hub): gunicorn starts
    a new worker each time, and a subscriber again gets the updates of both live workers."""
    with servers.gunicorn("dashboard_workers:application", pythonpath=str(EXAMPLE.parent),
                          workers=2) as srv:
        first = srv.ready_pids()
        dead: set[int] = set()
        for pid in sorted(first):
            os.kill(pid, signal.SIGKILL)
            dead.add(pid)
            wait_for(lambda: len(srv.ready_pids() - dead) == 2, timeout=WAIT,
                     what="gunicorn's new worker")
            live = srv.ready_pids() - dead
            with gsp.socket("sub", dial=f"ws://127.0.0.1:{srv.port}/sp", recv_timeout=WAIT) as sub:
                sub.subscribe(b"")
                seen: set[int] = set()  # (an update of a dead worker may still be on its way)
                while not live <= seen:
                    seen.add(json.loads(sub.recv())["pid"])
                    assert seen <= live | dead, seen


def test_the_page_quotes_the_example() -> None:
    page = (ROOT / "docs" / "browsers.md").read_text(encoding="utf-8")
    quoted = [code for kind, where, _, code in BLOCK.findall(page)
              if kind == "snippet" and where == "examples/dashboard_workers.py"]
    assert quoted and all(code in EXAMPLE.read_text(encoding="utf-8") for code in quoted)
