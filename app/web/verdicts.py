"""Verdicts, metrics and re-test flags: the trial page's proposal form and metrics table, the
campaign page's "waiting for a verdict" and "re-test" lists, and the metrics CSV."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine
from sqlmodel import Session

from app.deps import OperatorDep, RowId, SessionDep, require_operator
from app.domain import campaigns, comparison, proposals, verdicts
from app.domain import fingerprint as stack
from app.domain.errors import Invalid, or_not_found
from app.domain.trial_reads import trial_metrics
from app.models import NO_VERDICT_TRIAL_STATES, TERMINAL_TRIAL_STATES, Approach, ApproachStatus, Campaign, Trial
from app.services import campaigns as campaign_writes
from app.state import app_state
from app.web.render import CHANGED, render

router = APIRouter(dependencies=[Depends(require_operator)])
CSV_BATCH = 5000  # metric rows per fetch and per write of the CSV stream


class VerdictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    status: ApproachStatus
    reason: str = Field("", max_length=20000)
    components: list[str] = Field(default_factory=list, description="Stack components the verdict is bound to.")


def _trial(session: Session, trial_id: int) -> tuple[Trial, Approach, Campaign]:
    trial = or_not_found(session.get(Trial, trial_id), f"No trial #{trial_id}.")
    approach = session.get(Approach, trial.approach_id)
    campaign = session.get(Campaign, trial.campaign_id)
    return trial, approach, campaign  # type: ignore[return-value]


def _verdict_fragment(request: Request, session: Session, trial_id: int, headers: dict | None = None) -> Response:
    trial, approach, campaign = _trial(session, trial_id)
    recorded, current = verdicts.recorded_for(session, trial)
    ctx = {
        "recorded": recorded,
        "current": current,
        "trial": trial,
        "approach": approach,
        "campaign": campaign,
        "ended": trial.state in TERMINAL_TRIAL_STATES,
        "proposal": proposals.propose(session, trial) if trial.state in TERMINAL_TRIAL_STATES else None,
        "pending": approach.pending_trial_id == trial.id,
        "statuses": verdicts.VERDICT_STATUSES,
        "components": stack.STACK_COMPONENTS,
        "no_verdict": trial.state in NO_VERDICT_TRIAL_STATES,
        "values": {c: stack.component_value(trial.fingerprint, c) for c in stack.STACK_COMPONENTS},
        "binding": stack.describe_binding(approach.bound_to, approach.verdict_fingerprint),
    }
    return render(request, "_partials/verdict.html", ctx, headers=headers)


@router.get("/trials/{trial_id}/verdict", include_in_schema=False)
def verdict_fragment(request: Request, session: SessionDep, trial_id: RowId) -> Response:
    return _verdict_fragment(request, session, trial_id)


@router.post("/trials/{trial_id}/verdict", include_in_schema=False)
def confirm_from_form(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    trial_id: RowId,
    status: Annotated[str, Form()],
    reason: Annotated[str, Form()] = "",
    components: Annotated[list[str] | None, Form()] = None,
) -> Response:
    if status not in ApproachStatus.__members__:
        raise Invalid(f"status: unknown status {status!r}", field="status")
    trial, approach, _ = _trial(session, trial_id)
    campaign_writes.confirm_verdict(session, approach, trial, status, reason, components or [], operator.name)
    return _verdict_fragment(request, session, trial_id, headers=CHANGED)


@router.post("/api/trials/{trial_id}/verdict", tags=["trials"], summary="Confirm or edit a trial's proposed verdict")
def confirm_from_api(trial_id: RowId, data: VerdictRequest, session: SessionDep, operator: OperatorDep) -> dict:
    trial, approach, _ = _trial(session, trial_id)
    campaign_writes.confirm_verdict(session, approach, trial, data.status, data.reason, data.components, operator.name)
    return {
        "approach": approach.key,
        "status": approach.status,
        "reason": approach.reason,
        "bound_to": approach.bound_to,
        "verdict_fingerprint": approach.verdict_fingerprint,
    }


@router.get("/api/trials/{trial_id}/proposal", tags=["trials"], summary="The verdict an ended trial proposes")
def proposal_api(trial_id: RowId, session: SessionDep) -> dict:
    trial, _, _ = _trial(session, trial_id)
    if trial.state not in TERMINAL_TRIAL_STATES:
        raise Invalid(f"trial #{trial_id} has not ended ({trial.state})", field="trial_id")
    p = proposals.propose(session, trial)
    return {
        "status": p.status.value,
        "reason": p.reason,
        "components": p.components,
        "cause": p.cause,
        "signature": p.signature,
        "evidence_line": p.evidence_line,
        "label": p.label,
        "settle": list(p.settle) if p.settle else None,
    }


@router.get("/trials/{trial_id}/metrics", include_in_schema=False)
def metrics_fragment(request: Request, session: SessionDep, trial_id: RowId) -> Response:
    trial, approach, campaign = _trial(session, trial_id)
    rows = trial_metrics(session, [trial_id])
    tag_names = sorted({k for m in rows for k in m.tags if not k.endswith("_us") or k == "median_us"})
    # Each metric along its point's numeric coordinate (bytes, tokens, batch: comparison's x tag, as the
    # compare page plots it), else in print order; x_tag names the axis.
    series: dict[str, dict] = {}
    for group in comparison.metric_groups({trial_id: 0}, 1, rows):
        if group.x_tag:
            found = [r.values[0] for r in group.rows]
            x = [dict(r.point)[group.x_tag] for r in group.rows]
        else:  # every value as printed (a repeated point is a sample, not a replacement)
            found = [m.value for m in rows if m.name == group.name]
            x = list(range(1, len(found) + 1))
        values = [v if v is not None and math.isfinite(v) else None for v in found]
        series[group.name] = {"unit": group.unit, "values": values, "x": x, "x_tag": group.x_tag or ""}
    ctx = {"trial": trial, "metrics": rows, "tag_names": tag_names, "series": series}
    return render(request, "_partials/metrics_table.html", ctx)


CSV_SQL = (
    'SELECT metric.trial_id, approach."key", metric.name, metric.value, metric.unit, CAST(metric.tags AS TEXT), '
    "metric.created_at FROM metric JOIN approach ON approach.id = metric.approach_id "
    'WHERE metric.campaign_id = {param} ORDER BY metric.trial_id, metric.seq, metric."index"'
)


class _Converted(dict):
    """A cache of a conversion per distinct value: `cache[value]` converts on the first miss only."""

    def __init__(self, convert: Callable[[Any], str]) -> None:
        super().__init__()
        self.convert = convert

    def __missing__(self, value: Any) -> str:
        if len(self) > 50_000:
            self.clear()
        found = self[value] = self.convert(value)
        return found


def csv_field(text: str) -> str:
    """One field as csv.writer writes it in a row of several (QUOTE_MINIMAL, "\\r\\n" lines)."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_blocks(engine: Engine, campaign_id: int) -> Iterator[bytes]:
    """A campaign's metrics as CSV blocks of CSV_BATCH rows, in constant memory (Starlette iterates a sync
    body on a worker thread); the same bytes csv.writer writes (tests/web/test_verdict_routes.py checks).

    The driver's cursor directly (no SQLAlchemy row processing): a server-side cursor on PostgreSQL,
    fetchmany batches on SQLite. The text fields repeat from row to row (approach keys, names, units, a
    trial's tags and timestamp), so each distinct value is quoted and converted once; a line is one
    f-string (csv.writer's per-field checks were most of the cost)."""
    sqlite = engine.dialect.name == "sqlite"

    def iso(value: Any) -> str:
        if sqlite:  # stored as "YYYY-MM-DD HH:MM:SS.ffffff" (UTC): what datetime.isoformat() gives for it
            return (value[:10] + "T" + value[11:]).removesuffix(".000000")
        return value.isoformat()

    text = _Converted(csv_field)
    tags = _Converted(lambda stored: csv_field(json.dumps(json.loads(stored) if stored else {}, sort_keys=True)))
    times = _Converted(iso)
    yield b"trial_id,approach,name,value,unit,tags,recorded_at\r\n"
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        cursor = dbapi.cursor() if sqlite else dbapi.cursor(name="metrics_csv")
        try:
            cursor.execute(CSV_SQL.format(param="?" if sqlite else "%s"), (campaign_id,))
            while rows := cursor.fetchmany(CSV_BATCH):
                yield "".join(
                    [
                        f"{trial_id},{text[key]},{text[name]},{value!r},{text[unit]},{tags[tag]},{times[created]}\r\n"
                        for trial_id, key, name, value, unit, tag, created in rows
                    ]
                ).encode()
        finally:
            cursor.close()
            conn.rollback()


@router.get("/campaigns/{slug}/metrics.csv", include_in_schema=False)
@router.get(
    "/api/campaigns/{slug}/metrics.csv",
    tags=["campaigns"],
    summary="Every metric of a campaign's trials, as CSV",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/csv": {}}, "description": "CSV"}},
)
def metrics_csv(request: Request, slug: str, session: SessionDep) -> StreamingResponse:
    """Streamed in constant memory on a worker thread: see `csv_blocks`."""
    campaign_id = campaigns.get_campaign(session, slug).id  # 404 before streaming starts
    assert campaign_id is not None
    body = csv_blocks(app_state(request).engine, campaign_id)
    return StreamingResponse(
        body, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{slug}-metrics.csv"'}
    )


@router.get("/campaigns/{slug}/verdicts", include_in_schema=False)
def campaign_verdicts(request: Request, session: SessionDep, slug: str) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    flags = verdicts.retest_flags(session, campaign)
    flagged = [(a, flags[a.id]) for a in campaigns.approaches(session, campaign) if a.id in flags]
    ctx = {"campaign": campaign, "pending": verdicts.pending(session, campaign), "flagged": flagged}
    return render(request, "_partials/campaign_verdicts.html", ctx)
