"""URL parsing for transports: ``scheme://address`` and ``host:port`` with IPv6 literals."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import InvalidAddress

__all__ = ["split_url", "parse_host_port", "hostport"]


def split_url(url: str) -> tuple[str, str]:
    """Split ``scheme://rest``; raise :class:`gsp.InvalidAddress` for anything else."""
    if not isinstance(url, str):
        raise InvalidAddress(f"a URL is a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or any(c.isspace() for c in url):
        raise InvalidAddress(f"not a URL: {url!r} (expected scheme://address)")
    return scheme.lower(), rest


def parse_host_port(url: str, *, listening: bool, default_port: int | None = None) -> tuple[str, int]:
    """Host and port of ``scheme://host:port[/...]``; IPv6 literals in brackets.

    A listener may use port 0 and an empty or ``*`` host (all interfaces); a dialer may not.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError as exc:
        raise InvalidAddress(f"bad address in {url!r}: {exc}") from None
    netloc = parts.netloc
    if netloc.startswith("*"):
        host = ""
        try:
            port = int(netloc[2:]) if netloc.startswith("*:") else None
        except ValueError:
            raise InvalidAddress(f"bad port in {url!r}") from None
    if port is None:
        if default_port is None:
            raise InvalidAddress(f"{url!r} has no port")
        port = default_port
    if not listening and (not host or port == 0):
        raise InvalidAddress(f"cannot dial {url!r}: a dialer needs a host and a non-zero port")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidAddress(f"unexpected query, fragment or credentials in {url!r}")
    return host, port


def hostport(host: str, port: int) -> str:
    """``host:port``, with an IPv6 literal in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
