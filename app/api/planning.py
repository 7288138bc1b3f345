"""JSON API for planning the campaign: the payoff ranking, the order "Run next candidate" follows, and the
upgrade planner, and campaign replay."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import campaigns, planning, replay, scheduling
from app.models import RunOrder
from app.services import campaigns as campaign_writes
from app.services import trials as trial_services
from app.state import app_state

router = APIRouter(prefix="/api", tags=["planning"], dependencies=[Depends(require_operator)])


class RankedPublic(BaseModel):
    """One candidate of the payoff ranking with every term of its score (docs/planning.md)."""

    key: str
    title: str
    score: float | None = Field(description="gain x (1 - risk) / effort; null when no figure is known for it")
    needs: dict[str, Any] = Field(description="Latency to reach at the verify size (us): to beat the best, to pay")
    expected: dict[str, Any] | None = Field(description="Its expected t_ar (us) and where that figure comes from")
    gain_ms: float | None
    effort: float
    risk: float
    retest: str | None
    reasons: list[str]


class RunOrderRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order: RunOrder = Field(description="ranking: Run next follows the payoff ranking; priority: the order set by hand")


class RunOrderPublic(BaseModel):
    order: RunOrder


@router.get("/campaigns/{slug}/ranking", response_model=list[RankedPublic])
def ranking(slug: str, session: SessionDep) -> list[dict[str, Any]]:
    """The candidates "Run next" can start, best payoff first, each with the reasons in sentences."""
    campaign = campaigns.get_campaign(session, slug)
    return [r.as_dict() for r in scheduling.ranking(session, campaign)]


@router.put("/campaigns/{slug}/run-order", response_model=RunOrderPublic)
def set_run_order(slug: str, data: RunOrderRequest, session: SessionDep, operator: OperatorDep) -> RunOrderPublic:
    """Pin the priority order, or let "Run next candidate" follow the ranking again."""
    campaign = campaigns.get_campaign(session, slug)
    campaign_writes.set_run_order(session, campaign, data.order)
    return RunOrderPublic(order=data.order)


class UpgradesPublic(BaseModel):
    """The upgrade planner (docs/planning.md): per stack component the closed verdicts bound to it; for a
    target stack, what it re-opens (with the predicted payoff) and what it leaves, with why."""

    target: dict[str, str]
    changes: list[dict[str, Any]]
    components: list[dict[str, Any]]
    reopens: list[dict[str, Any]]
    untouched: list[dict[str, Any]]


@router.get("/campaigns/{slug}/upgrades", response_model=UpgradesPublic)
def upgrades(
    slug: str,
    session: SessionDep,
    target: Annotated[list[str], Query(description="COMPONENT=VERSION, repeated: torch=2.11.0")] = [],  # noqa: B006
    runner: Annotated[int | None, Query(ge=1, le=2**63 - 1, description="A runner whose stack is the target")] = None,
) -> dict[str, Any]:
    """Without a target: per component. With `target=` items or a `runner=` id: what that stack re-opens."""
    campaign = campaigns.get_campaign(session, slug)
    return planning.upgrade_plan(session, campaign, planning.target_of(session, target, runner)).as_dict()


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    runner_id: int = Field(ge=1, le=2**63 - 1, description="The runner whose stack the campaign is replayed on")


class ReplayPublic(BaseModel):
    """A replay (docs/planning.md, Replay): its runner and stack, its trials, and per approach (payoff
    order) the verdict and headline figures before and after, with the comparison statistics."""

    id: int
    state: str = Field(description="running, finished (every trial ended) or cancelled")
    runner_id: int | None
    runner: str
    runner_stack: str
    requested_by: str
    created_at: datetime
    ended_at: datetime | None
    trials: int = Field(description="Trials it queued")
    ended: int = Field(description="Of those, how many have ended")
    rows: list[dict[str, Any]]


def _replay_view(session: Any, slug: str, replay_id: int) -> dict[str, Any]:
    campaign = campaigns.get_campaign(session, slug)
    return replay.report(session, campaign, replay.get(session, campaign, replay_id)).as_dict()


@router.post("/campaigns/{slug}/replays", response_model=ReplayPublic, status_code=201)
async def start_replay(request: Request, slug: str, data: ReplayRequest, operator: OperatorDep) -> dict[str, Any]:
    """Replay on a runner: one trial of every approach whose verdict is bound to a component in which the
    runner's stack differs, queued for that runner only, in payoff order. 422 when nothing differs."""
    row, _ = await trial_services.start_replay(request.app, slug, data.runner_id, operator.name)
    return await app_state(request).db.read_in_tx(_replay_view, slug, row.id)


@router.get("/campaigns/{slug}/replays", response_model=list[ReplayPublic])
def list_replays(slug: str, session: SessionDep) -> list[dict[str, Any]]:
    """The campaign's replays, newest first, each with its report."""
    campaign = campaigns.get_campaign(session, slug)
    return [replay.report(session, campaign, r).as_dict() for r in replay.of_campaign(session, campaign)]


@router.get("/campaigns/{slug}/replays/{replay_id}", response_model=ReplayPublic)
def get_replay(slug: str, replay_id: Annotated[int, Path(ge=1, le=2**63 - 1)], session: SessionDep) -> dict[str, Any]:
    """One replay and its report (at any time: rows whose trials have not ended say so)."""
    return _replay_view(session, slug, replay_id)


@router.post("/campaigns/{slug}/replays/{replay_id}/cancel", response_model=ReplayPublic)
async def cancel_replay(
    request: Request, slug: str, replay_id: Annotated[int, Path(ge=1, le=2**63 - 1)], operator: OperatorDep
) -> dict[str, Any]:
    """Cancel the replay's queued trials, and nothing else (a trial its runner took runs on)."""
    await trial_services.cancel_replay(request.app, slug, replay_id, operator.name)
    return await app_state(request).db.read_in_tx(_replay_view, slug, replay_id)
