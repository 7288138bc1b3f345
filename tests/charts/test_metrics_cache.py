"""`load_campaign_metrics` keeps what a read-only session read, keyed on the trials that matter and their
number of rows: a second read gives the same rows without reading them, and every committed metric, or one a
writing session has not committed, is seen at once (a stale answer is the failure this guards against)."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns
from app.domain.answer import CampaignMetrics, load_campaign_metrics
from app.models import Trial
from app.state import app_state
from tests.support.charts import SLUG, add_metrics, build_fixture_campaign

pytestmark = pytest.mark.both_databases  # the answer's metric loading queries and what a transaction sees


def _read(engine) -> CampaignMetrics:
    with session_scope(engine, write=False) as session:
        return load_campaign_metrics(session, campaigns.get_campaign(session, SLUG))


def _uncached(engine) -> CampaignMetrics:
    """The same read through a session that may write, which never uses what was kept."""
    with session_scope(engine) as session:
        return load_campaign_metrics(session, campaigns.get_campaign(session, SLUG))


def _add_to_newest(engine, value: float) -> None:
    """One more row of the newest trial read, as its log would add it (same name, a later chunk)."""
    newest = _read(engine).rows[0]
    with session_scope(engine) as session:
        trial = session.exec(select(Trial).where(Trial.id == newest.trial_id)).one()
        add_metrics(session, trial, [(newest.name, value, dict(newest.tags))], seq=newest.seq + 1000)


def test_a_second_read_is_the_first_and_equals_a_fresh_one(app):
    engine = app_state(app).engine
    with session_scope(engine) as session:
        build_fixture_campaign(session)
    first = _read(engine)
    assert first.rows
    assert _read(engine).rows is first.rows  # the kept read (its rows shared; the traces read again)
    assert _uncached(engine).rows == first.rows


def test_a_committed_metric_is_seen_by_the_next_read(app):
    engine = app_state(app).engine
    with session_scope(engine) as session:
        build_fixture_campaign(session)
    before = _read(engine)
    _add_to_newest(engine, 12345.5)
    after = _read(engine)
    assert after.rows is not before.rows
    assert 12345.5 in [m.value for m in after.rows] and 12345.5 not in [m.value for m in before.rows]
    assert after.rows == _uncached(engine).rows


def test_an_uncommitted_metric_is_never_kept(app):
    engine = app_state(app).engine
    with session_scope(engine) as session:
        build_fixture_campaign(session)
    before = _read(engine)
    newest = before.rows[0]
    with session_scope(engine) as session:
        trial = session.exec(select(Trial).where(Trial.id == newest.trial_id)).one()
        add_metrics(session, trial, [(newest.name, 777.25, dict(newest.tags))], seq=newest.seq + 1000)
        session.flush()
        inside = load_campaign_metrics(session, campaigns.get_campaign(session, SLUG))
        assert 777.25 in [m.value for m in inside.rows]  # the writing session reads its own row
        session.rollback()
    # Rolled back: a later commit of as many rows must not be answered with the rolled-back one.
    _add_to_newest(engine, 888.75)
    values = [m.value for m in _read(engine).rows]
    assert 888.75 in values and 777.25 not in values


def test_the_rows_key_is_computed_once_per_read_and_changes_with_a_new_metric(app):
    """The speculation answer's cache keys on `rows_key`: the kept read's copies share it (computed once, not on
    every visit), an uncached read of the same rows gives the same key, and a new committed row a new one."""
    engine = app_state(app).engine
    with session_scope(engine) as session:
        build_fixture_campaign(session)
    first = _read(engine)
    key = first.rows_key
    again = _read(engine)
    assert again is not first and "rows_key" in again._shared and again.rows_key == key
    assert _uncached(engine).rows_key == key
    _add_to_newest(engine, 777.25)
    assert _read(engine).rows_key != key
