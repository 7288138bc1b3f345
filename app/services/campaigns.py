"""A campaign's writes made from a route on the request session (app/deps.SessionDep): the domain's change,
and the page events it makes, published once the session commits (`events.after_commit`; nothing on a
rollback). Routes call these, never the domain's writes and `after_commit` side by side, so what a change
tells open pages is said once, here, whichever route (HTML or JSON) makes it."""

from __future__ import annotations

from sqlmodel import Session

from app.domain import campaigns, verdicts
from app.domain.campaigns import Evidence
from app.models import Approach, ApproachStatus, Campaign, RunOrder, StatusChange, Trial
from app.schemas import ApproachCreate, ApproachUpdate, CampaignUpdate
from app.services import events


def _approach_changed(session: Session, approach: Approach) -> None:
    events.after_commit(session, events.campaign(approach.campaign_id), events.approach(approach.id))


def update_campaign(session: Session, campaign: Campaign, data: CampaignUpdate) -> Campaign:
    events.after_commit(session, events.campaign(campaign.id))  # its pages show the name and the model inputs
    return campaigns.update_campaign(session, campaign, data)


def add_approach(session: Session, campaign: Campaign, data: ApproachCreate, actor: str) -> Approach:
    events.after_commit(session, events.campaign(campaign.id))
    return campaigns.add_approach(session, campaign, data, actor)


def update_approach(session: Session, approach: Approach, data: ApproachUpdate) -> Approach:
    _approach_changed(session, approach)
    return campaigns.update_approach(session, approach, data)


def change_status(
    session: Session, approach: Approach, to: ApproachStatus | str, reason: str, actor: str
) -> StatusChange:
    _approach_changed(session, approach)
    return campaigns.change_status(session, approach, to, reason, actor)


def move_approach(session: Session, campaign: Campaign, approach: Approach, position: int) -> None:
    events.after_commit(session, events.campaign(campaign.id))
    campaigns.move_approach(session, campaign, approach, position)


def set_run_order(session: Session, campaign: Campaign, order: RunOrder | str) -> None:
    events.after_commit(session, events.campaign(campaign.id))
    campaigns.set_run_order(session, campaign, order)


def archive_approach(session: Session, campaign: Campaign, approach: Approach, actor: str) -> Evidence:
    _approach_changed(session, approach)
    return campaigns.archive_approach(session, campaign, approach, actor)


def restore_approach(session: Session, campaign: Campaign, approach: Approach) -> None:
    _approach_changed(session, approach)
    campaigns.restore_approach(session, campaign, approach)


def delete_approach(
    session: Session, campaign: Campaign, approach: Approach, *, delete_evidence: bool = False
) -> Evidence:
    _approach_changed(session, approach)  # its topics named while the row is there
    return campaigns.delete_approach(session, campaign, approach, delete_evidence=delete_evidence)


def confirm_verdict(
    session: Session,
    approach: Approach,
    trial: Trial,
    status: ApproachStatus | str,
    reason: str,
    components: list[str],
    actor: str,
) -> None:
    events.after_commit(session, *events.of_trial(trial))
    verdicts.confirm(session, approach, trial, status, reason, components, actor)
