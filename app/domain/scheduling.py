"""Scheduling: what runs where. Which approach runs next and on which runner (`run_next`,
`run_approach`), creating a trial and its attempts, the Dispatch message, and what a (re)connecting
runner still holds (`reconcile`).

Each dispatch is an Attempt with its own id; a report naming an attempt that is not its trial's
current one is stale (app/domain/trials.py, which owns every change of a trial's state). Functions
flush, never commit: the caller commits, then pushes the returned protocol messages over the
runner's socket.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.domain import campaigns, planning, read_only, trials, verdicts
from app.domain import runners as runner_domain
from app.domain.runners import unmet_requirements
from app.models import (
    ACTIVE_TRIAL_STATES,
    TERMINAL_TRIAL_STATES,
    Approach,
    ApproachStatus,
    Attempt,
    Campaign,
    Runner,
    Trial,
    TrialState,
    utcnow,
)
from app.protocol.messages import AttemptRef, Dispatch

QUEUED_PHASE = "waiting for a free runner"

# ---- what can run where -----------------------------------------------------------------------


def retest_candidates(session: Session, campaign: Campaign) -> list[Approach]:
    """Approaches whose verdict is bound to a stack component a connected runner now has differently."""
    flags = verdicts.retest_flags(session, campaign)
    if not flags:
        return []
    return list(
        session.exec(
            select(Approach).where(col(Approach.id).in_(flags)).order_by(col(Approach.position), col(Approach.id))
        )
    )


def _being_tried() -> Any:
    """Approaches with a trial queued or running (the trial is their activity; their status stays)."""
    return select(Trial.approach_id).where(col(Trial.state).in_(ACTIVE_TRIAL_STATES))


def candidates(session: Session, campaign: Campaign) -> list[Approach]:
    """Approaches that may run next: untested ones by priority, then those flagged for re-test; each with a
    recipe, none being tried already."""
    untested = list(
        session.exec(
            select(Approach)
            .where(
                Approach.campaign_id == campaign.id,
                Approach.status == ApproachStatus.untested,
                col(Approach.id).not_in(_being_tried()),
            )
            .order_by(col(Approach.position), col(Approach.id))
        )
    )
    # Untested first, then the re-test flags; an approach whose last trial awaits a verdict waits too.
    seen = {a.id for a in untested}
    retest = [a for a in retest_candidates(session, campaign) if a.id not in seen]
    if retest:
        busy = set(session.exec(_being_tried().where(col(Trial.approach_id).in_([a.id for a in retest]))))
        retest = [a for a in retest if a.id not in busy]
    rows = untested + retest
    return [a for a in rows if has_recipe(a) and a.pending_trial_id is None and a.archived_at is None]


def ranking(session: Session, campaign: Campaign) -> list[planning.Ranked]:
    """The candidates, ranked by payoff (app/domain/planning.py): what the ranking page and API show."""
    return planning.payoff_ranking(session, campaign, candidates(session, campaign))


def has_recipe(approach: Approach) -> bool:
    return isinstance(approach.recipe, dict) and bool(approach.recipe.get("kind"))


@dataclass
class RunNext:
    """The outcome of "run next candidate": a started trial, or the reason nothing can run."""

    trial: Trial | None = None
    approach: Approach | None = None
    runner: Runner | None = None
    reason: str = ""
    dispatch: Dispatch | None = None

    @property
    def started(self) -> bool:
        return self.trial is not None and self.dispatch is not None

    @property
    def queued(self) -> bool:
        """A trial was made but waits in the queue for a free runner (app/domain/queue.py)."""
        return self.trial is not None and self.dispatch is None


def lock_campaign(session: Session, campaign: Campaign) -> None:
    """Taken by every way of starting trials (run next, run this, repeat, settle, replay); an archived campaign
    is refused here, before any is looked for (read_only.py would refuse the trial's row anyway)."""
    read_only.check_writable(session, campaign)
    # Serializes "run next" per campaign. SQLite: the write session already holds BEGIN IMMEDIATE.
    # PostgreSQL: FOR NO KEY UPDATE, not FOR UPDATE: rows that reference the campaign (a runner's batch
    # inserting metrics) go on meanwhile, so that batch, holding its runner's row, never waits for this
    # transaction while this one waits for that runner's row (_lock_runners).
    if session.get_bind().dialect.name != "sqlite":
        session.execute(
            sa_select(col(Campaign.id)).where(col(Campaign.id) == campaign.id).with_for_update(key_share=True)
        )


def _start_on_first_idle(session: Session, approach: Approach, runners: list[Runner], actor: str) -> RunNext | None:
    """A trial of the approach on the first of these runners that is still idle once locked, or None."""
    for runner in runners:
        if _lock_runner_idle(session, runner):
            trial = create_trial(session, approach, runner, actor)
            return RunNext(
                trial=trial,
                approach=approach,
                runner=runner,
                dispatch=dispatch_message(trial, requirements=approach.requirements),
            )
    return None


def _lock_runner_idle(session: Session, runner: Runner) -> bool:
    """Lock the runner row, then re-check that it holds no active trial (at most one per runner)."""
    if session.get_bind().dialect.name != "sqlite":
        session.execute(sa_select(col(Runner.id)).where(col(Runner.id) == runner.id).with_for_update(key_share=True))
    busy = session.exec(
        select(Trial.id).where(Trial.runner_id == runner.id, col(Trial.state).in_(ACTIVE_TRIAL_STATES))
    ).first()
    return busy is None


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def run_next(session: Session, campaign: Campaign, actor: str, *, online: set[int] | None = None) -> RunNext:
    """Start the first candidate that some connected, idle runner can run: in the payoff ranking's order
    (app/domain/planning.py), or by priority when a person pinned it (campaign.run_order).

    `online`: ids of runners whose socket this server holds (None: trust Runner.connected).
    """
    lock_campaign(session, campaign)
    session.refresh(campaign)
    queue = planning.run_next_order(session, campaign, candidates(session, campaign))
    if not queue:
        untested = session.exec(
            select(Approach)
            .where(
                Approach.campaign_id == campaign.id,
                Approach.status == ApproachStatus.untested,
                col(Approach.archived_at).is_(None),
                col(Approach.id).not_in(_being_tried()),
            )
            .order_by(col(Approach.position), col(Approach.id))
        ).first()
        waiting = session.exec(
            select(Approach)
            .where(Approach.campaign_id == campaign.id, Approach.pending_trial_id.is_not(None))  # type: ignore[union-attr]
            .order_by(col(Approach.position))
        ).all()
        if waiting:
            names = ", ".join(a.title for a in waiting[:3]) + (" …" if len(waiting) > 3 else "")
            return RunNext(
                reason=f"nothing to run until a verdict is confirmed: {names} "
                f"{'waits' if len(waiting) == 1 else 'wait'} for yours"
            )
        if untested is not None:
            return RunNext(reason=f"nothing to run: the untested approaches have no recipe (next is {untested.title})")
        if session.exec(select(Approach.id).where(Approach.campaign_id == campaign.id)).first() is None:
            return RunNext(reason="this campaign has no approaches yet: add one first")
        return RunNext(reason="nothing untested left")
    connected = _connected_runners(session, online)
    if not connected:
        return RunNext(approach=queue[0], reason="no runner is connected")
    _lock_runners(session, connected)
    busy = runner_domain.active_trials_by_runner(session)
    idle = [r for r in connected if r.id not in busy]
    for approach in queue:
        started = _start_on_first_idle(session, approach, _able_for(approach, idle), actor)
        if started is not None:
            return started
    # No idle runner can run any candidate: the first that a connected (busy) runner can run waits in the queue.
    for approach in queue:
        able = _able_for(approach, connected)
        if able:
            return _start_or_queue(session, approach, able, actor)
    first = queue[0]
    if any(not unmet_requirements(first.requirements, r.fingerprint) for r in connected):
        if not idle:
            return RunNext(approach=first, reason="every runner is busy")
        return RunNext(approach=first, reason=f"next is {first.title}: the runners that can run it are busy")
    fewest = min((unmet_requirements(first.requirements, r.fingerprint) for r in connected), key=len)
    if not idle:
        return RunNext(
            approach=first,
            reason=f"every runner is busy (and next is {first.title}: needs {_join(fewest)}, no runner has them)",
        )
    return RunNext(approach=first, reason=f"next is {first.title}: needs {_join(fewest)}, no runner has them")


def _able_for(approach: Approach, runners: list[Runner]) -> list[Runner]:
    """The runners that meet the approach's requirements; for a re-test, only where the bound stack differs."""
    able = [r for r in runners if not unmet_requirements(approach.requirements, r.fingerprint)]
    if approach.status != ApproachStatus.untested:
        able = [r for r in able if verdicts.retest_reason_on(approach, r.fingerprint)]
    return able


def _start_or_queue(session: Session, approach: Approach, able: list[Runner], actor: str) -> RunNext:
    """Start the approach on the first of `able` that is idle once locked (one may have freed up since it
    was read), else queue a trial of it: it starts when one of them frees up (app/domain/queue.py)."""
    started = _start_on_first_idle(session, approach, able, actor)
    if started is not None:
        return started
    trial = create_trial(session, approach, None, actor)
    names = _join([r.name for r in able])
    return RunNext(
        trial=trial,
        approach=approach,
        reason=f"{approach.title} waits in the queue for a free runner ({names} {'is' if len(able) == 1 else 'are'} busy)",
    )


def _lock_runners(session: Session, runners: list[Runner]) -> None:
    """Lock these runner rows in id order (PostgreSQL: FOR NO KEY UPDATE, so inserts that reference them
    proceed), after the campaign lock: the busy / idle read that follows is then the truth until commit,
    and a runner freeing up meanwhile (app/domain/queue.start_queued locks its row first) sees what this
    transaction queued."""
    if runners and session.get_bind().dialect.name != "sqlite":
        session.execute(
            sa_select(col(Runner.id))
            .where(Runner.id.in_([r.id for r in runners]))  # type: ignore[union-attr]
            .order_by(col(Runner.id))
            .with_for_update(key_share=True)
        ).all()


def _connected_runners(session: Session, online: set[int] | None) -> list[Runner]:
    return [
        r
        for r in session.exec(
            select(Runner)
            .where(
                Runner.connected.is_(True),  # type: ignore[attr-defined]
                col(Runner.revoked_at).is_(None),
            )
            .order_by(col(Runner.id))
        )
        if online is None or r.id in online
    ]


@dataclass(frozen=True)
class CanRun:
    """Whether a trial of an approach may be started or queued now: the connected runners able to run it
    (idle or busy: a busy one takes it from the queue), or why none can."""

    able: list[Runner]
    reason: str = ""


def can_run(
    session: Session,
    approach: Approach,
    *,
    online: set[int] | None = None,
    runner: Runner | None = None,
) -> CanRun:
    """The one check of what can run, for every way of starting or queueing a trial of a chosen approach
    (run this, repeat, settle; run next applies the same requirement test to its candidates): a recipe,
    not archived, no trial of it queued or running, no verdict awaited, and a connected runner that meets
    its requirements. A trial no runner can take is refused with the reason, never queued to wait forever.
    One rule for every door (issue 43): a proposal waiting for a person is read before more is measured;
    only the later rounds of a started Settle / Repeat go on without it (repeats.advance: no new decision).
    `runner` (a replay, whose trials are pinned to it): that runner alone must be connected and able."""
    if approach.archived_at is not None:
        return CanRun([], f"{approach.title} is archived: restore it first")
    if not has_recipe(approach):
        return CanRun([], f"{approach.title} has no recipe: add one under Details › Edit")
    active = session.exec(
        select(Trial).where(Trial.approach_id == approach.id, col(Trial.state).in_(ACTIVE_TRIAL_STATES))
    ).first()
    if active is not None:
        return CanRun([], f"{approach.title} is already being tried: trial #{active.id} is {active.state}")
    if approach.pending_trial_id is not None:
        return CanRun(
            [], f"{approach.title} waits for your verdict on trial #{approach.pending_trial_id}: confirm it first"
        )
    return runners_for(session, approach, online=online, runner=runner)


def runners_for(
    session: Session, approach: Approach, *, online: set[int] | None = None, runner: Runner | None = None
) -> CanRun:
    """The runner half of `can_run`: the connected runners that meet the approach's requirements, or why
    none does (the queue says it of a trial that waits for a runner that is not there); with `runner`,
    that one runner, or why not."""
    if runner is not None:
        if not runner.connected or runner.revoked_at is not None or (online is not None and runner.id not in online):
            return CanRun([], f"{runner.name} is not connected")
        unmet = unmet_requirements(approach.requirements, runner.fingerprint)
        return CanRun([], f"{runner.name} lacks {_join(unmet)}") if unmet else CanRun([runner])
    connected = _connected_runners(session, online)
    if not connected:
        return CanRun([], "no runner is connected")
    able = [r for r in connected if not unmet_requirements(approach.requirements, r.fingerprint)]
    if not able:
        fewest = min((unmet_requirements(approach.requirements, r.fingerprint) for r in connected), key=len)
        return CanRun([], f"{approach.title} needs {_join(fewest)}: no connected runner has them")
    return CanRun(able)


def run_approach(
    session: Session, campaign: Campaign, approach: Approach, actor: str, *, online: set[int] | None = None
) -> RunNext:
    """ "Run this approach": a person's choice, whatever its status or priority, on a connected idle
    runner that can run it (queued when they are all busy); or the reason it cannot run now (`can_run`).
    Serialized with run_next per campaign."""
    lock_campaign(session, campaign)
    session.refresh(approach)
    check = can_run(session, approach, online=online)
    if check.reason:
        return RunNext(approach=approach, reason=check.reason)
    _lock_runners(session, check.able)
    return _start_or_queue(session, approach, check.able, actor)


# ---- trials and attempts ----------------------------------------------------------------------


def create_trial(session: Session, approach: Approach, runner: Runner | None, actor: str) -> Trial:
    """A trial of the approach on the runner, with its first attempt, an event in the approach's history (its
    decided status stays: the trial is its activity, `campaigns.activities`).
    Without a runner the trial waits in the queue (state queued, no attempt) until
    app/domain/queue.start_queued gives it one."""
    trial = Trial(
        campaign_id=approach.campaign_id,
        approach_id=approach.id,  # type: ignore[arg-type]  # a stored approach has its id
        recipe=dict(approach.recipe or {}),
        state=TrialState.queued,
        phase="queued" if runner is not None else QUEUED_PHASE,
        requested_by=actor,
        fingerprint=runner.fingerprint if runner is not None else None,
    )
    session.add(trial)
    session.flush()
    campaigns.trial_event(
        session,
        approach,
        trial,
        f"trial #{trial.id} queued on {runner.name}"
        if runner is not None
        else f"trial #{trial.id} queued: waits for a free runner",
        actor,
    )
    if runner is not None:
        new_attempt(session, trial, runner)
    return trial


def new_attempt(session: Session, trial: Trial, runner: Runner) -> Attempt:
    attempt = Attempt(
        id=uuid.uuid4().hex,
        trial_id=trial.id,  # type: ignore[arg-type]  # a stored trial has its id
        runner_id=runner.id,
        number=trial.attempt_count + 1,
        state=TrialState.dispatched,
    )
    trial.attempt_id = attempt.id
    trial.attempt_count += 1
    trial.runner_id = runner.id
    trials.advance(trial, trials.TrialEvent.dispatch)
    trial.phase = "dispatched"
    trial.dispatched_at = utcnow()
    session.add(attempt)
    session.add(trial)
    session.flush()
    return attempt


def dispatch_message(trial: Trial, approach_key: str = "", requirements: dict[str, Any] | None = None) -> Dispatch:
    return Dispatch(
        trial_id=trial.id,
        attempt_id=trial.attempt_id or "",
        recipe=trial.recipe,
        approach_key=approach_key,
        requirements=requirements or {},
    )


# ---- a runner (re)connects, goes silent ------------------------------------------------------


@dataclass
class Reconnect:
    acked: dict[str, int] = field(default_factory=dict)
    cancel: list[str] = field(default_factory=list)
    redispatch: list[Dispatch] = field(default_factory=list)
    lost: list[Trial] = field(default_factory=list)


def reconcile(session: Session, runner: Runner, held: list[AttemptRef], last_seq) -> Reconnect:
    """Compare what a (re)connecting runner still holds with what the server thinks it runs.

    `last_seq(trial_id, attempt_id)` -> the last contiguously stored log seq (app.domain.logs).
    """
    out = Reconnect()
    held_ids = {ref.attempt_id for ref in held}
    for ref in held:
        trial = session.get(Trial, ref.trial_id)
        out.acked[ref.attempt_id] = last_seq(ref.trial_id, ref.attempt_id) if trial else -1
        if (
            trial is None
            or trial.attempt_id != ref.attempt_id
            or trial.runner_id != runner.id
            or trial.state == TrialState.lost
        ):
            out.cancel.append(ref.attempt_id)
        elif trial.cancel_requested and trial.state not in TERMINAL_TRIAL_STATES:
            out.cancel.append(ref.attempt_id)
    mine = session.exec(select(Trial).where(Trial.runner_id == runner.id, Trial.state.in_(ACTIVE_TRIAL_STATES))).all()  # type: ignore[attr-defined]
    for trial in mine:
        if trial.attempt_id in held_ids:
            continue
        if trial.state == TrialState.running:
            # The runner no longer knows the process it was running (it restarted).
            trials.mark_lost(session, trial, f"runner {runner.name} reconnected without this trial")
            out.lost.append(trial)
        elif trial.cancel_requested:
            trials.end_trial(session, trial, TrialState.cancelled, reason="cancelled before it started")
            out.lost.append(trial)
        else:  # dispatched but never started: the push may not have arrived; send it again
            approach = session.get(Approach, trial.approach_id)
            out.redispatch.append(
                dispatch_message(trial, approach.key if approach else "", approach.requirements if approach else None)
            )
    return out
