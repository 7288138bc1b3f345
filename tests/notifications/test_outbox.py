"""The notification outbox on a real database (SQLite file and PostgreSQL): what is written for whom, once;
claiming with coalescing into digests; retries with backoff; claims of a killed server; redaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain import notifications as nd
from app.domain.errors import Invalid
from app.domain.scheduling import create_trial
from app.domain.trials import end_trial
from app.models import Approach, Campaign, DeliveryState, NotificationOutbox, Runner, Trial, TrialState, utcnow

pytestmark = pytest.mark.both_databases  # ON CONFLICT DO NOTHING per dialect, outbox claims, timestamps

BASE = "http://board.example:8000"


@pytest.fixture
def engine(engine):
    """The shared engine (tests/conftest.py) with two campaigns."""
    with session_scope(engine) as session:
        for slug in ("kimi", "other"):
            session.add(Campaign(slug=slug, name=slug))
    return engine


def _target(engine, url: str, events: list[str], campaign: str | None = None) -> int:
    with session_scope(engine) as session:
        chosen = session.exec(select(Campaign).where(Campaign.slug == campaign)).one() if campaign else None
        return nd.create_target(session, url, events, campaign=chosen, actor="ada").id or 0


def _campaign_id(engine, slug: str) -> int:
    with session_scope(engine, write=False) as session:
        return session.exec(select(Campaign.id).where(Campaign.slug == slug)).one() or 0


def _event(n: int, campaign_id: int | None, name: str = "trial.ended") -> nd.Event:
    return nd.Event(name, f"{name}:{n}", f"trial #{n} succeeded", f"body {n}", f"/trials/{n}", campaign_id)


def test_an_event_is_written_once_for_each_destination_that_follows_it(engine):
    kimi, other = _campaign_id(engine, "kimi"), _campaign_id(engine, "other")
    board_wide = _target(engine, "json://127.0.0.1:9/a", ["trial.ended"])
    kimi_only = _target(engine, "json://127.0.0.1:9/b", ["trial.ended", "runner.lost"], campaign="kimi")
    _target(engine, "json://127.0.0.1:9/c", ["runner.lost"])  # follows another event
    with session_scope(engine) as session:
        assert nd.record(session, _event(1, kimi)) == 2
        assert nd.record(session, _event(1, kimi)) == 0  # the same event again: deduplicated
        assert nd.record(session, _event(2, other)) == 1  # only the board-wide one
    with session_scope(engine, write=False) as session:
        rows = session.exec(select(NotificationOutbox.target_id, NotificationOutbox.dedupe_key)).all()
    assert sorted(rows) == sorted(
        [(board_wide, "trial.ended:1"), (kimi_only, "trial.ended:1"), (board_wide, "trial.ended:2")]
    )


def test_a_burst_goes_as_one_digest_and_the_next_waits_for_the_coalescing_window(engine):
    target = _target(engine, "json://127.0.0.1:9/a", ["trial.ended"])
    with session_scope(engine) as session:
        for n in range(100):
            nd.record(session, _event(n, None))
    now = utcnow()
    with session_scope(engine) as session:
        messages = nd.claim_due(session, BASE, now)
    assert len(messages) == 1 and len(messages[0].row_ids) == 100
    assert messages[0].title == "Campaign Board: 100 events"
    assert "100 events: 100 trial.ended" in messages[0].body and "... and 60 more" in messages[0].body
    assert f"{BASE}/trials/0" in messages[0].body
    with session_scope(engine) as session:
        nd.settle(session, messages[0], None, now)
        nd.record(session, _event(500, None))
        assert nd.claim_due(session, BASE, now + timedelta(seconds=nd.COALESCE_S / 2)) == []  # inside the window
    with session_scope(engine) as session:
        later = nd.claim_due(session, BASE, now + timedelta(seconds=nd.COALESCE_S + 0.1))
    assert [m.target_id for m in later] == [target] and later[0].title == "trial #500 succeeded"
    assert later[0].body == f"body 500\n{BASE}/trials/500"


def test_a_failed_send_is_retried_with_backoff_then_given_up_and_its_error_holds_no_url(engine):
    _target(engine, "json://user:hunter2@127.0.0.1:9/a", ["trial.ended"])
    with session_scope(engine) as session:
        nd.record(session, _event(1, None))
    now = utcnow()
    for attempt in range(1, nd.MAX_ATTEMPTS + 1):
        with session_scope(engine) as session:
            assert nd.claim_due(session, BASE, now - timedelta(seconds=1)) == []  # not due before its time
            (message,) = nd.claim_due(session, BASE, now)
            nd.settle(session, message, "POST to json://user:hunter2@127.0.0.1:9/a failed: 500", now)
        with session_scope(engine, write=False) as session:
            row = session.exec(select(NotificationOutbox)).one()
        assert row.attempts == attempt and "hunter2" not in row.last_error and "json://…" in row.last_error
        if attempt < nd.MAX_ATTEMPTS:
            assert row.state == DeliveryState.retrying
            assert (
                row.next_attempt_at.replace(tzinfo=None) - now.replace(tzinfo=None)
            ).total_seconds() == pytest.approx(nd.backoff_s(attempt), abs=0.01)
            now = now + timedelta(seconds=nd.backoff_s(attempt))
        else:
            assert row.state == DeliveryState.failed
    assert [nd.backoff_s(n) for n in (1, 2, 3, 9)] == [2.0, 4.0, 8.0, 300.0]


def test_claims_of_a_server_that_died_go_back_to_pending(engine):
    _target(engine, "json://127.0.0.1:9/a", ["trial.ended"])
    with session_scope(engine) as session:
        nd.record(session, _event(1, None))
        nd.claim_due(session, BASE)  # claimed, never settled: the server was killed mid-send
    with session_scope(engine) as session:
        assert nd.requeue_claims(session, older_than_s=3600) == 0  # a fresh claim is not stale
        assert nd.requeue_claims(session) == 1
    with session_scope(engine) as session:
        (message,) = nd.claim_due(session, BASE, utcnow() + timedelta(seconds=nd.COALESCE_S + 1))
        assert len(message.row_ids) == 1


def test_urls_are_redacted_and_refused_when_apprise_does_not_know_them():
    assert nd.redact("json://user:hunter2@127.0.0.1:8080/hook?token=s3cret") == "json://user:****@127.0.0.1:8080/hook"
    slack = nd.redact("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#ops")
    assert "TIiajkdnlazkcOXrIdevi7FQ" not in slack and "A1BRTD4JD" not in slack
    assert nd.redact("json://hooks.example/services/0123456789abcdef") == "json://hooks.example/services/0...f"
    with pytest.raises(Invalid, match="not a notification URL"):
        nd.redact("bogus://x")


def test_events_are_checked(engine):
    with session_scope(engine) as session:
        with pytest.raises(Invalid, match="unknown event 'trial.started'"):
            nd.create_target(session, "json://127.0.0.1:9/a", ["trial.started"], campaign=None, actor="ada")
        with pytest.raises(Invalid, match="pick at least one event"):
            nd.create_target(session, "json://127.0.0.1:9/a", [" "], campaign=None, actor="ada")


def test_a_trial_that_ends_tells_trial_ended_and_the_last_one_queue_drained(engine):
    _target(engine, "json://127.0.0.1:9/a", ["trial.ended", "queue.drained"], campaign="kimi")
    kimi = _campaign_id(engine, "kimi")
    with session_scope(engine) as session:
        approaches = [Approach(campaign_id=kimi, key=k, title=k.upper(), position=i) for i, k in enumerate(("a", "b"))]
        session.add_all(approaches)
        runner = Runner(name="node-1", token_hash="x")
        session.add(runner)
        session.flush()
        first, second = (create_trial(session, a, runner, "ada") for a in approaches)
        ids = first.id, second.id
    with session_scope(engine) as session:
        end_trial(session, session.get_one(Trial, ids[0]), TrialState.succeeded)
    with session_scope(engine) as session:
        assert [r.event for r in session.exec(select(NotificationOutbox))] == ["trial.ended"]
        end_trial(session, session.get_one(Trial, ids[1]), TrialState.failed)
    with session_scope(engine, write=False) as session:
        rows = session.exec(select(NotificationOutbox).order_by(col(NotificationOutbox.id))).all()
    assert [r.event for r in rows] == ["trial.ended", "trial.ended", "queue.drained"]
    assert rows[1].title == f"b: trial #{ids[1]} failed" and rows[1].link == f"/trials/{ids[1]}"
    assert "Stack: unknown stack" in rows[1].body
    # The proposed verdict the trial page shows (app/domain/proposals.py), on success and on failure alike.
    assert all("\nProposed verdict: " in r.body for r in rows[:2]), [r.body for r in rows]


def test_a_thousand_events_in_a_minute_are_at_most_ten_messages(engine):
    _target(engine, "json://127.0.0.1:9/a", ["trial.ended"])
    start = utcnow()
    messages = 0  # in the first minute
    for tick in range(140):  # the notifier's passes, every 0.5 s, the events arriving over the first 56 s
        now = start + timedelta(seconds=tick * 0.5)
        with session_scope(engine) as session:
            for n in range(tick * 9, min(1000, (tick + 1) * 9)):
                nd.record(session, _event(n, None))
            for message in nd.claim_due(session, BASE, now):
                nd.settle(session, message, None, now)
                messages += tick * 0.5 < 60
    with session_scope(engine, write=False) as session:
        states = {r.state for r in session.exec(select(NotificationOutbox))}
        assert session.exec(select(NotificationOutbox)).all().__len__() == 1000
    assert messages <= 10 and states == {DeliveryState.sent}


def test_a_verdict_that_waits_past_the_destinations_hours_is_told_once(engine):
    kimi = _campaign_id(engine, "kimi")
    with session_scope(engine) as session:
        chosen = session.exec(select(Campaign).where(Campaign.slug == "kimi")).one()
        nd.create_target(
            session, "json://127.0.0.1:9/a", ["verdict.waiting"], campaign=chosen, actor="ada", waiting_hours=2
        )
        approach = Approach(campaign_id=kimi, key="symm", title="Symm", position=1)
        runner = Runner(name="node-1", token_hash="x")
        session.add_all([approach, runner])
        session.flush()
        trial = create_trial(session, approach, runner, "ada")
        end_trial(session, trial, TrialState.succeeded)
        trial.finished_at = utcnow() - timedelta(hours=3)
        session.add(trial)
    with session_scope(engine) as session:
        assert session.get_one(Approach, approach.id).pending_trial_id == trial.id
        assert nd.waiting_verdicts(session, utcnow() - timedelta(hours=2)) == 0  # an hour in: not yet
        assert nd.waiting_verdicts(session) == 1
        assert nd.waiting_verdicts(session) == 0  # told once
        (row,) = session.exec(select(NotificationOutbox).where(NotificationOutbox.event == "verdict.waiting")).all()
    assert row.title == "kimi/symm: a verdict has waited 3 h" and row.link == f"/trials/{trial.id}"


def test_a_runner_that_goes_silent_is_told_as_lost_with_its_trials(engine):
    from app.domain.trials import sweep_lost

    _target(engine, "json://127.0.0.1:9/a", ["runner.lost"])
    kimi = _campaign_id(engine, "kimi")
    with session_scope(engine) as session:
        approach = Approach(campaign_id=kimi, key="symm", title="Symm", position=1)
        runner = Runner(name="node-9", token_hash="x", connected=True)
        session.add_all([approach, runner])
        session.flush()
        trial = create_trial(session, approach, runner, "ada")
        ids = trial.id or 0, runner.id or 0
    with session_scope(engine) as session:
        lost, silent = sweep_lost(session, 4.0, {ids[1]: utcnow() - timedelta(seconds=60)})
    assert [t.id for t in lost] == [ids[0]] and silent == [ids[1]]
    with session_scope(engine, write=False) as session:
        (row,) = session.exec(select(NotificationOutbox)).all()
    assert row.event == "runner.lost" and row.title == "Runner node-9 lost" and f"#{ids[0]}" in row.body
