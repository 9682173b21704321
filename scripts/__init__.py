"""The repository's own scripts (not installed with gsp): :mod:`scripts.docs_pages` writes the
documentation site's generated pages at build time, :mod:`scripts.docgen` the generated references
(docs/options.md, docs/plugin-reference.md)."""
