"""Inventory rules: transitions, reasons, history, priority order. On SQLite and PostgreSQL."""

import pytest
from sqlmodel import Session

from app.db import session_scope
from app.domain import campaigns
from app.domain.errors import Conflict, Invalid, NotFound
from app.schemas import ApproachCreate, CampaignCreate


@pytest.fixture
def campaign_slug(engine):
    with session_scope(engine) as s:
        c = campaigns.create_campaign(s, CampaignCreate(slug="c", name="C"))
        for key in ("a", "b", "c", "d"):
            campaigns.add_approach(s, c, ApproachCreate(key=key, title=key.upper()), "tester")
    return "c"


def _keys(s: Session, slug: str) -> list[str]:
    return [a.key for a in campaigns.approaches(s, campaigns.get_campaign(s, slug))]


def test_new_approaches_go_last_in_priority(engine, campaign_slug):
    with session_scope(engine) as s:
        assert _keys(s, "c") == ["a", "b", "c", "d"]
        assert [a.position for a in campaigns.approaches(s, campaigns.get_campaign(s, "c"))] == [1, 2, 3, 4]


@pytest.mark.both_databases  # renumbering positions in one flush
def test_move_renumbers_densely(engine, campaign_slug):
    with session_scope(engine) as s:
        c = campaigns.get_campaign(s, "c")
        campaigns.move_approach(s, c, campaigns.get_approach(s, c, "d"), 1)
    with session_scope(engine) as s:
        assert _keys(s, "c") == ["d", "a", "b", "c"]
        c = campaigns.get_campaign(s, "c")
        campaigns.move_approach(s, c, campaigns.get_approach(s, c, "d"), 99)  # past the end: last
        assert _keys(s, "c") == ["a", "b", "c", "d"]
        assert [a.position for a in campaigns.approaches(s, c)] == [1, 2, 3, 4]


@pytest.mark.parametrize("status", ["dead_end", "deferred"])
def test_verdicts_need_a_reason(engine, campaign_slug, status):
    with session_scope(engine) as s:
        a = campaigns.get_approach(s, campaigns.get_campaign(s, "c"), "a")
        with pytest.raises(Invalid) as exc:
            campaigns.change_status(s, a, status, "   ", "tester")
        assert exc.value.field == "reason"
        assert a.status == "untested"


def test_status_change_is_kept_as_history(engine, campaign_slug):
    with session_scope(engine) as s:
        a = campaigns.get_approach(s, campaigns.get_campaign(s, "c"), "a")
        campaigns.change_status(s, a, "dead_end", "KeyError: 12 at startup", "alice")
        campaigns.change_status(s, a, "untested", "new torch, try again", "bob")
    with session_scope(engine) as s:
        a = campaigns.get_approach(s, campaigns.get_campaign(s, "c"), "a")
        rows = campaigns.history(s, a)
        assert [(h.from_status, h.to_status, h.actor) for h in rows[:2]] == [
            ("dead_end", "untested", "bob"),
            ("untested", "dead_end", "alice"),
        ]
        assert rows[1].reason == "KeyError: 12 at startup"
        assert a.status == "untested" and a.reason == "new torch, try again"


def test_queued_and_running_are_no_status(engine, campaign_slug):
    # What a trial is doing is its activity, shown beside the status; nobody sets it as one.
    with session_scope(engine) as s:
        a = campaigns.get_approach(s, campaigns.get_campaign(s, "c"), "a")
        for status in ("queued", "running"):
            with pytest.raises(Invalid, match="what a trial is doing"):
                campaigns.change_status(s, a, status, "", "tester")
        assert a.status == "untested"


def test_same_status_is_refused(engine, campaign_slug):
    # A conflict with the approach's state (409), not a bad value: the status is one a person may set.
    with session_scope(engine) as s:
        a = campaigns.get_approach(s, campaigns.get_campaign(s, "c"), "a")
        with pytest.raises(Conflict):
            campaigns.change_status(s, a, "untested", "", "tester")


@pytest.mark.both_databases  # the unique key and its error
def test_duplicate_keys_and_missing_things(engine, campaign_slug):
    with session_scope(engine) as s:
        c = campaigns.get_campaign(s, "c")
        with pytest.raises(Conflict):
            campaigns.add_approach(s, c, ApproachCreate(key="a", title="again"), "tester")
        with pytest.raises(Conflict):
            campaigns.create_campaign(s, CampaignCreate(slug="c", name="again"))
        with pytest.raises(NotFound):
            campaigns.get_approach(s, c, "nope")
        with pytest.raises(NotFound):
            campaigns.get_campaign(s, "nope")


@pytest.mark.both_databases  # renumbering positions in one flush
def test_delete_keeps_positions_dense(engine, campaign_slug):
    with session_scope(engine) as s:
        c = campaigns.get_campaign(s, "c")
        campaigns.delete_approach(s, c, campaigns.get_approach(s, c, "b"))
    with session_scope(engine) as s:
        rows = campaigns.approaches(s, campaigns.get_campaign(s, "c"))
        assert [(a.key, a.position) for a in rows] == [("a", 1), ("c", 2), ("d", 3)]
