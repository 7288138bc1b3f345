"""The timeline's status changes (app/domain/timeline.py) on SQLite and PostgreSQL: the most recently active
approaches only, and of each its newest changes only (by time, the later row first at the same time), read
in one statement whatever the number of approaches shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from app.db import session_scope
from app.domain.timeline import campaign_timeline
from app.models import StatusChange
from tests.support.verdicts import approach, campaign, seed

pytestmark = pytest.mark.both_databases  # timestamps ordered and round-tripped

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _change(approach_id: int | None, reason: str, at: datetime) -> StatusChange:
    assert approach_id is not None
    return StatusChange(approach_id=approach_id, from_status="untested", to_status="measured", reason=reason, at=at)


def _timeline(engine, **limits):
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    with session_scope(engine, write=False) as s:
        c = campaign(s)
        event.listen(engine, "before_cursor_execute", count)
        try:
            found = campaign_timeline(s, c, **limits)
        finally:
            event.remove(engine, "before_cursor_execute", count)
    return found, len(statements)


def test_the_newest_changes_of_the_most_recently_active_approaches(engine):
    seed(engine, *({"key": k} for k in ("busy", "quiet", "stale", "other")))
    with session_scope(engine) as s:
        ids = {k: approach(s, k).id for k in ("busy", "quiet", "stale", "other")}
        for n in range(12):  # an hour apart; the last two at the same time (the later row is the newer)
            s.add(_change(ids["busy"], f"busy {n}", T0 + timedelta(hours=min(n, 10))))
            s.flush()
        s.add(_change(ids["quiet"], "quiet", T0 + timedelta(hours=5)))
        s.add(_change(ids["other"], "other", T0 + timedelta(hours=1)))
        s.add(_change(ids["stale"], "stale", T0 - timedelta(days=30)))
    found, statements = _timeline(engine, max_approaches=3, changes_per_approach=4)
    assert (found.approaches_shown, found.approaches_total) == (3, 4)
    assert [e.reason for e in found.status_events] == ["other", "quiet", "busy 8", "busy 9", "busy 10", "busy 11"]
    assert [e.at for e in found.status_events][-2:] == [T0 + timedelta(hours=10)] * 2
    # Every shown approach's changes in one statement: as many statements with one approach shown as with three.
    _, one = _timeline(engine, max_approaches=1, changes_per_approach=4)
    assert one == statements
