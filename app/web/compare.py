"""Compare trials: `/campaigns/{slug}/compare?trial=12&trial=15` (or `?approach=nccl&approach=symm`, over
each approach's succeeded trials) shows their metrics overlaid in one Plotly chart, their values side by
side with each row's verdict and interval (app/domain/statistics.py), and their stacks diffed; with
fewer than two picked it is the picker alone. The page follows the campaign's page feed: the metrics
re-render as trials land (a Settle or Repeat in progress). The same comparison as JSON is
GET /api/campaigns/{slug}/compare (app/api/trials.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import Field
from sqlmodel import Session

from app.charts import TRIAL_COLORS, trial_comparison
from app.deps import OperatorDep
from app.domain import comparison as comparison_domain
from app.domain import repeats, statistics, trial_reads
from app.domain.inventory import get_campaign
from app.schemas import SLUG_PATTERN
from app.services import events
from app.services.trials import start_settle
from app.state import app_state
from app.web.render import render

router = APIRouter(include_in_schema=False)

PICKER_TRIALS = 30  # the latest trials offered for picking

# Past the comparison's bound the domain answers with its own message; this bound only keeps URLs sane.
PageTrialIds = Annotated[list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None, Query(max_length=50)]
PageApproachKeys = Annotated[
    list[Annotated[str, Field(pattern=SLUG_PATTERN, max_length=80)]] | None, Query(max_length=50)
]


def _compare_page(
    session: Session, slug: str, trial_ids: list[int], approach_keys: list[str], across_stacks: bool
) -> dict[str, Any]:
    campaign = get_campaign(session, slug)
    selected = list(dict.fromkeys(trial_ids))
    comparison = None
    if len(selected) >= comparison_domain.MIN_TRIALS or approach_keys:
        comparison = comparison_domain.compare(session, campaign, selected, approach_keys, across_stacks)
    recent = trial_reads.list_trials(session, campaign=slug, limit=PICKER_TRIALS).rows
    listed = {r.trial.id for r in recent}
    return {
        "campaign": campaign,
        "comparison": comparison,
        "figure": trial_comparison(comparison) if comparison else None,
        "colors": TRIAL_COLORS,
        "recent": recent,
        "selected": selected,
        "selected_elsewhere": [i for i in selected if i not in listed],
        "min_trials": comparison_domain.MIN_TRIALS,
        "max_trials": comparison_domain.MAX_TRIALS,
        "settle_pair": repeats.settle_pair(comparison) if comparison else None,
        "repeat_keys": repeats.repeat_keys(comparison) if comparison else [],
        "verdict_words": statistics.VERDICT_WORDS,
        "settles": repeats.open_settles(session, campaign),
        "settle_budget": repeats.DEFAULT_BUDGET,
    }


@router.get("/campaigns/{slug}/compare")
async def compare_page(
    request: Request,
    slug: str,
    operator: OperatorDep,
    trial: PageTrialIds = None,
    approach: PageApproachKeys = None,
    across_stacks: bool = False,
) -> HTMLResponse:
    request.state.feed_mark = events.page_mark(request)  # before the read: see app/api/pagefeed.py
    ctx = await app_state(request).db.read_in_tx(_compare_page, slug, trial or [], approach or [], across_stacks)
    # The page feed's refresh asks for the metrics alone (htmx sends HX-Request).
    block = "metrics" if request.headers.get("HX-Request") else None
    return render(request, "compare.html", ctx, block=block)


@router.post("/campaigns/{slug}/settle")
async def settle_form(
    request: Request,
    slug: str,
    operator: OperatorDep,
    a: Annotated[str, Form()],
    b: Annotated[str, Form()] = "",
    budget: Annotated[int, Form(ge=1, le=repeats.MAX_BUDGET)] = repeats.DEFAULT_BUDGET,
) -> RedirectResponse:
    """The compare page's "Settle A vs B" and the approach page's "Repeat": queue, then show the comparison."""
    await start_settle(request.app, slug, a, b or None, budget, operator.name)
    keys = f"approach={a}" + (f"&approach={b}" if b else "")
    target = f"/campaigns/{slug}/compare?{keys}" if b else f"/campaigns/{slug}/approaches/{a}"
    return RedirectResponse(target, status_code=303)
