"""Verdicts: a person's confirmation of what an ended trial proposes (app/domain/proposals.py), and re-test flags.

A trial that ends (succeeded, failed, timed out) leaves its approach waiting for a verdict
(`Approach.pending_trial_id`); "Run next candidate" skips it until a person confirms or edits
the proposal. The confirmed verdict records the stack it was reached on (the trial's runner
fingerprint) and the components it is bound to. When a connected runner that could run the
approach reports a different value for a bound component, the approach is flagged for re-test.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from app.domain import fingerprint as stack
from app.domain import notifications
from app.domain.campaigns import change_status
from app.domain.errors import Invalid
from app.domain.runners import unmet_requirements
from app.models import (
    NO_VERDICT_TRIAL_STATES,
    TERMINAL_TRIAL_STATES,
    Approach,
    ApproachStatus,
    Campaign,
    HistoryKind,
    Runner,
    StatusChange,
    Trial,
    utcnow,
)
from app.protocol.metrics import MetricName

# What a failure signature's verdict means for the approach's status.
SIGNATURE_STATUS = {
    "dead_end": ApproachStatus.dead_end,
    "deferred": ApproachStatus.deferred,
    # The approach was not really tried (a flag this sglang lacks, say): park it, naming why.
    "retest": ApproachStatus.deferred,
    "inconclusive": ApproachStatus.untested,
}
VERDICT_STATUSES = [
    ApproachStatus.promising,
    ApproachStatus.adopted,
    ApproachStatus.dead_end,
    ApproachStatus.deferred,
    ApproachStatus.untested,
]
# Metrics worth naming in a success proposal, in order of interest.
SUMMARY_METRICS = (
    MetricName.OUTPUT_THROUGHPUT,
    MetricName.VERIFY_TIME_MS,
    MetricName.ALLREDUCE_IN_SITU_US,
    MetricName.ALLREDUCE_LATENCY_US,
    MetricName.BENCH_ACCEPT_LENGTH,
)


def on_trial_ended(session: Session, trial: Trial) -> None:
    """scheduling's trial-ended hook: the approach now waits for a person's verdict."""
    if trial.state in NO_VERDICT_TRIAL_STATES:
        return
    approach = session.get(Approach, trial.approach_id)
    if approach is not None:
        approach.pending_trial_id = trial.id
        session.add(approach)
        session.flush()


def confirm(
    session: Session,
    approach: Approach,
    trial: Trial,
    status: ApproachStatus | str,
    reason: str,
    components: list[str],
    actor: str,
) -> None:
    """A person's verdict on a trial: the status with its reason, the stack it was reached on,
    and the stack components it is bound to ([] = not bound, e.g. physics of the topology)."""
    if trial.approach_id != approach.id:
        raise Invalid(f"trial #{trial.id} is not a trial of {approach.title}", field="trial_id")
    if trial.state not in TERMINAL_TRIAL_STATES:
        raise Invalid(
            f"trial #{trial.id} has not ended ({trial.state}): confirm its verdict when it has", field="trial_id"
        )
    unknown = sorted(set(components) - set(stack.STACK_COMPONENTS))
    if unknown:
        raise Invalid(
            f"components: unknown stack component(s) {', '.join(unknown)}; expected "
            f"{', '.join(stack.STACK_COMPONENTS)}",
            field="components",
        )
    # Display order, each once, whatever order the form sent them in.
    components = [c for c in stack.STACK_COMPONENTS if c in set(components)]
    try:
        status = ApproachStatus(status)
    except ValueError:
        raise Invalid(
            f"status: {status!r} is not a verdict (one of {', '.join(s.value for s in ApproachStatus)})",
            field="status",
        ) from None
    # A verdict on an older trial is not one on the trial still waiting (if another one is).
    still_pending = approach.pending_trial_id if approach.pending_trial_id not in (None, trial.id) else None
    if approach.status == status.value:
        # Same status, new evidence: keep it in the history all the same.
        approach.reason = reason.strip() or approach.reason
        session.add(
            StatusChange(
                approach_id=approach.id,
                from_status=status.value,
                to_status=status.value,
                reason=f"confirmed: {approach.reason}",
                actor=actor,
                trial_id=trial.id,
            )
        )
    else:
        change_status(session, approach, status, reason, actor, trial_id=trial.id)
    approach.verdict_fingerprint = trial.fingerprint
    approach.bound_to = {"components": list(components)} if components else None
    approach.pending_trial_id = still_pending
    approach.updated_at = utcnow()
    session.add(approach)
    session.flush()
    notifications.verdict_confirmed(session, approach, trial, actor)


def _connected_runners(session: Session) -> list[Runner]:
    return list(
        session.exec(
            select(Runner)
            .where(col(Runner.connected).is_(True), col(Runner.revoked_at).is_(None))
            .order_by(col(Runner.id))
        )
    )


def _able(approach: Approach, runners: list[Runner]) -> list[Runner]:
    return [r for r in runners if r.fingerprint and not unmet_requirements(approach.requirements, r.fingerprint)]


def retest_reason_on(approach: Approach, fingerprint: dict[str, Any] | None) -> str | None:
    """'re-test: torch 2.10.0 -> 2.11.0' when a runner with this fingerprint would re-test the
    approach's verdict on a different stack (None: same bound stack, or the verdict is not bound)."""
    return stack.retest_reason(approach.bound_to, approach.verdict_fingerprint, fingerprint)


def retest_flags(session: Session, campaign: Campaign) -> dict[int, str]:
    """approach id -> 're-test: torch 2.10.0 -> 2.11.0' for verdicts bound to a component that a
    connected runner able to run the approach now reports differently."""
    flags: dict[int, str] = {}
    runners = _connected_runners(session)  # one query, whatever the number of approaches
    if not runners:
        return flags
    verdicts = session.exec(
        select(Approach).where(
            Approach.campaign_id == campaign.id,
            col(Approach.status).in_([ApproachStatus.dead_end, ApproachStatus.deferred]),
        )
    )
    for approach in verdicts:
        assert approach.id is not None  # read from the database
        if not stack.bound_components(approach.bound_to):
            continue
        for runner in _able(approach, runners):
            reason = retest_reason_on(approach, runner.fingerprint)
            if reason:
                flags[approach.id] = f"{reason} (on {runner.name})"
                break
    return flags


def recorded_for(session: Session, trial: Trial) -> tuple[list[StatusChange], bool]:
    """The verdicts people recorded on this trial, newest first (a trial's own events are not verdicts),
    and whether the newest is the approach's current verdict (a later trial's may have replaced it)."""
    rows = list(
        session.exec(
            select(StatusChange)
            .where(StatusChange.trial_id == trial.id, StatusChange.kind == HistoryKind.status)
            .order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
        )
    )
    if not rows:
        return rows, False
    newest = session.exec(
        select(StatusChange.id)
        .where(StatusChange.approach_id == trial.approach_id, StatusChange.kind == HistoryKind.status)
        .order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
    ).first()
    return rows, newest == rows[0].id


def pending(session: Session, campaign: Campaign) -> list[tuple[Approach, Trial]]:
    rows = session.exec(
        select(Approach, Trial)
        .join(Trial, col(Trial.id) == Approach.pending_trial_id)
        .where(Approach.campaign_id == campaign.id)
        .order_by(col(Approach.position))
    )
    return list(rows)
