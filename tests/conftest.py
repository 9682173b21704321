"""Shared fixtures (tests/support/fixtures.py); the suite's tiers (tests/support/tiers.py) load
as a plugin for every run (pyproject.toml's addopts).

Set GSP_TEST_MONKEY=1 to run under gevent.monkey.patch_all().
"""

from __future__ import annotations

import os

if os.environ.get("GSP_TEST_MONKEY"):
    from gevent import monkey

    monkey.patch_all()

from tests.support.fixtures import *  # noqa: E402,F403

MONKEY = bool(os.environ.get("GSP_TEST_MONKEY"))

pytest_plugins = ("pytester",)
