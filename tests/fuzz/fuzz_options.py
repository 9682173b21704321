"""Fuzz target: option parsing and URL parsing, the values users (and configuration files)
hand to gsp: ``Options.update_checked`` and item assignment over every option a socket of a
protocol takes (socket, protocol and all transport options, ws and tls included); URL parsing
(``gsp.transport.urls.split_url``, ``parse_host_port``, gsp-ws's ``parse_ws_url`` and the registry's
``transport_for``); and the Spark data source's string options (``SourceConfig.parse``,
``SinkConfig.parse``).

Input layout (text, so the seed corpus is readable): byte 0 chooses the surface (its value
mod 3: options, URLs, Spark options), byte 1 the protocol whose options apply; the rest, read
as latin-1, is lines. Options and Spark lines are ``name=value``; an option value is typed by
a prefix: ``i:`` int, ``f:`` float, ``b:`` bool (``1``/``0``), ``n:`` None, ``t:`` a timedelta
of that many seconds, ``s:`` str, ``x:`` bytes (hex), ``l:`` list of str (comma-separated),
``d:`` dict of str (``k=v;k=v``), ``p:`` (name, value) pairs (``k=v;k=v``); anything else is
a str. URL lines are URLs.

A finding is: an option validator raising anything but :class:`gsp.BadOption`; a refused
``update_checked`` that changed a value; an accepted value that does not read back as it was
validated; URL parsing raising anything but :class:`gsp.InvalidAddress` (or ``UnknownPlugin``
for a scheme nothing serves), or returning a port outside 0..65535, or a dialer address without
a host or with port 0; the Spark parsers raising anything but ``BadOption``/``InvalidAddress``.
"""

from __future__ import annotations

import datetime
from typing import Any

import atheris
import harness

with atheris.instrument_imports(include=list(harness.INSTRUMENTED)):
    import gsp
    from gsp.options import SOCKET_OPTIONS, Options
    from gsp.transport import parse_host_port, split_url
    from gsp_spark._config import SinkConfig, SourceConfig
    from gsp_ws.transport import parse_ws_url

PROTOCOLS = [gsp.registry.protocol(n) for n in sorted(gsp.registry.protocols)]
TRANSPORT_OPTIONS = gsp.registry.transport_options()
URL_ERRORS = (gsp.InvalidAddress, gsp.UnknownPlugin)
#: Found here, in gsp_ws/_http.py (reproducer: findings/options-ws-origins-bool): ws_origins set
#: to a non-iterable (True, 5, 1.5) raises TypeError instead of BadOption.
KNOWN: list[harness.Known] = []  # ws_origins' TypeError is fixed (tests/project/test_fuzz.py FIXED)


def _pairs(text: str) -> list[tuple[str, str]]:
    return [tuple(kv.split("=", 1)) if "=" in kv else (kv, "") for kv in text.split(";")]  # type: ignore[misc]


def value(text: str) -> Any:
    kind, sep, rest = text.partition(":")
    if not sep or len(kind) != 1:
        return text
    try:
        if kind == "i":
            return int(rest)
        if kind == "f":
            return float(rest)
        if kind == "t":
            return datetime.timedelta(seconds=float(rest))
        if kind == "x":
            return bytes.fromhex(rest)
    except (ValueError, OverflowError):
        return rest
    convert = {"b": lambda r: r == "1", "n": lambda r: None, "s": str,
               "l": lambda r: r.split(","), "d": lambda r: dict(_pairs(r)), "p": _pairs}
    return convert[kind](rest) if kind in convert else text


def lines(data: bytes) -> list[tuple[str, str]]:
    out = []
    for line in data.decode("latin-1").split("\n"):
        name, _, val = line.partition("=")
        out.append((name, val))
    return out


def fuzz_options(protocol: Any, data: bytes) -> None:
    opts = Options({**SOCKET_OPTIONS, **TRANSPORT_OPTIONS, **protocol.options})
    given = {name: value(val) for name, val in lines(data)}
    before = {n: opts[n] for n in opts}
    try:
        opts.update_checked(given)
    except gsp.BadOption as exc:
        harness.expect(str(exc) != "", "BadOption without a message")
        harness.expect({n: opts[n] for n in opts} == before, f"refused {given!r} but changed")
    for name, v in given.items():
        try:
            opts[name] = v
        except gsp.BadOption:
            continue
        harness.expect(opts[name] == opts.check_name(name).validate(name, opts[name]),
                       f"{name}: {opts[name]!r} does not validate again")


def fuzz_urls(data: bytes) -> None:
    for url in data.decode("latin-1").split("\n"):
        try:
            split_url(url)
            gsp.registry.transport_for(url)
        except URL_ERRORS:
            pass
        for listening in (True, False):
            for default in (None, 80):
                try:
                    host, port = parse_host_port(url, listening=listening, default_port=default)
                except gsp.InvalidAddress:
                    continue
                harness.expect(type(port) is int and 0 <= port <= 65535, f"{url!r}: port {port!r}")
                harness.expect(listening or (host != "" and port != 0),
                               f"{url!r}: a dialer got {host!r}:{port}")
            try:
                _, host, port, path = parse_ws_url(url, listening)
            except gsp.InvalidAddress:
                continue
            harness.expect(0 <= port <= 65535 and path.startswith("/"), f"{url!r}: {port} {path}")


def fuzz_spark(data: bytes) -> None:
    given = dict(lines(data))
    for parse in (SourceConfig.parse, SinkConfig.parse):
        try:
            parse(given)
        except (gsp.BadOption, gsp.InvalidAddress) as exc:
            harness.expect(str(exc).startswith("gsp s") or "URL" in str(exc) or
                           "transport" in str(exc), f"unclear error {exc}")


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    surface = data[0] % 3
    if surface == 0:
        fuzz_options(PROTOCOLS[data[1] % len(PROTOCOLS)], data[2:])
    elif surface == 1:
        fuzz_urls(data[2:])
    else:
        fuzz_spark(data[2:])


if __name__ == "__main__":
    harness.main(one_input, KNOWN)
