"""``gsp cat`` (``python -m gsp cat``): nngcat's command line on gsp sockets.

Poke at SP sockets from a shell: open one socket of any installed protocol, dial and/or listen
on URLs of any installed transport, send ``--data`` and print what arrives. The options are
nngcat's (``gsp cat --help`` lists them); what each protocol does::

    push, pub        send --data/--file (--count times, every --interval; once by default)
    pull, sub        print every message (sub: --subscribe PREFIX, all when none given)
    req, surveyor    send, then print the reply / the responses until the survey ends
    rep, respondent  with --data: print each request and answer it with the data;
                     without: only print requests
    pair, pair1, bus, star and any other protocol: with --data as req, else as pull

Received messages print in one format: none (the default, as nngcat), ``--raw``, ``--ascii``,
``--quoted``, ``--hex``, ``--msgpack`` (nngcat's: each body wrapped as one msgpack bin) or gsp's
``--object`` (the body decoded as msgpack, as ``recv_obj`` does, printed as a Python repr).

Where gsp cat differs from nngcat: ``--pair`` is pair v1 as in nngcat but gsp's protocol
named ``pair`` is v0 (``--pair0``); ``--ascii`` ends each message with a newline; ``--verbose``
writes to stderr (stdout carries only messages); a receive that times out ends receiving as in
nngcat, but when ``--recv-timeout`` was given and nothing at all came it is an error (exit 1);
``-o NAME=VALUE`` sets any gsp socket option and ``--data-object`` sends a msgpack-encoded
Python literal; ``--compat`` and ``--zt-home`` do not exist.

Exit status: 0 done, 1 a gsp error or unreadable file (one line on stderr: gsp's error text
and its class), 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

import gsp

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gsp cat`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from ._args import parse
    from ._run import run

    cfg = None
    try:
        cfg = parse(sys.argv[1:] if argv is None else argv)
        run(cfg, sys.stdout.buffer, sys.stderr)
    except gsp.GspError as exc:
        return _fail(f"{exc} (gsp.{type(exc).__name__})", cfg is not None and cfg.verbose < 0)
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        return _fail(str(exc), cfg is not None and cfg.verbose < 0)
    except KeyboardInterrupt:
        return 130
    return 0


def _fail(text: str, silent: bool) -> int:
    if not silent:
        line = " ".join(text.split())  # one line, whatever the error's text holds
        print(f"gsp cat: {line}", file=sys.stderr, flush=True)
    return 1
