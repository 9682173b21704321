"""``gsp cat``'s command line: nngcat's options, read into a :class:`Config`."""

from __future__ import annotations

import argparse
import ast
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

import gsp

from ..objects import pack
from ._formats import FORMATS

__all__ = ["Config", "parse", "parser", "ROLES"]

#: What a protocol does in gsp cat, as in nngcat; any other protocol (pair, pair1, bus, star,
#: plugins) is a "peer": with --data it sends then prints what comes, without it only prints.
ROLES = {"push": "sender", "pub": "sender", "pull": "receiver", "sub": "receiver",
         "req": "asker", "surveyor": "asker", "rep": "replier", "respondent": "replier"}


@dataclass
class Config:
    protocol: str
    addrs: list[tuple[str, str]]  # ("dial" | "listen", url), in command-line order
    data: bytes | None = None
    fmt: str = "no"
    count: int = 0
    interval: float | None = None
    delay: float = 0.0
    recv_timeout: float | None = None
    subscribe: list[bytes] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # socket options
    async_dial: bool = False
    verbose: int = 0  # 1 with --verbose, -1 with --silent

    @property
    def role(self) -> str:
        return ROLES.get(self.protocol, "peer")


_NOUNS = {"protocol": "protocol", "fmt": "output format",
          "data": "of --data, --file, --data-object"}


class _Once(argparse.Action):
    """Store ``const`` (or the value) in ``dest``; a second, different one is an error."""

    def __call__(self, ap: argparse.ArgumentParser, ns: argparse.Namespace,
                 values: Any, option: str | None = None) -> None:
        value = self.const if self.const is not None else values
        old = getattr(ns, self.dest, None)
        if old is not None:
            ap.error(f"{option}: only one {_NOUNS[self.dest]} may be given")
        setattr(ns, self.dest, value)


class _Addr(argparse.Action):
    """Append (mode, url) to ``addrs``; ``const`` is (mode, template) for the nngcat shortcuts."""

    def __call__(self, ap: argparse.ArgumentParser, ns: argparse.Namespace,
                 values: Any, option: str | None = None) -> None:
        mode, template = self.const
        addrs = getattr(ns, "addrs", None) or []
        addrs.append((mode, template.format(values)))
        ns.addrs = addrs


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seconds expected, not {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"seconds >= 0 expected, not {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a whole number >= 0 expected, not {text!r}")
    return int(text)


def _option(text: str) -> tuple[str, Any]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"NAME=VALUE expected, not {text!r}")
    try:
        return name.replace("-", "_"), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name.replace("-", "_"), value  # not a Python literal: the text itself


def _protocol_flags() -> dict[str, list[str]]:
    """protocol -> its flags: every installed protocol as --NAME and --NAME0 (nngcat's --req0),
    and nngcat's --pair, which means pair1 (gsp's "pair" is pair v0: --pair0)."""
    flags: dict[str, list[str]] = {}
    for name in gsp.protocol_names():
        own = flags[name] = [f"--{name}"]
        if not name[-1].isdigit():
            own.append(f"--{name}0")
    if "pair" in flags and "pair1" in flags:
        flags["pair"].remove("--pair")
        flags["pair1"].insert(0, "--pair")
    return flags


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gsp cat", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="gsp cat PROTOCOL ADDRESS... [FORMAT] [OPTIONS] [DATA]",
        description="nngcat for gsp: open one socket, dial or listen, send --data and/or print "
                    "what arrives.",
        epilog="exit status: 0 done, 1 a gsp or file error (one line on stderr), 2 bad usage")
    ap.set_defaults(addrs=[], protocol=None, fmt=None, data=None)
    g = ap.add_argument_group("protocol (exactly one)")
    for name, proto_flags in _protocol_flags().items():
        note = " (--pair: as in nngcat)" if "--pair" in proto_flags else ""
        g.add_argument(*proto_flags, dest="protocol", action=_Once, nargs=0, const=name,
                       help=f"a {name} socket{note}")
    g.add_argument("--protocol", dest="protocol", action=_Once, metavar="NAME",
                   help=f"any installed protocol ({', '.join(gsp.protocol_names())})")
    g = ap.add_argument_group("addresses (one or more, in order; any installed transport)")
    addr_flags: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
            (("--dial", "--connect"), "dial", "{}", "URL"),
            (("--listen", "--bind"), "listen", "{}", "URL"),
            (("-l", "--connect-local"), "dial", "tcp://127.0.0.1:{}", "PORT"),
            (("-L", "--bind-local"), "listen", "tcp://127.0.0.1:{}", "PORT"),
            (("-x", "--connect-ipc"), "dial", "ipc://{}", "PATH"),
            (("-X", "--bind-ipc"), "listen", "ipc://{}", "PATH"))
    for flags, mode, tpl, meta in addr_flags:
        g.add_argument(*flags, action=_Addr, const=(mode, tpl), metavar=meta,
                       help=f"{mode} {tpl.format(meta)}")
    g.add_argument("--async", dest="async_dial", action="store_true",
                   help="dial in the background, retrying (default: a refused dial fails)")
    g = ap.add_argument_group("output format of received messages (default: none, as nngcat)")
    for fmt_flags, name, hlp in (
            (("--raw",), "raw", "the bytes as they are"),
            (("-A", "--ascii"), "ascii", "printable ASCII, other bytes as '.', one line each"),
            (("-Q", "--quoted"), "quoted", 'a C string: "a\\n\\x00"'),
            (("--hex",), "hex", 'a C string of \\xNN escapes'),
            (("--msgpack",), "msgpack", "each body as one msgpack bin (nngcat's --msgpack)"),
            (("--object",), "object", "the body decoded as msgpack (send_obj), as a Python repr")):
        g.add_argument(*fmt_flags, dest="fmt", action=_Once, nargs=0, const=name, help=hlp)
    g.add_argument("--format", dest="fmt", action=_Once, choices=sorted(FORMATS),
                   metavar="FORMAT", help=f"one of {', '.join(FORMATS)}")
    g = ap.add_argument_group("data to send (at most one)")
    g.add_argument("-D", "--data", dest="data", action=_Once, metavar="TEXT",
                   help="the message body (the argument's bytes)")
    g.add_argument("-F", "--file", dest="data", action=_Once, type=lambda p: ("file", p),
                   metavar="PATH", help="the message body read from a file (- for stdin)")
    g.add_argument("--data-object", dest="data", action=_Once,
                   type=lambda t: ("object", t), metavar="LITERAL",
                   help="a Python literal sent msgpack-encoded, as send_obj does")
    g = ap.add_argument_group("behaviour")
    g.add_argument("-C", "--count", type=_count, default=0,
                   help="send (or receive, or reply) N times, then exit (0: no limit)")
    g.add_argument("-i", "--interval", type=_seconds, metavar="SECONDS",
                   help="send again every SECONDS")
    g.add_argument("-d", "--delay", type=_seconds, default=0.0, metavar="SECONDS",
                   help="wait before the first send")
    g.add_argument("--subscribe", action="append", default=[], metavar="PREFIX",
                   help="sub: receive messages starting with PREFIX (repeatable; default all)")
    g.add_argument("--recv-timeout", type=_seconds, metavar="SECONDS",
                   help="stop receiving after SECONDS without a message (an error if none came)")
    g.add_argument("--send-timeout", type=_seconds, metavar="SECONDS",
                   help="fail a send that cannot go within SECONDS")
    g.add_argument("-Z", "--recv-maxsz", type=_count, metavar="BYTES",
                   help="largest message accepted (0: no limit; gsp's default 1 MiB)")
    g.add_argument("-o", "--option", type=_option, action="append", default=[],
                   metavar="NAME=VALUE", help="any gsp socket option, e.g. -o survey_time=0.5")
    g.add_argument("-v", "--verbose", dest="verbose", action="store_const", const=1, default=0,
                   help="say on stderr where it listens and what it connected to")
    g.add_argument("-q", "--silent", dest="verbose", action="store_const", const=-1,
                   help="no error message on stderr (the exit status still tells)")
    g.add_argument("-V", "--version", action="version", version=f"gsp {gsp.__version__}")
    g = ap.add_argument_group("TLS (tls+tcp://, wss://)")
    g.add_argument("-E", "--cert", metavar="FILE", help="own certificate (PEM; may hold the key)")
    g.add_argument("--key", metavar="FILE", help="own private key (PEM)")
    g.add_argument("--cacert", metavar="FILE", help="CA certificates to verify the peer with")
    g.add_argument("-k", "--insecure", action="store_true",
                   help="dialers: do not verify the server's certificate")
    return ap


def _data(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return os.fsencode(value)  # the argument's own bytes, even those not valid UTF-8
    kind, text = value
    if kind == "object":
        return pack(ast.literal_eval(text))
    if text == "-":
        return sys.stdin.buffer.read()
    try:
        with open(text, "rb") as f:
            return f.read()
    except OSError as exc:
        raise OSError(f"cannot read --file {text}: {exc.strerror or exc}") from exc


def parse(argv: Sequence[str]) -> Config:
    """A :class:`Config` from ``argv``; usage errors exit with status 2 (argparse), an unreadable
    ``--file`` raises OSError."""
    ap = parser()
    ns = ap.parse_args(list(argv))
    if ns.protocol is None:
        ap.error("no protocol given: --push, --pull, --req, ... or --protocol NAME")
    if ns.protocol not in gsp.protocol_names():
        ap.error(f"unknown protocol {ns.protocol!r}; installed: {', '.join(gsp.protocol_names())}")
    if not ns.addrs:
        ap.error("no address given: --dial URL or --listen URL (repeatable)")
    try:
        data = _data(ns.data)
    except (ValueError, SyntaxError, TypeError) as exc:
        ap.error(f"--data-object: {exc}")
    cfg = Config(protocol=ns.protocol, addrs=ns.addrs, data=data, fmt=ns.fmt or "no",
                 count=ns.count, interval=ns.interval, delay=ns.delay,
                 recv_timeout=ns.recv_timeout, async_dial=ns.async_dial, verbose=ns.verbose,
                 subscribe=[os.fsencode(t) for t in ns.subscribe])
    _check_role(ap, ns, cfg)
    _set_options(ns, cfg.options)
    return cfg


def _check_role(ap: argparse.ArgumentParser, ns: argparse.Namespace, cfg: Config) -> None:
    """Usage errors of flags the protocol's role cannot use, or needs and lacks."""
    role, data = cfg.role, cfg.data
    if ns.subscribe and cfg.protocol != "sub":
        ap.error("--subscribe is for --sub only")
    if role == "receiver" and data is not None:
        ap.error(f"{cfg.protocol} cannot send: no --data or --file")
    if role in ("receiver", "replier") and ns.interval is not None:
        ap.error(f"{cfg.protocol} does not take --interval")
    if role == "sender" and ns.fmt is not None:
        ap.error(f"{cfg.protocol} receives nothing: no output format")
    if role in ("sender", "asker") and data is None:
        ap.error(f"{cfg.protocol} needs --data or --file")
    if role == "peer" and ns.interval is not None and data is None:
        ap.error("--interval needs --data or --file")


def _set_options(ns: argparse.Namespace, opts: dict[str, Any]) -> None:
    """The socket options the flags give (``--option`` last: it overrides)."""
    for name, value in (("recv_timeout", ns.recv_timeout), ("send_timeout", ns.send_timeout),
                        ("max_recv_size", ns.recv_maxsz), ("tls_cert_file", ns.cert),
                        ("tls_key_file", ns.key), ("tls_ca_file", ns.cacert)):
        if value is not None:
            opts[name] = value
    if ns.insecure:
        opts["tls_verify"] = False
    opts.update(ns.option)
