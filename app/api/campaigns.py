"""JSON API for campaigns and approaches: the same operations as the pages, in OpenAPI."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from app.db import stream_in_session
from app.deps import AdminDep, OperatorDep, PageAfter, SessionDep, require_operator
from app.domain import campaigns, history, lifecycle, repeats
from app.domain.campaign_files import campaign_file_schema, export_stream, import_campaign
from app.domain.errors import Invalid
from app.errors import concrete_paths_first
from app.models import Approach
from app.schemas import (
    ApproachCreate,
    ApproachDeleted,
    ApproachPublic,
    ApproachUpdate,
    ArchiveRequest,
    CampaignCreate,
    CampaignDeleted,
    CampaignEventPublic,
    CampaignPublic,
    CampaignRename,
    CampaignUpdate,
    DecisionsPage,
    EvidencePublic,
    ImportSummary,
    MoveRequest,
    SettleProgressPublic,
    StatusChangePublic,
    StatusChangeRequest,
)
from app.services import campaigns as campaign_writes
from app.services import lifecycle as lifecycle_steps
from app.state import app_state

router = APIRouter(prefix="/api", tags=["campaigns"], dependencies=[Depends(require_operator)])


@router.get("/campaigns", response_model=list[CampaignPublic])
def list_campaigns(
    session: SessionDep,
    archived: Annotated[bool, Query(description="The archived campaigns instead of the active ones.")] = False,
):
    return campaigns.list_campaigns(session, archived=archived)


@router.post("/campaigns", response_model=CampaignPublic, status_code=201)
def create_campaign(data: CampaignCreate, session: SessionDep, operator: OperatorDep):
    return campaigns.create_campaign(session, data)


# `/api/campaigns/import` is the import's (POST): these two do not take it as a slug.
OWN_PATHS_FIRST = [Depends(concrete_paths_first)]


@router.get("/campaigns/{slug}", response_model=CampaignPublic, dependencies=OWN_PATHS_FIRST)
def get_campaign(slug: str, session: SessionDep):
    return campaigns.get_campaign(session, slug)


@router.patch("/campaigns/{slug}", response_model=CampaignPublic, dependencies=OWN_PATHS_FIRST)
def update_campaign(slug: str, data: CampaignUpdate, session: SessionDep, operator: OperatorDep):
    campaign = campaigns.get_campaign(session, slug)
    return campaign_writes.update_campaign(session, campaign, data)


async def _campaign(request: Request, slug: str) -> CampaignPublic:
    read = await app_state(request).db.read_in_tx(campaigns.get_campaign, slug)
    return CampaignPublic.model_validate(read)


@router.post("/campaigns/{slug}/rename", response_model=CampaignPublic)
async def rename_campaign(request: Request, slug: str, data: CampaignRename, operator: OperatorDep):
    """A new slug: the old one's URLs redirect (308) to the new ones, and no other campaign may take it meanwhile."""
    await lifecycle_steps.rename(request.app, slug, data, operator.name)
    return await _campaign(request, data.slug)


@router.post("/campaigns/{slug}/archive", response_model=CampaignPublic)
async def archive_campaign(request: Request, slug: str, data: ArchiveRequest, operator: OperatorDep):
    """Read-only from now on and off the front page (listed with `?archived=true`); `restore` brings it back.
    409 while trials are queued or running, unless `cancel_active`."""
    await lifecycle_steps.archive(request.app, slug, operator.name, cancel_active=data.cancel_active)
    return await _campaign(request, slug)


@router.post("/campaigns/{slug}/restore", response_model=CampaignPublic)
async def restore_campaign(request: Request, slug: str, operator: OperatorDep):
    await lifecycle_steps.restore(request.app, slug, operator.name)
    return await _campaign(request, slug)


@router.delete("/campaigns/{slug}", response_model=CampaignDeleted, dependencies=OWN_PATHS_FIRST)
async def delete_campaign(
    request: Request,
    slug: str,
    operator: AdminDep,
    confirm: Annotated[str, Query(max_length=200, description="The campaign's name, typed to confirm.")],
) -> CampaignDeleted:
    """Admin only, and only an archived campaign: it goes with every row of its own (approaches, trials, logs,
    metrics, artifacts, share links, history), nothing else. Export it first (`/export?with_results=true`)."""
    done = await lifecycle_steps.delete(request.app, slug, confirm, operator.name)
    return CampaignDeleted(deleted=done.slug, removed=done.removed)


@router.get("/campaigns/{slug}/history", response_model=list[CampaignEventPublic])
def campaign_history(slug: str, session: SessionDep):
    """The campaign's lifecycle steps (renamed, archived, restored), newest first."""
    return lifecycle.history(session, campaigns.get_campaign(session, slug))


@router.get(
    "/campaigns/{slug}/export",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-yaml": {}}, "description": "The campaign file"}},
)
def export(request: Request, slug: str, session: SessionDep, with_results: bool = False) -> StreamingResponse:
    """The campaign file (YAML), streamed in constant memory: see `campaign_files.export_stream`.
    `with_results`: also the ended trials with their metrics, samples and stack fingerprint."""
    campaigns.get_campaign(session, slug)  # 404 before streaming starts
    body = stream_in_session(app_state(request).engine, export_stream, slug, with_results)
    return StreamingResponse(body, media_type="application/x-yaml")


async def _yaml_body(request: Request) -> str:
    try:
        return (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("the campaign file is not UTF-8 text", field="body") from None


# The body is YAML text whose content is a `CampaignFile`: the schema says so, so clients (and schemathesis)
# know what the import accepts; `install_openapi` moves the file's own models into the components.
CAMPAIGN_FILE_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/x-yaml": {"schema": campaign_file_schema()}},
    }
}


@router.post(
    "/campaigns/import", summary="Import a campaign file (YAML body); all or nothing", openapi_extra=CAMPAIGN_FILE_BODY
)
def import_file(
    session: SessionDep,
    operator: OperatorDep,
    body: Annotated[str, Depends(_yaml_body)],
    replace: bool = False,
) -> ImportSummary:
    """Refused whole, with the line and field, for any value the rest of the API refuses (the same models)."""
    return import_campaign(session, body, actor=operator.name, replace=replace)


def _public(session: SessionDep, rows: list[Approach]) -> list[ApproachPublic]:
    """The approaches as the API shows them: each decided status with what its trial is doing beside it."""
    doing = campaigns.activities(session, rows)
    out = []
    for approach in rows:
        found = doing.get(approach.id) if approach.id is not None else None
        public = ApproachPublic.model_validate(approach)
        if found is not None:
            public = public.model_copy(update={"activity": found.activity, "activity_trial_id": found.trial_id})
        out.append(public)
    return out


def _one(session: SessionDep, approach: Approach) -> ApproachPublic:
    return _public(session, [approach])[0]


@router.get("/campaigns/{slug}/approaches", response_model=list[ApproachPublic])
def list_approaches(slug: str, session: SessionDep):
    return _public(session, campaigns.approaches(session, campaigns.get_campaign(session, slug)))


@router.post("/campaigns/{slug}/approaches", response_model=ApproachPublic, status_code=201)
def add_approach(slug: str, data: ApproachCreate, session: SessionDep, operator: OperatorDep):
    campaign = campaigns.get_campaign(session, slug)
    return campaign_writes.add_approach(session, campaign, data, operator.name)


@router.get("/campaigns/{slug}/approaches/{key}", response_model=ApproachPublic)
def get_approach(slug: str, key: str, session: SessionDep):
    return _one(session, campaigns.get_approach(session, campaigns.get_campaign(session, slug), key))


@router.patch("/campaigns/{slug}/approaches/{key}", response_model=ApproachPublic)
def update_approach(slug: str, key: str, data: ApproachUpdate, session: SessionDep, operator: OperatorDep):
    approach = campaigns.get_approach(session, campaigns.get_campaign(session, slug), key)
    return _one(session, campaign_writes.update_approach(session, approach, data))


def _evidence(found: campaigns.Evidence) -> EvidencePublic:
    return EvidencePublic(
        **found.counts(), active_trial=found.active_trial, adopted=found.adopted, summary=found.sentence()
    )


@router.get("/campaigns/{slug}/approaches/{key}/evidence", response_model=EvidencePublic)
def approach_evidence(slug: str, key: str, session: SessionDep) -> EvidencePublic:
    """What the approach holds: what a delete with `delete_evidence=true` would remove (archive keeps it)."""
    return _evidence(
        campaigns.evidence(session, campaigns.get_approach(session, campaigns.get_campaign(session, slug), key))
    )


@router.delete("/campaigns/{slug}/approaches/{key}", response_model=ApproachDeleted)
def delete_approach(
    slug: str,
    key: str,
    session: SessionDep,
    operator: OperatorDep,
    delete_evidence: Annotated[
        bool, Query(description="Also delete its trials, metrics, logs and artifacts (else 409 when it has any).")
    ] = False,
) -> ApproachDeleted:
    """Delete an approach. One with trials is refused (409, saying what it holds) unless `delete_evidence`:
    archive it to keep them. The answer counts what went."""
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    removed = campaign_writes.delete_approach(session, campaign, approach, delete_evidence=delete_evidence)
    return ApproachDeleted(deleted=key, removed=_evidence(removed))


@router.post("/campaigns/{slug}/approaches/{key}/archive", response_model=ApproachPublic)
def archive_approach(slug: str, key: str, session: SessionDep, operator: OperatorDep):
    """Off the active list and "run next", its trials and answers kept; `restore` brings it back."""
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    campaign_writes.archive_approach(session, campaign, approach, operator.name)
    return approach


@router.post("/campaigns/{slug}/approaches/{key}/restore", response_model=ApproachPublic)
def restore_approach(slug: str, key: str, session: SessionDep, operator: OperatorDep):
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    campaign_writes.restore_approach(session, campaign, approach)
    return approach


@router.post("/campaigns/{slug}/approaches/{key}/status", response_model=StatusChangePublic)
def change_status(slug: str, key: str, data: StatusChangeRequest, session: SessionDep, operator: OperatorDep):
    approach = campaigns.get_approach(session, campaigns.get_campaign(session, slug), key)
    return campaign_writes.change_status(session, approach, data.status, data.reason, operator.name)


@router.post("/campaigns/{slug}/approaches/{key}/move", response_model=list[ApproachPublic])
def move_approach(slug: str, key: str, data: MoveRequest, session: SessionDep, operator: OperatorDep):
    campaign = campaigns.get_campaign(session, slug)
    campaign_writes.move_approach(session, campaign, campaigns.get_approach(session, campaign, key), data.position)
    return _public(session, campaigns.approaches(session, campaign))


@router.get("/campaigns/{slug}/approaches/{key}/history", response_model=list[StatusChangePublic])
def approach_history(
    slug: str,
    key: str,
    session: SessionDep,
    before: PageAfter = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
):
    """Newest first, a page at a time: pass the last id you got as `before` for the next page."""
    approach = campaigns.get_approach(session, campaigns.get_campaign(session, slug), key)
    return campaigns.history(session, approach, before=before, limit=limit)


@router.get("/campaigns/{slug}/approaches/{key}/decisions", response_model=DecisionsPage)
def approach_decisions(
    slug: str,
    key: str,
    session: SessionDep,
    before: PageAfter = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
):
    """The history as the approach page shows it: decisions first, each with the trial events after it folded
    under it, newest first; `limit` decisions a page (pass `next_before` as `before` for the next)."""
    approach = campaigns.get_approach(session, campaigns.get_campaign(session, slug), key)
    groups, more = history.folded_history(session, approach, before=before, limit=limit)
    return {"groups": [{"decision": g.decision, "events": g.events} for g in groups], "next_before": more}


@router.get("/campaigns/{slug}/settles", response_model=list[SettleProgressPublic])
def settle_progress(
    slug: str, session: SessionDep, approach: Annotated[str | None, Query(max_length=80)] = None
) -> list[dict]:
    """Repeat / Settle progress: an approach's open settles and its newest ended one (`approach`), else the
    campaign's ten newest; each with trials done of the most it may take and each side's interval so far."""
    campaign = campaigns.get_campaign(session, slug)
    if approach is not None:
        found = repeats.approach_progress(session, campaigns.get_approach(session, campaign, approach))
    else:
        found = repeats.campaign_progress(session, campaign)
    return [repeats.progress_json(p) for p in found]
