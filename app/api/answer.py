"""The answer over (batch, draft tokens) and the engine config to deploy it: `app/domain/answer/read.py`,
`app/domain/answer/configs/`. Read-only."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from app.deps import SessionDep, require_operator
from app.domain import campaigns
from app.domain.answer import AnswerQuery
from app.domain.answer.configs import config_json, deploy_target, engine_config, parse_serve_range
from app.domain.answer.configs.schedule import SERVE_PATTERN
from app.domain.answer.prediction import check_document
from app.domain.answer.read import Answer, answer_document, pick_conditions, read_answer

router = APIRouter(prefix="/api", tags=["answer"], dependencies=[Depends(require_operator)])


class Figure(BaseModel):
    """A figure with its trial-level bootstrap interval at the campaign's confidence; low/high are null when every
    input is exact (`no_samples`: entered or derived)."""

    value: float
    low: float | None
    high: float | None
    unstable: bool = Field(description="An input's spread exceeds the statistics home's unstable CV (10%).")
    no_samples: bool = Field(description="Exact: every input entered or derived, none measured by a trial.")
    within_run_only: bool = Field(
        False, description="An input was measured by one trial: the interval holds within-run noise only."
    )


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
    verdict: str | None = Field(
        None,
        description="The speedup against 1 labelled as the comparisons label a ratio (faster, slower, equivalent, "
        "below_min_effect, inconclusive) at the campaign's confidence and minimum effect; null without a speedup.",
    )
    note: str = Field(description="How t_ar was obtained, or why the cell is open (e.g. not extrapolated).")


class ApproachAnswerPublic(BaseModel):
    key: str
    title: str
    status: str
    world_size: int
    tau_star: Figure | None = Field(description="tau* at the smallest batch with `tau_star_draft_tokens`.")
    tau_star_draft_tokens: int | None
    break_even_batch: int | None = Field(
        description="The largest measured batch whose best speedup pays by the interval rule (pays_by_batch 'yes')."
    )
    first_losing_batch: int | None
    best_draft_tokens: dict[str, int] = Field(
        description="Batch -> best draft length; 0 (do not speculate) where its best cell does not pay by the interval."
    )
    pays_by_batch: dict[str, str] = Field(
        default_factory=dict,
        description="Batch -> its best cell's verdict by the interval rule: 'yes', 'no' or 'unclear' (the one rule).",
    )
    unstable_inputs: list[str]
    by_batch: list[CellPublic]


class AcceptLengthPublic(Figure):
    draft_tokens: int
    source: str


class InputPublic(Figure):
    name: str
    approach: str | None = Field(description="The approach whose trial measured it; null when shared.")
    source: str
    trials: list[int] = Field(description="The trials that measured it (empty: exact).")
    conditions: str = Field(description="What it was measured under, the stand-in it came from included.")


class MissingPublic(BaseModel):
    what: str
    approach: str | None = Field(description="The approach whose trial would measure it; null: enter it.")
    how: str
    conditions: str | None = Field(description="The conditions it is missing under.")


class TierVerdictPublic(BaseModel):
    leader: str = Field(description="The tier leader's key.")
    verdict: str = Field(description="equivalent, below_min_effect or inconclusive (statistics.finding_of).")
    words: str = Field(description="The label in words: equivalent, not shown to differ, ...")
    ratio: float = Field(description="This approach's headline figure over the leader's.")
    low: float | None
    high: float | None


class ConditionSetPublic(BaseModel):
    key: str = Field(description="Pass it as ?conditions= to get the answer under this set.")
    label: str
    approaches: int
    cells: int
    inputs: int = Field(
        0, description="Of the four inputs an answer needs (decode step, draft step, verify compute, accept length)."
    )
    answers: bool = Field(False, description="It holds all four: this set can answer.")


class AnswerPublic(BaseModel):
    sentence: str
    batches: list[int]
    draft_tokens: list[int]
    allreduces_per_verify: int | None = Field(
        description="Allreduces per verify step in a cell whose verify step communicates (world_size above 1: the "
        "campaign's N_ar); a cell at world_size 1 runs none."
    )
    confidence: float
    resamples: int
    paired_runs: int = Field(0, description="The runs whose inputs were paired (each speedup per run, then over them).")
    chosen: str | None
    tiers: list[list[str]] = Field(
        description="Approach keys, best first; keys in one tier are not shown to differ by the campaign's minimum "
        "effect (the comparisons' rule on the ratio of their headline figures)."
    )
    indistinguishable: list[list[str]] = Field(description="The tiers of more than one key (kept for older clients).")
    tier_verdicts: dict[str, TierVerdictPublic] = Field(
        default_factory=dict, description="Each tier member (not its leader) against its tier's leader."
    )
    accept_length: list[AcceptLengthPublic]
    approaches: list[ApproachAnswerPublic]
    inputs: list[InputPublic]
    missing: list[MissingPublic]
    conditions: str | None = Field(description="The condition set this answer is given under (its key).")
    conditions_label: str | None
    default_conditions: str | None = Field(
        description="The key of the default condition set: the one holding most of the four inputs an answer "
        "needs (decode, draft and verify steps, accept length), then most approaches, then most cells with a speedup."
    )
    default_conditions_label: str | None = Field(None, description="The default condition set in words.")
    default_conditions_declared: bool | None = Field(
        None,
        description="true: the default is the set the campaign declares (answer_conditions); false: it declares "
        "conditions no set that can answer states, so the default is the most complete; null: it declares none.",
    )
    draft_vocab_note: str | None = Field(
        None,
        description="Which draft vocabulary the draft step is read at and why, where more than one was measured "
        "under these conditions (ask for another with `draft_vocab`).",
    )
    condition_sets: list[ConditionSetPublic]
    within_run_only: bool = Field(description="Some figure reads an input measured by one trial.")
    flags: list[str] = Field(
        description="Contradictory inputs (accept length above k + 1, allreduces longer than the step)."
    )


class SettingPublic(BaseModel):
    option: str
    value: Any
    source: str = Field(description="The measurement the setting comes from.")


class ConfigFilePublic(BaseModel):
    name: str = Field(description="The file name the launch line refers to.")
    media_type: str
    content: str


class BatchCostPublic(BaseModel):
    batch: int
    speedup: float | None = Field(description="At the one chosen k.")
    best_k: int = Field(description="This batch's best draft length (0: speculation does not pay here).")
    best_speedup: float


class StaticChoicePublic(BaseModel):
    """One k for the whole served range (SGLang without adaptive speculation), with its cost per batch."""

    serve_batches: str
    k: int
    argv: list[str]
    shell: str
    costs: list[BatchCostPublic]
    unmeasured: list[int] | None = Field(description="[low, high] of the served range above the measured batches.")
    rule: str


class PathChoicePublic(BaseModel):
    value: str = Field(description="The path on the launch line, or a named placeholder such as <target-model-path>.")
    source: str = Field(description="Where it comes from (an approach's recipe), or what to replace.")


class LaunchCommandPublic(BaseModel):
    """The whole server command a person pastes (app/domain/answer/configs/launch.py)."""

    argv: list[str] = Field(description="The engine's server command, one element per argument.")
    command: str = Field(description="argv quoted for a POSIX shell: shlex.split(command) == argv.")
    shell: str = Field(description="What to paste: the files written by quoted here-documents, then the command.")
    files: list[ConfigFilePublic]
    model: PathChoicePublic
    draft: PathChoicePublic
    tensor_parallel: int = Field(description="The world size the answer was measured at.")
    placeholders: list[str] = Field(description="Placeholders left on the line for the person to replace.")


class BatchDeviationPublic(BaseModel):
    batch: int
    answer_speedup: float | None = Field(description="The answer's predicted speedup at its choice (1.0: off).")
    config_speedup: float | None = Field(description="The predicted speedup at the config's choice (1.0: off).")
    loss: float | None = Field(description="1 - config_speedup / answer_speedup (negative: the config gains).")


class DeviationPublic(BaseModel):
    """A batch range where the config does not do what the answer says (the engine cannot express it)."""

    start: int
    end: int
    answer_k: int = Field(description="The answer's draft length there (0: off).")
    config_k: int = Field(description="What the config drafts there (0: off).")
    text: str = Field(description="The deviation and its predicted cost in words.")
    batches: list[BatchDeviationPublic] = Field(description="The predicted cost at each measured batch inside it.")


class EngineConfigPublic(BaseModel):
    engine: Literal["sglang", "vllm", "trtllm"]
    approach: str | None
    argv: list[str] = Field(description="What to add to the server's launch line, one element per argument.")
    shell: str = Field(description="argv quoted for a POSIX shell: pasted, each argument stays one argument.")
    env: dict[str, str]
    settings: list[SettingPublic]
    notes: list[str]
    files: list[ConfigFilePublic] = Field(description="Files the launch line names (save them where you launch).")
    static: StaticChoicePublic | None = Field(description="SGLang only: one k for the served batch range.")
    proposed_trials: list[dict[str, Any]] = Field(
        description="Recipes that would measure what the config cannot cite (e.g. the kernel SGLang would run)."
    )
    launch: LaunchCommandPublic | None = Field(description="The whole launch command around argv.")
    rules: str = Field(description="The engine release whose rules the config follows (e.g. TensorRT-LLM 1.4.0rc4).")
    expressible: bool = Field(description="The config does what the answer says at every batch (no deviation).")
    deviations: list[DeviationPublic] = Field(
        description="Where the config differs from the answer, per batch range, with the predicted cost: never silent."
    )


class CheckFigurePublic(Figure):
    trials: list[int] = Field(description="The trials the figure comes from.")
    source: str = Field(description="How it was obtained (metric, method, the formula it comes from).")


class PredictionPublic(BaseModel):
    name: str = Field(description="engine's counting | stand-in compute | stand-in + engine overhead")
    figure: CheckFigurePublic | None = Field(description="Null when an input is missing (`missing` says which).")
    held: bool | None = Field(description="The prediction's interval overlaps the measured one; null: not predicted.")
    off_by: float | None = Field(description="(predicted - measured) / measured, on the point estimates.")
    words: str = Field(description="'held (off by +0.8%)', 'missed by -46.2%' or 'not predicted: ...'.")
    missing: str
    note: str


class CheckCellPublic(BaseModel):
    batch: int
    draft_tokens: int
    conditions: str = Field(description="The engine's conditions (engine, release, model, method, ...) as a key.")
    conditions_label: str
    trials: list[int] = Field(description="The engine trials measuring this cell under these conditions.")
    one_trial: bool = Field(description="One trial: the measured interval is its within-trial spread only.")
    measured: CheckFigurePublic
    predictions: list[PredictionPublic]
    inputs: dict[str, CheckFigurePublic | None] = Field(
        description="accept_length, engine_step_off_ms, engine_step_on_ms, standin_decode_ms, standin_verify_ms, "
        "engine_overhead_ms (an input of the answer), ngram_drafter_ms (null: counted 0)."
    )
    standin: str = Field(description="The stand-in paired with the engine, or why none was.")


class OverheadPublic(CheckFigurePublic):
    batch: int


class EngineCheckPublic(BaseModel):
    rule: str
    confidence: float
    held: int
    missed: int
    missing: list[str] = Field(description="What the check lacks (no engine trial, no stand-in): never silently empty.")
    overheads: list[OverheadPublic] = Field(description="The engine's per-step overhead per batch, with its source.")
    cells: list[CheckCellPublic]


@dataclass
class ConditionsAsked:
    """The condition set a reader asks for, by its key or by what it states (query parameters)."""

    conditions: str | None = None
    context: int | None = None
    mode: Literal["graph", "eager"] | None = None
    experts_dtype: Literal["bf16", "fp8", "int4"] | None = None
    draft_vocab: Annotated[
        int | None, Query(ge=1, description="The condition set whose draft step has this vocabulary.")
    ] = None


Conditions = Annotated[ConditionsAsked, Depends()]


def _read(session: SessionDep, slug: str, asked: ConditionsAsked) -> Answer:
    campaign = campaigns.get_campaign(session, slug)
    stated = asdict(asked)
    key = pick_conditions(session, campaign, stated.pop("conditions"), **stated)
    return read_answer(session, campaign, AnswerQuery(key))


@router.get("/campaigns/{slug}/answer", response_model=AnswerPublic)
def answer(slug: str, session: SessionDep, asked: Conditions) -> dict[str, Any]:
    """Speculation over batch sizes and draft lengths, per approach, under one condition set (`conditions`, or
    `context` / `mode`; default: the most complete, named), with intervals at the campaign's confidence."""
    return answer_document(_read(session, slug, asked))


@router.get("/campaigns/{slug}/answer/config", response_model=EngineConfigPublic)
def answer_config(
    slug: str,
    session: SessionDep,
    asked: Conditions,
    engine: Literal["sglang", "vllm", "trtllm"] = "sglang",
    serve_batches: str | None = Query(
        None,
        max_length=20,
        pattern=SERVE_PATTERN,
        description="The batch range you serve, e.g. 1-32 (the default): SGLang's one-k line.",
    ),
) -> Any:
    """The launch settings for the decision, each naming the measurement it comes from."""
    serve = parse_serve_range(serve_batches)
    found = _read(session, slug, asked)
    spec, rows = found.speculation, found.approaches
    return config_json(engine_config(engine, spec, rows, serve=serve, target=deploy_target(session, spec, rows)))


@router.get("/campaigns/{slug}/answer/engine-check", response_model=EngineCheckPublic)
def answer_engine_check(slug: str, session: SessionDep) -> dict[str, Any]:
    """The answer checked against a real engine: every (batch, draft tokens) cell a vllm_server trial measured,
    its measured speedup beside the answer's predictions, each held or missed by x% (docs/profitability.md)."""
    found = read_answer(session, campaigns.get_campaign(session, slug), AnswerQuery())
    assert found.engine_check is not None  # read_answer always checks
    return check_document(found.engine_check)
