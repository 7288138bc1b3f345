"""Ids in links and notifications ("trial #45 succeeded ... /trials/45") name one row forever: after the newest
trial, approach, campaign, artifact or replay is deleted, the next one gets a new id, on both databases, on a
fresh database and on one upgraded through migration 0016 (whose SQLite table rebuild keeps every child row)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateTable
from sqlmodel import select

from alembic import command
from app.db import alembic_config, make_engine, migrate, session_scope
from app.models import Approach, Artifact, Campaign, LogChunk, Metric, Replay, StatusChange, Trial, utcnow

pytestmark = pytest.mark.both_databases  # ids never reused: AUTOINCREMENT on SQLite, sequences on PostgreSQL


def _insert(conn, model, **values) -> int:
    """One row through SQLAlchemy Core into the columns the database's table has (reflected), so it also works
    on a database at an older schema (0015 has no approach.archived_at, no status_change.kind); required columns
    not given get a plain value of their type."""
    existing = sa.Table(model.__table__.name, sa.MetaData(), autoload_with=conn)
    for column in model.__table__.columns:
        if column.name not in existing.c or column.name in values or column.primary_key or column.nullable:
            continue
        if existing.c[column.name].server_default is not None:
            continue
        kind = type(column.type).__name__
        values[column.name] = {"DateTime": utcnow(), "JSON": {}, "Boolean": False, "Integer": 0, "Float": 0.0}.get(
            kind, ""
        )
    return conn.execute(existing.insert().values(**values).returning(existing.c.id)).scalar_one()


def _seed(engine, slug: str) -> dict[str, int]:
    with engine.begin() as conn:
        campaign = _insert(conn, Campaign, slug=slug, name=slug)
        approach = _insert(conn, Approach, campaign_id=campaign, key="a", title="A", position=1)
        trial = _insert(conn, Trial, campaign_id=campaign, approach_id=approach, state="succeeded")
        _insert(conn, LogChunk, trial_id=trial, attempt_id="x", seq=0, offset=0, data="hello\n")
        _insert(conn, Metric, trial_id=trial, approach_id=approach, campaign_id=campaign, seq=0, name="t", value=1.0)
        _insert(conn, StatusChange, approach_id=approach, from_status="untested", to_status="promising")
        artifact = _insert(conn, Artifact, trial_id=trial, campaign_id=campaign, name="r.json", size=1, sha256="0")
        replay = _insert(conn, Replay, campaign_id=campaign, runner_name="node")
    return {"campaign": campaign, "approach": approach, "trial": trial, "artifact": artifact, "replay": replay}


def _delete_newest_and_add_again(engine, ids: dict[str, int]) -> dict[str, int]:
    with session_scope(engine) as session:
        session.delete(session.get(Campaign, ids["campaign"]))  # cascades to all the others
    return _seed(engine, "again")


def _assert_never_reused(engine) -> None:
    first = _seed(engine, "first")
    again = _delete_newest_and_add_again(engine, first)
    for table, old in first.items():
        assert again[table] > old, (table, old, again[table])


def test_ids_are_never_reused_on_a_fresh_database(db_url):
    for model in (Campaign, Approach, Trial, Artifact, Replay):  # the models say so too (a create_all database)
        table = model.__table__  # type: ignore[union-attr]
        assert "AUTOINCREMENT" in str(CreateTable(table).compile(dialect=sqlite.dialect())), model
    engine = make_engine(db_url)
    try:
        _assert_never_reused(engine)
    finally:
        engine.dispose()


def test_migration_0016_keeps_every_row_and_stops_reuse(empty_db_url):
    command.upgrade(alembic_config(empty_db_url), "0015")
    engine = make_engine(empty_db_url)
    try:
        before = _seed(engine, "before")
        migrate(empty_db_url)
        with session_scope(engine, write=False) as session:
            trial = session.get(Trial, before["trial"])
            assert trial is not None and trial.approach_id == before["approach"]
            # The rebuilt parents' children are all there (foreign keys were off for the rebuild, not cascaded).
            assert [c.data for c in session.exec(select(LogChunk).where(LogChunk.trial_id == trial.id))] == ["hello\n"]
            assert len(session.exec(select(Metric).where(Metric.trial_id == trial.id)).all()) == 1
            assert (
                len(session.exec(select(StatusChange).where(StatusChange.approach_id == before["approach"])).all()) == 1
            )
            assert session.get(Artifact, before["artifact"]) is not None
            assert session.get(Approach, before["approach"]).archived_at is None  # type: ignore[union-attr]
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1  # on again for the app
                sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'trial'").scalar()
                assert "AUTOINCREMENT" in str(sql)
        _assert_never_reused(engine)
    finally:
        engine.dispose()
    command.downgrade(alembic_config(empty_db_url), "0015")
