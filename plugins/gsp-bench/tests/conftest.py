"""gsp-bench's tests share the suite's fixtures and tiers (tests/support/)."""

from tests.support.fixtures import *  # noqa: F403
from tests.support.tiers import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_setup,
)
