"""The campaign page's planning panels: why this candidate next (the payoff ranking) and the order
"Run next candidate" follows."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import inventory, planning, scheduling
from app.services import events
from app.web.render import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])
CHANGED = {"HX-Trigger": "campaign-changed"}


def _ranking(request: Request, session: SessionDep, slug: str, headers: dict | None = None) -> Response:
    campaign = inventory.get_campaign(session, slug)
    ranked = scheduling.ranking(session, campaign)
    ctx = {"campaign": campaign, "ranked": ranked, "why": planning.why_next(ranked)}
    return render(request, "_partials/ranking.html", ctx, headers=headers)


@router.get("/campaigns/{slug}/ranking")
def ranking_fragment(request: Request, session: SessionDep, slug: str) -> Response:
    return _ranking(request, session, slug)


@router.post("/campaigns/{slug}/run-order")
def set_run_order(
    request: Request, session: SessionDep, operator: OperatorDep, slug: str, order: Annotated[str, Form()]
) -> Response:
    campaign = inventory.get_campaign(session, slug)
    inventory.set_run_order(session, campaign, order)
    events.after_commit(session, events.campaign(campaign.id))
    return _ranking(request, session, slug, headers=CHANGED)
