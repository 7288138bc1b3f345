"""Planning pages: the campaign page's "What to try next" panel (the payoff ranking, the order "Run next
candidate" follows) and the Upgrades page (what a target stack re-opens)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import campaigns, planning, scheduling
from app.domain import fingerprint as stack
from app.domain import runners as runner_domain
from app.domain.errors import Invalid
from app.services import campaigns as campaign_writes
from app.web.render import CHANGED, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])


def _ranking(request: Request, session: SessionDep, slug: str, headers: dict | None = None) -> Response:
    campaign = campaigns.get_campaign(session, slug)
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
    campaign = campaigns.get_campaign(session, slug)
    campaign_writes.set_run_order(session, campaign, order)
    return _ranking(request, session, slug, headers=CHANGED)


# The components the Upgrades form offers to type a version for (the hardware is not upgraded by typing).
TYPED = tuple(c for c in stack.STACK_COMPONENTS if c not in ("gpu", "sm"))


@router.get("/campaigns/{slug}/upgrades")
def upgrades_page(request: Request, session: SessionDep, slug: str) -> Response:
    """The Upgrades page: versions typed in (one field per component) or a connected runner's stack."""
    campaign = campaigns.get_campaign(session, slug)
    query = request.query_params
    typed = {c: query.get(c, "").strip() for c in TYPED}
    runner_text = query.get("runner", "").strip()
    runner_id = (
        int(runner_text) if runner_text.isdigit() and len(runner_text) <= 18 else None
    )  # an id, not 5,000 digits
    error: Invalid | None = None
    try:
        if runner_text and runner_id is None:
            raise Invalid("runner: choose a runner from the list", field="runner")
        target = planning.target_of(session, [f"{c}={v}" for c, v in typed.items() if v], runner_id)
    except Invalid as exc:  # the form again, with its error (a 422), the plan without a target
        error, target = exc, None
    plan = planning.upgrade_plan(session, campaign, target)
    runners = [v for v in runner_domain.list_runners(session) if v.runner.fingerprint and v.runner.revoked_at is None]
    ctx = {
        "campaign": campaign,
        "plan": plan,
        "typed": typed,
        "runner_id": runner_id,
        "runners": runners,
        "names": stack.STACK_COMPONENTS,
        "error": error,
    }
    return render(request, "upgrades.html", ctx, status_code=422 if error else 200)
