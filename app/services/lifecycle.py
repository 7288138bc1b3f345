"""A campaign's lifecycle steps (app/domain/lifecycle.py): one transaction, then the Cancel pushed to the
runners of the trials an archive cancelled, the deleted campaign's artifact files removed, and open pages told."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from sqlmodel import Session

from app.domain import artifacts as store_domain
from app.domain import lifecycle, trial_reads
from app.domain.campaigns import get_campaign
from app.models import CampaignEvent
from app.schemas import CampaignRename
from app.services import events
from app.state import app_state


async def rename(app: FastAPI, slug: str, data: CampaignRename, actor: str) -> CampaignEvent:
    def work(session: Session) -> CampaignEvent:
        return lifecycle.rename(session, get_campaign(session, slug), data, actor)

    event = await app_state(app).db.run_in_tx(work)
    events.publish(app, events.campaign(event.campaign_id))
    return event


async def archive(app: FastAPI, slug: str, actor: str, *, cancel_active: bool = False) -> lifecycle.Archived:
    def work(session: Session) -> lifecycle.Archived:
        return lifecycle.archive(session, get_campaign(session, slug), actor, cancel_active=cancel_active)

    done = await app_state(app).db.run_in_tx(work)
    hub = app_state(app).hub
    for runner_id, message in done.messages:
        await hub.send_to_runner(runner_id, message)
    for trial in done.cancelled:
        hub.publish_state(trial.id or 0, trial_reads.trial_view(trial))
    events.publish(
        app, events.campaign(done.event.campaign_id), *(t for trial in done.cancelled for t in events.of_trial(trial))
    )
    return done


async def restore(app: FastAPI, slug: str, actor: str) -> CampaignEvent:
    def work(session: Session) -> CampaignEvent:
        return lifecycle.restore(session, get_campaign(session, slug), actor)

    event = await app_state(app).db.run_in_tx(work)
    events.publish(app, events.campaign(event.campaign_id))
    return event


async def delete(app: FastAPI, slug: str, confirm: str, actor: str) -> lifecycle.Deleted:
    """Delete from the archive; the artifact files no other campaign's rows refer to go after the commit."""
    campaign_id: list[int] = []

    def work(session: Session) -> lifecycle.Deleted:
        campaign = get_campaign(session, slug)
        campaign_id.append(campaign.id or 0)
        return lifecycle.delete(session, campaign, confirm, actor)

    done = await app_state(app).db.run_in_tx(work)
    store = store_domain.store_for(app_state(app).settings.data_dir)
    for sha in done.blobs:
        await asyncio.to_thread(store.delete, sha)
    events.publish(app, events.campaign(campaign_id[0]))
    return done
