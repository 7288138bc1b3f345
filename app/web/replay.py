"""Campaign replay pages: the campaign page's "Replays" panel (the list, and "Replay on runner R") and a
replay's report page, which follows the campaign's page feed (its rows re-render as its trials end). The
same as JSON: /api/campaigns/{slug}/replays (app/api/planning.py); the rules: docs/planning.md, Replay."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Form, Path, Request
from fastapi.responses import Response
from sqlmodel import Session

from app.deps import OperatorDep, require_operator, take_feed_mark
from app.domain import campaigns, replay
from app.domain import runners as runner_domain
from app.services import trials as trial_services
from app.state import app_state
from app.web.render import navigate, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])
ReplayId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _panel(session: Session, slug: str) -> dict[str, Any]:
    campaign = campaigns.get_campaign(session, slug)
    runners = [v for v in runner_domain.list_runners(session) if v.runner.fingerprint and v.runner.revoked_at is None]
    return {"campaign": campaign, "runners": runners, "replays": replay.summaries(session, campaign)}


@router.get("/campaigns/{slug}/replays")
async def replays_panel(request: Request, slug: str, part: Literal["list"] | None = None) -> Response:
    """The campaign page's Replays panel (an htmx fragment), or with `part=list` its list alone (the feed's refresh)."""
    ctx = await app_state(request).db.read_in_tx(_panel, slug)
    return render(request, "_partials/replays.html", ctx, block="replay_list" if part == "list" else None)


@router.post("/campaigns/{slug}/replays")
async def start_replay(
    request: Request, slug: str, operator: OperatorDep, runner_id: Annotated[int, Form(ge=1, le=2**63 - 1)]
) -> Response:
    """Replay on the runner picked, then its report. Nothing to replay is a refusal like any other (app/errors.py:
    the page's flash says why), so a refresh of the panel by the page feed cannot hide it."""
    row, _ = await trial_services.start_replay(request.app, slug, runner_id, operator.name)
    return navigate(request, f"/campaigns/{slug}/replays/{row.id}")


def _report(session: Session, slug: str, replay_id: int) -> dict[str, Any]:
    campaign = campaigns.get_campaign(session, slug)
    return {"campaign": campaign, "report": replay.report(session, campaign, replay.get(session, campaign, replay_id))}


@router.get("/campaigns/{slug}/replays/{replay_id}")
async def report_page(request: Request, slug: str, replay_id: ReplayId) -> Response:
    """A replay's report: per approach before and after; its rows re-fetch on "feed:campaign"."""
    take_feed_mark(request)  # before the read
    ctx = await app_state(request).db.read_in_tx(_report, slug, replay_id)
    block = "report" if request.headers.get("hx-request") else None
    return render(request, "replay.html", ctx, block=block)


@router.post("/campaigns/{slug}/replays/{replay_id}/cancel")
async def cancel(request: Request, slug: str, replay_id: ReplayId, operator: OperatorDep) -> Response:
    """Cancel the replay's queued trials (and nothing else), then its report again."""
    await trial_services.cancel_replay(request.app, slug, replay_id, operator.name)
    return navigate(request, f"/campaigns/{slug}/replays/{replay_id}")
