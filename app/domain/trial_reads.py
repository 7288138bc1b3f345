"""Reading trials: the filtered, paged list (newest first), one trial with its attempts, its metric rows, and
the fields a trial page shows live (`trial_view`).

Every read here is a fixed number of statements, whatever the number of trials: the list is one joined
query (trial, approach, campaign, runner name) after at most one lookup per filter; a trial's detail is
the trial plus one joined lookup and its attempts. The pages (app/web/trials.py) and the JSON API
(app/api/trials.py) both read through these functions.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.domain.campaigns import get_approach, get_campaign
from app.domain.errors import Invalid, or_not_found
from app.domain.trials import get_trial
from app.models import Approach, Attempt, Campaign, Metric, Runner, Trial, TrialListed, TrialState, TrialTag, aware
from app.schemas import NO_PROPOSAL, TRIAL_SORTS, TrialFilter, TrialSummary

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
    return or_not_found(runner, f"No runner named {name!r}.", field="runner")


# The sortable columns: name -> the column (ties broken by id, newest first).
SORTS: dict[str, Any] = {
    "id": col(Trial.id),
    "campaign": col(Campaign.slug),
    "approach": col(Approach.key),
    "state": col(Trial.state),
    "runner": col(Runner.name),
    "requested_by": col(Trial.requested_by),
    "created": col(Trial.created_at),
    "started": col(Trial.started_at),
    "finished": col(Trial.finished_at),
}
assert tuple(SORTS) == TRIAL_SORTS  # the schema names them for the API; the columns are here


def _tag(tag: str) -> tuple[str, str]:
    name, sep, value = tag.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise Invalid("tag: expected name=value (a metric tag or condition, e.g. world_size=8)", field="tag")
    return name.strip(), value.strip()


def _filtered(session: Session, query: Any, f: TrialFilter) -> Any:
    """`query` (over Trial joined with Approach and Campaign) narrowed by the filter. An unknown campaign, an
    approach not in the given campaign or an unknown runner is NotFound."""
    if f.campaign is not None:
        found = get_campaign(session, f.campaign)
        if f.approach is not None:
            query = query.where(Trial.approach_id == get_approach(session, found, f.approach).id)
        else:
            query = query.where(Trial.campaign_id == found.id)
    elif f.approach is not None:  # the key in every campaign that has it
        query = query.where(Approach.key == f.approach)
    if f.state is not None:
        query = query.where(Trial.state == TrialState(f.state).value)
    if f.runner is not None:
        query = query.where(Trial.runner_id == _runner_by_name(session, f.runner).id)
    if f.proposal is not None:
        verdict = func.coalesce(col(Trial.proposal)["verdict"].as_string(), "")
        query = query.where(verdict == ("" if f.proposal == NO_PROPOSAL else f.proposal))
    if f.tag is not None:
        name, value = _tag(f.tag)
        # The trial's tags as the metric triggers keep them (migration 0023): an index probe per trial.
        kept = select(TrialTag.trial_id).where(
            TrialTag.trial_id == Trial.id, TrialTag.name == name, TrialTag.value == value
        )
        query = query.where(kept.exists())
    if f.since is not None:
        query = query.where(col(Trial.created_at) >= f.since)
    if f.until is not None:
        query = query.where(col(Trial.created_at) < f.until)
    if f.requested_by is not None:
        query = query.where(Trial.requested_by == f.requested_by)
    return query


def _rows_query() -> Any:
    return (
        select(Trial, Approach, Campaign.slug, Runner.name)
        .join(Approach, Approach.id == Trial.approach_id)  # type: ignore[arg-type]
        .join(Campaign, Campaign.id == Trial.campaign_id)  # type: ignore[arg-type]
        .outerjoin(Runner, Runner.id == Trial.runner_id)  # type: ignore[arg-type]
    )


def list_trials(
    session: Session,
    *,
    before: int | None = None,
    limit: int = 50,
    **filters: Any,
) -> TrialPage:
    """Trials newest first (by id), at most `limit`, older than `before`, narrowed by `TrialFilter`'s fields."""
    if not 1 <= limit <= MAX_PAGE:
        raise Invalid(f"limit must be between 1 and {MAX_PAGE}.", field="limit")
    query = _filtered(session, _rows_query(), TrialFilter(**filters)).order_by(col(Trial.id).desc())
    if before is not None:
        query = query.where(Trial.id < before)  # type: ignore[operator]
    found_rows = session.exec(query.limit(limit + 1)).all()
    rows = [TrialRow(t, a, slug, name) for t, a, slug, name in found_rows[:limit]]
    return TrialPage(rows, rows[-1].trial.id if len(found_rows) > limit else None)


@dataclass(frozen=True)
class TrialSearch:
    """One page of the trials page: its rows, how many trials the filter finds, the page, its size and sort."""

    rows: list[TrialRow]
    total: int
    page: int
    per_page: int
    sort: str

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def _order(sort: str) -> list[Any]:
    name = sort.removeprefix("-")
    if name not in SORTS:
        raise Invalid(f"sort: one of {', '.join(SORTS)} (a leading - for descending), not {sort!r}", field="sort")
    column = SORTS[name]
    if sort.startswith("-"):
        return [column.desc(), col(Trial.id).desc()]
    return [column.asc(), col(Trial.id).asc()]


def search_trials(
    session: Session, f: TrialFilter, *, sort: str = "-id", page: int = 1, per_page: int = 50
) -> TrialSearch:
    """The trials page: the filter's trials in `sort`'s order, page `page` of `per_page`, and their count
    (two statements after the filter's lookups)."""
    if not 1 <= per_page <= MAX_PAGE:
        raise Invalid(f"per_page must be between 1 and {MAX_PAGE}.", field="per_page")
    if page < 1:
        raise Invalid("page must be 1 or more.", field="page")
    order = _order(sort)
    name = sort.removeprefix("-")
    # The page's ids first, over the trial table and only the joins the filter or the sort needs; then those
    # rows with their approach, campaign and runner (a join of 50 rows, not of every trial the filter finds).
    narrowed = _filtered(session, select(Trial.id), f)
    if name == "approach" or (f.approach is not None and f.campaign is None):
        narrowed = narrowed.join(Approach, col(Approach.id) == col(Trial.approach_id))
    if name == "campaign":
        narrowed = narrowed.join(Campaign, col(Campaign.id) == col(Trial.campaign_id))
    if name == "runner":
        narrowed = narrowed.outerjoin(Runner, col(Runner.id) == col(Trial.runner_id))
    total = int(session.exec(select(func.count()).select_from(narrowed.order_by(None).subquery())).one())
    ids = list(session.exec(narrowed.order_by(*order).offset((page - 1) * per_page).limit(per_page)))
    found = {
        t.id: (t, a, slug, runner) for t, a, slug, runner in session.exec(_rows_query().where(col(Trial.id).in_(ids)))
    }
    rows = [TrialRow(*found[i]) for i in ids if i in found]
    return TrialSearch(rows, total, page, per_page, sort)


def iter_trials(session: Session, f: TrialFilter, *, sort: str = "-id") -> Iterator[TrialRow]:
    """Every trial the filter finds, in `sort`'s order, read in batches (the exports stream it)."""
    query = _filtered(session, _rows_query(), f).order_by(*_order(sort)).execution_options(yield_per=1000)
    for t, a, slug, name in session.exec(query):
        yield TrialRow(t, a, slug, name)


LISTED = tuple(TrialListed.model_fields)  # a trial's own fields a list row shows (declared in app/models.py)


def summary(row: TrialRow) -> dict[str, Any]:
    """A trial as a list row (`schemas.TrialSummary`, the CSV and JSON exports' columns): its listed fields,
    times in UTC, with its campaign, approach and runner by name."""
    t = row.trial
    own = {name: getattr(t, name) for name in LISTED}
    return {
        **{name: aware(v) if isinstance(v, datetime) else v for name, v in own.items()},
        "id": t.id,
        "campaign": row.campaign_slug,
        "approach": row.approach.key,
        "approach_title": row.approach.title,
        "runner": row.runner_name,
        "proposed": (t.proposal or {}).get("verdict") or "",
    }


EXPORT_COLUMNS = [
    "id", "campaign", "approach", "approach_title", "state", "phase", "runner_id", "runner", "attempt_count",
    "requested_by", "exit_code", "created_at", "dispatched_at", "started_at", "finished_at", "proposed",
]  # fmt: skip
assert set(EXPORT_COLUMNS) == set(TrialSummary.model_fields)  # the exports' column order, TrialSummary's fields
MEDIA_TYPES = {"csv": "text/csv", "json": "application/json"}
EXPORT_BATCH = 500


def _cell(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def export_stream(session: Session, f: TrialFilter, sort: str, fmt: str) -> Iterator[str]:
    """Every trial the filter finds as CSV (a header row, then one row per trial) or a JSON array, in pieces of
    EXPORT_BATCH trials: constant memory at any size."""
    batch: list[dict[str, Any]] = []
    first = True
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
        writer.writeheader()
    else:
        yield "["

    def piece() -> str:
        nonlocal first
        rows = [{k: _cell(item[k]) for k in EXPORT_COLUMNS} for item in batch]  # in the columns' order
        batch.clear()
        if fmt == "csv":
            writer.writerows(rows)
            text = buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            return text
        text = ("" if first else ",") + ",".join(json.dumps(r, ensure_ascii=False) for r in rows)
        first = False
        return text

    for row in iter_trials(session, f, sort=sort):
        batch.append(summary(row))
        if len(batch) >= EXPORT_BATCH:
            yield piece()
    if batch or fmt == "csv":
        yield piece()
    if fmt == "json":
        yield "]"


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
