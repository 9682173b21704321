"""examples/dashboard.py run as a user runs it, its page in headless Chromium: the live chart is
drawn from the SUB over the mount (checked on a screenshot), a command goes through the REQ path
to the backend, and the mounts refuse a page without a session and a page of another origin."""

from __future__ import annotations

import io
import os
import signal
import sys
from typing import Iterator

import pytest

from tests.support import servers
from tests.support.browser_support import Browser, page_server

pytestmark = pytest.mark.browser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CHART_BLUE = (0x15, 0x65, 0xC0)  # the page's "jobs done" line


@pytest.fixture
def dashboard() -> Iterator[servers.Server]:
    port = servers.free_port()
    srv = servers.Server([sys.executable, os.path.join(ROOT, "examples", "dashboard.py"),
                          "--port", str(port)], port,
                         {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
                             p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)},
                         ready_line="dashboard at", ready_count=1)
    try:
        srv.wait_ready()
        yield srv
        assert srv.stop(signal.SIGTERM, timeout=10) == 0, srv.output()
    finally:
        srv.close()


def test_the_dashboard_draws_its_live_chart_and_takes_commands(
        browser: Browser, dashboard: servers.Server, tmp_path: "os.PathLike[str]") -> None:
    page = browser.page(dashboard.url + "/login", ready=False)  # -> session cookie -> /
    try:
        page.wait_for("Number(document.getElementById('chart').dataset.frames || 0) >= 8")
        shot = page.screenshot(os.path.join(os.environ.get("GSP_SCREENSHOTS", tmp_path),
                                            "dashboard.png"), selector="#chart")
        from PIL import Image  # the browser tier's, as Chromium is

        image = Image.open(io.BytesIO(shot)).convert("RGB")
        colors = image.getcolors(1 << 24) or []  # (count, (r, g, b)) of every colour used
        blue = sum(n for n, rgb in colors if all(abs(a - b) < 40 for a, b in zip(rgb, CHART_BLUE)))
        assert image.size[0] >= 700 and len(colors) > 10
        assert blue > 100, f"the chart's line is not drawn ({blue} blue pixels)"
        status = page.run("""
            document.querySelector("button[data-command=faster]").click();
            const reply = document.getElementById("reply");
            for (let i = 0; i < 100 && !reply.textContent; i++) await new Promise((r) => setTimeout(r, 50));
            return {reply: reply.textContent, status: document.getElementById("status").textContent};
        """)
        assert '"command": "faster"' in status["reply"] and '"target": 60.0' in status["reply"]
        assert status["status"] == "live"
    finally:
        page.close()


def test_the_mounts_refuse_pages_without_a_session_or_from_elsewhere(
        browser: Browser, dashboard: servers.Server) -> None:
    script = """
        const gsp = await import(arg.module);
        const sub = gsp.socket("sub");
        try { await sub.dial(arg.url, {failFast: true}); } catch (e) { return e.name; }
        sub.close();
        return "connected";
    """
    ws = dashboard.url.replace("http://", "ws://") + "/sp"
    anonymous = browser.page(dashboard.url + "/nowhere", ready=False)  # same origin, no session
    try:
        assert anonymous.run(script, {"module": "/sp/gsp.js", "url": ws}) == "ConnectionRefused"
    finally:
        anonymous.close()
    # A logged-in browser (the session cookie is valid: the chart goes live) whose page of
    # another origin on the same host dials the mount: the cookie goes along (cookies ignore
    # the port), the Origin is the other page's, and ws_origins refuses it.
    page = browser.page(dashboard.url + "/login", ready=False)
    try:
        page.wait_for("document.getElementById('status').textContent === 'live'")
        with page_server() as other:
            page.goto(other.url)
            assert page.run("return document.cookie.includes('session') ? 'leaked' : 'ok';") \
                == "ok"  # HttpOnly: the page's scripts never see it
            assert page.run(script, {"module": "/sp/gsp.js", "url": ws}) == "ConnectionRefused"
    finally:
        page.close()
