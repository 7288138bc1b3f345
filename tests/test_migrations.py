"""Migrations upgrade an empty database (SQLite and PostgreSQL) to exactly what the models say."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

import app.models  # noqa: F401
from app.db import make_engine, migrate


def test_upgrade_empty_database_matches_models(empty_db_url):
    migrate(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, SQLModel.metadata)
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations differ: {diff}"
    assert {"campaign", "approach", "status_change", "trial", "log_chunk", "metric", "runner"} <= tables


def test_migrate_twice_is_a_no_op(empty_db_url):
    migrate(empty_db_url)
    migrate(empty_db_url)


def test_sqlite_has_wal_and_foreign_keys(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate(url)
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()
