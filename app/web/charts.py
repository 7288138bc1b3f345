"""The charts page (profitability, allreduce curves, throughput, timeline) and its what-if.

The what-if is a GET: it computes with the values in the query and stores nothing. Only
"save as campaign inputs" (a POST, operator + CSRF) writes them to the campaign.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlmodel import Session

from app import charts, charts_speculation
from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import inventory
from app.domain.engine_config import ENGINES, EngineConfig, engine_config
from app.domain.errors import Conflict, Invalid
from app.domain.profitability import (
    CampaignMetrics,
    ModelInputs,
    ProfitabilityReport,
    WhatIf,
    latency_series,
    load_campaign_metrics,
    profitability_report,
    throughput_rows,
)
from app.domain.speculation import SpeculationAnswer
from app.domain.speculation_inputs import campaign_speculation
from app.domain.timeline import campaign_timeline
from app.models import Approach, Campaign
from app.schemas import CampaignUpdate
from app.web.render import navigate, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])


class WhatIfForm(BaseModel):
    """The what-if inputs as a form sends them: a blank field means "the campaign's value"."""

    model_config = ConfigDict(extra="ignore")
    accept_length: float | None = Field(None, ge=1, le=64)
    draft_steps: int | None = Field(None, ge=0, le=64)
    draft_step_ms: float | None = Field(None, ge=0, le=10_000)
    verify_compute_ms: float | None = Field(None, ge=0, le=100_000)
    allreduces_per_verify: int | None = Field(None, ge=0, le=100_000)
    verify_tokens: int | None = Field(None, ge=1, le=4096)
    baseline_tok_s: float | None = Field(None, gt=0, le=1_000_000)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    def changes_from(self, inputs: ModelInputs) -> WhatIf:
        """Only the values that differ from what the campaign already uses are what-ifs."""
        current = _form_values(inputs)
        return WhatIf(
            **{name: value for name, value in self.model_dump().items() if value is not None and value != current[name]}
        )


def _form_values(inputs: ModelInputs) -> dict[str, Any]:
    """The values the campaign's model uses now, by what-if field."""
    return {
        "accept_length": inputs.accept_length.value,
        "draft_steps": inputs.draft_steps.value,
        "draft_step_ms": inputs.draft_step_ms.value,
        "verify_compute_ms": inputs.verify_compute_ms.value,
        "allreduces_per_verify": inputs.allreduces_per_verify.value,
        "verify_tokens": inputs.verify_tokens,
        "baseline_tok_s": inputs.baseline_tok_s.value,
    }


@dataclass(frozen=True)
class CampaignAnswer:
    """What the charts and status pages draw, read once: the campaign's model metrics and approaches, and
    the report (with the what-if laid over it, when there is one)."""

    metrics: CampaignMetrics
    approaches: list[Approach]
    report: ProfitabilityReport
    what_if: WhatIf

    def figures(self) -> dict[str, Any]:
        """The figures that depend on the model's inputs (the what-if partial re-plots these)."""
        report = self.report
        return {
            "chart_break_even": charts.break_even_accept_length(report) if report.speculative else None,
            "chart_verify": charts.verify_comm_vs_savings(report) if report.speculative and report.costs else None,
            "chart_comparison": None if report.speculative else charts.latency_comparison(report),
            "chart_latency": charts.allreduce_latency_vs_size(
                latency_series(self.metrics, self.approaches), report.inputs.verify_bytes, report.references
            ),
        }


def throughput_figure(answer: CampaignAnswer) -> dict[str, Any] | None:
    """Chart 3, or None while no approach has a measured throughput or a dead end to mark: a baseline
    line alone across empty rows says nothing (no empty axes)."""
    rows = throughput_rows(answer.metrics, answer.approaches)
    baseline = answer.report.inputs.baseline_tok_s.value
    if all(r.tok_s is None and r.status != "dead_end" for r in rows):
        return None
    return charts.throughput_vs_baseline(rows, baseline)


def campaign_answer(session: Session, campaign: Campaign, form: WhatIfForm | None = None) -> CampaignAnswer:
    """One pass over the campaign's metrics and approaches, however many approaches and trials it has."""
    metrics = load_campaign_metrics(session, campaign)
    rows = inventory.approaches(session, campaign)
    report = profitability_report(session, campaign, metrics=metrics, approach_rows=rows)
    what_if = form.changes_from(report.inputs) if form else WhatIf()
    if what_if.any():
        report = profitability_report(session, campaign, what_if, metrics=metrics, approach_rows=rows)
    return CampaignAnswer(metrics, rows, report, what_if)


@dataclass(frozen=True)
class DeployOption:
    """One engine's launch settings for the decision, or why there are none yet."""

    engine: str
    label: str
    config: EngineConfig | None
    error: str


ENGINE_LABELS = {"sglang": "SGLang (launch flags)", "vllm": "vLLM (--speculative-config)"}


def speculation_context(session: Session, campaign: Campaign, answer: CampaignAnswer) -> dict[str, Any]:
    """Context of `_partials/speculation.html`: the answer over (batch, draft tokens), its charts and the
    Deploy panel, from the metrics the page already read (one more query, for the samples)."""
    found: SpeculationAnswer = campaign_speculation(session, campaign, answer.metrics, answer.approaches)
    deploy = []
    for engine in ENGINES:
        try:
            deploy.append(
                DeployOption(engine, ENGINE_LABELS[engine], engine_config(engine, found, answer.approaches), "")
            )
        except Conflict as exc:  # no decision to deploy yet: the panel says why
            deploy.append(DeployOption(engine, ENGINE_LABELS[engine], None, exc.message))
    return {
        "speculation": found,
        "speculation_charts": {
            "speedup": charts_speculation.speedup_vs_batch(found),
            "heatmap": charts_speculation.speedup_heatmap(found),
            "break_even": charts_speculation.break_even_batches(found),
        },
        "deploy": deploy,
    }


def _profitability(answer: CampaignAnswer, campaign: Campaign) -> dict[str, Any]:
    """Context of the what-if partial: the report and the figures that depend on its inputs."""
    return {"campaign": campaign, "report": answer.report, "what_if": answer.what_if, **answer.figures()}


@router.get("/campaigns/{slug}/charts")
def charts_page(request: Request, session: SessionDep, slug: str) -> Response:
    campaign = inventory.get_campaign(session, slug)
    answer = campaign_answer(session, campaign)
    ctx = _profitability(answer, campaign)
    ctx["form"] = _form_values(answer.report.inputs)
    ctx["chart_throughput"] = throughput_figure(answer)
    ctx["chart_timeline"] = charts.campaign_timeline(campaign_timeline(session, campaign))
    ctx.update(speculation_context(session, campaign, answer))
    return render(request, "charts.html", ctx)


@router.get("/campaigns/{slug}/charts/whatif")
def what_if(request: Request, session: SessionDep, slug: str, form: Annotated[WhatIfForm, Query()]) -> Response:
    campaign = inventory.get_campaign(session, slug)
    return render(request, "_partials/whatif.html", _profitability(campaign_answer(session, campaign, form), campaign))


@router.post("/campaigns/{slug}/charts/whatif/save")
async def save_what_if(request: Request, session: SessionDep, operator: OperatorDep, slug: str) -> Response:
    campaign = inventory.get_campaign(session, slug)
    try:
        form = WhatIfForm.model_validate(dict((await request.form()).items()))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise Invalid(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}", field=str(err["loc"][0])) from None
    values = {k: v for k, v in form.model_dump().items() if v is not None}
    inventory.update_campaign(session, campaign, CampaignUpdate(**values))
    url = f"/campaigns/{campaign.slug}/charts"
    return navigate(request, url)
