"""docs/plugins.md quotes the example plugins: every quoted block must still be in its file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "plugins.md"
# A marker line, then a fenced block: ``<!-- snippet: path -->`` or ``<!-- snippet-exempt: why -->``
BLOCK = re.compile(r"(?:<!-- (snippet|snippet-exempt): ([^>]*?) -->\n)?```(\w*)\n(.*?)\n```", re.S)


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
