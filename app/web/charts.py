"""The charts page (profitability, allreduce curves, throughput, timeline) and its what-if.

The what-if is a GET: it computes with the values in the query and stores nothing. Only
"save as campaign inputs" (a POST, operator + CSRF) writes them to the campaign.
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlmodel import Session

from app import charts
from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import inventory
from app.domain.errors import Invalid
from app.domain.profitability import (ModelInputs, WhatIf, latency_series, profitability_report,
                                      throughput_rows)
from app.domain.timeline import campaign_timeline
from app.models import Campaign
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
        current = {"accept_length": inputs.accept_length.value, "draft_steps": inputs.draft_steps.value,
                   "draft_step_ms": inputs.draft_step_ms.value, "verify_compute_ms": inputs.verify_compute_ms.value,
                   "allreduces_per_verify": inputs.allreduces_per_verify.value,
                   "verify_tokens": inputs.verify_tokens, "baseline_tok_s": inputs.baseline_tok_s.value}
        return WhatIf(**{name: value for name, value in self.model_dump().items()
                         if value is not None and value != current[name]})


def _form_values(inputs: ModelInputs) -> dict[str, Any]:
    return {"accept_length": inputs.accept_length.value, "draft_steps": inputs.draft_steps.value,
            "draft_step_ms": inputs.draft_step_ms.value, "verify_compute_ms": inputs.verify_compute_ms.value,
            "allreduces_per_verify": inputs.allreduces_per_verify.value, "verify_tokens": inputs.verify_tokens,
            "baseline_tok_s": inputs.baseline_tok_s.value}


def _profitability(session: Session, campaign: Campaign, form: WhatIfForm | None = None) -> dict[str, Any]:
    """Context of the what-if partial: the report and the two figures that depend on its inputs."""
    report = profitability_report(session, campaign)
    what_if = form.changes_from(report.inputs) if form else WhatIf()
    if what_if.any():
        report = profitability_report(session, campaign, what_if)
    return {
        "campaign": campaign, "report": report, "what_if": what_if,
        "chart_verify": charts.verify_comm_vs_savings(report) if report.costs else None,
        "chart_latency": charts.allreduce_latency_vs_size(latency_series(session, campaign), report.inputs.verify_bytes),
    }


@router.get("/campaigns/{slug}/charts")
def charts_page(request: Request, session: SessionDep, slug: str) -> Response:
    campaign = inventory.get_campaign(session, slug)
    ctx = _profitability(session, campaign)
    ctx["form"] = _form_values(ctx["report"].inputs)
    ctx["chart_throughput"] = charts.throughput_vs_baseline(throughput_rows(session, campaign),
                                                            ctx["report"].inputs.baseline_tok_s.value)
    ctx["chart_timeline"] = charts.campaign_timeline(campaign_timeline(session, campaign))
    return render(request, "charts.html", ctx)


@router.get("/campaigns/{slug}/charts/whatif")
def what_if(request: Request, session: SessionDep, slug: str, form: Annotated[WhatIfForm, Query()]) -> Response:
    campaign = inventory.get_campaign(session, slug)
    return render(request, "_partials/whatif.html", _profitability(session, campaign, form))


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
