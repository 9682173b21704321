"""Option parsing for the ``gsp`` data source: Spark hands every option over as a string with a
lower-cased key, so each one is converted and checked here, once, with an error naming it."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

import gsp

# Keys Spark itself puts into a data source's options; not ours to reject.
_SPARK_KEYS = frozenset({"path", "paths", "checkpointlocation", "queryname"})

SOURCE_PROTOCOLS = ("pull", "sub", "rep")
SINK_PROTOCOLS = ("push", "pub", "req")

_D = TypeVar("_D")
_V = TypeVar("_V")


class _Reader:
    """Takes options out of Spark's map one by one; :meth:`done` rejects whatever is left."""

    def __init__(self, options: Mapping[str, str], what: str) -> None:
        self._left = {k.lower(): v for k, v in dict(options).items()}
        self.what = what

    def _take(self, name: str, default: _D, conv: Callable[[str], _V], want: str) -> _D | _V:
        raw = self._left.pop(name, None)
        if raw is None:
            return default
        try:
            return conv(str(raw).strip())
        except (TypeError, ValueError):
            raise gsp.BadOption(f"{self.what}: option {name!r} must be {want}, "
                                f"not {raw!r}") from None

    def string(self, name: str, default: str | None = None) -> str | None:
        return self._take(name, default, str, "a string")

    def choice(self, name: str, choices: tuple[str, ...], default: str | None) -> str:
        val = self._take(name, default, str.lower, "a string")
        if val is None:
            raise gsp.BadOption(f"{self.what}: option {name!r} is required; "
                                f"one of {', '.join(choices)}")
        if val not in choices:
            raise gsp.BadOption(f"{self.what}: unknown {name} {val!r}; "
                                f"use one of {', '.join(choices)}")
        return val

    def integer(self, name: str, default: int, lo: int = 1) -> int:
        val = self._take(name, default, int, f"an integer >= {lo}")
        if val < lo:
            raise gsp.BadOption(f"{self.what}: option {name!r} must be an integer >= {lo}, "
                                f"not {val}")
        return val

    def seconds(self, name: str, default: float) -> float:
        val = self._take(name, default, float, "a number of seconds > 0")
        if not val > 0:
            raise gsp.BadOption(f"{self.what}: option {name!r} must be a number of seconds > 0")
        return val

    def urls(self) -> list[str]:
        raw = self._left.pop("url", None)
        urls = [u.strip() for u in str(raw or "").split(",") if u.strip()]
        if not urls:
            raise gsp.BadOption(f"{self.what}: option 'url' is required, e.g. "
                                ".option('url', 'tcp://127.0.0.1:5555') (several: comma-separated)")
        for u in urls:
            _check_scheme(u)
        return urls

    def done(self) -> None:
        extra = sorted(k for k in self._left if k not in _SPARK_KEYS)
        if extra:
            raise gsp.BadOption(f"{self.what}: unknown option(s) {', '.join(map(repr, extra))}")


def _check_scheme(url: str) -> None:
    """Reject a URL no installed transport serves, as gsp's own dial/listen would, but at load
    time: raises :class:`gsp.InvalidAddress` naming the installed schemes."""
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme or any(c.isspace() for c in url):
        raise gsp.InvalidAddress(f"not a URL: {url!r} (expected scheme://address)")
    installed = gsp.transport_schemes()
    if scheme.lower() not in installed:
        raise gsp.InvalidAddress(f"no transport for {scheme.lower()!r} in {url!r}; installed "
                                 f"schemes: {', '.join(installed) or 'none'}")


@dataclass
class SourceConfig:
    urls: list[str]
    protocol: str = "pull"
    mode: str = "listen"
    subscribe: list[bytes] = field(default_factory=lambda: [b""])
    spool: str = ""
    format: str = "auto"
    partitions: int = 2
    max_batch_rows: int = 500_000
    recv_max_size: int = 1 << 20
    on_bad_message: str = "fail"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceConfig":
        r = _Reader(options, "gsp source")
        urls = r.urls()
        protocol = r.choice("protocol", SOURCE_PROTOCOLS, "pull")
        mode = r.choice("mode", ("listen", "dial"), "listen")
        sub = r.string("subscribe")
        if sub is not None and protocol != "sub":
            raise gsp.BadOption("gsp source: option 'subscribe' needs protocol 'sub'")
        cfg = cls(
            urls=urls, protocol=protocol, mode=mode,
            subscribe=_prefixes(sub),
            spool=r.string("spool") or "",
            format=r.choice("format", ("auto", "msgpack", "raw"), "auto"),
            partitions=r.integer("partitions", 2),
            max_batch_rows=r.integer("max_batch_rows", 500_000),
            recv_max_size=r.integer("recv_max_size", 1 << 20, lo=0),
            on_bad_message=r.choice("on_bad_message", ("fail", "skip"), "fail"),
        )
        r.done()
        if not cfg.spool:
            # Deterministic, so a restarted query finds what its predecessor spooled.
            ident = json.dumps([cfg.urls, cfg.protocol, cfg.mode, [p.hex() for p in cfg.subscribe]])
            digest = hashlib.sha1(ident.encode()).hexdigest()[:16]
            cfg.spool = os.path.join(tempfile.gettempdir(), "gsp-spark-spool", digest)
        cfg.spool = os.path.abspath(cfg.spool)
        return cfg


def _prefixes(raw: str | None) -> list[bytes]:
    """``subscribe``: a JSON list of strings, or comma-separated prefixes; absent = everything."""
    if raw is None:
        return [b""]
    if raw.startswith("["):
        try:
            items = json.loads(raw)
        except ValueError:
            raise gsp.BadOption("gsp source: option 'subscribe' is not a JSON list: "
                                f"{raw!r}") from None
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise gsp.BadOption("gsp source: option 'subscribe' must be a list of strings")
    else:
        items = raw.split(",")
    return [s.encode() for s in items]


@dataclass
class SinkConfig:
    urls: list[str]
    protocol: str = "push"
    mode: str = "dial"
    format: str = "msgpack"
    batch_rows: int = 1
    window: int = 64
    resend_time: float = 5.0
    ack_timeout: float = 60.0
    connect_timeout: float = 30.0
    send_timeout: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkConfig":
        r = _Reader(options, "gsp sink")
        cfg = cls(
            urls=r.urls(),
            protocol=r.choice("protocol", SINK_PROTOCOLS, "push"),
            mode=r.choice("mode", ("dial", "listen"), "dial"),
            format=r.choice("format", ("msgpack", "raw"), "msgpack"),
            batch_rows=r.integer("batch_rows", 1),
            window=r.integer("window", 64),
            resend_time=r.seconds("resend_time", 5.0),
            ack_timeout=r.seconds("ack_timeout", 60.0),
            connect_timeout=r.seconds("connect_timeout", 30.0),
            send_timeout=r.seconds("send_timeout", 60.0),
        )
        r.done()
        if cfg.format == "raw" and cfg.batch_rows != 1:
            raise gsp.BadOption("gsp sink: batch_rows packs msgpack maps; it cannot be used "
                                "with format 'raw'")
        return cfg
