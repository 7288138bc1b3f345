"""Campaign and approach pages. Mutations answer htmx with the changed fragment and an
HX-Trigger "campaign-changed" event; other fragments listen for it (hx-trigger from:body)."""

from __future__ import annotations

import json
import typing
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request, UploadFile
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from starlette.datastructures import FormData

from app.db import stream_in_session
from app.deps import AdminDep, OperatorDep, PageAfter, SessionDep, current_operator, require_operator
from app.domain import campaigns, history, inbox, lifecycle, repeats
from app.domain.campaign_files import campaign_file_text, export_stream, import_campaign
from app.domain.errors import Invalid
from app.models import ApproachStatus
from app.schemas import ApproachForm, ApproachUpdate, CampaignCreate, CampaignRename, Requirements, error_words
from app.services import campaigns as campaign_writes
from app.services import lifecycle as lifecycle_steps
from app.state import app_state
from app.web.render import CHANGED, navigate, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])
PERSON_STATUSES = list(ApproachStatus)
HISTORY_PAGE = 50


async def _posted_form(request: Request) -> FormData:
    return await request.form()  # parsed on the loop; the sync route reads the parsed fields


PostedForm = Annotated[FormData, Depends(_posted_form)]


def _validated(model, **values):
    """Build a pydantic model from form values (text: never strict); a bad field becomes a DomainError naming it."""
    try:
        return model.model_validate(values, strict=False)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise Invalid(f"{field}: {error_words(err)}", field=field) from None


def _json_field(text: str, field: str) -> dict | None:
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Invalid(f"{field}: not valid JSON ({exc})", field=field) from None
    if not isinstance(value, dict):
        raise Invalid(f"{field}: must be a JSON object", field=field)
    return value


def _overview(
    request: Request, session: SessionDep, slug: str, block: str | None = None, headers: dict | None = None
) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    rows = campaigns.approaches(session, campaign, archived=False)
    doing = campaigns.activities(session, rows)
    ctx = {
        "campaign": campaign,
        "approaches": rows,
        "archived": campaigns.approaches(session, campaign, archived=True),
        "counts": campaigns.status_counts(rows),
        "doing": doing,
        "doing_counts": campaigns.doing_counts(rows, doing),
        "person_statuses": PERSON_STATUSES,
        "campaign_history": lifecycle.history(session, campaign),
        "old_slugs": lifecycle.old_slugs(session, campaign),
        **_watching(request, session, campaign),
    }
    return render(request, "campaign.html", ctx, block=block, headers=headers)


def _front(session: SessionDep) -> dict[str, Any]:
    return {
        "campaigns": campaigns.list_campaigns(session),
        "archived_campaigns": campaigns.list_campaigns(session, archived=True),
    }


def _watching(request: Request, session: SessionDep, campaign, approach=None) -> dict[str, Any]:
    """The Watch button's context (_partials/watch.html) for the person asking."""
    operator = current_operator(request)
    user_id = operator.user_id if operator is not None else None
    return {"watch_approach": approach, "watching": inbox.watching(session, user_id, campaign, approach)}


@router.get("/")
def campaigns_page(request: Request, session: SessionDep) -> Response:
    return render(request, "campaigns.html", _front(session))


@router.post("/campaigns/{slug}/rename")
async def rename_campaign(request: Request, operator: OperatorDep, slug: str, form: PostedForm) -> Response:
    data = _validated(CampaignRename, slug=form.get("slug", ""))
    await lifecycle_steps.rename(request.app, slug, data, operator.name)
    return navigate(request, f"/campaigns/{data.slug}")


@router.post("/campaigns/{slug}/archive")
async def archive_campaign(request: Request, operator: OperatorDep, slug: str, form: PostedForm) -> Response:
    cancel = form.get("cancel_active") in ("true", "on", "1")
    await lifecycle_steps.archive(request.app, slug, operator.name, cancel_active=cancel)
    return navigate(request, f"/campaigns/{slug}")


@router.post("/campaigns/{slug}/restore")
async def restore_campaign(request: Request, operator: OperatorDep, slug: str) -> Response:
    await lifecycle_steps.restore(request.app, slug, operator.name)
    return navigate(request, f"/campaigns/{slug}")


@router.post("/campaigns/{slug}/delete")
async def delete_campaign(request: Request, operator: AdminDep, slug: str, form: PostedForm) -> Response:
    confirm = form.get("confirm", "")
    await lifecycle_steps.delete(request.app, slug, confirm if isinstance(confirm, str) else "", operator.name)
    return navigate(request, "/")


@router.post("/campaigns")
def create_campaign(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: Annotated[str, Form()],
    name: Annotated[str, Form()],
    description: Annotated[str, Form()] = "",
) -> Response:
    campaign = campaigns.create_campaign(
        session, _validated(CampaignCreate, slug=slug, name=name, description=description)
    )
    return navigate(request, f"/campaigns/{campaign.slug}")


@router.post("/campaigns/import")
async def import_page(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    file: UploadFile | None = None,
    text: Annotated[str, Form()] = "",
) -> Response:
    if file is not None and file.filename:  # YAML, or YAML gzip-compressed (a results campaign)
        text = campaign_file_text(
            await file.read(), expanded_limit=app_state(request).settings.max_campaign_file_expanded_bytes
        )
    if not text.strip():
        raise Invalid("choose a campaign file or paste its YAML", field="file")
    summary = import_campaign(session, text, actor=operator.name)
    if not request.headers.get("hx-request"):
        return navigate(request, f"/campaigns/{summary.campaign}")
    # htmx: the summary of what it added or changed, in the import card, with the way to the campaign.
    ctx = {**_front(session), "imported": summary}
    return render(request, "campaigns.html", ctx, block="import_result")


@router.get("/campaigns/{slug}")
def campaign_page(request: Request, session: SessionDep, slug: str) -> Response:
    return _overview(request, session, slug)


@router.get("/campaigns/{slug}/inventory")
def inventory_fragment(request: Request, session: SessionDep, slug: str) -> Response:
    return _overview(request, session, slug, block="inventory")


@router.get("/campaigns/{slug}/export.yaml")
def export_file(request: Request, session: SessionDep, slug: str) -> StreamingResponse:
    campaign = campaigns.get_campaign(session, slug)  # 404 before streaming starts
    return StreamingResponse(
        stream_in_session(app_state(request).engine, export_stream, slug),
        media_type="application/x-yaml",
        headers={"Content-Disposition": f'attachment; filename="{campaign.slug}.yaml"'},
    )


@router.post("/campaigns/{slug}/approaches")
def add_approach(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: str,
    data: Annotated[ApproachForm, Form()],
) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    campaign_writes.add_approach(session, campaign, data, operator.name)
    return _overview(request, session, slug, block="inventory", headers=CHANGED)


@router.post("/campaigns/{slug}/approaches/{key}/move")
def move_approach(
    request: Request, session: SessionDep, operator: OperatorDep, slug: str, key: str, direction: Annotated[str, Form()]
) -> Response:
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    step = {"up": -1, "down": 1, "top": -(10**6)}.get(direction)
    if step is None:
        raise Invalid("direction: must be up, down or top", field="direction")
    campaign_writes.move_approach(session, campaign, approach, approach.position + step)
    return _overview(request, session, slug, block="inventory", headers=CHANGED)


@router.post("/campaigns/{slug}/approaches/{key}/status")
def change_status(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: str,
    key: str,
    status: Annotated[str, Form()],
    reason: Annotated[str, Form()] = "",
    view: Annotated[str, Form()] = "approach",
) -> Response:
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    if status not in ApproachStatus.__members__:
        raise Invalid(f"status: unknown status {status!r}", field="status")
    campaign_writes.change_status(session, approach, status, reason, operator.name)
    if view == "inventory":
        return _overview(request, session, slug, block="inventory", headers=CHANGED)
    return _approach(request, session, slug, key, block="verdict", headers=CHANGED)


def _history_page(session: SessionDep, approach, before: int | None = None) -> dict:
    """One page of the approach's history, decisions first with their trial events folded (app/domain/history.py),
    and the decision id to ask the next page before (or None)."""
    groups, more = history.folded_history(session, approach, before=before, limit=HISTORY_PAGE)
    return {"groups": groups, "history_more": more}


def _shown(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else "" if value is None else str(value)


def requirements_view(stored: dict[str, Any] | None) -> dict[str, Any]:
    """An approach's requirements as its page shows them, from `Requirements`' own fields: `facts` (label,
    text) for each field set away from its default, `inputs` for the fields the edit form shows."""
    fields = Requirements.model_fields
    defaults = {name: field.get_default(call_default_factory=True) for name, field in fields.items()}
    values = {**defaults, **(stored or {})}
    facts = [(fields[n].title, _shown(values[n])) for n in fields if values[n] != defaults[n]]
    inputs = []
    for name in Requirements.FORM_FIELDS:
        field = fields[name]
        inputs.append(
            {
                "name": name,
                "label": field.title,
                "value": _shown(values[name]) if stored else "",
                "min": next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
                if field.annotation is int
                else None,
            }
        )
    return {"facts": facts, "inputs": inputs}


def _approach(
    request: Request, session: SessionDep, slug: str, key: str, block: str | None = None, headers: dict | None = None
) -> Response:
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    ctx = {
        "campaign": campaign,
        "approach": approach,
        "doing": campaigns.activities(session, [approach]).get(approach.id or 0),
        "requirements": requirements_view(approach.requirements),
        "evidence": campaigns.evidence(session, approach),
        **_history_page(session, approach),
        "repeats": repeats.approach_progress(session, approach),
        **_watching(request, session, campaign, approach),
        "person_statuses": PERSON_STATUSES,
        "heading_oob": block == "details",  # the heading rides along with the details fragment
    }
    return render(request, "approach.html", ctx, block=block, headers=headers)


@router.get("/campaigns/{slug}/approaches/{key}/history")
def history_rows(request: Request, session: SessionDep, slug: str, key: str, before: PageAfter) -> Response:
    """The next page of history items (htmx: replaces the "more" item)."""
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    ctx = {"campaign": campaign, "approach": approach, **_history_page(session, approach, before)}
    return render(request, "approach.html", ctx, block="history_rows")


@router.get("/campaigns/{slug}/approaches/{key}/repeats")
def repeats_fragment(request: Request, session: SessionDep, slug: str, key: str) -> Response:
    """Repeat / Settle progress of the approach: re-fetched on the page feed's notices."""
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    ctx = {"campaign": campaign, "approach": approach, "repeats": repeats.approach_progress(session, approach)}
    return render(request, "_partials/repeat_progress.html", ctx)


@router.get("/campaigns/{slug}/approaches/{key}/status")
def status_fragment(request: Request, session: SessionDep, slug: str, key: str) -> Response:
    """The status block (status, verdict link, history): re-fetched on the page feed's notices."""
    return _approach(request, session, slug, key, block="verdict")


@router.get("/campaigns/{slug}/approaches/{key}/details")
def details_fragment(request: Request, session: SessionDep, slug: str, key: str) -> Response:
    return _approach(request, session, slug, key, block="details")


@router.get("/campaigns/{slug}/approaches/{key}")
def approach_page(request: Request, session: SessionDep, slug: str, key: str) -> Response:
    return _approach(request, session, slug, key)


def _form_requirements(stored: dict[str, Any] | None, form: FormData) -> Requirements | None:
    """The approach's requirements with the fields this form shows put over the stored ones: a form that
    shows some fields merges onto the rest, so `nodes`, `sbatch` ... survive a form without them. A shown
    field left empty takes its default; a list is comma-separated. None when nothing is left."""
    values = dict(stored or {})
    for name, field in Requirements.model_fields.items():
        raw = form.get(name)
        if not isinstance(raw, str):
            continue  # not shown: kept
        values.pop(name, None)
        if raw.strip():
            is_list = typing.get_origin(field.annotation) is list
            values[name] = [s.strip() for s in raw.split(",") if s.strip()] if is_list else raw.strip()
    return _validated(Requirements, **values) if values else None


@router.post("/campaigns/{slug}/approaches/{key}")
def edit_approach(
    request: Request, session: SessionDep, operator: OperatorDep, slug: str, key: str, form: PostedForm
) -> Response:
    """The edit form: the `ApproachUpdate` and `Requirements` fields it shows; the rest stays as stored."""
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    values: dict[str, Any] = {n: v for n in ApproachUpdate.model_fields if isinstance(v := form.get(n), str)}
    if "recipe" in values:
        values["recipe"] = _json_field(values["recipe"], "recipe")
    if any(name in form for name in Requirements.model_fields):
        values["requirements"] = _form_requirements(approach.requirements, form)
    campaign_writes.update_approach(session, approach, _validated(ApproachUpdate, **values))
    return _approach(request, session, slug, key, block="details", headers=CHANGED)


@router.post("/campaigns/{slug}/approaches/{key}/delete")
def delete_approach(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: str,
    key: str,
    delete_evidence: Annotated[bool, Form()] = False,
) -> Response:
    """Delete: refused (409, in the flash) while the approach has trials, unless the form says
    `delete_evidence` (the button whose confirm counts what goes). Archive keeps them."""
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    campaign_writes.delete_approach(session, campaign, approach, delete_evidence=delete_evidence)
    return navigate(request, f"/campaigns/{slug}")


@router.post("/campaigns/{slug}/approaches/{key}/archive")
def archive_approach(request: Request, session: SessionDep, operator: OperatorDep, slug: str, key: str) -> Response:
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    campaign_writes.archive_approach(session, campaign, approach, operator.name)
    return navigate(request, f"/campaigns/{slug}/approaches/{key}")


@router.post("/campaigns/{slug}/approaches/{key}/restore")
def restore_approach(request: Request, session: SessionDep, operator: OperatorDep, slug: str, key: str) -> Response:
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    campaign_writes.restore_approach(session, campaign, approach)
    return navigate(request, f"/campaigns/{slug}/approaches/{key}")
