"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks``).

gsp's docstrings name other objects with reST roles (``:class:`Socket```, ``:func:`gsp.prefork```),
which mkdocstrings renders as Markdown: the role's name would show as text before the code
span. This drops it, leaving the code span.
"""

from __future__ import annotations

import re
from typing import Any

#: A reST role's name right before the code span it marked, as rendered to HTML.
ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj|const|py:\w+):(?=<code)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)
