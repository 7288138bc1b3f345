"""Fixtures for the profitability, charts and share-link tests: the fixture campaign in a fresh app."""

from __future__ import annotations

import pytest

from tests.support.charts import build_fixture_campaign


@pytest.fixture
def fixture_app(app):
    """The app (on each storage backend) with the fixture campaign loaded."""
    from app.db import session_scope

    with session_scope(app.state.engine) as session:
        build_fixture_campaign(session)
    return app


@pytest.fixture
def session(fixture_app):
    from app.db import session_scope

    with session_scope(fixture_app.state.engine) as s:
        yield s
