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

import contextlib
import os
import signal
import sys
from typing import Iterator, Sequence

import gevent

import gsp

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gsp cat`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status (bad
    usage exits with 2 through argparse's SystemExit)."""
    from ._args import Config, parse
    from ._run import run

    def fail(text: str, cfg: Config | None) -> int:
        if cfg is None or cfg.verbose >= 0:
            line = " ".join(text.split())  # one line, whatever the error's text holds
            print(f"gsp cat: {line}", file=sys.stderr, flush=True)
        return 1

    try:
        cfg = parse(sys.argv[1:] if argv is None else argv)
    except OSError as exc:  # an unreadable --file
        return fail(str(exc), None)
    with _ctrl_c():
        try:
            run(cfg, sys.stdout.buffer, sys.stderr)
        except gsp.GspError as exc:
            return fail(f"{exc} (gsp.{type(exc).__name__})", cfg)
        except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except OSError as exc:
            return fail(str(exc), cfg)
        except KeyboardInterrupt:
            return 130
    return 0


@contextlib.contextmanager
def _ctrl_c() -> Iterator[None]:
    """Ctrl-C ends the run as KeyboardInterrupt in this greenlet, without gevent's report."""
    hub = gevent.get_hub()
    reported = hub.NOT_ERROR
    hub.NOT_ERROR = (*reported, KeyboardInterrupt)
    watcher = None
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # (a shell's background job: off)
        # Delivered to this greenlet wherever the hub was when it came, never to another
        # greenlet (a socket's accept loop, say) that Python's own handler might have hit.
        watcher = gevent.signal_handler(signal.SIGINT, gevent.kill, gevent.getcurrent(),
                                        KeyboardInterrupt)
    try:
        yield
    finally:
        hub.NOT_ERROR = reported
        if watcher is not None:
            watcher.cancel()
