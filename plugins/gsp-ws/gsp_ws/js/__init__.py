"""The browser SP client: ``gsp.js`` (an ES module, no dependencies) and its TypeScript
declarations ``gsp.d.ts``, shipped as package data; a WSGI mount serves the module at
``<mount path>/gsp.js`` (docs/browsers.md)."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Iterable

__all__ = ["client_source", "serve_client"]


@lru_cache(maxsize=None)
def client_source(name: str = "gsp.js") -> bytes:
    """The bytes of ``gsp.js`` (or ``gsp.d.ts``) as shipped in this package."""
    if name not in ("gsp.js", "gsp.d.ts"):
        raise ValueError(f"no such client file: {name!r}")
    return resources.files(__package__).joinpath(name).read_bytes()


@lru_cache(maxsize=None)
def _etag() -> str:
    return '"' + hashlib.sha256(client_source()).hexdigest()[:32] + '"'


def serve_client(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """A WSGI answer to ``GET <mount>/gsp.js``: the module as ``text/javascript``, revalidated by
    its ETag (``no-cache``: a page gets the new module as soon as the server runs a new one),
    importable by pages of any origin."""
    method = environ.get("REQUEST_METHOD", "GET")
    if method not in ("GET", "HEAD"):
        body = b"gsp.js: GET or HEAD only\n"
        start_response("405 Method Not Allowed", [
            ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
            ("Allow", "GET, HEAD")])
        return [body]
    tag = _etag()
    # Access-Control-Allow-Origin: a page of another origin may import it too (module scripts
    # are fetched with CORS); the file is public and is sent without credentials.
    headers = [("ETag", tag), ("Cache-Control", "no-cache"),
               ("X-Content-Type-Options", "nosniff"), ("Access-Control-Allow-Origin", "*")]
    if tag in [t.strip() for t in environ.get("HTTP_IF_NONE_MATCH", "").split(",")]:
        start_response("304 Not Modified", headers)
        return []
    source = client_source()
    start_response("200 OK", [("Content-Type", "text/javascript; charset=utf-8"),
                              ("Content-Length", str(len(source))), *headers])
    return [b""] if method == "HEAD" else [source]
