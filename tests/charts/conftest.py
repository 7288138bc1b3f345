"""Fixtures for the profitability, charts and share-link tests: the fixture campaign in a fresh app."""

from __future__ import annotations

import pytest

from app.state import app_state
from tests.support.charts import build_fixture_campaign


@pytest.fixture
def fixture_app(app):
    """The app (on each storage backend) with the fixture campaign loaded."""
    from app.db import session_scope

    with session_scope(app_state(app).engine) as session:
        build_fixture_campaign(session)
    return app


@pytest.fixture
def session(fixture_app):
    from app.db import session_scope

    with session_scope(app_state(fixture_app).engine) as s:
        yield s
