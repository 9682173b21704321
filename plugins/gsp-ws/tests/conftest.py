"""gsp-ws's tests share the suite's fixtures (tests/support/); the tiers load for every run."""

from tests.support.fixtures import *  # noqa: F403
