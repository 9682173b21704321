"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks``).

- gsp's docstrings name other objects with reST roles (``:class:`Socket```,
  ``:func:`gsp.prefork```), which mkdocstrings renders as Markdown: the role's name would show as
  text before the code span. :func:`on_page_content` drops it, leaving the code span.
- The reference pages exist only in the built site (scripts/docs_pages.py writes them), so a page
  in docs/ links to a reference by the source it is generated from (``../gsp/__init__.py``),
  which is there when the page is read in the repository; :func:`on_page_markdown` turns each
  such link into a link to the generated page (:data:`SOURCE_PAGES`).
"""

from __future__ import annotations

import re
from typing import Any

#: A reST role's name right before the code span it marked, as rendered to HTML.
ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj|const|py:\w+):(?=<code)")

#: Source file (from the repository root) -> the site's page generated from it.
SOURCE_PAGES = {
    "gsp/__init__.py": "reference/api/gsp.md",
    "gsp/protocol/__init__.py": "reference/api/gsp.protocol.md",
    "gsp/transport/__init__.py": "reference/api/gsp.transport.md",
    "gsp/testing/__init__.py": "reference/api/gsp.testing.md",
    "plugins/gsp-ws/gsp_ws/__init__.py": "reference/api/gsp_ws.md",
    "plugins/gsp-spark/src/gsp_spark/__init__.py": "reference/api/gsp_spark.md",
    "gsp/errors.py": "reference/errors.md",
    "gsp/__main__.py": "reference/cli.md",
}
#: A Markdown link from a page in docs/ to one of those sources (``../`` once per level, plus the
#: one out of docs/), with its anchor if any.
SOURCE_LINK = re.compile(r"\]\(((?:\.\./)+)(" + "|".join(map(re.escape, SOURCE_PAGES))
                         + r")(#[^)]*)?\)")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    def to_page(m: re.Match[str]) -> str:
        up = m.group(1)[len("../"):]
        return f"]({up}{SOURCE_PAGES[m.group(2)]}{m.group(3) or ''})"

    return SOURCE_LINK.sub(to_page, markdown)


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)
