"""Verdicts, metrics and re-test flags: the trial page's proposal form and metrics table, the
campaign page's "waiting for a verdict" and "re-test" lists, and the metrics CSV."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Text, cast
from sqlmodel import Session, select

from app.db import open_session
from app.deps import OperatorDep, RowId, SessionDep, require_operator
from app.domain import fingerprint as stack
from app.domain import inventory, verdicts
from app.domain.errors import Invalid, NotFound
from app.models import Approach, ApproachStatus, Campaign, Metric, Trial
from app.services import events
from app.web.render import render

router = APIRouter(dependencies=[Depends(require_operator)])
CHANGED = {"HX-Trigger": "campaign-changed"}
CSV_BATCH = 5000  # metric rows per fetch and per write of the CSV stream
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "lost"}


class VerdictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    status: ApproachStatus
    reason: str = Field("", max_length=20000)
    components: list[str] = Field(default_factory=list, description="Stack components the verdict is bound to.")


def _trial(session: Session, trial_id: int) -> tuple[Trial, Approach, Campaign]:
    trial = session.get(Trial, trial_id)
    if trial is None:
        raise NotFound(f"No trial #{trial_id}.")
    approach = session.get(Approach, trial.approach_id)
    campaign = session.get(Campaign, trial.campaign_id)
    return trial, approach, campaign  # type: ignore[return-value]


def _verdict_fragment(request: Request, session: Session, trial_id: int, headers: dict | None = None) -> Response:
    trial, approach, campaign = _trial(session, trial_id)
    ctx = {
        "trial": trial,
        "approach": approach,
        "campaign": campaign,
        "ended": trial.state in TERMINAL,
        "proposal": verdicts.propose(session, trial) if trial.state in TERMINAL else None,
        "pending": approach.pending_trial_id == trial.id,
        "statuses": verdicts.VERDICT_STATUSES,
        "components": stack.STACK_COMPONENTS,
        "no_verdict": trial.state in verdicts.NO_VERDICT_STATES,
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
    verdicts.confirm(session, approach, trial, status, reason, components or [], operator.name)
    events.after_commit(session, *events.of_trial(trial))
    return _verdict_fragment(request, session, trial_id, headers=CHANGED)


@router.post("/api/trials/{trial_id}/verdict", tags=["trials"], summary="Confirm or edit a trial's proposed verdict")
def confirm_from_api(trial_id: RowId, data: VerdictRequest, session: SessionDep, operator: OperatorDep) -> dict:
    trial, approach, _ = _trial(session, trial_id)
    verdicts.confirm(session, approach, trial, data.status, data.reason, data.components, operator.name)
    events.after_commit(session, *events.of_trial(trial))
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
    if trial.state not in TERMINAL:
        raise Invalid(f"trial #{trial_id} has not ended ({trial.state})", field="trial_id")
    p = verdicts.propose(session, trial)
    return {
        "status": p.status.value,
        "reason": p.reason,
        "components": p.components,
        "cause": p.cause,
        "signature": p.signature,
        "evidence_line": p.evidence_line,
    }


def _metrics(session: Session, where) -> list[Metric]:
    return list(session.exec(select(Metric).where(where).order_by(Metric.trial_id, Metric.seq, Metric.index)))


@router.get("/trials/{trial_id}/metrics", include_in_schema=False)
def metrics_fragment(request: Request, session: SessionDep, trial_id: RowId) -> Response:
    trial, approach, campaign = _trial(session, trial_id)
    rows = _metrics(session, Metric.trial_id == trial_id)
    tag_names = sorted({k for m in rows for k in m.tags if not k.endswith("_us") or k == "median_us"})
    series: dict[str, dict] = {}
    for m in rows:
        series.setdefault(m.name, {"unit": m.unit, "values": []})["values"].append(
            m.value if math.isfinite(m.value) else None
        )
    ctx = {"trial": trial, "metrics": rows, "tag_names": tag_names, "series": series}
    return render(request, "_partials/metrics_table.html", ctx)


@router.get("/campaigns/{slug}/metrics.csv", include_in_schema=False)
@router.get(
    "/api/campaigns/{slug}/metrics.csv",
    tags=["campaigns"],
    summary="Every metric of a campaign's trials, as CSV",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/csv": {}}, "description": "CSV"}},
)
def metrics_csv(request: Request, slug: str, session: SessionDep) -> StreamingResponse:
    """Streamed in constant memory: rows as columns (no ORM objects), read with a server-side cursor on
    PostgreSQL, written a batch at a time on a worker thread."""
    campaign_id = inventory.get_campaign(session, slug).id  # 404 before streaming starts
    engine = request.app.state.engine

    def body() -> Iterator[bytes]:  # Starlette iterates sync bodies on a worker thread
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["trial_id", "approach", "name", "value", "unit", "tags", "recorded_at"])
        canonical: dict[str, str] = {}  # stored tags text -> sorted JSON (a campaign repeats few tag sets)

        def tags_json(text: str) -> str:
            found = canonical.get(text)
            if found is None:
                if len(canonical) > 50_000:
                    canonical.clear()
                found = canonical[text] = json.dumps(json.loads(text), sort_keys=True)
            return found

        query = (
            select(
                Metric.trial_id,
                Approach.key,
                Metric.name,
                Metric.value,
                Metric.unit,
                cast(Metric.tags, Text),
                Metric.created_at,
            )  # type: ignore[arg-type]
            .join(Approach, Approach.id == Metric.approach_id)  # type: ignore[arg-type]
            .where(Metric.campaign_id == campaign_id)
            .order_by(Metric.trial_id, Metric.seq, Metric.index)  # type: ignore[arg-type]
            .execution_options(yield_per=CSV_BATCH)
        )
        with open_session(engine, write=False) as reader:
            for rows in reader.connection().execute(query).partitions():
                writer.writerows(
                    [trial_id, key, name, repr(value), unit, tags_json(tags), created_at.isoformat()]
                    for trial_id, key, name, value, unit, tags, created_at in rows
                )
                yield out.getvalue().encode()
                out.seek(0)
                out.truncate()

    return StreamingResponse(
        body(), media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{slug}-metrics.csv"'}
    )


@router.get("/campaigns/{slug}/verdicts", include_in_schema=False)
def campaign_verdicts(request: Request, session: SessionDep, slug: str) -> Response:
    campaign = inventory.get_campaign(session, slug)
    flags = verdicts.retest_flags(session, campaign)
    flagged = [(a, flags[a.id]) for a in inventory.approaches(session, campaign) if a.id in flags]
    ctx = {"campaign": campaign, "pending": verdicts.pending(session, campaign), "flagged": flagged}
    return render(request, "_partials/campaign_verdicts.html", ctx)
