"""The domain tests' session: one write session on the test's app database, committed when the test ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlmodel import Session

from app.db import session_scope
from app.state import app_state


@pytest.fixture
def session(app) -> Iterator[Session]:
    with session_scope(app_state(app).engine) as s:
        yield s
