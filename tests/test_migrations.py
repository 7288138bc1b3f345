"""Migrations upgrade an empty database (SQLite and PostgreSQL) to exactly what the models say."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

import app.models  # noqa: F401
from app.db import make_engine, migrate
from tests.support.databases import make_postgres_db


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


def test_postgres_connections_plan_every_statement_for_its_parameters(postgres_admin):
    """psycopg prepares a statement run five times, and PostgreSQL may then keep one generic plan for it: for
    the charts page's metric lookups that plan was 2,000x slower after about ten visits (docs/performance.md).
    Every connection of the pool plans each execution for its own parameters, after a rollback too."""
    url, drop = make_postgres_db(postgres_admin)
    engine = make_engine(url)
    try:
        with engine.connect() as a, engine.connect() as b:
            for conn in (a, b):
                assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == "force_custom_plan"
            a.rollback()
            assert a.exec_driver_sql("SHOW plan_cache_mode").scalar() == "force_custom_plan"
    finally:
        engine.dispose()
        drop()
