"""docs/plugin-reference.md is generated from the SDK's docstrings and must match them; every hook
it lists has a docstring that says what the hook may raise. (`python scripts/docgen.py hooks`
writing the file is checked beside `... options` in tests/project/test_options_doc.py.)"""

from __future__ import annotations

import importlib
import pathlib
import re
from typing import Any

import gsp
from gsp.protocol import Protocol, ProtocolContext
from gsp.transport import Connection, StreamConnection
from scripts import docgen as _docs

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "plugin-reference.md"
RAISES = re.compile(r"\brais(e|es|ed|ing)\b", re.I)


def test_docs_plugin_reference_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == _docs.reference_markdown(), (
        "docs/plugin-reference.md is stale: regenerate it with "
        f"`{_docs.REFERENCE_COMMAND}` at the repository root")


def _unsaid(obj: Any, members: list[tuple[str, str, str, str]]) -> list[str]:
    """The hooks of ``obj`` whose docstring (theirs, or the one of the hook they implement) is
    missing or does not say what they may raise."""
    bad = []
    for name, sig, doc, base in members:
        if not sig.startswith("("):
            continue  # attributes and properties: read, never raise
        said = [doc]
        if base:
            said.append(getattr(next(c for c in obj.__mro__ if c.__name__ == base), name).__doc__)
        if not any(d and RAISES.search(d) for d in said):
            bad.append(f"{obj.__qualname__}.{name}")
    return bad


def test_every_hook_says_what_it_may_raise() -> None:
    bad: list[str] = []
    for qual, doc, members in _docs.reference_entries():
        module, _, name = qual.rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        assert doc, f"{qual} has no docstring"
        if isinstance(obj, type):
            bad += _unsaid(obj, members)
            assert all(d or b for n, s, d, b in members), f"{qual}: a member without a docstring"
        elif not RAISES.search(doc):
            bad.append(qual)
    assert not bad, f"docstrings that do not say what the hook may raise: {bad}"


def test_the_check_bites_on_a_hook_that_does_not_say() -> None:
    class Quiet(Protocol):
        def add_pipe(self, pipe: Any) -> None:
            """Adds it."""  # Protocol.add_pipe's docstring says what it may raise: fine

        def extra(self) -> None:
            """Does something."""

    bad = _unsaid(Quiet, _docs.hook_members(Quiet, None))
    assert len(bad) == 1 and bad[0].endswith("Quiet.extra"), bad


def test_every_optional_and_do_hook_is_in_the_reference() -> None:
    text = _docs.reference_markdown()
    for cls in (Protocol, Connection, StreamConnection, ProtocolContext):
        for hook in cls.OPTIONAL_HOOKS:
            assert f"**`{hook}(" in text, (cls, hook)
    shown = {n for n, *_ in _docs.hook_members(ProtocolContext, _docs.MEMBERS["ProtocolContext"])}
    assert {n for n in vars(ProtocolContext) if n.startswith("do_")} | {"on_close"} <= shown
    for name in gsp.hookspecs.__all__ + ["gsp_transports", "gsp_protocols", "gsp_pipe_event"]:
        if name not in ("hookspec", "hookimpl"):
            assert f"### `{name}(" in text, name


def test_reference_text_is_markdown_not_rest() -> None:
    text = _docs.reference_markdown()
    assert ":class:`" not in text and ":meth:`" not in text and "``" not in text.replace(
        "```", "")
