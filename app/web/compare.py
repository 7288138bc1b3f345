"""Compare trials: `/campaigns/{slug}/compare?trial=12&trial=15` shows their metrics overlaid in one
Plotly chart, their values side by side and their stacks diffed; with fewer than two trials it is the
picker alone. The same comparison as JSON is GET /api/campaigns/{slug}/compare (app/api/trials.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import Field
from sqlmodel import Session

from app.charts import TRIAL_COLORS, trial_comparison
from app.deps import OperatorDep
from app.domain import comparison as comparison_domain
from app.domain import trial_reads
from app.domain.inventory import get_campaign
from app.live import run_in_tx
from app.web.render import render

router = APIRouter(include_in_schema=False)

PICKER_TRIALS = 30  # the latest trials offered for picking

# Past the comparison's bound the domain answers with its own message; this bound only keeps URLs sane.
PageTrialIds = Annotated[list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None, Query(max_length=50)]


def _compare_page(session: Session, slug: str, trial_ids: list[int]) -> dict[str, Any]:
    campaign = get_campaign(session, slug)
    selected = list(dict.fromkeys(trial_ids))
    comparison = None
    if len(selected) >= comparison_domain.MIN_TRIALS:
        comparison = comparison_domain.compare_trials(session, campaign, selected)
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
    }


@router.get("/campaigns/{slug}/compare")
async def compare_page(request: Request, slug: str, operator: OperatorDep, trial: PageTrialIds = None) -> HTMLResponse:
    ctx = await run_in_tx(request.app.state.engine, _compare_page, slug, trial or [], write=False)
    return render(request, "compare.html", ctx)
