"""Trials, JSON: run next candidate, cancel, read a trial, download its log. The browser's live-log
websocket is app/api/livelog.py.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from sqlmodel import Session

from app.db import open_session
from app.deps import OperatorDep, RowId
from app.domain import logs as log_domain
from app.domain import scheduling
from app.live import run_in_tx
from app.models import Approach, Campaign
from app.services.trials import cancel, start_next

router = APIRouter(tags=["trials"])


def run_next_body(result: scheduling.RunNext) -> dict[str, Any]:
    return {
        "started": result.started,
        "trial_id": result.trial.id if result.trial else None,
        "approach": result.approach.key if result.approach else None,
        "runner": result.runner.name if result.runner else None,
        "reason": result.reason,
    }


def trial_detail(session: Session, trial_id: int) -> dict[str, Any]:
    trial = scheduling.get_trial(session, trial_id)
    approach = session.get(Approach, trial.approach_id)
    campaign = session.get(Campaign, trial.campaign_id)
    return {
        **scheduling.trial_view(trial),
        "approach": approach.key if approach else None,
        "approach_title": approach.title if approach else None,
        "campaign": campaign.slug if campaign else None,
        "recipe": trial.recipe,
    }


# ---- JSON routes ------------------------------------------------------------------------------


@router.post("/api/campaigns/{slug}/run-next")
async def run_next(request: Request, slug: str, operator: OperatorDep) -> dict[str, Any]:
    """Start the next candidate on a runner that can run it, or say why nothing can run."""
    return run_next_body(await start_next(request.app, slug, operator.name))


@router.post("/api/campaigns/{slug}/approaches/{key}/run")
async def run_approach(request: Request, slug: str, key: str, operator: OperatorDep) -> dict[str, Any]:
    """Start this approach (any status) on a runner that can run it, or say why it cannot run now."""
    return run_next_body(await start_next(request.app, slug, operator.name, approach_key=key))


@router.get("/api/trials/{trial_id}")
async def get_trial(request: Request, trial_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    return await run_in_tx(request.app.state.engine, trial_detail, trial_id, write=False)


@router.post("/api/trials/{trial_id}/cancel")
async def cancel_trial(request: Request, trial_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    trial = await cancel(request.app, trial_id, operator.name)
    return scheduling.trial_view(trial)


@router.get("/api/trials/{trial_id}/log", response_class=StreamingResponse)
async def download_log(request: Request, trial_id: RowId, operator: OperatorDep) -> StreamingResponse:
    """The full stored log (text/plain, as an attachment)."""
    engine = request.app.state.engine
    await run_in_tx(engine, scheduling.get_trial, trial_id, write=False)  # 404 before streaming starts

    def body():  # runs on a worker thread (Starlette iterates sync bodies off the event loop)
        with open_session(engine, write=False) as session:
            trial = scheduling.get_trial(session, trial_id)
            for text in log_domain.iter_full_log(session, trial):
                yield text.encode()

    return StreamingResponse(
        body(),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="trial-{trial_id}.log"'},
    )
