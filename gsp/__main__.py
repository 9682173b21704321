"""``python -m gsp`` / ``gsp``: show what is installed (``info``), print the options reference
(``options``) or the plugin hook reference (``hooks``), benchmark (``bench``), poke at sockets
from a shell (``cat``, nngcat's command line)."""

from __future__ import annotations

import argparse
import sys

import gsp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gsp", description="gsp — Scalability Protocols on gevent")
    ap.add_argument("--version", action="version", version=f"gsp {gsp.__version__}")
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("info", help="list installed protocols and transports")
    opts = sub.add_parser("options", help="the options reference in Markdown (docs/options.md)")
    opts.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")
    opts.add_argument("--all", action="store_true",
                      help="include every installed plugin, not only gsp's own and shipped ones")
    hooks = sub.add_parser("hooks", help="the plugin hook reference in Markdown "
                                         "(docs/plugin-reference.md)")
    hooks.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")
    sub.add_parser("bench", help="benchmarks, alone or against pynng/pyzmq (gsp bench -h)",
                   add_help=False)
    sub.add_parser("cat", help="nngcat's command line: send and print messages (gsp cat -h)",
                   add_help=False)
    argv = sys.argv[1:] if argv is None else argv
    # Everything after "bench" or "cat" belongs to that command's own parser.
    if argv[:1] == ["bench"]:
        from gsp.bench import main as bench_main
        return bench_main(argv[1:])
    if argv[:1] == ["cat"]:
        from gsp.cat import main as cat_main
        return cat_main(argv[1:])
    args = ap.parse_args(argv)
    if args.cmd in (None, "info"):
        print(f"gsp {gsp.__version__}")
        for name, spec in sorted(gsp.registry.protocols.items()):
            print(f"  protocol  {name:<11} 0x{spec.number:03x}  peer {spec.peer_name}")
        for scheme, t in sorted(gsp.registry.transports.items()):
            print(f"  transport {scheme:<11} {type(t).__module__}")
        return 0
    if args.cmd in ("options", "hooks"):
        from gsp._core.docs import options_markdown, reference_markdown
        text = options_markdown(include_all=args.all) if args.cmd == "options" \
            else reference_markdown()
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
