"""Run next candidate, run this approach, the queue and cancel: one transaction, then the push to the runner
and the publish to viewers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from sqlmodel import Session

from app.domain import proposals, queue, repeats, replay, scheduling, trial_reads, trials
from app.domain.campaigns import get_approach, get_campaign
from app.models import Trial
from app.services import events
from app.state import app_state


async def start_next(app: FastAPI, slug: str, actor: str, approach_key: str | None = None) -> scheduling.RunNext:
    """Run next candidate (or, with `approach_key`, "run this approach"): one transaction (serialized
    per campaign), then push the Dispatch; or the trial waits in the queue (app/domain/queue.py)."""
    hub = app_state(app).hub

    def work(session: Session) -> scheduling.RunNext:
        campaign = get_campaign(session, slug)
        if approach_key is not None:
            approach = get_approach(session, campaign, approach_key)
            return scheduling.run_approach(session, campaign, approach, actor, online=hub.online())
        return scheduling.run_next(session, campaign, actor, online=hub.online())

    result = await _dispatch(app, work)
    assert result is not None  # run_next / run_approach always answer
    if result.queued:
        # A runner that freed up (or was welcomed) while this transaction ran looked at the queue before
        # this trial was in it: now that it is, each connected runner looks again (idle ones take work).
        await start_queued_anywhere(app)
    return result


async def start_queued(app: FastAPI, runner_id: int) -> scheduling.RunNext | None:
    """A runner may have freed up (a trial of its ended, or it was welcomed): it takes the first queued
    trial it can run, if any (one transaction, then the push and the publish)."""
    hub = app_state(app).hub
    settled: list[int] = []

    def work(session: Session) -> scheduling.RunNext | None:
        # Settles whose round ended queue their next round first (or end), so this runner can take it.
        settled[:] = repeats.advance_open(session)
        settled.extend(replay.advance_open(session))  # replays whose trials have all ended finish
        return queue.start_queued(session, runner_id, online=hub.online())

    result = await _dispatch(app, work)
    if settled:
        events.publish(app, *(events.campaign(c) for c in dict.fromkeys(settled)))
    return result


async def start_settle(
    app: FastAPI,
    slug: str,
    a_key: str,
    b_key: str | None,
    budget: int,
    actor: str,
    metric: str | None = None,
    *,
    taking: int | None = None,
) -> tuple[Any, list[Trial]]:
    """ "Settle A vs B" (or "Repeat A" without b_key): the settle and its first round, queued in one
    transaction; then every connected runner looks at the queue. Its check of what can run counts the runners
    the database holds as connected (a round waits for a busy or reconnecting one; scheduling.can_run: a
    proposal waiting for a person refuses it, as it refuses "Run this"). `taking`: the trial whose waiting
    proposal the person takes as it stands first, in the same transaction (the trial page's "Take the
    proposal and repeat")."""

    def work(session: Session) -> tuple[Any, list[Trial]]:
        campaign = get_campaign(session, slug)
        if taking is not None:
            proposals.take(session, trials.get_trial(session, taking), actor)
        a = get_approach(session, campaign, a_key)
        b = get_approach(session, campaign, b_key) if b_key else None
        return repeats.start(session, campaign, a, b, budget, actor, metric)

    settle, queued = await app_state(app).db.run_in_tx(work)
    for trial in queued:
        events.publish(app, *events.of_trial(trial))
    await start_queued_anywhere(app)
    return settle, queued


async def start_replay(app: FastAPI, slug: str, runner_id: int, actor: str) -> tuple[Any, list[Trial]]:
    """ "Replay on runner R": the replay and its trials, queued for R in one transaction; then R (if
    connected) takes the first (app/domain/replay.py)."""

    def work(session: Session) -> tuple[Any, list[Trial]]:
        return replay.start(session, get_campaign(session, slug), runner_id, actor)

    row, queued = await app_state(app).db.run_in_tx(work)
    events.publish(app, events.campaign(row.campaign_id), *(t for trial in queued for t in events.of_trial(trial)))
    await start_queued_anywhere(app)
    return row, queued


async def cancel_replay(app: FastAPI, slug: str, replay_id: int, actor: str) -> tuple[Any, list[Trial]]:
    """Cancel a replay's queued trials (one transaction), then tell viewers."""

    def work(session: Session) -> tuple[Any, list[Trial]]:
        campaign = get_campaign(session, slug)
        cancelled = replay.cancel(session, campaign, replay_id, actor)
        return replay.get(session, campaign, replay_id), cancelled

    row, cancelled = await app_state(app).db.run_in_tx(work)
    hub = app_state(app).hub
    for trial in cancelled:
        hub.publish_state(trial.id or 0, trial_reads.trial_view(trial))
    events.publish(app, events.campaign(row.campaign_id), *(t for trial in cancelled for t in events.of_trial(trial)))
    return row, cancelled


async def start_queued_anywhere(app: FastAPI) -> None:
    """Each connected runner looks at the queue (a no-op for the busy ones)."""
    for runner_id in sorted(app_state(app).hub.online()):
        await start_queued(app, runner_id)


async def _dispatch(app: FastAPI, work: Callable[[Session], scheduling.RunNext | None]) -> scheduling.RunNext | None:
    """Run `work` in a write transaction; push the Dispatch of the trial it started (if any) to its
    runner and publish the trial's change to viewers (a trial it queued: the publish only)."""
    hub = app_state(app).hub
    with hub.attempts.share() as validating:
        result: scheduling.RunNext | None = await app_state(app).db.run_in_tx(work)
        if validating and result is not None and result.trial is not None and result.runner is not None:
            if result.dispatch is not None:
                hub.attempts.remember(result.dispatch.trial_id, result.dispatch.attempt_id, result.runner.id)  # type: ignore[arg-type]
    if result is None or result.trial is None or result.trial.id is None:
        return result
    if result.runner is not None and result.runner.id is not None and result.dispatch is not None:
        result.dispatch.approach_key = result.approach.key if result.approach else ""
        # If the push fails (the socket just closed), the runner gets it again when it reconnects
        # (scheduling.reconcile), or the trial is lost after runner_lost_after_s.
        await hub.send_to_runner(result.runner.id, result.dispatch)
    hub.publish_state(result.trial.id, trial_reads.trial_view(result.trial))
    events.publish(app, *events.of_trial(result.trial))
    return result


async def cancel(app: FastAPI, trial_id: int, actor: str) -> Trial:
    """Ask a trial to stop: Cancel pushed to its runner, which reports Finished(cancelled). A queued
    trial (no runner yet) ends cancelled here, with no message to any runner."""

    def work(session: Session) -> tuple[Trial, Any]:
        trial = queue.lock_trial(session, trial_id)  # a queued one is not started meanwhile
        return trial, trials.request_cancel(session, trial, actor)

    trial, message = await app_state(app).db.run_in_tx(work)
    hub = app_state(app).hub
    if message is not None and trial.runner_id is not None:
        await hub.send_to_runner(trial.runner_id, message)
    hub.publish_state(trial.id or 0, trial_reads.trial_view(trial))
    events.publish(app, *events.of_trial(trial))
    if trial.runner_id is None:
        # A runner that freed up while this cancel held the queued trial's row skipped it (SKIP LOCKED)
        # and may have found nothing else: it looks at the queue again.
        await start_queued_anywhere(app)
    return trial
