"""JSON API for planning the campaign: the payoff ranking, the order "Run next candidate" follows, and the
upgrade planner."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from app.deps import OperatorDep, SessionDep, require_operator
from app.domain import inventory, planning, scheduling
from app.models import RunOrder
from app.services import events

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
    campaign = inventory.get_campaign(session, slug)
    return [r.as_dict() for r in scheduling.ranking(session, campaign)]


@router.put("/campaigns/{slug}/run-order", response_model=RunOrderPublic)
def set_run_order(slug: str, data: RunOrderRequest, session: SessionDep, operator: OperatorDep) -> RunOrderPublic:
    """Pin the priority order, or let "Run next candidate" follow the ranking again."""
    campaign = inventory.get_campaign(session, slug)
    inventory.set_run_order(session, campaign, data.order)
    events.after_commit(session, events.campaign(campaign.id))
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
    campaign = inventory.get_campaign(session, slug)
    return planning.upgrade_plan(session, campaign, planning.target_of(session, target, runner)).as_dict()
