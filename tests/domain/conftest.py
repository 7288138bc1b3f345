"""Domain tests run on a migrated, empty database of each backend (db_url: SQLite and PostgreSQL)."""

import pytest

from app.db import make_engine, migrate


@pytest.fixture
def engine(db_url):
    migrate(db_url)
    engine = make_engine(db_url)
    yield engine
    engine.dispose()
