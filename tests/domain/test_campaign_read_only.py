"""The read-only rule of an archived campaign (app/domain/read_only.py) on SQLite and PostgreSQL: the domain's
writes are refused whatever calls them; a runner's report of a trial that ran when the campaign was archived is
recorded; restore makes it writable again."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns, lifecycle, read_only, sharing, trials
from app.domain.errors import Conflict
from app.models import Campaign, Trial, TrialState
from app.protocol.messages import Finished
from app.schemas import ApproachCreate, CampaignRename, CampaignUpdate
from tests.support.seeded_trials import seed_trials

pytestmark = pytest.mark.both_databases  # the read-only flush rule


def _c(s) -> Campaign:
    return s.exec(select(Campaign).where(Campaign.slug == "c")).one()


def test_archive_cancels_in_the_same_step_and_the_runner_report_is_still_recorded(engine):
    seeded = seed_trials(engine)
    running = seeded.trial_ids[-1]
    with pytest.raises(Conflict, match="queued or running"), session_scope(engine) as s:
        lifecycle.archive(s, _c(s), "ada")
    with session_scope(engine) as s:
        done = lifecycle.archive(s, _c(s), "ada", cancel_active=True)
        assert [t.id for t in done.cancelled] == [running] and [m.trial_id for _, m in done.messages] == [running]
    # The runner reports the cancelled trial's end: recorded (its transaction records what runners report).
    with session_scope(engine) as s:
        read_only.recording_runs(s)
        trial = s.get(Trial, running)
        assert trial is not None
        trials.finish(s, trial, Finished(trial_id=running, attempt_id=trial.attempt_id or "", outcome="cancelled"))
    with session_scope(engine, write=False) as s:
        assert s.get(Trial, running).state == TrialState.cancelled  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "write",
    [
        lambda s, c: campaigns.add_approach(s, c, ApproachCreate(key="z", title="Z"), "ada"),
        lambda s, c: campaigns.update_campaign(s, c, CampaignUpdate.model_validate({"name": "New name"})),
        lambda s, c: campaigns.change_status(s, campaigns.get_approach(s, c, "a"), "dead_end", "no", "ada"),
        lambda s, c: campaigns.move_approach(s, c, campaigns.get_approach(s, c, "b"), 1),
        lambda s, c: sharing.create_share_link(s, c, "x", "ada"),
        lambda s, c: lifecycle.rename(s, c, CampaignRename(slug="c-new"), "ada"),
        lambda s, c: campaigns.delete_approach(s, c, campaigns.get_approach(s, c, "a"), delete_evidence=True),
    ],
)
def test_every_domain_write_to_an_archived_campaign_is_refused(engine, write):
    seed_trials(engine)
    with session_scope(engine) as s:
        lifecycle.archive(s, _c(s), "ada", cancel_active=True)
    with pytest.raises(Conflict, match="archived, so it is read-only"), session_scope(engine) as s:
        write(s, _c(s))
        s.flush()
    with session_scope(engine) as s:
        lifecycle.restore(s, _c(s), "ada")
    with session_scope(engine) as s:
        write(s, _c(s))  # writable again
        s.flush()
