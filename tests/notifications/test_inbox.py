"""Issue 45 item 6 on SQLite and PostgreSQL: one record of each event feeds the destinations' outbox and the
inboxes of the people who watch its campaign or approach; an event nobody's destination follows still
reaches a watcher; read marks are each person's own; the users reached are left for the page feed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain import inbox
from app.domain import notifications as nd
from app.domain.errors import Invalid, NotFound
from app.domain.scheduling import create_trial
from app.domain.trials import end_trial
from app.domain.users import create_user
from app.models import (
    Approach,
    Campaign,
    EventRecord,
    InboxItem,
    NotificationOutbox,
    Role,
    Runner,
    Trial,
    TrialState,
    User,
    utcnow,
)

pytestmark = pytest.mark.both_databases  # ON CONFLICT DO NOTHING per dialect, the inbox's bulk insert and unique key


def _setup(engine) -> dict[str, int]:
    with session_scope(engine) as s:
        kimi, other = Campaign(slug="kimi", name="Kimi"), Campaign(slug="other", name="Other")
        s.add_all([kimi, other])
        s.flush()
        a = Approach(campaign_id=kimi.id, key="symm", title="Symm", position=1)  # type: ignore[arg-type]
        b = Approach(campaign_id=kimi.id, key="nccl", title="NCCL", position=2)  # type: ignore[arg-type]
        runner = Runner(name="node-1", token_hash="x")
        s.add_all([a, b, runner])
        ada, bob, cy = (create_user(s, n, Role.viewer) for n in ("ada", "bob", "cy"))
        s.flush()
        inbox.watch(s, ada.id, kimi)  # the whole campaign
        inbox.watch(s, bob.id, kimi, b)  # one approach of it
        inbox.watch(s, cy.id, other)
        return {"ada": ada.id, "bob": bob.id, "cy": cy.id, "a": a.id, "b": b.id, "runner": runner.id}  # type: ignore[dict-item]


def _end(engine, approach_id: int, runner_id: int, state=TrialState.succeeded) -> tuple[int, set[int]]:
    with session_scope(engine) as s:
        trial = create_trial(s, s.get_one(Approach, approach_id), s.get_one(Runner, runner_id), "ada")
        end_trial(s, trial, state)
        return trial.id or 0, set(s.info.get(inbox.INBOX_USERS, set()))


def test_a_trial_end_reaches_the_watchers_inboxes_without_any_destination(engine):
    ids = _setup(engine)
    trial_a, reached = _end(engine, ids["a"], ids["runner"])
    assert reached == {ids["ada"]}  # the campaign's watcher; bob watches the other approach, cy another campaign
    trial_b, reached = _end(engine, ids["b"], ids["runner"], TrialState.failed)
    assert reached == {ids["ada"], ids["bob"]}
    with session_scope(engine, write=False) as s:
        # one record of each event, whoever follows it: no destination exists, and the outbox is empty
        records = s.exec(select(EventRecord).where(EventRecord.event == "trial.ended")).all()
        assert sorted(r.dedupe_key for r in records) == [f"trial.ended:{trial_a}", f"trial.ended:{trial_b}"]
        assert s.exec(select(NotificationOutbox)).first() is None
        assert inbox.unread_count(s, ids["ada"]) == 2 and inbox.unread_count(s, ids["bob"]) == 1
        assert inbox.unread_count(s, ids["cy"]) == 0
        (item,) = inbox.items(s, ids["bob"])
        assert item.event.link == f"/trials/{trial_b}" and "failed" in item.event.title
        # queue.drained is no inbox event: recorded, in nobody's inbox
        assert s.exec(select(EventRecord).where(EventRecord.event == "queue.drained")).first() is not None
        assert {e.event for e in (i.event for i in inbox.items(s, ids["ada"]))} == {"trial.ended"}


def test_the_outbox_and_the_inbox_share_the_one_record(engine):
    ids = _setup(engine)
    with session_scope(engine) as s:
        nd.create_target(s, "json://127.0.0.1:9/a", ["trial.ended"], campaign=None, actor="ada")
    trial, _ = _end(engine, ids["a"], ids["runner"])
    with session_scope(engine, write=False) as s:
        record = s.exec(select(EventRecord).where(EventRecord.dedupe_key == f"trial.ended:{trial}")).one()
        (outbox,) = s.exec(select(NotificationOutbox).where(NotificationOutbox.event == "trial.ended")).all()
        (item,) = s.exec(select(InboxItem).where(InboxItem.user_id == ids["ada"])).all()
        assert outbox.event_id == record.id == item.event_id
        # the same event recorded again is neither a second record nor a second inbox item
        again = nd.Event("trial.ended", record.dedupe_key, "x", "y", "/trials/1", record.campaign_id, ids["a"])
    with session_scope(engine) as s:
        assert nd.record(s, again) == 0
        assert len(s.exec(select(EventRecord).where(EventRecord.dedupe_key == record.dedupe_key)).all()) == 1
        assert inbox.unread_count(s, ids["ada"]) == 1


def test_read_marks_are_each_person_s_own(engine):
    ids = _setup(engine)
    _end(engine, ids["b"], ids["runner"])
    _end(engine, ids["b"], ids["runner"])
    with session_scope(engine) as s:
        first, second = inbox.items(s, ids["ada"])
        bob_item = inbox.items(s, ids["bob"])[0]
        with pytest.raises(NotFound):
            inbox.mark_read(s, ids["ada"], bob_item.id)  # not hers
        assert inbox.mark_read(s, ids["ada"], first.id) == 1
        assert s.info[inbox.INBOX_USERS] == {ids["ada"]}
        assert inbox.unread_count(s, ids["ada"]) == 1 and inbox.unread_count(s, ids["bob"]) == 2
        assert [i.id for i in inbox.items(s, ids["ada"], unread_only=True)] == [second.id]
        assert inbox.mark_read(s, ids["bob"]) == 2 and inbox.unread_count(s, ids["bob"]) == 0
        with pytest.raises(Invalid):
            inbox.watch(s, None, s.get_one(Campaign, s.get_one(Approach, ids["a"]).campaign_id))


def test_a_waiting_verdict_reaches_the_watchers_after_four_hours(engine):
    ids = _setup(engine)
    trial, _ = _end(engine, ids["a"], ids["runner"])
    with session_scope(engine) as s:
        t = s.get_one(Trial, trial)
        t.finished_at = utcnow() - timedelta(hours=5)
        s.add(t)
    with session_scope(engine) as s:
        assert s.get_one(Approach, ids["a"]).pending_trial_id == trial
        assert nd._follows(s, "verdict.waiting")  # a watcher follows it: the notifier checks
        nd.waiting_verdicts(s, utcnow() - timedelta(hours=2))  # three hours in: not yet
        assert not s.exec(select(EventRecord).where(EventRecord.event == "verdict.waiting")).first()
        nd.waiting_verdicts(s)
        nd.waiting_verdicts(s)  # told once
        items = inbox.items(s, ids["ada"])
        assert [i.event.event for i in items].count("verdict.waiting") == 1
        assert inbox.items(s, ids["bob"]) == []  # bob watches the other approach
        assert s.exec(select(NotificationOutbox)).first() is None


def test_unwatching_stops_new_items_and_a_disabled_person_gets_none(engine):
    ids = _setup(engine)
    with session_scope(engine) as s:
        kimi = s.exec(select(Campaign).where(Campaign.slug == "kimi")).one()
        assert inbox.unwatch(s, ids["ada"], kimi) and not inbox.unwatch(s, ids["ada"], kimi)
        assert inbox.watch(s, ids["bob"], kimi, s.get_one(Approach, ids["b"])).id  # again: the same watch
        bob = s.get_one(User, ids["bob"])
        bob.disabled_at = utcnow()
        s.add(bob)
    _, reached = _end(engine, ids["b"], ids["runner"])
    assert reached == set()
    with session_scope(engine, write=False) as s:
        assert s.exec(select(InboxItem).where(col(InboxItem.user_id).in_([ids["ada"], ids["bob"]]))).first() is None
