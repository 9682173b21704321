"""gsp-bench's tests share the suite's fixtures and tiers (tests/support/)."""

from tests.support.fixtures import *  # noqa: F403
from tests.support.tiers import pytest_runtest_setup  # noqa: F401
