"""Run next candidate and cancel: one transaction, then the push to the runner and the publish to viewers."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from sqlmodel import Session

from app.domain import scheduling, trial_reads, trials
from app.domain.inventory import get_approach, get_campaign
from app.live import get_hub, run_in_tx
from app.models import Trial
from app.services import events


async def start_next(app: FastAPI, slug: str, actor: str, approach_key: str | None = None) -> scheduling.RunNext:
    """Run next candidate (or, with `approach_key`, "run this approach"): one transaction (serialized
    per campaign), then push the Dispatch."""
    hub = get_hub(app)

    def work(session: Session) -> scheduling.RunNext:
        campaign = get_campaign(session, slug)
        if approach_key is not None:
            approach = get_approach(session, campaign, approach_key)
            return scheduling.run_approach(session, campaign, approach, actor, online=hub.online())
        return scheduling.run_next(session, campaign, actor, online=hub.online())

    with hub.attempts.share() as validating:
        result: scheduling.RunNext = await run_in_tx(app.state.engine, work)
        if validating and result.trial is not None and result.runner is not None and result.dispatch is not None:
            hub.attempts.remember(result.trial.id, result.dispatch.attempt_id, result.runner.id)  # type: ignore[arg-type]
    if result.trial is not None and result.runner is not None and result.dispatch is not None:
        result.dispatch.approach_key = result.approach.key if result.approach else ""
        # If the push fails (the socket just closed), the runner gets it again when it reconnects
        # (scheduling.reconcile), or the trial is lost after runner_lost_after_s.
        await hub.send_to_runner(result.runner.id, result.dispatch)  # type: ignore[arg-type]
        hub.publish_state(result.trial.id, trial_reads.trial_view(result.trial))  # type: ignore[arg-type]
        events.publish(app, *events.of_trial(result.trial))
    return result


async def cancel(app: FastAPI, trial_id: int, actor: str) -> Trial:
    """Ask a trial to stop: Cancel pushed to its runner, which reports Finished(cancelled)."""

    def work(session: Session) -> tuple[Trial, Any]:
        trial = trials.get_trial(session, trial_id)
        return trial, trials.request_cancel(session, trial, actor)

    trial, message = await run_in_tx(app.state.engine, work)
    hub = get_hub(app)
    if message is not None and trial.runner_id is not None:
        await hub.send_to_runner(trial.runner_id, message)
    hub.publish_state(trial.id, trial_reads.trial_view(trial))
    events.publish(app, *events.of_trial(trial))
    return trial
