"""Fixtures for the security tests: a real `campaign serve` (uvicorn, embedded runner) per backend."""

from __future__ import annotations

import pytest

from tests.support.databases import make_postgres_db
from tests.support.security import DB_PASSWORD


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def board_db(request, tmp_path):
    """A database URL per backend; the PostgreSQL one carries a password (the server trusts it)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'board.db'}"
        return
    url, drop = make_postgres_db(request.getfixturevalue("postgres_admin"))
    try:
        yield url.replace("://postgres@", f"://postgres:{DB_PASSWORD}@")
    finally:
        drop()
