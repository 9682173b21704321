"""The documentation site's generated pages, written at build time by mkdocs-gen-files
(mkdocs.yml's ``gen-files`` plugin runs this script on every ``mkdocs build`` or ``serve``):

- ``reference/api/<module>.md``: the public API of each module in :data:`API`, rendered from its
  docstrings and signatures by mkdocstrings;
- ``reference/cli.md``: the ``--help`` of ``gsp`` and of each of its commands, as the installed
  commands print it;
- ``reference/errors.md``: every error class of :mod:`gsp.errors`, as a tree, with its
  docstring;
- ``options.md`` and ``plugin-reference.md``: written afresh from the option specs and the SDK's
  docstrings by the repository's generator (the files in docs/ are its output, kept for readers
  of the repository and checked fresh by tests/project/test_options_doc.py and test_plugin_reference.py);
- ``architecture.md``: its layers and module map written afresh from the import-linter contracts
  and the modules' docstrings (a contract naming a module that is not there fails the build;
  tests/project/test_architecture_doc.py checks the file in docs/ fresh).

Nothing here is kept by hand: a docstring or an argument changed in the code changes the page.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent

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
              "([WebSocket and WSGI](../../webapp.md)); `gsp_ws.wsgi` mounts it.",
    "gsp_spark": "The `gevent-sp-spark` plugin: the `gsp` PySpark data source "
                 "([Spark](../../spark.md)).",
}

#: Modules rendered on their package's page too (a public module the package does not re-export).
ALSO = {"gsp": ("gsp.admit",), "gsp_ws": ("gsp_ws.wsgi",)}

#: gsp's own commands whose ``--help`` the CLI page shows; then those that installed
#: distributions add through the ``gsp.commands`` entry-point group (``gsp bench``).
COMMANDS = (["gsp"], ["gsp", "cat"])


def api_pages() -> None:
    for module, about in API.items():
        with mkdocs_gen_files.open(f"reference/api/{module}.md", "w") as f:
            f.write(f"# `{module}`\n\n{about}\n\n::: {module}\n")
            for extra in ALSO.get(module, ()):
                f.write(f"\n::: {extra}\n")


def help_text(command: list[str]) -> str:
    """What ``command --help`` prints, run as a user runs it (``python -m gsp ...``)."""
    argv = [sys.executable, "-m", "gsp", *command[1:], "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "COLUMNS": "100"}).stdout
    return out.rstrip()


def cli_page() -> None:
    from gsp.__main__ import commands

    plugged = {name: ep.dist.name if ep.dist else "" for name, ep in commands().items()}
    lines = ["# Command line", "",
             "`gsp` is installed with gsp (also `python -m gsp`); other distributions add "
             "commands to it. What each command prints with `--help`:", ""]
    for command in [*COMMANDS, *(["gsp", name] for name in sorted(plugged))]:
        head = f"## `{' '.join(command)}`"
        if command[1:] and command[1] in plugged:
            head += f" (from `{plugged[command[1]]}`)"
        lines += [head, "", "```text", help_text(command), "```", ""]
    with mkdocs_gen_files.open("reference/cli.md", "w") as f:
        f.write("\n".join(lines))


def _markdown(doc: str) -> str:
    """A docstring as one table cell: reST's literals and roles as Markdown code."""
    text = " ".join(inspect.cleandoc(doc).split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    return text.replace("|", "\\|")


def error_rows(cls: type, depth: int, classes: list[type]) -> list[str]:
    also = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins" and b is not Exception]
    name = "&nbsp;&nbsp;&nbsp;" * max(depth - 1, 0) + "↳ " * min(depth, 1) + f"`{cls.__name__}`"
    rows = [f"| {name} | {', '.join(f'`{a}`' for a in also)} | {_markdown(cls.__doc__ or '')} |"]
    for sub in classes:
        if sub.__bases__[0] is cls:
            rows += error_rows(sub, depth + 1, classes)
    return rows


def errors_page() -> None:
    import gsp.errors

    classes = [c for c in vars(gsp.errors).values()
               if isinstance(c, type) and issubclass(c, gsp.errors.GspError)]
    lines = ["# Error classes", "",
             "Every error gsp raises on purpose derives from `gsp.GspError`, and each is "
             "`gsp.<name>`. The tree below is generated from `gsp.errors` (first base first; "
             "\"also\" names the built-in exception a class also is, so that `except "
             "ValueError` or `except TimeoutError` catches it). What each call raises, protocol "
             "by protocol, and how timeouts work: [errors and timeouts](../errors.md).", "",
             "| error | also | raised when |", "|---|---|---|",
             *error_rows(gsp.errors.GspError, 0, classes), ""]
    with mkdocs_gen_files.open("reference/errors.md", "w") as f:
        f.write("\n".join(lines))


def generator() -> ModuleType:
    """The repository's generator of the options and hook references."""
    sys.path.insert(0, str(ROOT))
    try:
        from scripts import docgen
    finally:
        sys.path.remove(str(ROOT))
    return docgen


def generated_references() -> None:
    docgen = generator()
    for page, text in (("options.md", docgen.options_markdown()),
                       ("plugin-reference.md", docgen.reference_markdown()),
                       ("architecture.md", docgen.architecture_markdown())):
        with mkdocs_gen_files.open(page, "w") as f:
            f.write(text)


api_pages()
cli_page()
errors_page()
generated_references()
