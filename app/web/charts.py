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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from sqlmodel import Session

from app import charts
from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import campaigns
from app.domain.acceptance import accept_length_bound_error, conversion_words
from app.domain.answer import Answer, AnswerQuery, Input, ModelInputs, WhatIf, read_answer
from app.domain.errors import Invalid
from app.domain.timeline import campaign_timeline
from app.errors import form_error_headers
from app.models import Campaign, ModelInputFields
from app.schemas import CampaignUpdate, optional_inputs
from app.services import campaigns as campaign_writes
from app.web.answer_view import (
    answer_figures,
    answer_figures_json,
    speculation_context,
    throughput_figure,
    throughput_figure_json,
)
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
    # Not a campaign input: tried in place of the measured allreduce latencies, laid over the answer inside
    # read_answer (AnswerQuery.t_ar_us, report.with_allreduce_latency).
    allreduce_latency_us=(
        float | None,
        Field(None, gt=0, le=1e7, allow_inf_nan=False, title="Allreduce latency t_ar (us)"),
    ),
)
WHAT_IF_ONLY = ("allreduce_latency_us",)


def what_if_form(values: dict[str, Any]) -> BaseModel:
    """The what-if values validated against the inputs' declared bounds; a bad one is Invalid naming its field."""
    return _validated(WhatIfForm, values)


def _validated(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """`model` from the form's values; a bad one is Invalid naming its field (by its declared label)."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        label = (model.model_fields[field].title or field) if field in model.model_fields else field
        raise Invalid(f"{label}: {err['msg'].removeprefix('Value error, ')}", field=field or None) from None


def what_if_changes(form: BaseModel, inputs: ModelInputs) -> WhatIf:
    """Only the values that differ from what the campaign already uses are what-ifs. An accept length above
    draft steps + 1 (the form's or the campaign's, whichever the what-if uses) is Invalid (acceptance.py)."""
    current = _form_values(inputs)
    values = form.model_dump(exclude=set(WHAT_IF_ONLY))
    tau = values["accept_length"] if values["accept_length"] is not None else current["accept_length"]
    steps = values["draft_steps"] if values["draft_steps"] is not None else current["draft_steps"]
    if tau is not None and steps is not None:
        error = accept_length_bound_error(tau, int(steps), "draft step")
        if error:
            field = "accept_length" if values["accept_length"] is not None else "draft_steps"
            label = ModelInputFields.model_fields[field].title or field
            raise Invalid(f"{label}: {error}", field=field)
    return WhatIf(**{name: v for name, v in values.items() if v is not None and v != current[name]})


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
    clearable: bool  # a value is stored on the campaign and its column may be empty: the form offers to clear it


@cache
def _input_properties() -> dict[str, Any]:
    return ModelInputFields.model_json_schema()["properties"]


def _nullable(name: str) -> bool:
    """The input's column may be empty (hidden size and verify tokens may not)."""
    return "null" in {b.get("type") for b in _input_properties()[name].get("anyOf", [])}


def form_inputs(inputs: ModelInputs, campaign: Campaign) -> list[FormInput]:
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
                clearable=getattr(campaign, name) is not None and _nullable(name),
            )
        )
    return out


def what_if_query(session: Session, campaign: Campaign, form: BaseModel, conditions: str | None) -> AnswerQuery:
    """What the what-if form asks: its values that differ from the ones the campaign's answer uses (under the same
    conditions), and the what-if allreduce latency, which replaces the measured and reported ones."""
    plain = read_answer(session, campaign, AnswerQuery(conditions))
    what_if = what_if_changes(form, plain.report.inputs)
    return AnswerQuery(conditions, what_if, getattr(form, "allreduce_latency_us", None))


def _profitability(answer: Answer, campaign: Campaign) -> dict[str, Any]:
    """Context of the what-if partial: the report and the figures that depend on its inputs."""
    return {
        "campaign": campaign,
        "report": answer.report,
        "what_if": answer.what_if,
        "t_ar_us": answer.t_ar_us,
        **answer_figures(answer),
        "figures_json": answer_figures_json(answer),
    }


@router.get("/campaigns/{slug}/charts")
def charts_page(request: Request, session: SessionDep, slug: str, conditions: str | None = None) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    answer = read_answer(session, campaign, AnswerQuery(conditions))
    ctx = _profitability(answer, campaign)
    ctx["form_inputs"] = form_inputs(answer.report.inputs, campaign)
    ctx["chart_throughput"] = throughput_figure(answer, campaign)
    ctx["chart_throughput_json"] = throughput_figure_json(answer, campaign)
    ctx["chart_timeline"] = charts.campaign_timeline(campaign_timeline(session, campaign))
    ctx.update(speculation_context(session, campaign, answer, request.query_params.get("serve_batches")))
    ctx["deploy_form"] = True
    ctx["engine_check"] = answer.engine_check
    unconditional = campaign.accept_unconditional
    ctx["acceptance_conversion"] = conversion_words(unconditional) if unconditional else None
    return render(request, "charts.html", ctx)


@router.get("/campaigns/{slug}/charts/whatif")
def what_if(request: Request, session: SessionDep, slug: str) -> Response:
    """The answer with the form's values. A value out of its bounds answers nothing: the partial says which
    field (and the form marks it), so no earlier result stays on the page as if it were this one's."""
    campaign = campaigns.get_campaign(session, slug)
    conditions = request.query_params.get("conditions") or None
    try:
        query = what_if_query(session, campaign, what_if_form(dict(request.query_params)), conditions)
        answer = read_answer(session, campaign, query)
    except Invalid as exc:
        return render(
            request,
            "_partials/whatif.html",
            {"campaign": campaign, "invalid": exc.message},
            status_code=422,
            headers=form_error_headers(exc.message, exc.field),
        )
    ctx = _profitability(answer, campaign)
    # The whole answer follows the what-if: the grid, B*, tiers and the configs shown (swapped in out of band).
    ctx.update(speculation_context(session, campaign, answer, request.query_params.get("serve_batches")))
    ctx["deploy_form"] = True
    ctx["oob_speculation"] = True
    return render(request, "_partials/whatif.html", ctx)


@router.post("/campaigns/{slug}/charts/whatif/save")
async def save_what_if(request: Request, session: SessionDep, operator: OperatorDep, slug: str) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    form = what_if_form(dict((await request.form()).items()))
    values = {k: v for k, v in form.model_dump(exclude=set(WHAT_IF_ONLY)).items() if v is not None}
    campaign_writes.update_campaign(session, campaign, _validated(CampaignUpdate, values))
    url = f"/campaigns/{campaign.slug}/charts"
    return navigate(request, url)


def _acceptance_values(form: dict[str, Any]) -> dict[str, Any]:
    """The acceptance form's text fields as CampaignUpdate values ("1: 1.8, 3: 2.4"; "0.8, 0.7"); blank: kept."""
    values: dict[str, Any] = {}
    for name, text in form.items():
        text = str(text).strip()
        if name not in ("accept_length_by_k", "accept_alphas", "accept_unconditional") or not text:
            continue
        parts = [p for p in text.replace(";", ",").split(",") if p.strip()]
        try:
            if name == "accept_length_by_k":
                pairs = [p.split(":") for p in parts]
                values[name] = {k.strip(): float(v) for k, v in pairs}
            else:
                values[name] = [float(p) for p in parts]
        except ValueError:
            example = "1: 1.8, 3: 2.4" if name == "accept_length_by_k" else "0.8, 0.7, 0.6"
            raise Invalid(f"{name}: write it as {example}, not {text[:40]!r}", field=name) from None
    return values


@router.post("/campaigns/{slug}/charts/acceptance")
async def save_acceptance(request: Request, session: SessionDep, operator: OperatorDep, slug: str) -> Response:
    """Store acceptance entered per k, as conditional alphas or as vLLM's unconditional rates (converted)."""
    campaign = campaigns.get_campaign(session, slug)
    values = _acceptance_values(dict((await request.form()).items()))
    campaign_writes.update_campaign(session, campaign, _validated(CampaignUpdate, values))
    return navigate(request, f"/campaigns/{campaign.slug}/charts#acceptance")


@router.post("/campaigns/{slug}/charts/whatif/clear/{field}")
def clear_stored_input(request: Request, session: SessionDep, operator: OperatorDep, slug: str, field: str) -> Response:
    """Remove one stored model input (the model then uses the measured one, or says it is missing)."""
    campaign = campaigns.get_campaign(session, slug)
    if field not in ModelInputFields.WHAT_IF or not _nullable(field):
        raise Invalid(f"not a what-if input that can be cleared: {field[:40]!r}", field="field")
    campaign_writes.update_campaign(session, campaign, CampaignUpdate.model_validate({field: None}))
    return navigate(request, f"/campaigns/{campaign.slug}/charts")
