"""The test files that may read gsp's internals, each with why.

Tests go through gsp's public API (and the SDKs, ``gsp.protocol`` and ``gsp.transport``), so that
they say what gsp promises and survive a change of how it keeps it. A few test a piece whose
behaviour is its internals (a codec's buffers, a reader's parking): those may read private
attributes and import private modules, and are listed here. tests/project/test_suite_rules.py
holds every other test file to the public surface.
"""

from __future__ import annotations

#: path (from the repository's root) -> why that file reads internals
WHITE_BOX: dict[str, str] = {}
WHITE_BOX["plugins/gsp-ws/tests/test_ws_codec.py"] = "the ws frame codec: its buffers grow by what arrived (its read-ahead bound), and its pure-Python mask fallback matches the compiled one"
WHITE_BOX["plugins/gsp-ws/tests/test_ws_frames.py"] = "the ws pipes over the codec's pure-Python mask fallback, and message sizes around the codec's direct-read threshold"
WHITE_BOX["tests/serving/test_prefork.py"] = "prefork's accept turns timed against a hub held busy, which no public call can arrange"
