"""SQLModel tables. Enum-like columns are plain strings validated by the domain layer,
so adding a state never needs a database enum migration.

Times are timezone-aware UTC. JSON columns hold data that is shaped by recipes and runners
(recipe, requirements, fingerprints) and is never queried by its inner fields.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, overload

import pydantic
from pydantic import AfterValidator, field_validator, model_validator
from sqlalchemy import JSON, BigInteger, Column, DateTime, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from app.domain.acceptance import (
    alphas_from_unconditional,
    check_accept_length,
    check_accept_length_by_k,
    check_unconditional,
)
from app.protocol.metrics import ConditionTag


def utcnow() -> datetime:
    return datetime.now(UTC)


@overload
def aware(ts: datetime) -> datetime: ...
@overload
def aware(ts: None) -> None: ...
@overload
def aware(ts: datetime | None) -> datetime | None: ...
def aware(ts: datetime | None) -> datetime | None:
    """The one UTC helper: a time in UTC. SQLite returns naive datetimes for timezone-aware columns (they were
    written as UTC); a time of another zone (a campaign file's) is converted."""
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _ts(nullable: bool = True, **kw: Any) -> Any:
    return Field(default=None, sa_column=Column(DateTime(timezone=True), nullable=nullable), **kw)


def _created(**kw: Any) -> Any:
    return Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False), **kw)


def _json(default: Any = None, **kw: Any) -> Any:
    if callable(default):
        return Field(default_factory=default, sa_column=Column(JSON, nullable=False), **kw)
    return Field(default=None, sa_column=Column(JSON, nullable=True), **kw)


def _text(**bounds: Any) -> Any:
    """A text column (unbounded in the database, empty by default) with the bounds its input shapes check."""
    return Field(default="", sa_column=Column(Text, nullable=False, default=""), **bounds)


class RunOrder(StrEnum):
    """What "Run next candidate" follows."""

    ranking = "ranking"  # the payoff ranking proposes (ties fall back to priority)
    priority = "priority"  # a person pinned the order by hand


class ApproachStatus(StrEnum):
    """What a person decided of an approach (or "untested": nothing yet). Only a person sets it: a trial
    proposes (Trial.proposal, Approach.pending_trial_id), it never decides; what is running is `Activity`."""

    untested = "untested"
    promising = "promising"
    adopted = "adopted"
    dead_end = "dead_end"
    deferred = "deferred"


class Activity(StrEnum):
    """What an approach's trial is doing now, shown beside its decided status: read from its active trial
    (app/domain/campaigns.activities), never stored on the approach."""

    queued = "queued"  # a trial of it waits for a runner, or was handed to one that has not started it
    running = "running"


class HistoryKind(StrEnum):
    """A row of an approach's history: a person's status change, or an event of one of its trials (queued,
    ended), which changes no status (from_status == to_status: the decided status at the time)."""

    status = "status"
    trial = "trial"


class TrialState(StrEnum):
    queued = "queued"
    dispatched = "dispatched"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    timed_out = "timed_out"
    lost = "lost"


# The one home of these sets: a trial is active (holds its runner, may change) or has ended for good.
ACTIVE_TRIAL_STATES = (TrialState.queued, TrialState.dispatched, TrialState.running)
TERMINAL_TRIAL_STATES = (
    TrialState.succeeded,
    TrialState.failed,
    TrialState.cancelled,
    TrialState.timed_out,
    TrialState.lost,
)
# Ended without measuring anything: no verdict is asked for.
NO_VERDICT_TRIAL_STATES = (TrialState.cancelled, TrialState.lost)


def _input(default: Any, title: str, description: str, step: float, placeholder: str = "", **bounds: Any) -> Any:
    """A model input's field: its bounds (the schemas validate them; a table does not), its label, and how the
    what-if form shows it (`x-form`: the input's step and placeholder)."""
    form = {"step": step, "placeholder": placeholder}
    extra: dict[str, Any] = {"json_schema_extra": {"x-form": form}}
    if isinstance(step, float):
        extra["allow_inf_nan"] = False
    return Field(default, title=title, description=description, schema_extra=extra, **bounds)


class ModelInputFields(SQLModel):
    """The profitability model's inputs (domain.md "Is speculation profitable?"), declared once: the Campaign
    table, CampaignCreate / CampaignUpdate, the what-if (its form, `WhatIf`, the charts template) all derive
    from these fields, their bounds and labels. None = not known yet. Every bound is one a real campaign never
    reaches: 2**63 is a 422, never an overflow 500, and inf/NaN are refused."""

    # The inputs a what-if may try (the geometry's hidden size is the model's, not a what-if).
    WHAT_IF: ClassVar[tuple[str, ...]] = (
        "accept_length",
        "draft_steps",
        "draft_step_ms",
        "verify_compute_ms",
        "allreduces_per_verify",
        "verify_tokens",
        "baseline_tok_s",
    )

    baseline_tok_s: float | None = _input(
        None, "Baseline tok/s", "Plain decode throughput at batch 1 (tokens per second).", 0.1, gt=0, le=1e9
    )
    accept_length: float | None = _input(
        None,
        "Accept length τ",
        "Mean accepted length per speculative cycle, bonus token included (SGLang's accept len).",
        0.01,
        "e.g. 2.4",
        ge=1,
        le=1024,
    )
    draft_steps: int | None = _input(
        None, "Draft steps", "Draft steps per cycle (--speculative-num-steps).", 1, "e.g. 3", ge=0, le=1024
    )
    draft_step_ms: float | None = _input(
        None, "ms per draft step", "One draft head step, milliseconds.", 0.01, "e.g. 0.8", ge=0, le=1e7
    )
    verify_compute_ms: float | None = _input(
        None,
        "Verify compute (ms)",
        "One verify step without its communication, milliseconds.",
        0.01,
        "e.g. 9.5",
        ge=0,
        le=1e7,
    )
    allreduces_per_verify: int | None = _input(
        122,
        "Allreduces per verify",
        "Allreduces in one verify step (2 per layer with tensor parallelism).",
        1,
        ge=0,
        le=1_000_000,
    )
    hidden_size: int = _input(7168, "Hidden size", "The target model's hidden size.", 1, gt=0, le=1_048_576)
    verify_tokens: int = _input(
        4, "Verify tokens", "Tokens per verify step (--speculative-num-draft-tokens).", 1, gt=0, le=65_536
    )

    @model_validator(mode="after")
    def _tau_within_steps(self) -> Any:
        """tau <= draft steps + 1 when a body gives both, refused as accept_length's (the value above its
        bound: a campaign file's error names its line, not draft_steps'); a body with one of them is checked
        against the stored other by campaigns.update_campaign."""
        tau, steps = getattr(self, "accept_length", None), getattr(self, "draft_steps", None)
        if tau is not None and steps is not None:
            try:
                check_accept_length(tau, steps, "draft step")
            except ValueError as exc:
                raise ValueError(f"accept_length: {exc}") from None
        return self


# ---- a campaign's and an approach's fields, declared once: the table and the input shapes ----------------
# (app/schemas.py: XBase, XCreate, XUpdate, XPublic) inherit them, bounds included; a table checks no bound.

# The model over (batch, draft tokens) (app/domain/answer/grid.py): tau per k, alpha_i, the grid.
# Acceptance enters three ways (issue 33 item 3); each bound is app/domain/acceptance.py's, the one validator.
AcceptLengthByK = Annotated[
    dict[
        Annotated[str, pydantic.Field(pattern=r"^[1-9][0-9]?$")],
        Annotated[float, pydantic.Field(ge=1, le=100, allow_inf_nan=False)],
    ],
    AfterValidator(check_accept_length_by_k),
    pydantic.Field(
        max_length=64,
        description="Accept length tau (incl. the bonus token) per draft length k, e.g. {'3': 2.4}; at most k + 1.",
    ),
]
AcceptUnconditional = Annotated[
    list[Annotated[float, pydantic.Field(ge=0, le=1, allow_inf_nan=False)]],
    AfterValidator(check_unconditional),
    pydantic.Field(
        min_length=1,
        max_length=64,
        description="vLLM's per-position acceptance rates, unconditional (accepted at position i / drafts); stored "
        "with the conditional alphas they convert to (alpha_i = u_i / u_(i-1), u_0 = 1), which replace accept_alphas.",
    ),
]
AcceptAlphas = Annotated[
    list[Annotated[float, pydantic.Field(ge=0, le=1, allow_inf_nan=False)]],
    pydantic.Field(
        min_length=1,
        max_length=64,
        description="Per-position acceptance rates alpha_i (position i accepted given all before it were).",
    ),
]
BatchGrid = Annotated[
    list[Annotated[int, pydantic.Field(ge=1, le=65_536)]],
    pydantic.Field(min_length=1, max_length=32, description="Batch sizes to answer over (default: the measured ones)."),
]


def check_answer_conditions(value: dict[str, str]) -> dict[str, str]:
    declarable = ConditionTag.DECLARABLE
    unknown = sorted(k for k in value if k not in declarable)
    if unknown:
        raise ValueError(f"not a condition: {', '.join(unknown)} (conditions: {', '.join(sorted(declarable))})")
    return value


AnswerConditions = Annotated[
    dict[
        Annotated[str, pydantic.Field(max_length=40)],
        Annotated[str, pydantic.Field(min_length=1, max_length=80)],
    ],
    AfterValidator(check_answer_conditions),
    pydantic.Field(
        max_length=12,
        description="The conditions the default answer is given under, as the docs name them (e.g. "
        "{experts_dtype: int4}, the precision a team deploys); unset: the most complete set, bf16 and CUDA graphs "
        "among equals. Other sets are asked for by name.",
    ),
]
DraftTokenGrid = Annotated[
    list[Annotated[int, pydantic.Field(ge=1, le=64)]],
    pydantic.Field(
        min_length=1, max_length=64, description="Draft lengths k to answer over (default: the measured ones)."
    ),
]
# The comparisons' decision rule (docs/statistics.md): a verdict needs the interval at this level to
# exclude 1 and an effect of at least this share.
StatsConfidence = Annotated[
    float,
    pydantic.Field(ge=0.5, le=0.999, description="Confidence level of the comparisons' intervals (default 0.95)."),
]
StatsMinEffect = Annotated[
    float,
    pydantic.Field(ge=0.001, le=0.5, description="Smallest effect a comparison calls faster or slower (default 0.03)."),
]


class CampaignText(SQLModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = _text(max_length=20000)


def _sorted_unique(value: list[int] | None) -> list[int] | None:
    """A grid is a set of sizes: kept in increasing order, each once."""
    return sorted(set(value)) if value is not None else None


class CampaignSettings(SQLModel):
    """The comparisons' rule, then the model over (batch, draft tokens): how acceptance was entered, the grid."""

    stats_confidence: StatsConfidence = 0.95
    stats_min_effect: StatsMinEffect = 0.03
    # Accept length per draft length ({"3": 2.4}), per-position acceptance rates alpha_i (migration 0007);
    # vLLM's unconditional per-position rates as entered (migration 0017): accept_alphas holds their conversion.
    accept_length_by_k: AcceptLengthByK | None = _json()
    accept_alphas: AcceptAlphas | None = _json()
    accept_unconditional: AcceptUnconditional | None = _json()
    speculation_batches: BatchGrid | None = _json()
    answer_conditions: AnswerConditions | None = _json()
    speculation_draft_tokens: DraftTokenGrid | None = _json()

    _grids = field_validator("speculation_batches", "speculation_draft_tokens")(_sorted_unique)

    @model_validator(mode="after")
    def _acceptance(self) -> CampaignSettings:
        """vLLM's unconditional rates become the conditional accept_alphas (entering alphas directly clears them)."""
        if self.accept_unconditional is not None:
            converted = alphas_from_unconditional(self.accept_unconditional)
            given = self.accept_alphas if "accept_alphas" in self.model_fields_set else None
            if given is not None and [round(a, 9) for a in given] != [round(a, 9) for a in converted]:
                raise ValueError(
                    "accept_alphas and accept_unconditional disagree: enter one (a campaign file carries both, "
                    "the alphas being the unconditional rates' conversion)"
                )
            self.accept_alphas = converted
        elif "accept_alphas" in self.model_fields_set:
            self.accept_unconditional = None  # the stored unconditional rates no longer describe the alphas
        return self


def _strip(v: Any) -> Any:
    return v.strip() if isinstance(v, str) else v


class ApproachText(SQLModel):
    title: str = Field(min_length=1, max_length=200)
    description: str = _text(max_length=20000)
    evidence: str = _text(max_length=100000)
    effort: str = Field(default="", max_length=200)
    prerequisites: str = _text(max_length=20000)

    _strip = field_validator("title", "effort", mode="before")(_strip)


# Ids that links and notifications carry (/trials/45, "trial #45 succeeded") are never reused: SQLite hands
# out max(id) + 1 without AUTOINCREMENT, so a deleted newest row's id would name another row; PostgreSQL's
# sequences never go back (migration 0016).
NEVER_REUSED_IDS = {"sqlite_autoincrement": True}


class Campaign(CampaignSettings, ModelInputFields, CampaignText, table=True):
    """Its name and description, the model's inputs and the comparisons' and grid's settings (declared above,
    shared with app/schemas.py), then what only the table holds."""

    __table_args__ = (NEVER_REUSED_IDS,)

    id: int | None = Field(default=None, primary_key=True)
    slug: str = Field(max_length=80, unique=True, index=True)
    baseline_trial_id: int | None = None
    # As stored; the input shapes check them (schemas.CampaignBase: ModelInput names, schemas.ReportedFigure).
    input_sources: dict[str, str] | None = _json()  # model input -> where its entered value comes from
    reported: list[dict[str, Any]] | None = _json()  # figures reported elsewhere
    # What "Run next candidate" follows: the payoff ranking (app/domain/planning.py), or the priority a
    # person set by hand (moving an approach pins it). RunOrder above.
    run_order: str = Field(default="ranking", max_length=20, sa_column_kwargs={"server_default": "ranking"})
    created_at: datetime = _created()
    updated_at: datetime = _created()
    # Archived: read-only, off the front page, restorable (app/domain/lifecycle.py, migration 0020).
    archived_at: datetime | None = _ts()


class CampaignSlug(SQLModel, table=True):
    """A slug a campaign had before a rename: its old URLs redirect to the campaign while the row exists, and no
    other campaign may take the slug meanwhile (app/domain/lifecycle.py)."""

    __tablename__ = "campaign_slug"

    id: int | None = Field(default=None, primary_key=True)
    slug: str = Field(max_length=80, unique=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    created_at: datetime = _created()


class CampaignEventKind(StrEnum):
    """What a campaign's own history records (its approaches keep theirs in StatusChange)."""

    renamed = "renamed"
    archived = "archived"
    restored = "restored"


class CampaignEvent(SQLModel, table=True):
    """One step of a campaign's lifecycle: who renamed, archived or restored it, when, and what it did."""

    __tablename__ = "campaign_event"

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    kind: str = Field(max_length=20)
    detail: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    actor: str = Field(default="", max_length=120)
    at: datetime = _created()


class Approach(ApproachText, table=True):
    __table_args__ = (UniqueConstraint("campaign_id", "key", name="uq_approach_campaign_key"), NEVER_REUSED_IDS)

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    key: str = Field(max_length=80, description="Stable identifier within the campaign (used in campaign files).")
    position: int = Field(default=0, description="Priority order: 1 runs first.")
    status: str = Field(default=ApproachStatus.untested, max_length=20, index=True)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    # As stored; the input shapes check them (schemas.RecipeSpec, schemas.Requirements).
    recipe: dict[str, Any] | None = _json()
    requirements: dict[str, Any] | None = _json()
    # The stack the current verdict was reached on, and which of its components the verdict is bound to.
    verdict_fingerprint: dict[str, Any] | None = _json()
    bound_to: dict[str, Any] | None = _json()
    # The ended trial whose verdict a person has not confirmed yet ("Run next" skips it meanwhile).
    # No foreign key: trial -> approach already points the other way.
    pending_trial_id: int | None = None
    # Archived: off the inventory's active list and out of "run next", its trials and answers kept; restorable.
    archived_at: datetime | None = _ts()
    created_at: datetime = _created()
    updated_at: datetime = _created()


class StatusChange(SQLModel, table=True):
    __tablename__ = "status_change"
    # An approach's history, newest first, a page at a time.
    __table_args__ = (Index("ix_status_change_approach_at_id", "approach_id", "at", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    approach_id: int = Field(foreign_key="approach.id", index=True, ondelete="CASCADE")
    from_status: str = Field(max_length=20)
    to_status: str = Field(max_length=20)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    actor: str = Field(default="", max_length=120)
    trial_id: int | None = Field(default=None, foreign_key="trial.id", index=True, ondelete="SET NULL")
    kind: str = Field(default=HistoryKind.status, max_length=20, sa_column_kwargs={"server_default": "status"})
    at: datetime = _created()


class SettleState(StrEnum):
    open = "open"  # a round is queued or running, or the next one is due
    decided = "decided"  # the deciding metric's rows are faster / slower, or have the samples they need
    spent = "spent"  # the budget is spent, still undecided
    stopped = "stopped"  # a trial of it was cancelled or lost


DEFAULT_SETTLE_BUDGET = 10  # Google Benchmark's U test wants about 9 repetitions a side
MAX_SETTLE_BUDGET = 50


class SettleFields(SQLModel):
    """What a Settle or Repeat is asked for beside its approaches, declared once: the table (Settle), the API's
    request and answer (schemas.SettleRequest, SettlePublic) and the pages' form (schemas.SettleForm)."""

    budget: int = Field(
        default=DEFAULT_SETTLE_BUDGET,
        ge=1,
        le=MAX_SETTLE_BUDGET,
        title="Budget",
        description="Trials per approach at most.",
    )
    metric: str | None = Field(
        default=None,
        min_length=1,
        max_length=120,
        title="Deciding metric",
        description="The deciding metric (default: the headline one both measured).",
    )


class Settle(SettleFields, table=True):
    """ "Settle A vs B" (or "Repeat A", without B): rounds of interleaved trials queued until the comparison
    decides or `budget` trials per approach are spent (app/domain/repeats.py). Its budget and metric: SettleFields."""

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    approach_a_id: int = Field(foreign_key="approach.id", index=True, ondelete="CASCADE")
    approach_b_id: int | None = Field(default=None, foreign_key="approach.id", index=True, ondelete="CASCADE")
    state: str = Field(default=SettleState.open, max_length=20, index=True)
    outcome: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    requested_by: str = Field(default="", max_length=120)
    created_at: datetime = _created()
    ended_at: datetime | None = _ts()


class ReplayState(StrEnum):
    running = "running"  # some of its trials are queued or active
    finished = "finished"  # every trial of it ended
    cancelled = "cancelled"  # a person cancelled its queued trials


class Replay(SQLModel, table=True):
    """ "Replay on runner R": one trial of every approach whose verdict is bound to a component in which R's
    stack differs, queued for R in payoff order (app/domain/replay.py). `entries`: per approach, in that
    order, what it was before (status, reason, figures' trial, the verdict's stack summary) and the re-test
    reason; `runner_fingerprint`: R's stack when the replay started."""

    __table_args__ = (NEVER_REUSED_IDS,)

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    runner_id: int | None = Field(default=None, foreign_key="runner.id", ondelete="SET NULL")
    runner_name: str = Field(max_length=120)
    runner_fingerprint: dict[str, Any] | None = _json()
    entries: list[dict[str, Any]] = _json(list)
    state: str = Field(default=ReplayState.running, max_length=20, index=True)
    requested_by: str = Field(default="", max_length=120)
    created_at: datetime = _created()
    ended_at: datetime | None = _ts()


class RunnerFields(SQLModel):
    """A runner's fields that its pages and API show, declared once (title, bounds): the table (Runner) adds its
    key, token and creation time; schemas.RunnerPublic adds what is read beside it (status, trial, summary)."""

    name: str = Field(max_length=120, unique=True, title="Name")
    embedded: bool = Field(default=False, title="Embedded")
    connected: bool = Field(default=False, title="Connected")
    labels: list[str] = _json(list, title="Labels")
    fingerprint: dict[str, Any] | None = _json(title="Node")
    last_seen_at: datetime | None = _ts(title="Last seen")
    revoked_at: datetime | None = _ts(title="Revoked")


class Runner(RunnerFields, table=True):
    id: int | None = Field(default=None, primary_key=True)
    token_hash: str = Field(max_length=128, unique=True)
    created_at: datetime = _created()


class TrialListed(SQLModel):
    """A trial's own fields that lists show (schemas.TrialSummary, the exports, the trial tables), declared once
    with their titles; TrialOutcome holds the rest its page and GET /api/trials/{id} show."""

    state: str = Field(default=TrialState.queued, max_length=20, index=True, title="State")
    phase: str = Field(default="queued", max_length=40, title="Phase")
    runner_id: int | None = Field(
        default=None, foreign_key="runner.id", index=True, ondelete="SET NULL", title="Runner id"
    )
    attempt_count: int = Field(default=0, title="Attempts")
    requested_by: str = Field(default="", max_length=120, title="Started by")
    exit_code: int | None = Field(default=None, title="Exit code")
    created_at: datetime = _created(title="Created")
    dispatched_at: datetime | None = _ts(title="Dispatched")
    started_at: datetime | None = _ts(title="Started")
    finished_at: datetime | None = _ts(title="Finished")


class TrialOutcome(SQLModel):
    """The rest of a trial's own fields its page and GET /api/trials/{id} show (schemas.TrialPublic)."""

    exit_signal: int | None = Field(default=None, title="Exit signal")
    error: str = Field(default="", sa_column=Column(Text, nullable=False, default=""), title="Error")
    attempt_id: str | None = Field(
        default=None, max_length=64, description="The current attempt; reports from any other are stale."
    )
    fingerprint: dict[str, Any] | None = _json(description="The runner's stack when the trial was created.")
    recipe: dict[str, Any] = _json(dict)
    proposal: dict[str, Any] | None = _json(description="The verdict its log proposes, once it has ended.")
    log_bytes: int = 0
    log_dropped_bytes: int = 0
    cancel_requested: bool = False
    gpu_released: bool | None = None
    gpu_note: str = Field(default="", max_length=500)


class Trial(TrialOutcome, TrialListed, table=True):
    """A trial: its listed fields and outcome (declared above, shared with app/schemas.py), then its keys."""

    # Latest trials of a campaign / of an approach, a page at a time (newest first).
    __table_args__ = (
        Index("ix_trial_campaign_id_id", "campaign_id", "id"),
        Index("ix_trial_approach_id_id", "approach_id", "id"),
        # The trials page's date sorts and date range within a campaign (migration 0020).
        Index("ix_trial_campaign_created", "campaign_id", "created_at"),
        Index("ix_trial_campaign_finished", "campaign_id", "finished_at"),
        NEVER_REUSED_IDS,
    )
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    approach_id: int = Field(foreign_key="approach.id", index=True, ondelete="CASCADE")
    settle_id: int | None = Field(default=None, foreign_key="settle.id", index=True, ondelete="SET NULL")
    replay_id: int | None = Field(default=None, foreign_key="replay.id", index=True, ondelete="SET NULL")
    pinned_runner_id: int | None = Field(
        default=None,
        foreign_key="runner.id",
        ondelete="SET NULL",
        description="Queued for this runner only (a replay's): no other runner takes it; runner_id stays unset until dispatch.",
    )


class Attempt(SQLModel, table=True):
    id: str = Field(primary_key=True, max_length=64)
    trial_id: int = Field(foreign_key="trial.id", index=True, ondelete="CASCADE")
    runner_id: int | None = Field(default=None, foreign_key="runner.id", ondelete="SET NULL")
    number: int
    state: str = Field(default=TrialState.dispatched, max_length=20)
    created_at: datetime = _created()
    ended_at: datetime | None = _ts()


class LogChunk(SQLModel, table=True):
    __tablename__ = "log_chunk"
    __table_args__ = (
        UniqueConstraint("trial_id", "attempt_id", "seq", name="uq_log_chunk_trial_attempt_seq"),
        Index("ix_log_chunk_trial_seq", "trial_id", "seq"),
    )

    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="trial.id", ondelete="CASCADE")
    attempt_id: str = Field(max_length=64)
    seq: int
    offset: int
    data: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = _created()


class Metric(SQLModel, table=True):
    __table_args__ = (
        UniqueConstraint("trial_id", "seq", "index", name="uq_metric_trial_seq_index"),
        # The profitability report: per (approach, name) of a campaign, the newest trial and the best value are
        # each one seek into an index (profitability/metrics.py: load_campaign_metrics), whatever the number of trials.
        Index("ix_metric_campaign_name_approach_trial", "campaign_id", "name", "approach_id", "trial_id", "value"),
        Index("ix_metric_campaign_name_approach_value", "campaign_id", "name", "approach_id", "value", "trial_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="trial.id", index=True, ondelete="CASCADE")
    approach_id: int = Field(foreign_key="approach.id", index=True, ondelete="CASCADE")
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    seq: int = Field(description="The log chunk the metric line was read from.")
    index: int = Field(default=0, description="Position of the metric line within that chunk.")
    name: str = Field(max_length=120, index=True)
    value: float
    unit: str = Field(default="", max_length=40)
    tags: dict[str, Any] = _json(dict)
    # The raw samples the line's value summarises (recipes emit their R repetitions; at most 1,000), or None.
    samples: list[float] | None = _json()
    # Their summary as the statistics read a trial (statistics.summary_columns, written with the samples;
    # all None without samples): a comparison reads these, not the samples (docs/statistics.md).
    samples_median: float | None = Field(default=None)
    samples_cv: float | None = Field(default=None)
    samples_n: int | None = Field(default=None)
    created_at: datetime = _created()


class TrialTag(SQLModel, table=True):
    """A metric tag (name=value) that some metric of a trial carries, once per trial: the trials page's tag filter
    reads these through an index instead of every metric's JSON (docs/performance.md, "The trials page").
    Database triggers on `metric` (migration 0023) write them for every insert, whoever inserts; the value is the
    database's text of the JSON value (json_extract on SQLite, ->> on PostgreSQL), as the filter compared before.
    A name or value over 200 characters is not kept: the filter (schemas.TrialFilter.tag) is at most 200 in all."""

    __tablename__ = "trial_tag"
    __table_args__ = (Index("ix_trial_tag_name_value_trial", "name", "value", "trial_id"),)
    trial_id: int = Field(foreign_key="trial.id", primary_key=True, ondelete="CASCADE")
    name: str = Field(primary_key=True, max_length=200)
    value: str = Field(primary_key=True, max_length=200)


class Role(StrEnum):
    """What a person may do, each including the one before: read, change, administer."""

    viewer = "viewer"  # sees everything an operator sees, changes nothing
    operator = "operator"  # runs trials, edits approaches, decides verdicts
    admin = "admin"  # also invites, disables, revokes sessions, manages runners and API tokens


class User(SQLModel, table=True):
    """A person on the board. Never deleted (history names them): disabled instead."""

    __tablename__ = "board_user"  # "user" is a reserved word in PostgreSQL

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=40, unique=True, description="Display name, shown in history.")
    role: str = Field(default=Role.operator, max_length=20)
    created_at: datetime = _created()
    disabled_at: datetime | None = _ts()


class Invite(SQLModel, table=True):
    """A one-time link an admin hands a teammate: opening it creates their user with this role."""

    id: int | None = Field(default=None, primary_key=True)
    token_hash: str = Field(max_length=128, unique=True)
    role: str = Field(max_length=20)
    name: str = Field(default="", max_length=40, description="Suggested display name (the invitee may change it).")
    created_by_id: int | None = Field(default=None, foreign_key="board_user.id", ondelete="SET NULL")
    created_at: datetime = _created()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    used_at: datetime | None = _ts()
    used_by_id: int | None = Field(default=None, foreign_key="board_user.id", ondelete="SET NULL")
    revoked_at: datetime | None = _ts()


class AuthToken(SQLModel, table=True):
    """A secret someone presents: a one-time login link or an API token for scripts.

    Both belong to a user and act with that user's role. A login link without a user is the
    first-admin link of a board that has no users yet; an API token without one was made from
    the server's shell before the board had users and acts as an admin."""

    __tablename__ = "auth_token"

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=20, description="login (one-time) or api")
    name: str = Field(default="", max_length=120)
    user_id: int | None = Field(default=None, foreign_key="board_user.id", index=True, ondelete="CASCADE")
    token_hash: str = Field(max_length=128, unique=True)
    created_at: datetime = _created()
    expires_at: datetime | None = _ts()
    used_at: datetime | None = _ts()
    revoked_at: datetime | None = _ts()


class BrowserSession(SQLModel, table=True):
    """A logged-in browser. The cookie carries the session id (signed); only its hash is stored.
    Logout, `campaign sessions revoke` or expiry end it at once: the next request is refused."""

    __tablename__ = "browser_session"

    id: int | None = Field(default=None, primary_key=True)
    session_hash: str = Field(max_length=128, unique=True)
    # One login link makes at most one session, enforced by the database (concurrent redeems).
    login_token_id: int | None = Field(default=None, foreign_key="auth_token.id", unique=True)
    # One invite makes at most one session too.
    invite_id: int | None = Field(default=None, foreign_key="invite.id", unique=True)
    user_id: int | None = Field(default=None, foreign_key="board_user.id", index=True, ondelete="CASCADE")
    name: str = Field(default="operator", max_length=120)
    user_agent: str = Field(default="", max_length=200)
    created_at: datetime = _created()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    revoked_at: datetime | None = _ts()


class ShareLink(SQLModel, table=True):
    """A read-only link to a campaign's status page; the URL carries a signed id + nonce."""

    __tablename__ = "share_link"

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    name: str = Field(default="", max_length=120)
    nonce: str = Field(max_length=64)
    created_by: str = Field(default="", max_length=120)
    created_at: datetime = _created()
    revoked_at: datetime | None = _ts()


class NotificationEvent(StrEnum):
    """What a destination can be told (docs/notifications.md)."""

    trial_ended = "trial.ended"
    verdict_waiting = "verdict.waiting"
    verdict_confirmed = "verdict.confirmed"
    retest_flagged = "retest.flagged"
    regression_detected = "regression.detected"
    runner_lost = "runner.lost"
    queue_drained = "queue.drained"
    replay_finished = "replay.finished"
    test = "test"  # "Send a test message": always delivered, whatever the destination's events


class DeliveryState(StrEnum):
    pending = "pending"
    sending = "sending"  # claimed by the hub's notifier; back to pending if the server died meanwhile
    retrying = "retrying"
    sent = "sent"
    failed = "failed"  # given up after MAX_ATTEMPTS


class NotificationTarget(SQLModel, table=True):
    """A destination (an Apprise URL: Slack, Teams, Discord, ntfy, a JSON webhook, email, ...), for one
    campaign or (campaign_id None) the whole board. The URL holds secrets: only `redacted` is ever shown."""

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int | None = Field(default=None, foreign_key="campaign.id", index=True, ondelete="CASCADE")
    url: str = Field(sa_column=Column(Text, nullable=False))
    redacted: str = Field(max_length=500)
    events: list[str] = _json(list)
    waiting_hours: float = Field(default=4.0, description="verdict.waiting: after this many hours without a verdict.")
    created_by: str = Field(default="", max_length=120)
    created_at: datetime = _created()
    disabled_at: datetime | None = _ts()
    last_sent_at: datetime | None = _ts()  # the coalescing window starts here


class EventRecord(SQLModel, table=True):
    """One record of each event the board tells (a trial ended, a verdict waiting, a re-test flagged, ...),
    written once by `notifications.record` whoever follows it: the destinations' outbox rows and the people's
    inbox items point at it (issue 45)."""

    __tablename__ = "event_record"
    __table_args__ = (NEVER_REUSED_IDS,)

    id: int | None = Field(default=None, primary_key=True)
    event: str = Field(max_length=40, description="Its kind: a NotificationEvent value.")
    dedupe_key: str = Field(max_length=200, unique=True)
    title: str = Field(max_length=300)
    body: str = Field(sa_column=Column(Text, nullable=False))
    link: str = Field(default="", max_length=500)
    campaign_id: int | None = Field(default=None, foreign_key="campaign.id", index=True, ondelete="CASCADE")
    approach_id: int | None = Field(default=None, foreign_key="approach.id", index=True, ondelete="CASCADE")
    created_at: datetime = _created()


class Watch(SQLModel, table=True):
    """A person follows a campaign (approach_id None) or one approach of it: its events reach their inbox."""

    __table_args__ = (UniqueConstraint("user_id", "campaign_id", "approach_id", name="uq_watch_user_target"),)

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="board_user.id", index=True, ondelete="CASCADE")
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    approach_id: int | None = Field(default=None, foreign_key="approach.id", index=True, ondelete="CASCADE")
    created_at: datetime = _created()


class InboxItem(SQLModel, table=True):
    """One event in one person's inbox, unread until they read it."""

    __tablename__ = "inbox_item"
    __table_args__ = (
        UniqueConstraint("user_id", "event_id", name="uq_inbox_user_event"),
        Index("ix_inbox_user_read", "user_id", "read_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="board_user.id", ondelete="CASCADE")
    event_id: int = Field(foreign_key="event_record.id", index=True, ondelete="CASCADE")
    read_at: datetime | None = _ts()
    created_at: datetime = _created()


class NotificationOutbox(SQLModel, table=True):
    """One event for one destination, written in the transaction of the event itself; the hub's notifier
    delivers it (retried with backoff, coalesced into digests) and keeps it as the delivery log."""

    __table_args__ = (
        UniqueConstraint("target_id", "dedupe_key", name="uq_outbox_target_dedupe"),
        Index("ix_outbox_state_due", "state", "next_attempt_at"),
        Index("ix_outbox_target_created", "target_id", "created_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    target_id: int = Field(foreign_key="notificationtarget.id", ondelete="CASCADE")
    event_id: int | None = Field(default=None, foreign_key="event_record.id", index=True, ondelete="SET NULL")
    event: str = Field(max_length=40)
    dedupe_key: str = Field(max_length=200)
    title: str = Field(max_length=300)
    body: str = Field(sa_column=Column(Text, nullable=False))
    link: str = Field(default="", max_length=500)
    state: str = Field(default=DeliveryState.pending, max_length=20)
    attempts: int = 0
    next_attempt_at: datetime = _created()
    claimed_at: datetime | None = _ts()
    last_error: str = Field(default="", sa_column=Column(Text, nullable=False))
    batch_size: int = Field(default=0, description="How many events the message that carried this one held.")
    created_at: datetime = _created()
    sent_at: datetime | None = _ts()


class Artifact(SQLModel, table=True):
    """A file a trial left (results, profiles, traces), stored content-addressed by the board's artifact store
    (app/domain/artifacts.py). `removed_at`: deleted by the campaign's retention limit (the row stays, so the
    trial page says so)."""

    __table_args__ = (
        UniqueConstraint("trial_id", "name", name="uq_artifact_trial_name"),
        Index("ix_artifact_campaign_created", "campaign_id", "created_at"),
        NEVER_REUSED_IDS,
    )

    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="trial.id", index=True, ondelete="CASCADE")
    campaign_id: int = Field(foreign_key="campaign.id", ondelete="CASCADE")
    name: str = Field(max_length=255, description="Path within the trial's artifacts directory, '/'-separated.")
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    sha256: str = Field(max_length=64, index=True)
    content_type: str = Field(max_length=100)
    uploaded_by: str = Field(default="", max_length=120)
    created_at: datetime = _created()
    removed_at: datetime | None = _ts()
    removed_reason: str = Field(default="", max_length=200)
    # What a profiler trace gives (app/domain/traces.py `TraceSummary.figures`), read once when it is stored;
    # {"error": ...} when the file is not a trace; NULL for any other artifact (SQL NULL, never JSON null).
    trace: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))


class ChangeScan(SQLModel, table=True):
    """How far the change-point pass has read one approach's trials on one runner (app/domain/changes.py):
    a pair is recomputed only when it has a succeeded trial newer than `last_trial_id`."""

    __tablename__ = "change_scan"
    __table_args__ = (UniqueConstraint("approach_id", "runner_id", name="uq_change_scan_approach_runner"),)

    id: int | None = Field(default=None, primary_key=True)
    approach_id: int = Field(foreign_key="approach.id", ondelete="CASCADE")
    runner_id: int = Field(foreign_key="runner.id", ondelete="CASCADE")
    last_trial_id: int
    computed_at: datetime = _created()


class ChangePoint(SQLModel, table=True):
    """A change point of a series (approach x metric point x runner): where its figures moved, by how much
    (the ratio of the segments' medians, after over before, with its interval) and the stack diff between
    the trials around it."""

    __tablename__ = "change_point"
    __table_args__ = (Index("ix_change_point_approach_runner", "approach_id", "runner_id"),)

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True, ondelete="CASCADE")
    approach_id: int = Field(foreign_key="approach.id", ondelete="CASCADE")
    runner_id: int = Field(foreign_key="runner.id", ondelete="CASCADE")
    metric: str = Field(max_length=120)
    unit: str = Field(default="", max_length=40)
    point: str = Field(default="", max_length=500, description="The point's tags, 'tokens=8, scope=step'.")
    trial_id: int = Field(description="The first trial after the change.")
    before_trial_id: int = Field(description="The last trial before it.")
    ratio: float
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    verdict: str = Field(max_length=20, description="faster or slower (app/domain/statistics.Finding).")
    stack_diff: str = Field(default="", max_length=500)
    created_at: datetime = _created()
