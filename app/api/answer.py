"""The answer over (batch, draft tokens) and the engine config to deploy it: `app/domain/answer/grid.py`,
`app/domain/engine_config.py`. Read-only."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from app.deps import SessionDep, require_operator
from app.domain import inventory
from app.domain.engine_config import engine_config
from app.domain.answer.grid import answer_json
from app.domain.answer.loader import read_campaign_speculation

router = APIRouter(prefix="/api", tags=["answer"], dependencies=[Depends(require_operator)])


class Figure(BaseModel):
    """A figure with its 95% bootstrap interval; low/high are null without samples (`no_samples`)."""

    value: float
    low: float | None
    high: float | None
    unstable: bool = Field(description="An input's samples vary more than 10% (coefficient of variation).")
    no_samples: bool = Field(description="A point estimate: none of its inputs carries samples.")


class CellPublic(BaseModel):
    batch: int
    draft_tokens: int
    t_base_ms: float | None
    t_draft_ms: float | None
    t_verify_ms: float | None
    t_ar_us: float | None
    verify_bytes: int = Field(description="Bytes per allreduce: batch x (draft tokens + 1) x hidden x 2.")
    tau_star: Figure | None
    speedup: Figure | None = Field(description="Null while the accept length at this draft length is unknown.")
    pays: Literal["yes", "no", "unclear"] | None
    note: str = Field(description="How t_ar was obtained, or why the cell is open (e.g. not extrapolated).")


class ApproachAnswerPublic(BaseModel):
    key: str
    title: str
    status: str
    world_size: int
    tau_star: Figure | None = Field(description="tau* at the smallest batch with `tau_star_draft_tokens`.")
    tau_star_draft_tokens: int | None
    break_even_batch: int | None = Field(description="The largest measured batch whose best speedup exceeds 1.")
    first_losing_batch: int | None
    best_draft_tokens: dict[str, int] = Field(description="Batch -> best draft length (0: do not speculate).")
    unstable_inputs: list[str]
    by_batch: list[CellPublic]


class AcceptLengthPublic(Figure):
    draft_tokens: int
    source: str


class InputPublic(Figure):
    name: str
    approach: str | None = Field(description="The approach whose trial measured it; null when shared.")
    source: str


class MissingPublic(BaseModel):
    what: str
    approach: str | None = Field(description="The approach whose trial would measure it; null: enter it.")
    how: str


class AnswerPublic(BaseModel):
    sentence: str
    batches: list[int]
    draft_tokens: list[int]
    allreduces_per_verify: int | None
    confidence: float
    resamples: int
    chosen: str | None
    tiers: list[list[str]] = Field(description="Approach keys, best first; keys in one tier are indistinguishable.")
    indistinguishable: list[list[str]]
    accept_length: list[AcceptLengthPublic]
    approaches: list[ApproachAnswerPublic]
    inputs: list[InputPublic]
    missing: list[MissingPublic]


class SettingPublic(BaseModel):
    option: str
    value: Any
    source: str = Field(description="The measurement the setting comes from.")


class EngineConfigPublic(BaseModel):
    engine: Literal["sglang", "vllm"]
    approach: str | None
    argv: list[str] = Field(description="What to add to the server's launch line.")
    env: dict[str, str]
    settings: list[SettingPublic]
    notes: list[str]


@router.get("/campaigns/{slug}/answer", response_model=AnswerPublic)
def answer(slug: str, session: SessionDep) -> dict[str, Any]:
    """Speculation over batch sizes and draft lengths, per approach, with 95% intervals."""
    found, _rows = read_campaign_speculation(session, inventory.get_campaign(session, slug))
    return answer_json(found)


@router.get("/campaigns/{slug}/answer/config", response_model=EngineConfigPublic)
def answer_config(slug: str, session: SessionDep, engine: Literal["sglang", "vllm"] = "sglang") -> Any:
    """The launch settings for the decision, each naming the measurement it comes from."""
    found, rows = read_campaign_speculation(session, inventory.get_campaign(session, slug))
    return engine_config(engine, found, rows)
