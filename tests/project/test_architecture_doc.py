"""docs/architecture.md's layers and module map are generated from the import-linter contracts in
pyproject.toml and the modules' docstrings (``python scripts/docgen.py architecture``), and the
page names only modules and files that exist: a rename that the page or the contracts miss fails
here."""

from __future__ import annotations

import importlib
import pathlib
import re
from typing import Any

import pytest

from scripts import docgen as _docs
from scripts.docgen import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
#: Dotted names on the page that are not modules: the core's loggers, an entry-point group, the
#: browser module's file name.
NOT_MODULES = {"gsp.listener", "gsp.dialer", "gsp.pipe", "gsp.socket", "gsp.commands", "gsp.js"}


def test_docs_architecture_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == _docs.architecture_markdown(), (
        "docs/architecture.md is stale: regenerate it with "
        f"`{_docs.ARCHITECTURE_COMMAND}` at the repository root")


def test_the_command_writes_the_page(tmp_path: Any) -> None:
    out = tmp_path / "architecture.md"
    assert main(["architecture", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == _docs.architecture_markdown()
    assert _docs.ARCHITECTURE_COMMAND in out.read_text(encoding="utf-8")


def test_every_module_of_gsp_is_in_the_map_and_every_layer_in_the_diagram() -> None:
    page = DOC.read_text(encoding="utf-8")
    on_disk = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in (ROOT / "gsp").rglob("*.py") if "__pycache__" not in p.parts}
    mapped = set(re.findall(r"^\| (?:\d+|above) \| `([\w.]+)` \|", page, re.M))
    assert mapped == on_disk, (sorted(on_disk - mapped), sorted(mapped - on_disk))
    for layer in _docs.contracts()["contracts"][0]["layers"]:
        assert "<br>".join(m.strip() for m in layer.split("|")) in page


def test_a_contract_naming_a_missing_module_fails_the_page() -> None:
    table = _docs.contracts()
    layers = [c for c in table["contracts"] if c["type"] == "layers"][0]["layers"]
    layers[3] = "gsp._core | gsp.serving"
    with pytest.raises(LookupError, match="gsp.serving"):
        _docs.layers_markdown(table)
    with pytest.raises(LookupError, match="gsp._core.hot"):
        _docs.module_file("gsp._core.hot")


def test_a_page_without_its_generated_blocks_is_refused() -> None:
    page = DOC.read_text(encoding="utf-8")
    cut = re.sub(r"<!-- begin generated: modules.*?<!-- end generated: modules -->", "", page,
                 flags=re.S)
    with pytest.raises(LookupError, match="generated blocks"):
        _docs.architecture_markdown(cut)


def _resolves(name: str) -> bool:
    """``name`` is a module of the repository or a name a module of it defines."""
    try:
        _docs.module_file(name)
        return True
    except LookupError:
        pass
    parent, _, attr = name.rpartition(".")
    try:
        return hasattr(importlib.import_module(parent), attr)
    except ImportError:
        return False


def test_every_module_file_and_name_the_page_mentions_exists() -> None:
    page = DOC.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:gsp|plugins|tests|scripts)/[\w./-]+)`", page))
    assert paths and not [p for p in paths if not (ROOT / p.rstrip("/")).exists()]
    names = set(re.findall(r"`(gsp(?:\.[a-z_]+)+)`", page))
    names |= set(re.findall(r"\((gsp(?:\.[a-z_]+)+)[,)]", page))  # the diagram's labels
    assert names and not [n for n in names - NOT_MODULES if not _resolves(n)]


def test_mkdocs_draws_the_mermaid_blocks() -> None:
    assert "```mermaid" in DOC.read_text(encoding="utf-8")
    assert "name: mermaid" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
