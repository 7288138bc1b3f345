"""Scheduling: which approach runs next and where, trials and their attempts, the runner's
reports (started, phase, finished), cancel, and lost runners.

Each dispatch is an Attempt with its own id; a report naming an attempt that is not its trial's
current one is stale (`StaleAttempt`, answered with `Reject`). Functions flush, never commit:
the caller commits, then pushes the returned protocol messages over the runner's socket.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select as sa_select
from sqlmodel import Session, select

from app.domain import runners as runner_domain
from app.domain import verdicts
from app.domain.errors import Invalid, NotFound
from app.domain.inventory import change_status
from app.models import (
    ACTIVE_TRIAL_STATES,
    Approach,
    ApproachStatus,
    Attempt,
    Campaign,
    Runner,
    StatusChange,
    Trial,
    TrialState,
    utcnow,
)
from app.protocol import AttemptRef, Cancel, Dispatch, Finished

log = logging.getLogger(__name__)

QUEUED_PHASE = "waiting for a free runner"
TERMINAL_STATES = (TrialState.succeeded, TrialState.failed, TrialState.cancelled, TrialState.timed_out, TrialState.lost)


class StaleAttempt(Exception):
    """A runner wrote for an attempt that is not its trial's current one (or a trial it does not hold)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def aware(ts: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes for timezone-aware columns; they were written as UTC."""
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts


# ---- what can run where -----------------------------------------------------------------------


def retest_candidates(session: Session, campaign: Campaign) -> list[Approach]:
    """Approaches whose verdict is bound to a stack component a connected runner now has differently."""
    from app.domain.verdicts import retest_flags

    flags = retest_flags(session, campaign)
    if not flags:
        return []
    return list(
        session.exec(
            select(Approach)
            .where(Approach.id.in_(flags))  # type: ignore[union-attr]
            .order_by(Approach.position, Approach.id)
        )
    )


def candidates(session: Session, campaign: Campaign) -> list[Approach]:
    """Approaches that may run next: untested ones by priority, then those flagged for re-test; each with a recipe."""
    untested = list(
        session.exec(
            select(Approach)
            .where(Approach.campaign_id == campaign.id, Approach.status == ApproachStatus.untested)
            .order_by(Approach.position, Approach.id)
        )
    )
    # Untested first, then the re-test flags; an approach whose last trial awaits a verdict waits too.
    seen = {a.id for a in untested}
    rows = untested + [a for a in retest_candidates(session, campaign) if a.id not in seen]
    return [a for a in rows if has_recipe(a) and a.pending_trial_id is None]


def has_recipe(approach: Approach) -> bool:
    return isinstance(approach.recipe, dict) and bool(approach.recipe.get("kind"))


def unmet_requirements(requirements: dict[str, Any] | None, fingerprint: dict[str, Any] | None) -> list[str]:
    """What a runner with this fingerprint lacks for these requirements, in words ([] = it can run)."""
    req = requirements or {}
    missing: list[str] = []
    gpus = int(req.get("gpus") or 0)
    if gpus and runner_domain.gpu_count(fingerprint) < gpus:
        missing.append(f"{gpus} GPU{'s' if gpus != 1 else ''}")
    missing += _unmet_allocation(req, fingerprint)
    min_sm = runner_domain._sm_tuple(req.get("min_sm"))
    if min_sm:
        have = runner_domain.sm(fingerprint)
        if have is None or have < min_sm:
            missing.append(f"SM {min_sm[0]}.{min_sm[1]} or newer")
    installed = runner_domain.components(fingerprint)
    for name in req.get("software") or []:
        if str(name).lower() not in installed:
            missing.append(str(name))
    return missing


def _unmet_allocation(req: dict[str, Any], fingerprint: dict[str, Any] | None) -> list[str]:
    """N nodes x G GPUs: only a runner that hands trials to a scheduler (its fingerprint's `slurm`
    partition) can give more than one node; G GPUs per node must fit the partition's nodes."""
    nodes = int(req.get("nodes") or 1)
    per_node = int(req.get("gpus_per_node") or 0)
    missing: list[str] = []
    if per_node and runner_domain.gpu_count(fingerprint) < per_node:
        missing.append(f"{per_node} GPU{'s' if per_node != 1 else ''} per node")
    if nodes > 1:
        partition = (fingerprint or {}).get("slurm")
        have = partition.get("nodes", 0) if isinstance(partition, dict) else 0
        if have < nodes:
            missing.append(f"{nodes} nodes (a SLURM partition with {nodes} or more)")
    return missing


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


def _lock_campaign(session: Session, campaign: Campaign) -> None:
    # Serializes "run next" per campaign. SQLite: the write session already holds BEGIN IMMEDIATE.
    # PostgreSQL: FOR NO KEY UPDATE, not FOR UPDATE: rows that reference the campaign (a runner's batch
    # inserting metrics) go on meanwhile, so that batch, holding its runner's row, never waits for this
    # transaction while this one waits for that runner's row (_lock_runners).
    if session.get_bind().dialect.name != "sqlite":
        session.execute(sa_select(Campaign.id).where(Campaign.id == campaign.id).with_for_update(key_share=True))


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
        session.execute(sa_select(Runner.id).where(Runner.id == runner.id).with_for_update(key_share=True))
    busy = session.exec(
        select(Trial.id).where(Trial.runner_id == runner.id, Trial.state.in_(ACTIVE_TRIAL_STATES))
    ).first()  # type: ignore[attr-defined]
    return busy is None


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def run_next(session: Session, campaign: Campaign, actor: str, *, online: set[int] | None = None) -> RunNext:
    """Start the highest-priority candidate that some connected, idle runner can run.

    `online`: ids of runners whose socket this server holds (None: trust Runner.connected).
    """
    _lock_campaign(session, campaign)
    session.refresh(campaign)
    queue = candidates(session, campaign)
    if not queue:
        untested = session.exec(
            select(Approach)
            .where(Approach.campaign_id == campaign.id, Approach.status == ApproachStatus.untested)
            .order_by(Approach.position, Approach.id)
        ).first()
        waiting = session.exec(
            select(Approach)
            .where(Approach.campaign_id == campaign.id, Approach.pending_trial_id.is_not(None))  # type: ignore[union-attr]
            .order_by(Approach.position)
        ).all()
        if waiting:
            names = ", ".join(a.title for a in waiting[:3]) + (" …" if len(waiting) > 3 else "")
            return RunNext(
                reason=f"nothing to run until a verdict is confirmed: {names} "
                f"{'waits' if len(waiting) == 1 else 'wait'} for yours"
            )
        if untested is not None:
            return RunNext(reason=f"nothing to run: the untested approaches have no recipe (next is {untested.title})")
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
            sa_select(Runner.id)
            .where(Runner.id.in_([r.id for r in runners]))  # type: ignore[union-attr]
            .order_by(Runner.id)
            .with_for_update(key_share=True)
        ).all()


def _connected_runners(session: Session, online: set[int] | None) -> list[Runner]:
    return [
        r
        for r in session.exec(
            select(Runner)
            .where(
                Runner.connected.is_(True),  # type: ignore[attr-defined]
                Runner.revoked_at.is_(None),
            )
            .order_by(Runner.id)
        )  # type: ignore[union-attr]
        if online is None or r.id in online
    ]


def run_approach(
    session: Session, campaign: Campaign, approach: Approach, actor: str, *, online: set[int] | None = None
) -> RunNext:
    """ "Run this approach": a person's choice, whatever its status or priority, on a connected idle
    runner that can run it; or the reason it cannot run now. Serialized with run_next per campaign."""
    _lock_campaign(session, campaign)
    session.refresh(approach)
    if not has_recipe(approach):
        return RunNext(approach=approach, reason=f"{approach.title} has no recipe: add one under Details › Edit")
    active = session.exec(
        select(Trial).where(Trial.approach_id == approach.id, Trial.state.in_(ACTIVE_TRIAL_STATES))
    ).first()  # type: ignore[attr-defined]
    if active is not None:
        return RunNext(
            approach=approach, reason=f"{approach.title} is already being tried: trial #{active.id} is {active.state}"
        )
    if approach.pending_trial_id is not None:
        return RunNext(
            approach=approach,
            reason=f"{approach.title} waits for your verdict on trial #{approach.pending_trial_id}: confirm it first",
        )
    connected = _connected_runners(session, online)
    if not connected:
        return RunNext(approach=approach, reason="no runner is connected")
    able = [r for r in connected if not unmet_requirements(approach.requirements, r.fingerprint)]
    if not able:
        fewest = min((unmet_requirements(approach.requirements, r.fingerprint) for r in connected), key=len)
        return RunNext(
            approach=approach, reason=f"{approach.title} needs {_join(fewest)}: no connected runner has them"
        )
    _lock_runners(session, able)
    return _start_or_queue(session, approach, able, actor)


# ---- trials and attempts ----------------------------------------------------------------------


def create_trial(session: Session, approach: Approach, runner: Runner | None, actor: str) -> Trial:
    """A trial of the approach on the runner, with its first attempt; the approach becomes queued.
    Without a runner the trial waits in the queue (state queued, no attempt) until
    app/domain/queue.start_queued gives it one."""
    trial = Trial(
        campaign_id=approach.campaign_id,
        approach_id=approach.id,
        recipe=dict(approach.recipe or {}),
        state=TrialState.queued,
        phase="queued" if runner is not None else QUEUED_PHASE,
        requested_by=actor,
        fingerprint=runner.fingerprint if runner is not None else None,
    )
    session.add(trial)
    session.flush()
    change_status(
        session,
        approach,
        ApproachStatus.queued,
        f"trial #{trial.id} on {runner.name}" if runner is not None else f"trial #{trial.id} waits for a free runner",
        actor,
        trial_id=trial.id,
        by_trial=True,
    )
    if runner is not None:
        new_attempt(session, trial, runner)
    return trial


def new_attempt(session: Session, trial: Trial, runner: Runner) -> Attempt:
    attempt = Attempt(
        id=uuid.uuid4().hex,
        trial_id=trial.id,
        runner_id=runner.id,  # type: ignore[arg-type]
        number=trial.attempt_count + 1,
        state=TrialState.dispatched,
    )
    trial.attempt_id = attempt.id
    trial.attempt_count += 1
    trial.runner_id = runner.id
    trial.state = TrialState.dispatched
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
        recipe=trial.recipe,  # type: ignore[arg-type]
        approach_key=approach_key,
        requirements=requirements or {},
    )


def get_trial(session: Session, trial_id: int) -> Trial:
    trial = session.get(Trial, trial_id)
    if trial is None:
        raise NotFound(f"No trial #{trial_id}.")
    return trial


def current_trial(session: Session, ref: AttemptRef, runner_id: int) -> Trial:
    """The trial a runner's message is about, if the attempt is its current one and this runner holds it."""
    trial = session.get(Trial, ref.trial_id)
    if trial is None:
        raise StaleAttempt(f"no trial #{ref.trial_id}")
    if trial.attempt_id != ref.attempt_id:
        raise StaleAttempt(f"attempt {ref.attempt_id} is not trial #{trial.id}'s current attempt")
    if trial.runner_id != runner_id:
        raise StaleAttempt(f"trial #{trial.id} is not held by this runner")
    if trial.state == TrialState.lost:
        raise StaleAttempt(f"trial #{trial.id} was declared lost")
    return trial


def _runner_actor(session: Session, runner_id: int | None) -> str:
    runner = session.get(Runner, runner_id) if runner_id else None
    return f"runner {runner.name}" if runner else "runner"


def mark_started(session: Session, trial: Trial) -> None:
    if trial.state in (TrialState.queued, TrialState.dispatched):
        trial.state = TrialState.running
        trial.phase = "launching"
        trial.started_at = utcnow()
        attempt = session.get(Attempt, trial.attempt_id)
        if attempt is not None:
            attempt.state = TrialState.running
            session.add(attempt)
        session.add(trial)
        approach = session.get(Approach, trial.approach_id)
        if approach is not None and approach.status == ApproachStatus.queued:
            change_status(
                session,
                approach,
                ApproachStatus.running,
                f"trial #{trial.id} started",
                _runner_actor(session, trial.runner_id),
                trial_id=trial.id,
                by_trial=True,
            )
        session.flush()


def record_phase(session: Session, trial: Trial, phase: str) -> None:
    if trial.state not in TERMINAL_STATES:
        trial.phase = phase
        session.add(trial)
        session.flush()


def _outcome_state(trial: Trial, msg: Finished) -> TrialState:
    if msg.outcome == "cancelled" or (trial.cancel_requested and msg.signal is not None):
        return TrialState.cancelled
    if msg.outcome == "timed_out":
        return TrialState.timed_out
    if msg.outcome == "failed_to_start":
        return TrialState.failed
    return TrialState.succeeded if msg.exit_code == 0 else TrialState.failed


def finish(session: Session, trial: Trial, msg: Finished, *, log_text: str | None = None) -> bool:
    """Record the runner's Finished report (idempotent: a resent one changes nothing). True when it ended the trial."""
    if trial.state in TERMINAL_STATES:
        return False
    trial.exit_code = msg.exit_code
    trial.exit_signal = msg.signal
    trial.error = msg.error
    trial.gpu_released = msg.gpu_released
    trial.gpu_note = msg.gpu_note[:500]
    _end(session, trial, _outcome_state(trial, msg), log_text=log_text)
    return True


def _end(session: Session, trial: Trial, state: TrialState, *, log_text: str | None = None, reason: str = "") -> None:
    trial.state = state
    trial.phase = state.value.replace("_", " ")
    trial.finished_at = utcnow()
    if trial.started_at is None and state != TrialState.lost:
        trial.started_at = trial.finished_at
    attempt = session.get(Attempt, trial.attempt_id) if trial.attempt_id else None
    if attempt is not None:
        attempt.state = state
        attempt.ended_at = trial.finished_at
        session.add(attempt)
    if log_text is not None:
        trial.proposal = propose(session, trial, log_text)
    session.add(trial)
    session.flush()
    approach = session.get(Approach, trial.approach_id)
    if approach is not None and approach.status in (ApproachStatus.queued, ApproachStatus.running):
        # A trial that measured something leaves the approach untested, waiting for a person's verdict
        # (verdicts.on_trial_ended). One that was cancelled or lost measured nothing: the approach
        # goes back to what it was before (a re-tested dead end stays a dead end, with its reason).
        words = f"trial #{trial.id} {state.value.replace('_', ' ')}" + (f": {reason}" if reason else "")
        back_to, back_reason = ApproachStatus.untested, words
        if state in (TrialState.cancelled, TrialState.lost):
            before = _status_before(session, approach, trial)
            if before is not None:
                back_to, back_reason = before
        change_status(
            session,
            approach,
            back_to,
            back_reason,
            _runner_actor(session, trial.runner_id),
            trial_id=trial.id,
            by_trial=True,
        )
    for hook in TRIAL_ENDED_HOOKS:
        hook(session, trial)


def _status_before(session: Session, approach: Approach, trial: Trial) -> tuple[ApproachStatus, str] | None:
    """The approach's status and reason from before this trial queued it (None when unknown)."""
    changes = list(
        session.exec(
            select(StatusChange)
            .where(StatusChange.approach_id == approach.id)
            .order_by(StatusChange.at, StatusChange.id)
        )
    )  # type: ignore[arg-type]
    for index, change in enumerate(changes):
        if change.trial_id == trial.id and change.to_status == ApproachStatus.queued:
            earlier = changes[index - 1] if index > 0 else None
            reason = earlier.reason if earlier is not None and earlier.to_status == change.from_status else ""
            return ApproachStatus(change.from_status), reason
    return None


# Called with (session, trial) when a trial ends, inside the same transaction.
TRIAL_ENDED_HOOKS: list[Any] = [verdicts.on_trial_ended]


def propose(session: Session, trial: Trial, log_text: str) -> dict[str, Any] | None:
    """The failure classification proposal (app.domain.signatures), stored in trial.proposal for a
    person to confirm or edit (the verdict UI); None when nothing known matches."""
    try:
        from app.domain.signatures import classify
    except ImportError:
        return None
    from dataclasses import asdict, is_dataclass

    from app.models import Metric

    metrics = [
        {"name": m.name, "value": m.value, "unit": m.unit, "tags": m.tags}
        for m in session.exec(select(Metric).where(Metric.trial_id == trial.id))
    ]
    campaign = session.get(Campaign, trial.campaign_id)
    baseline = None
    if campaign is not None and campaign.baseline_tok_s and trial.id != campaign.baseline_trial_id:
        baseline = {
            "output_throughput_tok_s": campaign.baseline_tok_s,
            "decode_log_gen_throughput_tok_s": campaign.baseline_tok_s,
        }
    try:
        result = classify(
            log_text, exit_code=trial.exit_code, signal=trial.exit_signal, metrics=metrics, baseline=baseline
        )
    except Exception:  # a classifier bug must not keep a trial from ending
        log.exception("failure classification of trial #%s failed", trial.id)
        return None
    if result is None or isinstance(result, dict):
        return result
    if is_dataclass(result):
        return asdict(result)  # type: ignore[arg-type]
    return {"value": str(result)}


def request_cancel(session: Session, trial: Trial, actor: str) -> Cancel | None:
    """Ask for a trial to stop. Returns the Cancel to push to its runner (None: ended here, nothing to push)."""
    if trial.state in TERMINAL_STATES:
        raise Invalid(f"Trial #{trial.id} has already ended ({trial.state}).")
    trial.cancel_requested = True
    session.add(trial)
    if trial.state == TrialState.queued or trial.runner_id is None:
        _end(session, trial, TrialState.cancelled, reason=f"cancelled by {actor}")
        return None
    trial.phase = "cancelling"
    session.flush()
    return Cancel(trial_id=trial.id, attempt_id=trial.attempt_id or "", reason=f"cancelled by {actor}")  # type: ignore[arg-type]


def mark_lost(session: Session, trial: Trial, reason: str) -> None:
    if trial.state not in TERMINAL_STATES:
        trial.error = reason
        _end(session, trial, TrialState.lost, reason=reason)


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
        elif trial.cancel_requested and trial.state not in TERMINAL_STATES:
            out.cancel.append(ref.attempt_id)
    mine = session.exec(select(Trial).where(Trial.runner_id == runner.id, Trial.state.in_(ACTIVE_TRIAL_STATES))).all()  # type: ignore[attr-defined]
    for trial in mine:
        if trial.attempt_id in held_ids:
            continue
        if trial.state == TrialState.running:
            # The runner no longer knows the process it was running (it restarted).
            mark_lost(session, trial, f"runner {runner.name} reconnected without this trial")
            out.lost.append(trial)
        elif trial.cancel_requested:
            _end(session, trial, TrialState.cancelled, reason="cancelled before it started")
            out.lost.append(trial)
        else:  # dispatched but never started: the push may not have arrived; send it again
            approach = session.get(Approach, trial.approach_id)
            out.redispatch.append(
                dispatch_message(trial, approach.key if approach else "", approach.requirements if approach else None)
            )
    return out


def sweep_lost(
    session: Session, lost_after_s: float, online_seen: dict[int, datetime]
) -> tuple[list[Trial], list[int]]:
    """Runners silent past `lost_after_s` are offline and their active trials lost.

    `online_seen`: runner id -> last message time for the sockets this server holds.
    Returns (trials now lost, ids of online runners to disconnect because they went silent).
    """
    now = utcnow()
    limit = now - timedelta(seconds=lost_after_s)
    silent = [rid for rid, seen in online_seen.items() if seen < limit]
    lost: list[Trial] = []
    for runner in session.exec(select(Runner).where(Runner.connected.is_(True))):  # type: ignore[attr-defined]
        if runner.id not in online_seen or runner.id in silent:
            # Its socket is not held here (a previous server process) or it went silent.
            runner.connected = False
            if runner.id in silent:
                runner.last_seen_at = online_seen[runner.id]
            session.add(runner)
    session.flush()
    trials = session.exec(select(Trial).where(Trial.state.in_(ACTIVE_TRIAL_STATES))).all()  # type: ignore[attr-defined]
    for trial in trials:
        if trial.state == TrialState.queued:
            continue
        runner = session.get(Runner, trial.runner_id) if trial.runner_id else None
        if runner is None:
            mark_lost(session, trial, "its runner was deleted")
            lost.append(trial)
            continue
        if runner.id in online_seen and runner.id not in silent:
            continue
        seen = aware(runner.last_seen_at) or aware(trial.dispatched_at) or now
        if seen < limit:
            mark_lost(session, trial, f"runner {runner.name} silent for more than {lost_after_s:g} s")
            lost.append(trial)
    return lost, silent


def trial_view(trial: Trial) -> dict[str, Any]:
    """The fields a trial page shows live (sent to browsers on every change)."""

    def iso(ts: datetime | None) -> str | None:
        ts = aware(ts)
        return ts.isoformat() if ts else None

    return {
        "id": trial.id,
        "state": trial.state,
        "phase": trial.phase,
        "exit_code": trial.exit_code,
        "exit_signal": trial.exit_signal,
        "error": trial.error,
        "runner_id": trial.runner_id,
        "attempt_id": trial.attempt_id,
        "created_at": iso(trial.created_at),
        "dispatched_at": iso(trial.dispatched_at),
        "started_at": iso(trial.started_at),
        "finished_at": iso(trial.finished_at),
        "log_bytes": trial.log_bytes,
        "log_dropped_bytes": trial.log_dropped_bytes,
        "cancel_requested": trial.cancel_requested,
        "proposal": trial.proposal,
        "gpu_released": trial.gpu_released,
        "gpu_note": trial.gpu_note,
    }
