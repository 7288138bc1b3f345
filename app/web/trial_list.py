"""All trials: one page across campaigns (`/trials`), or a campaign's (`/trials?campaign=<slug>`, linked from
its page), filtered by `schemas.TrialFilter`, sorted by a column, paged with the count. The whole view lives in
the URL, so it can be shared; its export links give the same filter to `GET /api/trials/export`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from sqlmodel import Session, col, select

from app.deps import OperatorDep
from app.domain import campaigns, trial_reads
from app.domain.errors import Invalid
from app.domain.verdicts import SIGNATURE_STATUS
from app.models import Approach, Runner, TrialState
from app.schemas import NO_PROPOSAL, TRIAL_SORTS, TrialFilter, TrialSummary
from app.state import app_state
from app.web.render import render

router = APIRouter(include_in_schema=False)

PER_PAGE = 50
# The columns the table shows: each a field of TrialSummary (its title is the heading), with the sort its header
# toggles (None: not sortable).
_SORTED_BY = {
    "id": "id",
    "campaign": "campaign",
    "approach": "approach",
    "state": "state",
    "proposed": None,
    "runner": "runner",
    "requested_by": "requested_by",
    "created_at": "created",
    "finished_at": "finished",
}
COLUMNS = [(TrialSummary.model_fields[name].title, sort) for name, sort in _SORTED_BY.items()]


def _view(params: dict[str, str]) -> tuple[TrialFilter, str, int]:
    """The filter, sort and page of the URL; a form's empty fields mean "any"."""
    given = {k: v for k, v in params.items() if v.strip()}
    sort, page = given.pop("sort", "-id"), given.pop("page", "1")
    if sort.removeprefix("-") not in TRIAL_SORTS:
        raise Invalid(f"sort: one of {', '.join(TRIAL_SORTS)}", field="sort")
    if not page.isdigit() or not 1 <= int(page) <= 10**6:
        raise Invalid("page: a number from 1", field="page")
    try:
        found = TrialFilter.model_validate({k: v for k, v in given.items() if k in TrialFilter.model_fields})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise Invalid(f"{field}: {err['msg']}", field=field) from None
    return found, sort, int(page)


def _page(session: Session, filters: TrialFilter, sort: str, page: int) -> dict[str, Any]:
    found = trial_reads.search_trials(session, filters, sort=sort, page=page, per_page=PER_PAGE)
    campaign = campaigns.get_campaign(session, filters.campaign) if filters.campaign else None
    base = filters.items()

    def link(**changes: Any) -> str:
        items = dict(base + [("sort", sort), ("page", str(page))])
        items.update({k: str(v) for k, v in changes.items()})
        if items.get("sort") == "-id":
            items.pop("sort")
        if items.get("page") == "1":
            items.pop("page")
        return "/trials" + (f"?{urlencode(items)}" if items else "")

    return {
        "found": found,
        "filters": filters,
        "sort": sort,
        "columns": COLUMNS,
        "link": link,
        "export_query": urlencode(base + [("sort", sort)]),
        "campaign": campaign,
        "campaigns": campaigns.list_campaigns(session) + campaigns.list_campaigns(session, archived=True),
        "approaches": _approach_options(session, campaign.id) if campaign else [],
        "runners": list(session.exec(select(Runner.name).order_by(col(Runner.name)))),
        "states": list(TrialState),
        "proposals": [*SIGNATURE_STATUS, NO_PROPOSAL],
    }


def _approach_options(session: Session, campaign_id: int | None) -> list[tuple[str, str]]:
    """(key, title) of the campaign's approaches in priority order: the approach select (not 500 full rows)."""
    query = select(Approach.key, Approach.title).where(Approach.campaign_id == campaign_id)
    return [(k, t) for k, t in session.exec(query.order_by(col(Approach.position), col(Approach.id)))]


@router.get("/trials")
async def trials_page(request: Request, operator: OperatorDep) -> Response:
    filters, sort, page = _view(dict(request.query_params))
    if any(not v.strip() for v in request.query_params.values()):
        # The filter form sends its empty fields: the shared URL is the view without them.
        clean = [(k, v) for k, v in request.query_params.multi_items() if v.strip()]
        return RedirectResponse("/trials" + (f"?{urlencode(clean)}" if clean else ""), status_code=303)
    ctx = await app_state(request).db.read_in_tx(_page, filters, sort, page)
    return render(request, "trials.html", ctx)
