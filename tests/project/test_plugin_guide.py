"""docs/plugins.md quotes the example plugins: every quoted block must still be in its file; the
names and links it gives still exist."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.support import BLOCK, ROOT

GUIDE = ROOT / "docs" / "plugins.md"


def _blocks() -> list[tuple[str | None, str, str, str]]:
    return [(m[1], m[2], m[3], m[4]) for m in BLOCK.finditer(GUIDE.read_text())]


def test_the_guide_has_quoted_code() -> None:
    assert sum(kind == "snippet" for kind, *_ in _blocks()) >= 10


@pytest.mark.parametrize("kind, where, lang, code", [
    pytest.param(*b, id=f"{b[1]}:{b[3].splitlines()[0][:40]}") for b in _blocks() if b[2]
])
def test_code_blocks_are_copied_verbatim(kind: str | None, where: str, lang: str,
                                         code: str) -> None:
    """Every python/toml block names the file it is from, and that file contains it as is."""
    if kind == "snippet-exempt":
        return
    assert kind == "snippet", f"a {lang} block without a <!-- snippet: path --> line:\n{code}"
    source = (ROOT / where).read_text()
    assert code in source, f"not (or no longer) in {where}:\n{code}"


def test_the_guide_is_a_guide() -> None:
    """A guide of about 400 lines; the hooks' details live in the generated reference."""
    text = GUIDE.read_text()
    assert len(text.splitlines()) <= 420
    assert "(plugin-reference.md" in text


def _resolves(dotted: str) -> bool:
    """Whether ``gsp.a.b`` is a module or an attribute of one (a class's member included)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_gsp_name_the_guide_mentions_exists() -> None:
    """The layout moved modules: a stale ``gsp.x.y`` in the guide fails here."""
    names = set(re.findall(r"`(gsp(?:\.\w+)+)(?![\w*])", GUIDE.read_text()))
    assert len(names) >= 10
    assert not [n for n in sorted(names) if not _resolves(n)]


@pytest.mark.parametrize("package", ["gsp.transport", "gsp.protocol"])
def test_the_sdk_table_lists_what_the_package_exports(package: str) -> None:
    """Every name the guide says ``from gsp.<sdk> import ...`` gives is importable from there."""
    row = next(line for line in GUIDE.read_text().splitlines()
               if line.startswith(f"| `from {package} import ...`"))
    names = re.findall(r"`([A-Za-z_]\w*)`", row)
    assert len(names) >= 10
    module = importlib.import_module(package)
    assert [n for n in names if not hasattr(module, n)] == []


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_the_plugin_docs_resolve() -> None:
    """Links into the guide, the reference and the architecture page name a file and a heading
    that exist (the guide lost most of its old headings)."""
    docs = ROOT / "docs"
    targets = {"plugins.md", "plugin-reference.md", "architecture.md", "testing.md", "queues.md"}
    bad = []
    for page in [*docs.glob("*.md"), ROOT / "README.md"]:
        for target, anchor in re.findall(r"\]\((?:docs/)?([\w.-]+\.md)(?:#([\w-]+))?\)",
                                         page.read_text()):
            if target not in targets:
                continue
            if not (docs / target).exists():
                bad.append(f"{page.name} -> {target}")
                continue
            headings = re.findall(r"^#+ (.*)$", (docs / target).read_text(), re.M)
            if anchor and anchor not in {_slug(h) for h in headings}:
                bad.append(f"{page.name} -> {target}#{anchor}")
    assert bad == []
