"""The artifact tests' `server`: a real server with small artifact caps (tests/support/artifacts.py)."""

from tests.support.artifacts import server  # noqa: F401  (the fixture)
