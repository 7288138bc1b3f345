"""What "Run next candidate" says when it starts nothing (issue 32 item 15: an empty campaign said "nothing
untested left", as if it had run everything)."""

from __future__ import annotations

from app.db import session_scope
from app.domain import campaigns, scheduling
from app.schemas import ApproachCreate, CampaignCreate
from app.state import app_state


def test_an_empty_campaign_says_it_has_no_approaches_yet(app):
    with session_scope(app_state(app).engine) as session:
        campaign = campaigns.create_campaign(session, CampaignCreate(slug="empty", name="Empty"))
        assert (
            scheduling.run_next(session, campaign, "ada").reason == "this campaign has no approaches yet: add one first"
        )
        approach = campaigns.add_approach(session, campaign, ApproachCreate(key="a", title="A"), actor="ada")
        campaigns.change_status(session, approach, "dead_end", "tried", "ada")
        assert scheduling.run_next(session, campaign, "ada").reason == "nothing untested left"
