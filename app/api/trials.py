"""Trials, JSON: run next candidate, run this approach, a campaign's queue, cancel, list and read trials, their metrics, download a log, compare
trials. The browser's live-log websocket is app/api/livelog.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field
from sqlmodel import Session

from app.db import stream_in_session
from app.deps import OperatorDep, PageAfter, RowId
from app.domain import comparison as comparison_domain
from app.domain import logs as log_domain
from app.domain import queue as queue_domain
from app.domain import scheduling, trial_reads, trials
from app.domain.campaigns import get_campaign
from app.domain.errors import Invalid
from app.models import SettleFields, TrialOutcome, TrialState
from app.schemas import (
    SLUG_PATTERN,
    TRIAL_SORTS,
    AttemptPublic,
    ComparedColumnPublic,
    ComparedComponent,
    ComparedMetric,
    ComparedMetricRow,
    ComparedTrialPublic,
    ComparisonPublic,
    ComparisonRulePublic,
    MetricPublic,
    PairStatsPublic,
    QueuedTrialPublic,
    RatioPublic,
    RowStatsPublic,
    RunResultPublic,
    SettlePublic,
    SettleRequest,
    TrialFilter,
    TrialPage,
    TrialPublic,
    TrialSummary,
)
from app.services.trials import cancel, start_next, start_settle
from app.state import app_state

router = APIRouter(tags=["trials"])

Slug = Annotated[str, Field(pattern=SLUG_PATTERN)]
TrialIds = Annotated[
    list[Annotated[int, Field(ge=1, le=2**53)]] | None,
    Query(
        min_length=comparison_domain.MIN_TRIALS,
        max_length=comparison_domain.MAX_TRIALS,
        description="Different trials to compare, in column order: `?trial=12&trial=15`.",
        json_schema_extra={"uniqueItems": True},
    ),
]
ApproachKeys = Annotated[
    list[Annotated[str, Field(pattern=SLUG_PATTERN, max_length=80)]] | None,
    Query(
        min_length=comparison_domain.MIN_TRIALS,
        max_length=comparison_domain.MAX_COLUMNS,
        description="Or different approaches to compare over their succeeded trials: `?approach=nccl&approach=symm`.",
        json_schema_extra={"uniqueItems": True},
    ),
]
AcrossStacks = Annotated[
    bool,
    Query(description="Compare columns whose stacks (GPU, driver, CUDA, torch, NCCL, sglang) differ from the first's."),
]


def run_next_body(result: scheduling.RunNext) -> RunResultPublic:
    return RunResultPublic(
        started=result.started,
        queued=result.queued,
        trial_id=result.trial.id if result.trial else None,
        approach=result.approach.key if result.approach else None,
        runner=result.runner.name if result.runner else None,
        reason=result.reason,
    )


def _queue(session: Session, slug: str) -> list[QueuedTrialPublic]:
    return [
        QueuedTrialPublic(
            position=q.position,
            trial_id=q.trial.id,
            approach=q.approach.key,
            approach_title=q.approach.title,
            priority=q.approach.position,
            requested_by=q.trial.requested_by,
            queued_at=q.trial.created_at,
            blocked=q.blocked,
        )
        for q in queue_domain.campaign_queue(session, get_campaign(session, slug))
    ]


def _trial_public(session: Session, trial_id: int) -> TrialPublic:
    d = trial_reads.trial_detail(session, trial_id)
    t = d.trial
    row = trial_reads.TrialRow(t, d.approach, d.campaign.slug, d.runner.name if d.runner else None)
    return TrialPublic(
        **trial_reads.summary(row),
        **{name: getattr(t, name) for name in TrialOutcome.model_fields},
        attempts=[AttemptPublic.model_validate(a) for a in d.attempts],
        duration_s=d.duration_s(datetime.now(UTC)),
    )


def _trial_page(
    session: Session, filters: TrialFilter, sort: str, page: int, before: int | None, limit: int
) -> TrialPage:
    if before is not None:
        cursor = trial_reads.list_trials(session, before=before, limit=limit, **filters.model_dump())
        rows, last = cursor.rows, cursor.next_before
        total = trial_reads.search_trials(session, filters, per_page=1).total  # the count
    else:
        found = trial_reads.search_trials(session, filters, sort=sort, page=page, per_page=limit)
        rows, total = found.rows, found.total
        last = found.rows[-1].trial.id if found.rows and page < found.pages and sort == "-id" else None
    return TrialPage(
        items=[TrialSummary(**trial_reads.summary(r)) for r in rows], next_before=last, total=total, page=page
    )


def _metrics(session: Session, trial_id: int) -> list[MetricPublic]:
    trials.get_trial(session, trial_id)  # 404 for an unknown trial, not an empty list
    return [MetricPublic(**trial_reads.metric_dict(m)) for m in trial_reads.trial_metrics(session, [trial_id])]


def _ratio_body(ratio: Any) -> RatioPublic | None:
    return None if ratio is None else RatioPublic(value=ratio.value, low=ratio.low, high=ratio.high)


def _pair_body(column: int, pair: comparison_domain.PairFinding) -> PairStatsPublic:
    st = pair.stats
    return PairStatsPublic(
        column=column,
        ratio=_ratio_body(st.ratio) if st else None,
        p_value=st.p_value if st else None,
        verdict=st.verdict.value if st else None,
        trials_needed=st.trials_needed if st else None,
        no_verdict_reason=st.why_no_finding if st else "",
        spread=pair.spread,
        stack_difference=pair.stack_difference,
        not_compared=pair.not_compared,
    )


def row_stats_body(stats: comparison_domain.RowStats | None) -> RowStatsPublic | None:
    """The contract of docs/statistics.md: the second column against the first at the top level."""
    if stats is None:
        return None
    each = [_pair_body(c, p) for c, p in enumerate(stats.pairs, start=1)]
    head = each[0]
    return RowStatsPublic(
        ratio=head.ratio,
        p_value=head.p_value,
        verdict=head.verdict,
        cv=[s.cv for s in stats.sides],
        between_cv=[s.between_cv for s in stats.sides],
        unstable=[s.unstable for s in stats.sides],
        trials_needed=head.trials_needed,
        no_verdict_reason=head.no_verdict_reason,
        trials=[s.trials for s in stats.sides],
        n=[s.samples for s in stats.sides],
        spread=head.spread,
        stack_difference=head.stack_difference,
        not_compared=head.not_compared,
        each=each,
    )


def comparison_body(c: comparison_domain.Comparison) -> ComparisonPublic:
    return ComparisonPublic(
        campaign=c.campaign.slug,
        by=c.by,
        across_stacks=c.across_stacks,
        rule=ComparisonRulePublic(
            confidence=c.rule.confidence,
            min_effect=c.rule.min_effect,
            unstable_cv=c.rule.unstable_cv,
            power=c.rule.power,
        ),
        columns=[
            ComparedColumnPublic(
                key=col.key,
                label=col.label,
                approach=col.approach_key,
                trials=col.trial_ids,
                stack_difference=col.stack_difference,
                left_out=col.left_out,
            )
            for col in c.columns
        ],
        trials=[
            ComparedTrialPublic(
                id=t.id,
                approach=t.approach_key,
                approach_title=t.approach_title,
                state=TrialState(t.state),
                runner=t.runner_name,
                started_at=t.started_at,
                finished_at=t.finished_at,
            )
            for t in c.trials
        ],
        metrics=[
            ComparedMetric(
                name=g.name,
                unit=g.unit,
                x_tag=g.x_tag,
                lower_is_better=g.lower_is_better,
                rows=[
                    ComparedMetricRow(
                        point=dict(r.point), values=r.values, differs=r.differs, stats=row_stats_body(r.stats)
                    )
                    for r in g.rows
                ],
            )
            for g in c.metrics
        ],
        stack=_components(c.stack),
        conditions=_components(c.conditions),
    )


def _components(rows: list[comparison_domain.StackRow]) -> list[ComparedComponent]:
    """The stack's or the conditions' rows: a component's value per column, and whether they differ."""
    return [ComparedComponent(component=s.component, label=s.label, values=s.values, differs=s.differs) for s in rows]


def _compare(
    session: Session, slug: str, trial_ids: list[int], approach_keys: list[str], across_stacks: bool
) -> ComparisonPublic:
    campaign = get_campaign(session, slug)
    return comparison_body(comparison_domain.compare(session, campaign, trial_ids, approach_keys, across_stacks))


# ---- JSON routes ------------------------------------------------------------------------------


@router.post("/api/campaigns/{slug}/run-next", response_model=RunResultPublic)
async def run_next(request: Request, slug: str, operator: OperatorDep) -> RunResultPublic:
    """Start the next candidate on a runner that can run it; when the runners that can run it are all
    busy, queue it (it starts when one frees up); else say why nothing can run."""
    return run_next_body(await start_next(request.app, slug, operator.name))


@router.post("/api/campaigns/{slug}/approaches/{key}/run", response_model=RunResultPublic)
async def run_approach(request: Request, slug: str, key: str, operator: OperatorDep) -> RunResultPublic:
    """Start this approach (any status) on a runner that can run it, or queue it while those runners
    are busy, or say why it cannot run."""
    return run_next_body(await start_next(request.app, slug, operator.name, approach_key=key))


@router.post("/api/campaigns/{slug}/settle", response_model=SettlePublic)
async def settle(request: Request, slug: Slug, data: SettleRequest, operator: OperatorDep) -> SettlePublic:
    """Settle A vs B (or, without b, repeat A): queue interleaved trials (A B A B ...) through the normal
    queue until the comparison on the deciding metric is decided (faster / slower, or the samples it
    needs reached) or `budget` trials per approach are spent. Follow it on
    `GET /api/campaigns/{slug}/compare?approach=A&approach=B`."""
    row, queued = await start_settle(request.app, slug, data.a, data.b, data.budget, operator.name, data.metric)
    return SettlePublic(
        **{name: getattr(row, name) for name in SettleFields.model_fields},
        id=row.id,
        a=data.a,
        b=data.b,
        state=row.state,
        outcome=row.outcome,
        queued=[t.id for t in queued if t.id is not None],  # stored: each has its id
    )


@router.get("/api/campaigns/{slug}/queue", response_model=list[QueuedTrialPublic])
async def campaign_queue(request: Request, slug: Slug, operator: OperatorDep) -> list[QueuedTrialPublic]:
    """The campaign's queued trials in the order they will start (approach priority, then when queued).
    Cancel one with `POST /api/trials/{trial_id}/cancel`."""
    return await app_state(request).db.read_in_tx(_queue, slug)


TRIAL_EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}, "application/json": {}}, "description": "The trials, CSV or a JSON array"}
}
TrialSort = Annotated[
    str,
    Query(
        pattern="^-?(" + "|".join(TRIAL_SORTS) + ")$",
        description="A column to sort by, a leading - for descending (default -id: newest first).",
    ),
]


@router.get("/api/trials", response_model=TrialPage)
async def list_trials(
    request: Request,
    operator: OperatorDep,
    filters: Annotated[TrialFilter, Query()],
    sort: TrialSort = "-id",
    page: Annotated[int, Query(ge=1, le=10**6, description="The page (from 1), of `limit` trials each.")] = 1,
    before: PageAfter = None,
    limit: Annotated[int, Query(ge=1, le=trial_reads.MAX_PAGE)] = 50,
) -> TrialPage:
    """Trials, filtered (`TrialFilter`), sorted, a page at a time, with how many the filter finds (`total`).
    Page by `page`, or (newest first only) pass `next_before` back as `before`. An unknown campaign, approach or
    runner is a 404. `GET /api/trials/export?format=csv|json` gives every trial the same filter finds."""
    if before is not None and sort != "-id":
        raise Invalid("before: only with the default sort (-id); use page otherwise", field="before")
    return await app_state(request).db.read_in_tx(_trial_page, filters, sort, page, before, limit)


@router.get("/api/trials/export", response_class=StreamingResponse, responses=TRIAL_EXPORT_RESPONSES)
async def export_trials(
    request: Request,
    operator: OperatorDep,
    filters: Annotated[TrialFilter, Query()],
    sort: TrialSort = "-id",
    format: Annotated[Literal["csv", "json"], Query(description="csv or json (a JSON array).")] = "csv",
) -> StreamingResponse:
    """Every trial the filter finds, in `sort`'s order, streamed (the trials page's "Export")."""
    await app_state(request).db.read_in_tx(trial_reads.search_trials, filters, sort=sort, per_page=1)  # 4xx first
    body = stream_in_session(app_state(request).engine, trial_reads.export_stream, filters, sort, format)
    name = f"trials-{filters.campaign or 'all'}.{format}"
    return StreamingResponse(
        body,
        media_type=trial_reads.MEDIA_TYPES[format],
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/api/trials/{trial_id}", response_model=TrialPublic)
async def get_trial(request: Request, trial_id: RowId, operator: OperatorDep) -> TrialPublic:
    """A trial: state, phase, attempts, runner, stack, timings, the verdict it proposes."""
    return await app_state(request).db.read_in_tx(_trial_public, trial_id)


@router.get("/api/trials/{trial_id}/metrics", response_model=list[MetricPublic])
async def trial_metrics(request: Request, trial_id: RowId, operator: OperatorDep) -> list[MetricPublic]:
    """The trial's metric rows, in the order its log printed them."""
    return await app_state(request).db.read_in_tx(_metrics, trial_id)


@router.post("/api/trials/{trial_id}/cancel")
async def cancel_trial(request: Request, trial_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    trial = await cancel(request.app, trial_id, operator.name)
    return trial_reads.trial_view(trial)


def _log_bytes(session: Session, trial_id: int) -> Iterator[bytes]:
    trial = trials.get_trial(session, trial_id)
    for text in log_domain.iter_full_log(session, trial):
        yield text.encode()


@router.get(
    "/api/trials/{trial_id}/log",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "The log"}},
)
async def download_log(request: Request, trial_id: RowId, operator: OperatorDep) -> StreamingResponse:
    """The full stored log (text/plain, as an attachment), every attempt in order, streamed a page of
    chunks at a time from a worker thread (constant memory, however long the log)."""
    db = app_state(request).db
    await db.read_in_tx(trials.get_trial, trial_id)  # 404 before streaming starts

    return StreamingResponse(
        stream_in_session(db.engine, _log_bytes, trial_id),  # iterated on worker threads, in its own session
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="trial-{trial_id}.log"'},
    )


@router.get("/api/campaigns/{slug}/compare", response_model=ComparisonPublic)
async def compare(
    request: Request,
    slug: str,
    operator: OperatorDep,
    trial: TrialIds = None,
    approach: ApproachKeys = None,
    across_stacks: AcrossStacks = False,
) -> ComparisonPublic:
    """Trials (or approaches, over their succeeded trials) of a campaign side by side: metric rows aligned
    by name and point, each row's statistics against the first column, over trials (the ratio with its
    interval, Welch's p-value, the verdict, within-run and run-to-run coefficients of variation, trials
    needed, the run-to-run spread a one-trial side used; docs/statistics.md), stacks diffed. Columns on another stack are compared only with `across_stacks`."""
    read = partial(
        _compare, slug=slug, trial_ids=trial or [], approach_keys=approach or [], across_stacks=across_stacks
    )
    return await app_state(request).db.read_in_tx(read)
