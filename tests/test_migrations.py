"""Migrations upgrade an empty database (SQLite and PostgreSQL) to exactly what the models say."""

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

import app.models  # noqa: F401
from alembic import command
from app.db import alembic_config, make_engine, migrate, session_scope
from app.domain.search import SEARCH_TABLE_PREFIX
from app.domain.statistics import summary_columns
from tests.support.databases import make_postgres_db
from tests.support.verdicts import OLD_STACK, approach, end_trial, runner, seed

pytestmark = pytest.mark.both_databases  # the migrations, per dialect


def _search_table(name: str | None, kind: str) -> bool:
    """The search index's tables (SQLite FTS5) and indexes (PostgreSQL GIN over expressions): the migration's."""
    prefix = SEARCH_TABLE_PREFIX if kind == "table" else "ix_" + SEARCH_TABLE_PREFIX
    return kind in ("table", "index") and bool(name) and str(name).startswith(prefix)


def test_upgrade_empty_database_matches_models(empty_db_url):
    migrate(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            # the search index's tables (FTS5, migration 0021) are the migration's, not the models'
            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "include_name": lambda name, kind, _: not _search_table(name, kind)}
            )
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


def test_0018_fills_the_sample_summaries_of_rows_written_before_it(empty_db_url):
    """Rows written before 0018 have samples and no summary: the upgrade computes it from their samples
    (statistics.summary_columns); rows without samples keep none. Checked through 0018's downgrade and a
    second upgrade on the same rows."""
    migrate(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        seed(engine, {"key": "a"}, slug="m")
        with session_scope(engine) as s:
            node = runner(s, "node-a", OLD_STACK)
            lines: list[dict[str, Any]] = [
                {"name": "lat", "value": 2.0, "samples": [3.0, 1.0, 2.0, 10.0]},
                {"name": "lat", "value": 7.0, "tags": {"tokens": 8}},
                {"name": "tput", "value": 5.0, "samples": [5.0]},
            ]
            end_trial(s, approach(s, "a", "m"), node, metrics=lines)
        command.downgrade(alembic_config(empty_db_url), "0017")
        assert "samples_median" not in {c["name"] for c in inspect(engine).get_columns("metric")}
        migrate(empty_db_url)
        with engine.connect() as conn:
            found = conn.execute(text("SELECT samples_median, samples_cv, samples_n FROM metric ORDER BY id")).all()
    finally:
        engine.dispose()
    expected = [summary_columns(line.get("samples")) for line in lines]
    assert [tuple(row) for row in found] == [(e["samples_median"], e["samples_cv"], e["samples_n"]) for e in expected]
    assert found[0][0] == 2.5 and found[1] == (None, None, None) and found[2] == (5.0, None, 1)


def test_0019_gives_back_what_a_person_decided_and_keeps_trials_as_events(empty_db_url):
    """Before 0019 a trial moved its approach to queued / running and then to untested (or back): the
    upgrade walks each history, turns those rows into trial events at the decided status, and gives each
    approach its decided status and reason back (issue 43, item 1)."""
    migrate(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        seed(engine, {"key": "a"}, {"key": "b"}, slug="m")
        with session_scope(engine) as s:
            node = runner(s, "node-a", OLD_STACK)
            a, b = approach(s, "a", "m"), approach(s, "b", "m")
            ids = (a.id, b.id, end_trial(s, a, node).id, end_trial(s, b, node).id)
        command.downgrade(alembic_config(empty_db_url), "0018")
        a_id, b_id, t1, t2 = ids
        old = [  # (approach, from, to, reason, actor, trial): what the board wrote before 0019
            (a_id, "", "untested", "added", "alice", None),
            (a_id, "untested", "adopted", "fastest kernel", "alice", None),
            (a_id, "adopted", "queued", f"trial #{t1} on node-a", "bob", t1),
            (a_id, "queued", "running", f"trial #{t1} started", "runner node-a", t1),
            (a_id, "running", "untested", f"trial #{t1} succeeded", "runner node-a", t1),
            (b_id, "", "untested", "added", "alice", None),
            (b_id, "untested", "dead_end", "KeyError 12", "alice", None),
            (b_id, "dead_end", "queued", f"trial #{t2} on node-a", "bob", t2),
            (b_id, "queued", "running", f"trial #{t2} started", "runner node-a", t2),
            (b_id, "running", "deferred", "needs a new driver", "carol", None),  # a person, while it ran
        ]
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM status_change"))
            for i, (ap, frm, to, reason, actor, trial) in enumerate(old):
                conn.execute(
                    text(
                        "INSERT INTO status_change (approach_id, from_status, to_status, reason, actor, trial_id, at) "
                        "VALUES (:a, :f, :t, :r, :actor, :trial, :at)"
                    ),
                    {
                        "a": ap,
                        "f": frm,
                        "t": to,
                        "r": reason,
                        "actor": actor,
                        "trial": trial,
                        "at": f"2026-01-01 10:{i:02d}:00",
                    },
                )
            conn.execute(
                text("UPDATE approach SET status = 'untested', reason = :r WHERE id = :id"),
                {"r": f"trial #{t1} succeeded", "id": a_id},
            )
            conn.execute(
                text("UPDATE approach SET status = 'running', reason = :r WHERE id = :id"), {"r": "x", "id": b_id}
            )
        migrate(empty_db_url)
        with engine.connect() as conn:
            approaches = conn.execute(text("SELECT id, status, reason FROM approach ORDER BY id")).all()
            rows = conn.execute(text("SELECT kind, from_status, to_status FROM status_change ORDER BY id")).all()
    finally:
        engine.dispose()
    assert [tuple(r) for r in approaches] == [
        (a_id, "adopted", "fastest kernel"),
        (b_id, "deferred", "needs a new driver"),
    ]
    assert [tuple(r) for r in rows] == [
        ("status", "", "untested"),
        ("status", "untested", "adopted"),
        ("trial", "adopted", "adopted"),
        ("trial", "adopted", "adopted"),
        ("trial", "adopted", "adopted"),
        ("status", "", "untested"),
        ("status", "untested", "dead_end"),
        ("trial", "dead_end", "dead_end"),
        ("trial", "dead_end", "dead_end"),
        ("status", "dead_end", "deferred"),
    ]


def test_0024_downgrade_indexes_the_gaps_chunks(empty_db_url):
    """0021's indexer knows only its cursor: 0024's downgrade indexes the chunks waiting in gaps (below the
    cursor), so after it every chunk at or below the cursor is indexed, once. SQLite only (PostgreSQL: GIN)."""
    from app.domain import search
    from app.models import LogChunk, Trial

    migrate(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        if engine.dialect.name != "sqlite":
            command.downgrade(alembic_config(empty_db_url), "0023")
            migrate(empty_db_url)
            return
        seed(engine, {"key": "a"}, slug="m")
        with session_scope(engine) as s:
            trial = Trial(campaign_id=1, approach_id=1, recipe={})
            s.add(trial)
            s.flush()
            s.add_all(
                LogChunk(trial_id=trial.id, attempt_id="a", seq=k, offset=0, data=f"deluge w{k}\n")  # type: ignore[arg-type]
                for k in range(6)
            )
        with session_scope(engine) as s:
            assert search.index_pass(s, batch=2) == (2, True)  # w4, w5; w0-w3 in a gap
        command.downgrade(alembic_config(empty_db_url), "0023")
        with engine.connect() as conn:
            conn.execute(text("INSERT INTO search_log (search_log, rank) VALUES ('integrity-check', 1)"))
            hits = conn.execute(text("SELECT rowid FROM search_log WHERE search_log MATCH 'deluge'")).all()
        assert len(hits) == 6
        migrate(empty_db_url)
    finally:
        engine.dispose()
