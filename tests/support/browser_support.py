"""Headless Chromium for the browser tests (test_browser*.py): Debian's ``/usr/bin/chromium``
(installed by .ci/run; never a downloaded browser) driven by Playwright for Python.

Playwright's sync API blocks its OS thread while it waits for the browser; the test's gevent
hub must keep running meanwhile (it serves the pages, the mount and the gsp sockets a page talks
to). So every Playwright call runs on one native thread of its own (a gevent ThreadPool of one:
Playwright's objects belong to the thread that made them), and the calling greenlet waits
cooperatively. One browser serves a whole test module; each test opens its own page.

``PageServer`` is the real thing a page meets: gevent.pywsgi's WSGIServer on 127.0.0.1 with an
``SPWebSocketApp`` (the mount under test), serving an HTML page that imports ``gsp.js`` from the
mount exactly as docs/browsers.md shows (``import * as gsp from "/sp/gsp.js"``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

import gevent
from gevent.pywsgi import WSGIServer
from gevent.threadpool import ThreadPool

import gsp
from gsp_ws.wsgi import SPWebSocketApp
from tests.support.ws_support import echo, not_found, respond

CHROMIUM = "/usr/bin/chromium"
PAGE_TIMEOUT = 60.0  # seconds a page's script may run before the test fails

#: The page every test loads: it imports the module from the mount at /sp, as a user's would.
INDEX = b"""<!doctype html><html><head><meta charset="utf-8"><title>loading</title></head>
<body><script type="module">
import * as gsp from "/sp/gsp.js";
window.gsp = gsp;
document.title = "ready";
</script></body></html>
"""

#: Helpers every page script may use (defined before each script runs).
PRELUDE = """
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const unhex = (s) => new Uint8Array((s.match(/../g) || []).map((h) => parseInt(h, 16)));
"""


class Browser:
    """One headless Chromium; every call into Playwright runs on its own thread."""

    def __init__(self) -> None:
        self._pool = ThreadPool(1)
        self._pw: Any = None
        self._browser: Any = None
        try:
            self._pw, self._browser = self.call(self._launch)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _launch() -> tuple[Any, Any]:
        from playwright.sync_api import sync_playwright

        pw = sync_playwright().start()
        try:
            # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start;
            # --disable-dev-shm-usage: a container's small /dev/shm must not crash its pages.
            return pw, pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                          args=["--no-sandbox", "--disable-dev-shm-usage"])
        except BaseException:
            pw.stop()
            raise

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._pool.apply(fn, args)

    def page(self, url: str, cookies: Iterable[dict[str, Any]] = (), ready: bool = True,
             ignore_https_errors: bool = False) -> "Page":
        """A new page (its own browser context: no shared cookies or cache) at ``url``, once
        its title says "ready" (the module imported; ``ready=False``: once loaded)."""
        def open_page() -> Any:
            context = self._browser.new_context(viewport={"width": 900, "height": 600},
                                                ignore_https_errors=ignore_https_errors)
            if cookies:
                context.add_cookies(list(cookies))
            page = context.new_page()
            page.set_default_timeout(PAGE_TIMEOUT * 1000)
            return page, Page(self, page)
        page: Page = self.call(open_page)[1]
        page.goto(url, ready)
        return page

    def close(self) -> None:
        def stop() -> None:
            if self._browser is not None:
                self._browser.close()
            if self._pw is not None:
                self._pw.stop()
        try:
            self.call(stop)
        finally:
            self._pool.kill()


class Page:
    """A page in its own context. ``run`` evaluates an async script body with ``gsp`` (the
    imported module), ``arg`` and the PRELUDE helpers in scope, and returns its result."""

    def __init__(self, browser: Browser, page: Any) -> None:
        """Runs on the browser's thread (Playwright's listeners belong to it)."""
        self.browser = browser
        self._page = page
        self.console: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))

    def goto(self, url: str, ready: bool = True) -> None:
        def go() -> None:
            self._page.goto(url)
            if ready:
                self._page.wait_for_function("document.title === 'ready'")
        self.browser.call(go)

    def run(self, body: str, arg: Any = None) -> Any:
        script = ("async (arg) => { const gsp = window.gsp;" + PRELUDE +
                  "const work = (async () => {" + body + "})();"
                  "const limit = new Promise((_, no) => setTimeout(() => no(new Error("
                  f"'the page script ran over {PAGE_TIMEOUT} s')), {PAGE_TIMEOUT * 1000}));"
                  "return await Promise.race([work, limit]); }")
        return self.browser.call(self._page.evaluate, script, arg)

    def wait_for(self, expression: str, timeout: float = 30.0) -> None:
        self.browser.call(lambda: self._page.wait_for_function(expression,
                                                               timeout=timeout * 1000))

    def screenshot(self, path: str, selector: str | None = None) -> bytes:
        def shoot() -> bytes:
            target = self._page.locator(selector) if selector else self._page
            data: bytes = target.screenshot(path=path)
            return data
        result: bytes = self.browser.call(shoot)
        return result

    def close(self) -> None:
        self.browser.call(self._page.context.close)


def index_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    if environ.get("PATH_INFO") == "/":
        return respond(start_response, INDEX, "text/html; charset=utf-8")
    return not_found(start_response)


class PageServer:
    """gevent.pywsgi serving INDEX at /, a REP echo at /sp (whose mount serves /sp/gsp.js) and
    the tests' own mounts (``mount``), on 127.0.0.1."""

    def __init__(self, port: int = 0, ssl_context: Any = None, **echo_options: Any) -> None:
        self.scheme = "https" if ssl_context is not None else "http"
        self.app = SPWebSocketApp(index_app)
        self.echo = gsp.socket("rep", max_recv_size=0)
        self.app.mount(self.echo, "/sp", **echo_options)
        self._echo = gevent.spawn(echo, self.echo)
        tls = {} if ssl_context is None else {"ssl_context": ssl_context}
        self.server = WSGIServer(("127.0.0.1", port), self.app, log=None, **tls)
        self.server.start()
        self.port: int = self.server.server_port

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/"

    def ws(self, path: str) -> str:
        scheme = "wss" if self.scheme == "https" else "ws"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def mount(self, sock: gsp.Socket, path: str, **options: Any) -> gsp.Listener:
        return self.app.mount(sock, path, **options)

    def stop(self) -> None:
        self.server.stop(timeout=1)
        self.echo.close()
        self._echo.join(5)


@contextlib.contextmanager
def page_server(port: int = 0, ssl_context: Any = None,
                **echo_options: Any) -> Iterator[PageServer]:
    srv = PageServer(port, ssl_context, **echo_options)
    try:
        yield srv
    finally:
        srv.stop()


def wait_pipes(sock: gsp.Socket, count: int = 1, timeout: float = 10.0) -> None:
    """Wait until ``sock`` has ``count`` pipes (a page's connection reached it)."""
    with gevent.Timeout(timeout, AssertionError(f"{sock.protocol}: no {count} pipe(s) in time")):
        while len(sock.pipes) < count:
            gevent.sleep(0.01)
