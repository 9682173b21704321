"""The documentation's links work where it is read: in the repository (every relative link of
README.md and docs/*.md names a file that is there) and on the site (a link to a module's source
becomes a link to the reference page generated from it; `mkdocs build --strict` then checks it)."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from scripts import docs_hooks

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(page: pathlib.Path) -> list[str]:
    """The relative links of ``page``'s prose (code blocks and code spans left out)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and t[0] != "#"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_names_a_file_of_the_repository(page: pathlib.Path) -> None:
    dead = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not dead, f"{page.relative_to(ROOT)}: dead in the repository: {dead}"


def test_a_link_to_a_source_becomes_its_generated_page_on_the_site() -> None:
    md = ("[api](../gsp/__init__.py), [errors](../gsp/errors.py#x), [cli](../../gsp/__main__.py)"
          " and [a file](../gsp/chan.py)")
    assert docs_hooks.on_page_markdown(md) == (
        "[api](reference/api/gsp.md), [errors](reference/errors.md#x), "
        "[cli](../reference/cli.md) and [a file](../gsp/chan.py)")


def test_every_source_the_hook_maps_exists_and_its_page_is_generated() -> None:
    tree = ast.parse((ROOT / "scripts" / "docs_pages.py").read_text(encoding="utf-8"))
    api = next(n.value for n in tree.body if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "API" for t in n.targets))
    assert isinstance(api, ast.Dict)
    generated = {f"reference/api/{ast.literal_eval(k)}.md" for k in api.keys if k is not None}
    generated |= {"reference/errors.md", "reference/cli.md"}
    for source, page in docs_hooks.SOURCE_PAGES.items():
        assert (ROOT / source).is_file(), source
        assert page in generated, page
    assert {p for p in generated if p.startswith("reference/api/")} <= set(
        docs_hooks.SOURCE_PAGES.values())
