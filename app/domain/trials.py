"""The trial and attempt state machine: every change of a trial's (and its current attempt's) state
goes through `advance`, which looks the change up in TRANSITIONS and refuses any other.

    queued ──dispatch──▶ dispatched ──start──▶ running
      │                     │                     │
      └─────────────────────┴─────────────────────┴──succeed | fail | time_out | cancel | lose──▶ ended

`phase` and `cancel_request` keep an active trial in its state (a phase line, a cancel on its way to
the runner); an ended trial (TERMINAL_TRIAL_STATES) takes no event. An Attempt follows the same table:
its state is its trial's while it is the current one. Around the table: the runner's reports
(`mark_started`, `record_phase`, `finish`), a person's cancel (`request_cancel`), lost runners
(`mark_lost`, `sweep_lost`), and what an ended trial does to its approach (an event in its history, its
proposal waiting for a person: never its status, which only a person decides) and its proposal
(`classify_failure`).

Which approach runs where (and creating trials and attempts) is app/domain/scheduling.py. Functions
flush, never commit: the caller commits, then pushes the returned protocol messages.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from sqlmodel import Session, select

from app.domain import campaigns, notifications, proposals, verdicts
from app.domain.errors import Conflict, Invalid, or_not_found
from app.domain.signatures import classify
from app.models import (
    ACTIVE_TRIAL_STATES,
    NO_VERDICT_TRIAL_STATES,
    TERMINAL_TRIAL_STATES,
    Approach,
    Attempt,
    Campaign,
    Metric,
    Runner,
    Trial,
    TrialState,
    aware,
    utcnow,
)
from app.protocol.messages import AttemptRef, Cancel, Finished
from app.protocol.metrics import MetricName

log = logging.getLogger(__name__)


class TrialEvent(StrEnum):
    dispatch = "dispatch"  # an attempt was handed to a runner
    start = "start"  # the runner started the trial's process
    phase = "phase"  # the recipe named its phase
    cancel_request = "cancel_request"  # a person asked for a stop; the runner has yet to report it
    succeed = "succeed"
    fail = "fail"
    time_out = "time_out"
    cancel = "cancel"
    lose = "lose"  # its runner went away with it


# (from state, event) -> to state. Anything not listed is refused (IllegalTransition).
TRANSITIONS: dict[tuple[TrialState, TrialEvent], TrialState] = {
    (TrialState.queued, TrialEvent.dispatch): TrialState.dispatched,
    (TrialState.queued, TrialEvent.start): TrialState.running,
    (TrialState.dispatched, TrialEvent.start): TrialState.running,
    **{(active, TrialEvent.phase): active for active in ACTIVE_TRIAL_STATES},
    **{(active, TrialEvent.cancel_request): active for active in ACTIVE_TRIAL_STATES},
    **{
        (active, event): ended
        for active in ACTIVE_TRIAL_STATES
        for event, ended in (
            (TrialEvent.succeed, TrialState.succeeded),
            (TrialEvent.fail, TrialState.failed),
            (TrialEvent.time_out, TrialState.timed_out),
            (TrialEvent.cancel, TrialState.cancelled),
            (TrialEvent.lose, TrialState.lost),
        )
    },
}

# The event that ends a trial in each terminal state.
ENDING_EVENT = {to: event for (_, event), to in TRANSITIONS.items() if to in TERMINAL_TRIAL_STATES}


class IllegalTransition(Conflict):
    """A change the state machine does not allow (a bug in the caller, or a race it must handle)."""


class HasState(Protocol):
    state: str


def can(state: str, event: TrialEvent) -> bool:
    return (TrialState(state), event) in TRANSITIONS


def advance(row: HasState, event: TrialEvent) -> TrialState:
    """Move a Trial or Attempt along TRANSITIONS; IllegalTransition when the table has no such move."""
    to = TRANSITIONS.get((TrialState(row.state), event))
    if to is None:
        raise IllegalTransition(f"A {row.state} trial cannot {event.value.replace('_', ' ')}.")
    row.state = to
    return to


class StaleAttempt(Exception):
    """A runner wrote for an attempt that is not its trial's current one (or a trial it does not hold)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def get_trial(session: Session, trial_id: int) -> Trial:
    return or_not_found(session.get(Trial, trial_id), f"No trial #{trial_id}.")


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


# ---- the runner's reports ---------------------------------------------------------------------


def mark_started(session: Session, trial: Trial) -> None:
    """The runner started the trial (a resent report, or one for a trial past starting, changes nothing)."""
    if can(trial.state, TrialEvent.start):
        advance(trial, TrialEvent.start)
        trial.phase = "launching"
        trial.started_at = utcnow()
        attempt = session.get(Attempt, trial.attempt_id)
        if attempt is not None and can(attempt.state, TrialEvent.start):
            advance(attempt, TrialEvent.start)
            session.add(attempt)
        session.add(trial)
        session.flush()


def record_phase(session: Session, trial: Trial, phase: str) -> None:
    if can(trial.state, TrialEvent.phase):
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
    if trial.state in TERMINAL_TRIAL_STATES:
        return False
    trial.exit_code = msg.exit_code
    trial.exit_signal = msg.signal
    trial.error = msg.error
    trial.gpu_released = msg.gpu_released
    trial.gpu_note = msg.gpu_note[:500]
    end_trial(session, trial, _outcome_state(trial, msg), log_text=log_text)
    return True


def end_trial(
    session: Session,
    trial: Trial,
    state: TrialState,
    *,
    log_text: str | None = None,
    reason: str = "",
    actor: str | None = None,
) -> None:
    """End an active trial in `state` (a terminal one): its attempt ends too, `log_text` (when given)
    is classified into its proposal, the end is an event in its approach's history (its decided status
    stays what a person made it), and the verdict hook leaves the proposal waiting for a person.
    `actor`: who ended it, for the approach's history (default: its runner)."""
    never_ran = trial.state == TrialState.queued  # cancelled while waiting for a runner
    advance(trial, ENDING_EVENT[state])
    trial.phase = state.value.replace("_", " ")
    trial.finished_at = utcnow()
    if trial.started_at is None and state != TrialState.lost and not never_ran:
        trial.started_at = trial.finished_at
    attempt = session.get(Attempt, trial.attempt_id) if trial.attempt_id else None
    if attempt is not None:
        attempt.state = state  # the current attempt ends with its trial, whatever it had reached
        attempt.ended_at = trial.finished_at
        session.add(attempt)
    if log_text is not None:
        trial.proposal = classify_failure(session, trial, log_text)
    session.add(trial)
    session.flush()
    verdicts.on_trial_ended(session, trial)
    proposal = proposals.propose(session, trial) if trial.state not in NO_VERDICT_TRIAL_STATES else None
    approach = session.get(Approach, trial.approach_id)
    if approach is not None:
        words = f"trial #{trial.id} {state.value.replace('_', ' ')}" + (f": {reason}" if reason else "")
        if proposal is not None:
            words += f"; proposes {proposal.status.replace('_', ' ')}, waiting for a person"
        campaigns.trial_event(session, approach, trial, words, actor or _runner_actor(session, trial.runner_id))
    notifications.trial_ended(session, trial, (proposal.status, proposal.reason) if proposal else None)


def classify_failure(session: Session, trial: Trial, log_text: str) -> dict[str, Any] | None:
    """The failure classification of an ended trial's log (app.domain.signatures), stored in
    trial.proposal for a person to confirm or edit (the verdict UI); None when nothing known matches."""
    metrics = [
        {"name": m.name, "value": m.value, "unit": m.unit, "tags": m.tags}
        for m in session.exec(select(Metric).where(Metric.trial_id == trial.id))
    ]
    campaign = session.get(Campaign, trial.campaign_id)
    baseline = None
    if campaign is not None and campaign.baseline_tok_s and trial.id != campaign.baseline_trial_id:
        baseline = dict.fromkeys(MetricName.THROUGHPUT, campaign.baseline_tok_s)
    try:
        result = classify(
            log_text,
            exit_code=trial.exit_code,
            signal=trial.exit_signal,
            metrics=metrics,
            baseline=baseline,
            timed_out=trial.state == TrialState.timed_out,
        )
    except Exception:  # a classifier bug must not keep a trial from ending
        log.exception("failure classification of trial #%s failed", trial.id)
        return None
    return None if result is None else asdict(result)


# ---- a person's cancel, lost runners ----------------------------------------------------------


def request_cancel(session: Session, trial: Trial, actor: str) -> Cancel | None:
    """Ask for a trial to stop. Returns the Cancel to push to its runner (None: ended here, nothing to push)."""
    if trial.state in TERMINAL_TRIAL_STATES:
        raise Invalid(f"Trial #{trial.id} has already ended ({trial.state}).")
    advance(trial, TrialEvent.cancel_request)
    trial.cancel_requested = True
    session.add(trial)
    if trial.state == TrialState.queued or trial.runner_id is None:
        end_trial(session, trial, TrialState.cancelled, reason=f"cancelled by {actor}", actor=actor)
        return None
    trial.phase = "cancelling"
    session.flush()
    return Cancel(trial_id=trial.id, attempt_id=trial.attempt_id or "", reason=f"cancelled by {actor}")


def mark_lost(session: Session, trial: Trial, reason: str) -> None:
    if trial.state not in TERMINAL_TRIAL_STATES:
        trial.error = reason
        end_trial(session, trial, TrialState.lost, reason=reason)


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
    went_silent: list[Runner] = []
    for runner in session.exec(select(Runner).where(Runner.connected.is_(True))):  # type: ignore[attr-defined]
        if runner.id in silent:
            went_silent.append(runner)
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
        holder = session.get(Runner, trial.runner_id) if trial.runner_id else None
        if holder is None:
            mark_lost(session, trial, "its runner was deleted")
            lost.append(trial)
            continue
        if holder.id in online_seen and holder.id not in silent:
            continue
        seen = aware(holder.last_seen_at) or aware(trial.dispatched_at) or now
        if seen < limit:
            mark_lost(session, trial, f"runner {holder.name} silent for more than {lost_after_s:g} s")
            lost.append(trial)
            if holder not in went_silent:
                went_silent.append(holder)
    for runner in went_silent:
        notifications.runner_lost(session, runner.name, runner.id or 0, [t for t in lost if t.runner_id == runner.id])
    return lost, silent
