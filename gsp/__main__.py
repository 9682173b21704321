"""``python -m gsp`` / ``gsp``: show what is installed (``info``), poke at sockets from a shell
(``cat``, nngcat's command line), and run the commands other distributions add through the
``gsp.commands`` entry-point group (``gsp bench``, from ``gevent-sp-bench``).

A command in that group is a function taking the arguments after its name and returning the
exit status: ``bench = "gsp_bench.cli:main"`` makes ``gsp bench ARGS`` call
``gsp_bench.cli.main([ARGS])``.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import EntryPoint, entry_points

import gsp

#: The entry-point group of the commands other distributions add to ``gsp``.
COMMANDS = "gsp.commands"

#: Commands of gsp's own plugin distributions, for the hint when one is not installed.
KNOWN = {"bench": "gevent-sp-bench (pip install -e plugins/gsp-bench in a gsp checkout)"}


def commands() -> dict[str, EntryPoint]:
    """The installed plugin commands by name (gsp's own, ``info`` and ``cat``, cannot be
    replaced)."""
    return {ep.name: ep for ep in entry_points(group=COMMANDS) if ep.name not in ("info", "cat")}


def main(argv: list[str] | None = None) -> int:
    """``gsp``: the command line. A reader that stops early (``gsp info | head -1``) ends it
    quietly, as other command-line tools end."""
    try:
        code = _main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Python's own advice: point stdout at /dev/null so that the flush at exit fails no more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: list[str]) -> int:
    plugged = commands()
    ap = argparse.ArgumentParser(prog="gsp", description="gsp — Scalability Protocols on gevent")
    ap.add_argument("--version", action="version", version=f"gsp {gsp.__version__}")
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("info", help="list installed protocols and transports, and gsp's build")
    sub.add_parser("cat", help="nngcat's command line: send and print messages (gsp cat -h)",
                   add_help=False)
    for name, ep in sorted(plugged.items()):
        dist = ep.dist.name if ep.dist is not None else ep.value
        sub.add_parser(name, help=f"from {dist} (gsp {name} -h)", add_help=False)
    # Everything after "cat" or a plugin's command belongs to that command's own parser.
    if argv[:1] == ["cat"]:
        from gsp.cat import main as cat_main
        return cat_main(argv[1:])
    if argv[:1] and argv[0] in plugged:
        run = plugged[argv[0]].load()
        return int(run(argv[1:]) or 0)
    if argv[:1] and argv[0] in KNOWN:
        print(f"gsp: {argv[0]!r} comes with {KNOWN[argv[0]]}", file=sys.stderr)
        return 2
    args = ap.parse_args(argv)
    if args.cmd in (None, "info"):
        return info()
    return 2


def info() -> int:
    from gsp._mypyc import build, compiled
    print(f"gsp {gsp.__version__} ({build(compiled())} build)")
    for name, spec in sorted(gsp.registry.protocols.items()):
        print(f"  protocol  {name:<11} 0x{spec.number:03x}  peer {spec.peer_name}")
    for scheme, t in sorted(gsp.registry.transports.items()):
        print(f"  transport {scheme:<11} {type(t).__module__}")
    for name, ep in sorted(commands().items()):
        print(f"  command   {name:<11} {ep.value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
