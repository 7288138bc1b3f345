"""Fixtures for the security tests: a real `campaign serve` (uvicorn, embedded runner) per backend."""
from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trials"))

from tests.conftest import make_postgres_db  # noqa: E402

DB_PASSWORD = "db-pass-" + "9f3c1e7a"  # in the database URL: a secret trials must not see


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


def api_client(server) -> httpx.Client:
    token = server.cli("token", "create", "security-tests").stdout.strip()
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
