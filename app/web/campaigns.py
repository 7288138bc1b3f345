"""Campaign and approach pages. Mutations answer htmx with the changed fragment and an
HX-Trigger "campaign-changed" event; other fragments listen for it (hx-trigger from:body)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request, UploadFile
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError

from app.db import stream_in_session
from app.deps import OperatorDep, PageAfter, SessionDep, require_operator
from app.domain import inventory
from app.domain.campaign_files import export_stream, import_campaign
from app.domain.errors import Invalid
from app.models import ApproachStatus
from app.schemas import ApproachCreate, ApproachUpdate, CampaignCreate, Requirements
from app.services import events
from app.web.render import navigate, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])
CHANGED = {"HX-Trigger": "campaign-changed"}
PERSON_STATUSES = [s for s in ApproachStatus if s not in inventory.TRIAL_DRIVEN]
HISTORY_PAGE = 50


def _validated(model, **values):
    """Build a pydantic model from form values; a bad field becomes a DomainError naming it."""
    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise Invalid(f"{field}: {err['msg']}", field=field) from None


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
    campaign = inventory.get_campaign(session, slug)
    rows = inventory.approaches(session, campaign)
    ctx = {
        "campaign": campaign,
        "approaches": rows,
        "counts": inventory.status_counts(rows, awaiting=True),
        "person_statuses": PERSON_STATUSES,
    }
    return render(request, "campaign.html", ctx, block=block, headers=headers)


@router.get("/")
def campaigns_page(request: Request, session: SessionDep) -> Response:
    return render(request, "campaigns.html", {"campaigns": inventory.list_campaigns(session)})


@router.post("/campaigns")
def create_campaign(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: Annotated[str, Form()],
    name: Annotated[str, Form()],
    description: Annotated[str, Form()] = "",
) -> Response:
    campaign = inventory.create_campaign(
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
    if file is not None and file.filename:
        raw = await file.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Invalid("the file is not UTF-8 text", field="file") from None
    if not text.strip():
        raise Invalid("choose a campaign file or paste its YAML", field="file")
    summary = import_campaign(session, text, actor=operator.name)
    slug = summary.split("'")[1]
    return navigate(request, f"/campaigns/{slug}")


@router.get("/campaigns/{slug}")
def campaign_page(request: Request, session: SessionDep, slug: str) -> Response:
    return _overview(request, session, slug)


@router.get("/campaigns/{slug}/inventory")
def inventory_fragment(request: Request, session: SessionDep, slug: str) -> Response:
    return _overview(request, session, slug, block="inventory")


@router.get("/campaigns/{slug}/export.yaml")
def export_file(request: Request, session: SessionDep, slug: str) -> StreamingResponse:
    campaign = inventory.get_campaign(session, slug)  # 404 before streaming starts
    return StreamingResponse(
        stream_in_session(request.app.state.engine, export_stream, slug),
        media_type="application/x-yaml",
        headers={"Content-Disposition": f'attachment; filename="{campaign.slug}.yaml"'},
    )


@router.post("/campaigns/{slug}/approaches")
def add_approach(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: str,
    key: Annotated[str, Form()],
    title: Annotated[str, Form()],
    effort: Annotated[str, Form()] = "",
    evidence: Annotated[str, Form()] = "",
    description: Annotated[str, Form()] = "",
) -> Response:
    campaign = inventory.get_campaign(session, slug)
    data = _validated(ApproachCreate, key=key, title=title, effort=effort, evidence=evidence, description=description)
    inventory.add_approach(session, campaign, data, operator.name)
    events.after_commit(session, events.campaign(campaign.id))
    return _overview(request, session, slug, block="inventory", headers=CHANGED)


@router.post("/campaigns/{slug}/approaches/{key}/move")
def move_approach(
    request: Request, session: SessionDep, operator: OperatorDep, slug: str, key: str, direction: Annotated[str, Form()]
) -> Response:
    campaign = inventory.get_campaign(session, slug)
    approach = inventory.get_approach(session, campaign, key)
    step = {"up": -1, "down": 1, "top": -(10**6)}.get(direction)
    if step is None:
        raise Invalid("direction: must be up, down or top", field="direction")
    inventory.move_approach(session, campaign, approach, approach.position + step)
    events.after_commit(session, events.campaign(campaign.id))
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
    campaign = inventory.get_campaign(session, slug)
    approach = inventory.get_approach(session, campaign, key)
    if status not in ApproachStatus.__members__:
        raise Invalid(f"status: unknown status {status!r}", field="status")
    inventory.change_status(session, approach, status, reason, operator.name)
    events.after_commit(session, events.campaign(campaign.id), events.approach(approach.id))
    if view == "inventory":
        return _overview(request, session, slug, block="inventory", headers=CHANGED)
    return _approach(request, session, slug, key, block="verdict", headers=CHANGED)


def _history_page(session: SessionDep, approach, before: int | None = None) -> dict:
    """One page of the approach's history, newest first, and the id to ask the next page after (or None)."""
    rows = inventory.history(session, approach, before=before, limit=HISTORY_PAGE + 1)
    return {
        "history": rows[:HISTORY_PAGE],
        "history_more": rows[HISTORY_PAGE - 1].id if len(rows) > HISTORY_PAGE else None,
    }


def _approach(
    request: Request, session: SessionDep, slug: str, key: str, block: str | None = None, headers: dict | None = None
) -> Response:
    campaign = inventory.get_campaign(session, slug)
    approach = inventory.get_approach(session, campaign, key)
    ctx = {
        "campaign": campaign,
        "approach": approach,
        **_history_page(session, approach),
        "person_statuses": PERSON_STATUSES,
    }
    return render(request, "approach.html", ctx, block=block, headers=headers)


@router.get("/campaigns/{slug}/approaches/{key}/history")
def history_rows(request: Request, session: SessionDep, slug: str, key: str, before: PageAfter) -> Response:
    """The next page of history items (htmx: replaces the "more" item)."""
    campaign = inventory.get_campaign(session, slug)
    approach = inventory.get_approach(session, campaign, key)
    ctx = {"campaign": campaign, "approach": approach, **_history_page(session, approach, before)}
    return render(request, "approach.html", ctx, block="history_rows")


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


@router.post("/campaigns/{slug}/approaches/{key}")
def edit_approach(
    request: Request,
    session: SessionDep,
    operator: OperatorDep,
    slug: str,
    key: str,
    title: Annotated[str, Form()],
    effort: Annotated[str, Form()] = "",
    evidence: Annotated[str, Form()] = "",
    description: Annotated[str, Form()] = "",
    prerequisites: Annotated[str, Form()] = "",
    recipe: Annotated[str, Form()] = "",
    gpus: Annotated[str, Form()] = "",
    min_sm: Annotated[str, Form()] = "",
    software: Annotated[str, Form()] = "",
) -> Response:
    campaign = inventory.get_campaign(session, slug)
    approach = inventory.get_approach(session, campaign, key)
    requirements = None
    if gpus.strip() or min_sm.strip() or software.strip():
        requirements = _validated(
            Requirements,
            gpus=gpus.strip() or 0,
            min_sm=min_sm.strip() or None,
            software=[s.strip() for s in software.split(",") if s.strip()],
        )
    data = _validated(
        ApproachUpdate,
        title=title,
        effort=effort,
        evidence=evidence,
        description=description,
        prerequisites=prerequisites,
        recipe=_json_field(recipe, "recipe"),
        requirements=requirements,
    )
    inventory.update_approach(session, approach, data)
    events.after_commit(session, events.campaign(campaign.id), events.approach(approach.id))
    return _approach(request, session, slug, key, block="details", headers=CHANGED)


@router.post("/campaigns/{slug}/approaches/{key}/delete")
def delete_approach(request: Request, session: SessionDep, operator: OperatorDep, slug: str, key: str) -> Response:
    campaign = inventory.get_campaign(session, slug)
    approach = inventory.get_approach(session, campaign, key)
    events.after_commit(session, events.campaign(campaign.id), events.approach(approach.id))
    inventory.delete_approach(session, campaign, approach)
    return navigate(request, f"/campaigns/{slug}")
