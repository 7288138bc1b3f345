"""Fixtures for the security tests: a real `campaign serve` (uvicorn, embedded runner) per backend."""

from __future__ import annotations

import pytest

from tests.support.databases import make_postgres_db
from tests.support.security import DB_PASSWORD


@pytest.fixture
def board_db(request, tmp_path, db_backend):
    """A database URL per backend the test runs on (tests/conftest.py); the PostgreSQL one carries a password
    (the server trusts it)."""
    if db_backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'board.db'}"
        return
    url, drop = make_postgres_db(request.getfixturevalue("postgres_admin"))
    try:
        yield url.replace("://postgres@", f"://postgres:{DB_PASSWORD}@")
    finally:
        drop()
