"""The charts page (profitability, allreduce curves, throughput, timeline) and its what-if.

The what-if is a GET: it computes with the values in the query and stores nothing. Only
"save as campaign inputs" (a POST, operator + CSRF) writes them to the campaign.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, ValidationError, create_model, field_validator
from sqlmodel import Session

from app import charts, charts_speculation
from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import inventory
from app.domain.answer import Input, ModelInputs, WhatIf, latency_series, throughput_rows
from app.domain.answer.read import Answer, read_answer
from app.domain.engine_config import ENGINES, EngineConfig, engine_config
from app.domain.errors import Conflict, Invalid
from app.domain.timeline import campaign_timeline
from app.errors import form_error_headers
from app.models import Campaign, ModelInputFields
from app.schemas import CampaignUpdate, optional_inputs
from app.web.render import navigate, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])


def _blank_is_none(cls: Any, value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


# The what-if inputs as a form sends them, each as ModelInputFields declares it (bounds, label); a blank field
# means "the campaign's value".
WhatIfForm: type[BaseModel] = create_model(
    "WhatIfForm",
    __config__=ConfigDict(extra="ignore"),
    __validators__={"blank_is_none": field_validator("*", mode="before")(_blank_is_none)},
    **optional_inputs(ModelInputFields.WHAT_IF),
)


def what_if_form(values: dict[str, Any]) -> BaseModel:
    """The what-if values validated against the inputs' declared bounds; a bad one is Invalid naming its field."""
    try:
        return WhatIfForm.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0])
        label = ModelInputFields.model_fields[field].title or field
        raise Invalid(f"{label}: {err['msg']}", field=field) from None


def what_if_changes(form: BaseModel, inputs: ModelInputs) -> WhatIf:
    """Only the values that differ from what the campaign already uses are what-ifs."""
    current = _form_values(inputs)
    return WhatIf(**{name: v for name, v in form.model_dump().items() if v is not None and v != current[name]})


def _form_values(inputs: ModelInputs) -> dict[str, Any]:
    """The values the campaign's model uses now, by what-if field."""
    found = {name: getattr(inputs, name) for name in ModelInputFields.WHAT_IF}
    return {name: v.value if isinstance(v, Input) else v for name, v in found.items()}


@dataclass(frozen=True)
class FormInput:
    """One what-if field as the form draws it, from its ModelInputFields declaration."""

    name: str
    label: str
    step: float
    min: float | None  # the declared ge (or gt: the server refuses the bound itself)
    max: float | None
    placeholder: str
    value: str


@cache
def _input_properties() -> dict[str, Any]:
    return ModelInputFields.model_json_schema()["properties"]


def form_inputs(inputs: ModelInputs) -> list[FormInput]:
    """The what-if form's fields with the campaign's current values, read from the inputs' JSON schema (the
    API's own: its bounds, titles and `x-form`), in declaration order."""
    current = _form_values(inputs)
    properties = _input_properties()
    out = []
    for name in ModelInputFields.WHAT_IF:
        prop = properties[name]
        number = next(b for b in prop.get("anyOf", [prop]) if b.get("type") != "null")
        form = prop.get("x-form", {})
        value = current[name]
        shown = "" if value is None else str(int(value)) if number["type"] == "integer" else repr(float(value))
        out.append(
            FormInput(
                name=name,
                label=prop.get("title", name),
                step=form.get("step", 1),
                min=number.get("minimum", number.get("exclusiveMinimum")),
                max=number.get("maximum"),
                placeholder=form.get("placeholder", ""),
                value=shown,
            )
        )
    return out


def answer_figures(answer: Answer) -> dict[str, Any]:
    """The figures that depend on the model's inputs (the what-if partial re-plots these)."""
    report = answer.report
    return {
        "chart_break_even": charts.break_even_accept_length(report) if report.speculative else None,
        "chart_verify": charts.verify_comm_vs_savings(report) if report.speculative and report.costs else None,
        "chart_comparison": None if report.speculative else charts.latency_comparison(report),
        "chart_latency": charts.allreduce_latency_vs_size(
            latency_series(answer.metrics, answer.approaches), report.inputs.verify_bytes, report.references
        ),
    }


def throughput_figure(answer: Answer, campaign: Campaign) -> dict[str, Any] | None:
    """Chart 3, or None while no approach has a measured or reported throughput or a dead end to mark: a
    baseline line alone across empty rows says nothing (no empty axes)."""
    rows = throughput_rows(answer.metrics, answer.approaches)
    reported = charts.reported_rates(campaign.reported, {a.key: a.title for a in answer.approaches})
    baseline = answer.report.inputs.baseline_tok_s.value
    if not reported and all(r.tok_s is None and r.status != "dead_end" for r in rows):
        return None
    return charts.throughput_vs_baseline(rows, baseline, reported)


def campaign_answer(
    session: Session, campaign: Campaign, form: BaseModel | None = None, conditions: str | None = None
) -> Answer:
    """`read_answer`, with the form's values that differ from the campaign's laid over it as a what-if."""
    found = read_answer(session, campaign, conditions=conditions)
    what_if = what_if_changes(form, found.report.inputs) if form is not None else WhatIf()
    if not what_if.any():
        return found
    return read_answer(
        session,
        campaign,
        conditions=conditions,
        what_if=what_if,
        metrics=found.metrics,
        approach_rows=found.approaches,
    )


@dataclass(frozen=True)
class DeployOption:
    """One engine's launch settings for the decision, or why there are none yet."""

    engine: str
    label: str
    config: EngineConfig | None
    error: str


ENGINE_LABELS = {"sglang": "SGLang (launch flags)", "vllm": "vLLM (--speculative-config)"}


def speculation_context(
    session: Session, campaign: Campaign, answer: Answer, *, read_only: bool = False
) -> dict[str, Any]:
    """Context of `_partials/speculation.html`: the answer over (batch, draft tokens) under its condition set (the
    set select), its charts and the Deploy panel."""
    found = answer.speculation
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
        "answer": answer,
        "read_only": read_only,
        "speculation_charts": {
            "speedup": charts_speculation.speedup_vs_batch(found),
            "heatmap": charts_speculation.speedup_heatmap(found),
            "break_even": charts_speculation.break_even_batches(found),
        },
        "deploy": deploy,
    }


def _profitability(answer: Answer, campaign: Campaign) -> dict[str, Any]:
    """Context of the what-if partial: the report and the figures that depend on its inputs."""
    return {"campaign": campaign, "report": answer.report, "what_if": answer.what_if, **answer_figures(answer)}


@router.get("/campaigns/{slug}/charts")
def charts_page(request: Request, session: SessionDep, slug: str, conditions: str | None = None) -> Response:
    campaign = inventory.get_campaign(session, slug)
    answer = campaign_answer(session, campaign, conditions=conditions)
    ctx = _profitability(answer, campaign)
    ctx["form_inputs"] = form_inputs(answer.report.inputs)
    ctx["chart_throughput"] = throughput_figure(answer, campaign)
    ctx["chart_timeline"] = charts.campaign_timeline(campaign_timeline(session, campaign))
    ctx.update(speculation_context(session, campaign, answer))
    return render(request, "charts.html", ctx)


@router.get("/campaigns/{slug}/charts/whatif")
def what_if(request: Request, session: SessionDep, slug: str) -> Response:
    """The answer with the form's values. A value out of its bounds answers nothing: the partial says which
    field (and the form marks it), so no earlier result stays on the page as if it were this one's."""
    campaign = inventory.get_campaign(session, slug)
    try:
        form = what_if_form(dict(request.query_params))
    except Invalid as exc:
        return render(
            request,
            "_partials/whatif.html",
            {"campaign": campaign, "invalid": exc.message},
            status_code=422,
            headers=form_error_headers(exc.message, exc.field),
        )
    return render(request, "_partials/whatif.html", _profitability(campaign_answer(session, campaign, form), campaign))


@router.post("/campaigns/{slug}/charts/whatif/save")
async def save_what_if(request: Request, session: SessionDep, operator: OperatorDep, slug: str) -> Response:
    campaign = inventory.get_campaign(session, slug)
    form = what_if_form(dict((await request.form()).items()))
    values = {k: v for k, v in form.model_dump().items() if v is not None}
    inventory.update_campaign(session, campaign, CampaignUpdate(**values))
    url = f"/campaigns/{campaign.slug}/charts"
    return navigate(request, url)
