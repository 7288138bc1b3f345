"""Reading trials: the filtered, paged list (newest first), one trial with its attempts, its metric rows, and
the fields a trial page shows live (`trial_view`).

Every read here is a fixed number of statements, whatever the number of trials: the list is one joined
query (trial, approach, campaign, runner name) after at most one lookup per filter; a trial's detail is
the trial plus one joined lookup and its attempts. The pages (app/web/trials.py) and the JSON API
(app/api/trials.py) both read through these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session, select

from app.domain.errors import Invalid, NotFound
from app.domain.inventory import get_approach, get_campaign
from app.domain.trials import get_trial
from app.models import Approach, Attempt, Campaign, Metric, Runner, Trial, TrialState, aware

MAX_PAGE = 200


@dataclass(frozen=True)
class TrialRow:
    """A trial as lists show it: with its approach, campaign and runner's name (None: never dispatched)."""

    trial: Trial
    approach: Approach
    campaign_slug: str
    runner_name: str | None


@dataclass(frozen=True)
class TrialPage:
    rows: list[TrialRow]
    next_before: int | None  # the cursor of the next (older) page, None on the last page


def _runner_by_name(session: Session, name: str) -> Runner:
    runner = session.exec(select(Runner).where(Runner.name == name)).first()
    if runner is None:
        raise NotFound(f"No runner named {name!r}.", field="runner")
    return runner


def list_trials(
    session: Session,
    *,
    campaign: str | None = None,
    approach: str | None = None,
    state: TrialState | None = None,
    runner: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> TrialPage:
    """Trials newest first (by id), at most `limit`, older than `before`: filtered by campaign slug, approach
    key (within that campaign; without one, in any campaign), state and runner name. An unknown campaign, an
    approach not in the given campaign or an unknown runner is NotFound."""
    if not 1 <= limit <= MAX_PAGE:
        raise Invalid(f"limit must be between 1 and {MAX_PAGE}.", field="limit")
    query = (
        select(Trial, Approach, Campaign.slug, Runner.name)
        .join(Approach, Approach.id == Trial.approach_id)  # type: ignore[arg-type]
        .join(Campaign, Campaign.id == Trial.campaign_id)  # type: ignore[arg-type]
        .outerjoin(Runner, Runner.id == Trial.runner_id)  # type: ignore[arg-type]
        .order_by(Trial.id.desc())  # type: ignore[union-attr]
    )
    if campaign is not None:
        found = get_campaign(session, campaign)
        if approach is not None:
            query = query.where(Trial.approach_id == get_approach(session, found, approach).id)
        else:
            query = query.where(Trial.campaign_id == found.id)
    elif approach is not None:  # the key in every campaign that has it
        query = query.where(Approach.key == approach)
    if state is not None:
        query = query.where(Trial.state == TrialState(state).value)
    if runner is not None:
        query = query.where(Trial.runner_id == _runner_by_name(session, runner).id)
    if before is not None:
        query = query.where(Trial.id < before)  # type: ignore[operator]
    found_rows = session.exec(query.limit(limit + 1)).all()
    rows = [TrialRow(t, a, slug, name) for t, a, slug, name in found_rows[:limit]]
    return TrialPage(rows, rows[-1].trial.id if len(found_rows) > limit else None)


@dataclass(frozen=True)
class TrialDetail:
    """One trial with everything its page and GET /api/trials/{id} show."""

    trial: Trial
    approach: Approach
    campaign: Campaign
    runner: Runner | None
    attempts: list[Attempt]

    def duration_s(self, now: datetime) -> float | None:
        """Seconds from start to end (or to `now` while it runs); None before it starts."""
        started = aware(self.trial.started_at)
        if started is None:
            return None
        return max(0.0, ((aware(self.trial.finished_at) or now) - started).total_seconds())


def trial_detail(session: Session, trial_id: int) -> TrialDetail:
    trial = get_trial(session, trial_id)
    approach, campaign = session.exec(
        select(Approach, Campaign)
        .join(Campaign, Campaign.id == Approach.campaign_id)  # type: ignore[arg-type]
        .where(Approach.id == trial.approach_id)
    ).one()
    runner = session.get(Runner, trial.runner_id) if trial.runner_id is not None else None
    attempts = list(session.exec(select(Attempt).where(Attempt.trial_id == trial.id).order_by(Attempt.number)))  # type: ignore[arg-type]
    return TrialDetail(trial, approach, campaign, runner, attempts)


def trial_metrics(session: Session, trial_ids: list[int]) -> list[Metric]:
    """The metric rows of these trials, in the order their lines were logged (one query)."""
    if not trial_ids:
        return []
    return list(
        session.exec(
            select(Metric)
            .where(Metric.trial_id.in_(trial_ids))  # type: ignore[attr-defined]
            .order_by(Metric.trial_id, Metric.seq, Metric.index)  # type: ignore[arg-type]
        )
    )


def metric_dict(metric: Metric) -> dict[str, Any]:
    return {
        "name": metric.name,
        "value": metric.value,
        "unit": metric.unit,
        "tags": metric.tags or {},
        "seq": metric.seq,
        "index": metric.index,
        "recorded_at": aware(metric.created_at),
    }


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
