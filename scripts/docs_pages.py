"""The documentation site's generated pages, written at build time by mkdocs-gen-files
(mkdocs.yml's ``gen-files`` plugin runs this script on every ``mkdocs build`` or ``serve``):

- ``reference/api/<module>.md``: the public API of each module in :data:`API`, rendered from its
  docstrings and signatures by mkdocstrings;
- ``reference/cli.md``: the ``--help`` of ``gsp`` and of each of its commands, as the installed
  commands print it.

Nothing here is kept by hand: a docstring or an argument changed in the code changes the page.
"""

from __future__ import annotations

import os
import subprocess
import sys

import mkdocs_gen_files

#: Module -> one line on what it is for, above its reference.
API = {
    "gsp": "The user API: sockets, contexts, messages, errors, select and channels, serving.",
    "gsp.protocol": "The protocol-author SDK: what a protocol plugin implements and the "
                    "helpers it builds on ([writing a plugin](../../plugins.md)).",
    "gsp.transport": "The transport-author SDK: what a transport plugin implements and the "
                     "helpers it builds on ([writing a plugin](../../plugins.md)).",
    "gsp.testing": "The conformance kit and pytest fixtures for plugin authors "
                   "([testing with the kit](../../testing.md)).",
    "gsp_ws": "The `gevent-sp-ws` plugin: `ws://` and `wss://`, and SP mounted in a WSGI app "
              "([WebSocket and WSGI](../../webapp.md)).",
    "gsp_spark": "The `gevent-sp-spark` plugin: the `gsp` PySpark data source "
                 "([Spark](../../spark.md)).",
}

#: The commands whose ``--help`` the CLI page shows, in order.
COMMANDS = (["gsp"], ["gsp", "cat"], ["gsp", "bench"])


def api_pages() -> None:
    for module, about in API.items():
        with mkdocs_gen_files.open(f"reference/api/{module}.md", "w") as f:
            f.write(f"# `{module}`\n\n{about}\n\n::: {module}\n")


def help_text(command: list[str]) -> str:
    """What ``command --help`` prints, run as a user runs it (``python -m gsp ...``)."""
    argv = [sys.executable, "-m", "gsp", *command[1:], "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "COLUMNS": "100"}).stdout
    return out.rstrip()


def cli_page() -> None:
    lines = ["# Command line", "",
             "`gsp` is installed with gsp (also `python -m gsp`). What each command prints "
             "with `--help`:", ""]
    for command in COMMANDS:
        lines += [f"## `{' '.join(command)}`", "", "```text", help_text(command), "```", ""]
    with mkdocs_gen_files.open("reference/cli.md", "w") as f:
        f.write("\n".join(lines))


api_pages()
cli_page()
