"""Shared fixtures (tests/support/fixtures.py) and the suite's tiers (tests/support/tiers.py).

Set GSP_TEST_MONKEY=1 to run under gevent.monkey.patch_all().
"""

from __future__ import annotations

import os

if os.environ.get("GSP_TEST_MONKEY"):
    from gevent import monkey

    monkey.patch_all()

from tests.support.fixtures import *  # noqa: E402,F403
from tests.support.tiers import (  # noqa: E402,F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_ignore_collect,
    pytest_report_header,
    pytest_runtest_setup,
)

MONKEY = bool(os.environ.get("GSP_TEST_MONKEY"))

pytest_plugins = ("pytester",)
