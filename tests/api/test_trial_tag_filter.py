"""The trials page's tag filter reads each trial's tags from `trial_tag` (migration 0023: triggers on `metric`
write them, whoever inserts), not every metric's JSON: the same trials as the JSON read found before, on SQLite
and PostgreSQL, for text, number, boolean, nested and long values (a name with a quote: its trials, where SQLite's JSON path
found none); the tags of metrics stored before 0023 are
filled in by the upgrade; a deleted trial's tags go with it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, cast, event, insert, select
from sqlmodel import col

from alembic import command
from app.db import alembic_config, make_engine, migrate, session_scope
from app.domain import trial_reads
from app.models import Metric, Trial, TrialTag, utcnow
from app.schemas import TrialFilter
from app.state import app_state
from tests.support.verdicts import OLD_STACK, approach, end_trial, runner, seed

TAGS: list[dict[str, Any]] = [
    {"tokens": 64, "mode": "graph", "world_size": 8},
    {"tokens": 8, "mode": "eager", "ratio": 1.5, "graph": True},
    {"tokens": 64, "nested": {"a": 1}, "none": None, "dotted.name": "x", 'quo"te': "y"},
    {"long": "v" * 190, "longer": "w" * 600, "mode": "graph"},
    {},
]
FILTERS = [
    "tokens=64", "tokens=8", "tokens=9", "mode=graph", "mode=eager", "world_size=8", "ratio=1.5", "graph=true",
    "graph=1", 'nested={"a":1}', 'nested={"a": 1}', "none=None", "none=null", "dotted.name=x",
    "long=" + "v" * 190, "long=v", "missing=1",
]  # fmt: skip


def _json_read(session, name: str, value: str) -> set[int]:
    """What the filter compared before 0023: the database's text of each metric's tags[name]."""
    exact = cast(col(Metric.tags)[name].as_string(), String) == value
    return set(session.exec(select(Metric.trial_id).where(exact)).scalars())  # type: ignore[call-overload]


def _filtered(session, tag: str) -> set[int]:
    page = trial_reads.list_trials(session, limit=200, tag=tag)
    return {row.trial.id for row in page.rows if row.trial.id is not None}


def _trials_with(engine) -> list[int]:
    """A trial per TAGS entry (its metrics through the ORM, as the ingest's tests write them) and one more whose
    metrics come in one bulk insert (as a campaign file's import and the benchmarks write them)."""
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        a = approach(s, "a")
        ids = [end_trial(s, a, node, metrics=[{"name": "lat", "value": 1.0, "tags": t}]).id for t in TAGS]
        bulk = end_trial(s, a, node)
        s.execute(
            insert(Metric),
            [
                {"trial_id": bulk.id, "approach_id": a.id, "campaign_id": a.campaign_id, "seq": 1, "index": i,
                 "name": "lat", "value": 2.0, "unit": "", "tags": t, "created_at": utcnow()}
                for i, t in enumerate(TAGS)
            ],
        )  # fmt: skip
        return [i for i in [*ids, bulk.id] if i is not None]


def test_the_filter_finds_what_the_json_read_found(app):
    engine = app_state(app).engine
    ids = _trials_with(engine)
    with session_scope(engine, write=False) as s:
        for tag in FILTERS:
            name, value = trial_reads._tag(tag)
            assert _filtered(s, tag) == _json_read(s, name, value), tag
        assert _filtered(s, "tokens=64") and _filtered(s, "long=" + "v" * 190)  # not vacuous
        # A name with a quote: SQLite's JSON path read found nothing before (its path broke); now its trials.
        assert _filtered(s, 'quo"te=y') == {ids[2], ids[-1]}


def test_the_filter_reads_the_kept_tags_not_the_metrics(app):
    engine = app_state(app).engine
    _trials_with(engine)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2].lower()))
    with session_scope(engine, write=False) as s:
        trial_reads.search_trials(s, TrialFilter(tag="tokens=64"), per_page=50)
    tagged = [q for q in statements if "trial_tag" in q]
    assert tagged and not any("metric" in q for q in tagged), statements


def test_a_deleted_trials_tags_go_with_it(app):
    engine = app_state(app).engine
    first = _trials_with(engine)[0]
    with session_scope(engine) as s:
        assert s.execute(select(col(TrialTag.name)).where(col(TrialTag.trial_id) == first)).all()
        trial = s.get(Trial, first)
        s.delete(trial)
    with session_scope(engine, write=False) as s:
        assert not s.execute(select(col(TrialTag.name)).where(col(TrialTag.trial_id) == first)).all()


def test_0023_fills_the_tags_of_metrics_stored_before_it(empty_db_url):
    migrate(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        command.downgrade(alembic_config(empty_db_url), "0022")
        ids = _trials_with(engine)
        migrate(empty_db_url)
        with session_scope(engine, write=False) as s:
            assert _filtered(s, "tokens=64") == {ids[0], ids[2], ids[-1]}
            for tag in FILTERS:
                name, value = trial_reads._tag(tag)
                assert _filtered(s, tag) == _json_read(s, name, value), tag
    finally:
        engine.dispose()
