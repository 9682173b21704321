"""The mount serves gsp.js (the browser client, shipped as package data): what a browser's
GET of <mount>/gsp.js gets, and serve_js=False. The module's behaviour is tested in headless
Chromium (plugins/gsp-ws/tests/test_browser.py)."""

from __future__ import annotations

import re
from typing import Any

import gsp
from gsp_ws.js import client_source
from gsp_ws.wsgi import SPWebSocketApp


def fallback(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("418 I'm a teapot", [("Content-Type", "text/plain")])
    return [b"app\n"]


def call(app: Any, path: str, method: str = "GET", **headers: str) -> tuple[str, dict[str, str], bytes]:
    answer: list[Any] = []

    def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
        answer[:] = [status, dict(response_headers)]
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_NAME": "127.0.0.1",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http",
               **{"HTTP_" + k.upper(): v for k, v in headers.items()}}
    body = b"".join(app(environ, start_response))
    return answer[0], answer[1], body


def test_the_mount_serves_the_module_and_the_flag_turns_it_off() -> None:
    app = SPWebSocketApp(fallback)
    on, off, root = gsp.socket("rep"), gsp.socket("pub"), gsp.socket("sub")
    try:
        app.mount(on, "/sp")
        app.mount(off, "/quiet", serve_js=False)
        lst = app.mount(root, "/")
        status, headers, body = call(app, "/sp/gsp.js")
        assert status == "200 OK" and body == client_source()
        assert headers["Content-Type"] == "text/javascript; charset=utf-8"
        assert headers["Content-Length"] == str(len(body)) and headers["Cache-Control"] == "no-cache"
        assert headers["Access-Control-Allow-Origin"] == "*"
        assert body.startswith(b"// gsp.js") and b"export function socket" in body
        assert call(app, "/gsp.js")[2] == body  # a mount at "/" serves /gsp.js
        assert call(app, "/quiet/gsp.js")[0].startswith("418")  # off: the app's own answer
        assert call(app, "/sp/other.js")[0].startswith("418")
        # revalidation, HEAD, other methods
        assert call(app, "/sp/gsp.js", if_none_match=headers["ETag"])[0] == "304 Not Modified"
        assert call(app, "/sp/gsp.js", if_none_match='"stale"')[0] == "200 OK"
        status, head_headers, head_body = call(app, "/sp/gsp.js", "HEAD")
        assert status == "200 OK" and head_body == b"" and \
            head_headers["Content-Length"] == str(len(body))
        status, headers, _ = call(app, "/sp/gsp.js", "POST")
        assert status == "405 Method Not Allowed" and headers["Allow"] == "GET, HEAD"
        # unmounting stops serving it
        lst.close()
        assert call(app, "/gsp.js")[0].startswith("418")
    finally:
        for s in (on, off, root):
            s.close()


def test_the_module_ships_with_its_declarations_and_stays_small() -> None:
    source = client_source()
    assert len(source) < 40 * 1024, f"gsp.js is {len(source)} bytes: the bar is under 40 KB"
    assert not re.search(rb"^\s*import\b|\bimport\(|\brequire\(", source, re.M), \
        "gsp.js has no runtime dependency"
    declarations = client_source("gsp.d.ts").decode()
    for name in ("socket", "Socket", "Context", "Timeout", "Closed", "ProtocolError",
                 "ConnectionRefused", "onPipe", "openContext", "subscribe", "recvText"):
        assert name in declarations
