"""The queue: trials waiting for a free runner.

"Run next candidate" and "Run this approach" queue a trial (state queued, no runner, no attempt:
scheduling.create_trial without a runner) when connected runners can run it but every one of them is
busy; when no connected runner could run it they refuse with the reason, as before. A queued trial
starts (`start_queued`) when a runner frees up: a trial of its ends, or it connects / reconnects.

Order: within a campaign by priority (the approach's position), then by when it was queued; across
campaigns, the campaign whose oldest queued trial waits longest goes first (positions of two campaigns
say nothing about each other, and no campaign starves another). A runner takes the first queued trial
whose requirements it meets, so a trial no free runner can run does not hold up those behind it.

Pinned trials: a trial with `pinned_runner_id` (a replay's, app/domain/replay.py) waits for that runner
only: another runner skips it. Its `runner_id` stays unset until that runner takes it (`start_queued`),
like any queued trial, so `scheduling.reconcile` never sees it before it is dispatched. Within its
campaign a replay's trials go first, in the replay's own order (the payoff order it was queued in).

Locks on PostgreSQL: `start_queued` locks the runner row, then the queued trial's row, both
FOR NO KEY UPDATE (an insert that references them, such as the new attempt, still proceeds); it never
takes the campaign row, and it skips a trial row another transaction holds (SKIP LOCKED): it waits only
for its runner row, holding nothing, so it cannot deadlock with run next (campaign, then runners in id
order) or a cancel (the trial row, `lock_trial`). On SQLite every write transaction is BEGIN IMMEDIATE.
Functions flush, never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from app.domain import scheduling
from app.domain.errors import or_not_found
from app.domain.runners import lock_runner, unmet_requirements
from app.models import ACTIVE_TRIAL_STATES, Approach, Campaign, Trial, TrialState, aware


@dataclass
class QueuedTrial:
    """A trial in the queue as the campaign page and GET /api/campaigns/{slug}/queue show it."""

    position: int  # 1 = the next of this campaign's queued trials to start
    trial: Trial
    approach: Approach
    blocked: str = ""  # why no connected runner can take it now (scheduling.runners_for), else ""

    @property
    def queued_at(self) -> datetime | None:
        return aware(self.trial.created_at)


def _waiting(session: Session, campaign_id: int | None = None) -> list[tuple[Trial, Approach]]:
    """Queued trials with their approaches, in the order they start (see the module's docstring)."""
    query = (
        select(Trial, Approach)
        .join(Approach, col(Approach.id) == col(Trial.approach_id))
        .where(Trial.state == TrialState.queued, col(Trial.runner_id).is_(None))
        .order_by(col(Approach.position), col(Trial.id))
    )
    if campaign_id is not None:
        query = query.where(Trial.campaign_id == campaign_id)
    rows = [(t, a) for t, a in session.exec(query)]
    oldest: dict[int, int] = {}
    for trial, _ in rows:
        oldest[trial.campaign_id] = min(oldest.get(trial.campaign_id, trial.id or 0), trial.id or 0)
    # A stable sort keeps position, then id, within each campaign; a replay's trials first, in its order.
    return sorted(
        rows,
        key=lambda row: (
            oldest[row[0].campaign_id],
            (0, row[0].replay_id, row[0].id or 0) if row[0].replay_id is not None else (1, 0, 0),
        ),
    )


def campaign_queue(session: Session, campaign: Campaign) -> list[QueuedTrial]:
    """The campaign's queued trials in the order they will start, each saying when no connected runner can
    take it (it waits until one that can connects; cancel it otherwise)."""
    rows = _waiting(session, campaign.id)
    blocked: dict[int, str] = {}
    for _, approach in rows:
        if approach.id is not None and approach.id not in blocked:
            blocked[approach.id] = scheduling.runners_for(session, approach).reason
    return [QueuedTrial(n, t, a, blocked.get(a.id or 0, "")) for n, (t, a) in enumerate(rows, start=1)]


def lock_trial(session: Session, trial_id: int) -> Trial:
    """The trial with its row locked (PostgreSQL: FOR NO KEY UPDATE) and re-read: a cancel takes it
    before deciding whether the trial is still queued, so it never races `start_queued`."""
    locked = select(Trial).where(Trial.id == trial_id).with_for_update(key_share=True)
    trial = session.exec(locked.execution_options(populate_existing=True)).first()
    return or_not_found(trial, f"No trial #{trial_id}.")


def _lock_if_queued(session: Session, trial_id: int) -> Trial | None:
    """The trial, locked, if it is still queued and no other transaction holds it (it is being started
    on another runner or cancelled)."""
    return session.exec(
        select(Trial)
        .where(Trial.id == trial_id, Trial.state == TrialState.queued, col(Trial.runner_id).is_(None))
        .with_for_update(key_share=True, skip_locked=True)
        .execution_options(populate_existing=True)
    ).first()


def start_queued(session: Session, runner_id: int, *, online: set[int] | None = None) -> scheduling.RunNext | None:
    """Give a runner that may have freed up the first queued trial it can run: a new attempt on it, and
    the Dispatch to push after the commit. None when the runner is busy, offline, revoked, or can run
    nothing in the queue. `online`: ids of runners whose socket this server holds (None: trust
    Runner.connected)."""
    runner = lock_runner(session, runner_id)
    if runner is None or not runner.connected or runner.revoked_at is not None:
        return None
    if online is not None and runner_id not in online:
        return None
    busy = session.exec(
        select(Trial.id).where(Trial.runner_id == runner_id, col(Trial.state).in_(ACTIVE_TRIAL_STATES))
    ).first()
    if busy is not None:
        return None
    for trial, approach in _waiting(session):
        if trial.pinned_runner_id is not None and trial.pinned_runner_id != runner_id:
            continue  # queued for another runner only
        if unmet_requirements(approach.requirements, runner.fingerprint):
            continue
        locked = _lock_if_queued(session, trial.id)  # type: ignore[arg-type]
        if locked is None:
            continue
        locked.fingerprint = runner.fingerprint
        scheduling.new_attempt(session, locked, runner)
        return scheduling.RunNext(
            trial=locked,
            approach=approach,
            runner=runner,
            dispatch=scheduling.dispatch_message(locked, approach.key, approach.requirements),
        )
    return None
