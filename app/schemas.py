"""Input and output shapes (pydantic) for the JSON API, the forms and campaign files.

A family per concept: XBase (shared fields), XCreate, XUpdate (all optional), XPublic (output).
"""

from __future__ import annotations

import re
from copy import copy
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.config import JsonDict
from sqlmodel import SQLModel

from app.models import (
    Activity,
    ApproachStatus,
    ApproachText,
    CampaignSettings,
    CampaignText,
    HistoryKind,
    ModelInputFields,
    RunnerFields,
    SettleFields,
    TrialListed,
    TrialOutcome,
    TrialState,
    aware,
)
from app.protocol.recipes import MAX_TIMEOUT_S, RecipeError
from runners.recipes import build_launch, recipes

SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,79}$"
SLUG_WORDS = (
    "use 1 to 80 lowercase letters, digits and dashes, starting with a letter or a digit (like kimi-k25-eagle3)"
)


def error_words(err: Any) -> str:
    """A pydantic error (one of `ValidationError.errors()`) as a person reads it: a slug's pattern in words,
    a model's own check without pydantic's "Value error, " prefix. Every error reader uses it."""
    if err.get("type") == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == SLUG_PATTERN:
        return SLUG_WORDS
    return str(err.get("msg", "")).removeprefix("Value error, ")


def _admits_none(annotation: Any) -> bool:
    return annotation is None or type(None) in get_args(annotation)


def _never_null(cls: type[BaseModel], data: Any) -> Any:
    """For update shapes: a field whose type has no None (its column is NOT NULL) may be left out, never null."""
    if isinstance(data, dict):
        for name, info in cls.model_fields.items():
            if name in data and data[name] is None and not _admits_none(info.annotation):
                raise ValueError(f"{name} cannot be null: leave it out to keep it")
    return data


Shape = TypeVar("Shape", bound=BaseModel)


def leave_out_any(cls: type[Shape]) -> type[Shape]:
    """An update shape (XUpdate) from the fields it inherits, their bounds and validators kept: each may be left
    out (its default is None, and an update is applied with `exclude_unset`, so no creation default applies).
    Its body adds `_never_null` for the fields that may not be null. mypy reads the inherited declarations
    (a creation's required field looks required): build an update with `model_validate`."""
    for info in cls.model_fields.values():
        info.default, info.default_factory = None, None
    cls.model_rebuild(force=True)
    return cls


class RowPublic(BaseModel):
    """An output shape read off a table row: each field from the row's attribute of its name, but those `given`
    (what the row holds under another name, or not at all)."""

    @classmethod
    def of_row(cls: type[Shape], row: object, **given: Any) -> Shape:
        return cls(**{name: getattr(row, name) for name in cls.model_fields if name not in given}, **given)


def _utc(v: Any) -> Any:
    return aware(v) if isinstance(v, datetime) else v  # a validator: models.aware on what is a datetime


class RecipeSpec(BaseModel):
    """An approach's recipe: data a runner turns into a process. `build_launch` (runners/recipes) is its one
    validator, here as on the runner: the kind's own checks of its params included. Stored as given (the
    fields it sets only)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal[tuple(sorted(recipes()))]  # type: ignore[valid-type]
    params: dict[str, Any] = Field(
        default_factory=dict, description="The kind's parameters (`python -m runners.recipes.<kind> --help`)."
    )
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=200)], str | int] = Field(
        default_factory=dict, max_length=200, description="Environment variables for the trial."
    )
    cwd: str | None = Field(None, min_length=1, max_length=4096, pattern=r"^[^\x00]*$")
    timeout_s: float = Field(
        600, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, description="The trial's time limit, seconds."
    )

    @model_validator(mode="after")
    def _launchable(self) -> RecipeSpec:
        try:
            build_launch(self.model_dump())
        except RecipeError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_serializer("timeout_s")
    def _seconds(self, value: float) -> int | float:
        return int(value) if float(value).is_integer() else value  # 600, as written, not 600.0

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


class Requirements(BaseModel):
    """What a runner must have to run an approach's trial. Strict: `true` is not 1 GPU (the schema says
    integer); a form, whose values are all text, validates with `strict=False`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    # The fields the approach's edit form shows (it merges them onto the rest: app/web/campaigns.py).
    FORM_FIELDS: ClassVar[tuple[str, ...]] = ("gpus", "min_sm", "software")

    gpus: int = Field(0, ge=0, le=1024, title="GPUs", description="GPUs needed on one node.")
    min_sm: str | None = Field(
        None, pattern=r"^\d+\.\d+$", max_length=16, title="Min SM", description="Minimum SM capability, e.g. '9.0'."
    )
    software: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=100)]] = Field(
        default_factory=list,
        max_length=50,
        title="Software",
        description="Fingerprint components that must be present, e.g. ['torch', 'sglang'].",
    )
    nodes: int = Field(
        1,
        ge=1,
        le=4096,
        title="Nodes",
        description="Nodes for one trial (more than 1: a SLURM runner, one rank per GPU via srun).",
    )
    gpus_per_node: int = Field(
        0,
        ge=0,
        le=1024,
        title="GPUs per node",
        description="GPUs per node of a multi-node trial (0: one rank per node).",
    )
    tasks_per_node: int = Field(
        0,
        ge=0,
        le=1024,
        title="Ranks per node",
        description="Ranks per node of a multi-node trial (0: one per GPU, or one per node without GPUs); "
        "CPU (gloo) trials set it to run several ranks per node.",
    )
    sbatch: list[Annotated[str, Field(pattern=r"^--?[A-Za-z][^\n\x00]*$", max_length=300)]] = Field(
        default_factory=list,
        max_length=50,
        title="sbatch options",
        description="Extra sbatch options for this approach's jobs, e.g. ['--qos=high'].",
    )

    @model_serializer(mode="wrap")
    def _allocation_only_when_asked(self, handler: Any) -> dict[str, Any]:
        # The allocation fields appear only when set, so single-node requirements read as before.
        data = handler(self)
        for name, default in (("nodes", 1), ("gpus_per_node", 0), ("tasks_per_node", 0), ("sbatch", [])):
            if data.get(name) == default:
                data.pop(name)
        return data


MODEL_INPUT_FIELDS: tuple[str, ...] = tuple(ModelInputFields.model_fields)
ModelInput = Literal[MODEL_INPUT_FIELDS]  # type: ignore[valid-type]  # the names of ModelInputFields


def optional_inputs(names: tuple[str, ...]) -> dict[str, Any]:
    """`create_model` field definitions: each named model input with its bounds and label, optional (None: not
    given). For shapes where every input may be left out, such as the what-if form."""
    fields: dict[str, Any] = {}
    for name in names:
        info = copy(ModelInputFields.model_fields[name])
        info.default = None
        if info.annotation is None:
            raise TypeError(f"model input {name} has no annotation")
        fields[name] = (info.annotation | None, info)
    return fields


def _no_defaults(schema: dict[str, Any]) -> None:
    # An update's left-out field keeps the stored value: the inherited creation defaults are not the update's.
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


class ReportedFigure(BaseModel):
    """A figure reported elsewhere (an earlier campaign, a library's docstring, a paper), with its source:
    it places an approach on the break-even chart before this campaign measures it. Exactly one of
    `t_ar_us` (one allreduce) and `tok_s` (plain decode throughput with the approach) is given."""

    # The rule "exactly one of t_ar_us and tok_s; the baseline is a t_ar_us" stated in the schema too, so
    # clients (and schemathesis) know it: one branch per figure, the other absent.
    model_config = ConfigDict(
        extra="forbid",
        str_strip_whitespace=True,
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["t_ar_us"],
                    "properties": {"t_ar_us": {"type": "number"}},
                    "not": {"required": ["tok_s"]},
                },
                {
                    "required": ["tok_s"],
                    "properties": {"tok_s": {"type": "number"}, "baseline": {"const": False}},
                    "not": {"required": ["t_ar_us"]},
                },
            ]
        },
    )
    label: str = Field(min_length=1, max_length=200)
    approach: str | None = Field(None, pattern=SLUG_PATTERN, description="The approach (key) the figure is about.")
    t_ar_us: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False, description="One allreduce, microseconds.")
    bytes: int | None = Field(None, gt=0, le=2**40, description="The message size t_ar_us was reported at.")
    tok_s: float | None = Field(
        None, gt=0, le=1e9, allow_inf_nan=False, description="Plain decode throughput with the approach (batch 1)."
    )
    baseline: StrictBool = Field(
        False, description="The baseline's own allreduce: tok_s figures are derived against it."
    )
    source: str = Field(min_length=1, max_length=2000, description="Where the figure comes from.")

    @model_validator(mode="after")
    def _one_figure(self) -> ReportedFigure:
        if (self.t_ar_us is None) == (self.tok_s is None):
            raise ValueError("give exactly one of t_ar_us and tok_s")
        if self.baseline and self.t_ar_us is None:
            raise ValueError("the baseline figure is a t_ar_us")
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: Any) -> dict[str, Any]:
        # Stored and exported without the fields left out, so a campaign file round-trips as written.
        return {k: v for k, v in handler(self).items() if v is not None and not (k == "baseline" and v is False)}


class CampaignSources(SQLModel):
    """Where the entered model inputs come from, and figures reported elsewhere (the table stores them as given)."""

    input_sources: dict[ModelInput, Annotated[str, Field(max_length=2000)]] | None = Field(
        None,
        max_length=50,
        description="Where each entered model input comes from, e.g. {baseline_tok_s: 'seed campaign, NCCL'}.",
    )
    reported: list[ReportedFigure] | None = Field(
        None, max_length=500, description="Figures reported elsewhere, with their sources."
    )


class CampaignBase(CampaignSettings, CampaignSources, ModelInputFields, CampaignText):
    """Name and description, then the model inputs (ModelInputFields), then where they come from."""

    # Then the comparisons' and the grid's settings. app/models.py declares all but the sources, with their bounds.

    model_config = {"extra": "forbid", "str_strip_whitespace": True}


RESERVED_SLUGS = ("import",)  # `/api/campaigns/import` is the import's, not a campaign's


def _not_reserved(value: str) -> str:
    if value in RESERVED_SLUGS:
        raise ValueError(f"{value!r} is reserved (a path of the API), choose another name")
    return value


# A campaign's slug as it is entered: at creation (CampaignCreate) and at a rename (CampaignRename).
CampaignSlugText = Annotated[
    str,
    Field(
        pattern=SLUG_PATTERN,
        description=f"URL name: lowercase letters, digits, dashes; not {', '.join(RESERVED_SLUGS)}.",
    ),
    AfterValidator(_not_reserved),
]


class CampaignCreate(CampaignBase):
    slug: CampaignSlugText


class CampaignRename(BaseModel):
    """The campaign's new slug: its old URLs redirect to it (docs/board.md "A campaign's lifecycle")."""

    model_config = {"extra": "forbid", "str_strip_whitespace": True}
    slug: CampaignSlugText


class ArchiveRequest(BaseModel):
    model_config = {"extra": "forbid", "strict": True}  # true or false, not "yes" or 1
    cancel_active: bool = Field(
        False, description="Cancel the campaign's queued and running trials in the same step (else 409 while any)."
    )


class DeleteRequest(BaseModel):
    model_config = {"extra": "forbid"}
    confirm: str = Field(description="The campaign's name, typed to confirm (the delete cannot be undone).")


class CampaignEventPublic(BaseModel):
    model_config = {"from_attributes": True}
    kind: str
    detail: str
    actor: str
    at: datetime

    _utc = field_validator("at", mode="before")(_utc)


class CampaignDeleted(BaseModel):
    deleted: str = Field(description="The deleted campaign's slug.")
    removed: dict[str, int] = Field(description="How many of its rows went with it, per kind.")


@leave_out_any
class CampaignUpdate(CampaignSettings, CampaignText, ModelInputFields):
    """Any of the campaign's text and model inputs; a field left out keeps its stored value (applied with
    `exclude_unset`, so the inputs' creation defaults never apply here)."""

    # Its settings too, not its sources; each field as CampaignBase's, left out by default (leave_out_any).

    model_config = {"extra": "forbid", "str_strip_whitespace": True, "json_schema_extra": _no_defaults}
    _never_null = model_validator(mode="before")(_never_null)


class CampaignPublic(CampaignCreate):
    model_config = {"from_attributes": True}
    id: int
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = Field(None, description="Archived (read-only) since then; null: active.")

    _utc = field_validator("created_at", "updated_at", "archived_at", mode="before")(_utc)


class ApproachBase(ApproachText):
    # The approach's text (app/models.py declares it, with its bounds), then what it runs and needs.
    model_config = {"extra": "forbid", "str_strip_whitespace": True}
    recipe: RecipeSpec | None = None
    requirements: Requirements | None = None


class ApproachCreate(ApproachBase):
    key: str = Field(pattern=SLUG_PATTERN, description="Stable name within the campaign: lowercase, digits, dashes.")
    status: ApproachStatus = ApproachStatus.untested
    reason: str = Field("", max_length=20000)


class ApproachForm(ApproachCreate):
    """The page's "add an approach" form: ApproachCreate's fields, as far as the form shows them."""

    model_config = {"extra": "ignore"}  # a page's form also posts its CSRF token


@leave_out_any
class ApproachUpdate(ApproachBase):
    _never_null = model_validator(mode="before")(_never_null)


class ImportSummary(BaseModel):
    """What importing a campaign file did."""

    campaign: str = Field(description="The campaign's slug.")
    created: bool = Field(description="True: a new campaign; false: an existing one brought up to date.")
    added: int
    changed: int
    removed: int
    kept: int = Field(description="Approaches the file does not list, kept (an import without `replace`).")
    summary: str = Field(description="The same, as a sentence.")


# The statuses a person sets (what a trial is doing is its activity, never a status): the schema says so.
PersonStatus = Literal["untested", "promising", "adopted", "dead_end", "deferred"]
if list(get_args(PersonStatus)) != [s.value for s in ApproachStatus]:  # one list: ApproachStatus's
    raise RuntimeError("PersonStatus no longer matches ApproachStatus")


# Statuses a verdict can end in; they need a reason so the next person knows why (the schema says so too).
NEEDS_REASON = frozenset({ApproachStatus.dead_end, ApproachStatus.deferred})
_REASON_REQUIRED: JsonDict = {
    "if": {"properties": {"status": {"enum": [s.value for s in sorted(NEEDS_REASON)]}}, "required": ["status"]},
    "then": {"properties": {"reason": {"pattern": "\\S"}}, "required": ["reason"]},
}


class StatusChangeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, json_schema_extra=_REASON_REQUIRED)
    status: PersonStatus
    reason: str = Field("", max_length=20000)


class MoveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    position: int = Field(ge=1, le=1_000_000, description="New 1-based priority position.")


class StatusChangePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    from_status: str
    to_status: str
    reason: str
    actor: str
    trial_id: int | None
    kind: HistoryKind = Field(
        HistoryKind.status,
        description="status: a person's change; trial: a trial's event (queued, ended), which changes no status.",
    )
    at: datetime

    _utc = field_validator("at", mode="before")(_utc)


class HistoryEntryPublic(StatusChangePublic):
    id: int


class HistoryGroupPublic(BaseModel):
    """A decision (null: trial events older than any decision read) and the trial events after it, newest first."""

    decision: HistoryEntryPublic | None
    events: list[HistoryEntryPublic]


class DecisionsPage(BaseModel):
    groups: list[HistoryGroupPublic]
    next_before: int | None = Field(description="Pass as `before` for the next page (null: no more).")


class SideSoFarPublic(BaseModel):
    title: str
    trials: int = Field(description="Succeeded trials measured at the point.")
    value: float | None = Field(description="The mean of the trials' medians.")
    low: float | None = Field(description="The interval over trials at the campaign's confidence (null below 2).")
    high: float | None


class SettleProgressPublic(BaseModel):
    """A Repeat or Settle while it runs: trials done of the most it may take, each side's figure so far."""

    id: int
    a: str
    b: str | None
    state: Literal["open", "decided", "spent", "stopped"]
    outcome: str
    done: int
    total: int
    active: int = Field(description="Trials of it queued or running now.")
    metric: str | None
    unit: str
    point: str
    confidence: float
    sides: list[SideSoFarPublic]


class ApproachPublic(ApproachCreate):
    model_config = {"from_attributes": True}
    id: int
    position: int
    recipe: dict[str, Any] | None = None  # type: ignore[assignment]  # as stored: read back, never re-checked
    bound_to: dict[str, Any] | None = None
    verdict_fingerprint: dict[str, Any] | None = None
    archived_at: datetime | None = Field(
        None, description="When it was archived (off the active list, its trials kept); null while active."
    )
    activity: Activity | None = Field(
        None, description="What its trial is doing now (queued, running), beside its decided status; null: none."
    )
    activity_trial_id: int | None = Field(None, description="The trial queued or running (null when none).")
    pending_trial_id: int | None = Field(
        None, description="The ended trial whose proposal waits for a person's verdict (null when none)."
    )
    created_at: datetime
    updated_at: datetime

    _utc = field_validator("created_at", "updated_at", "archived_at", mode="before")(_utc)


class EvidencePublic(BaseModel):
    """What an approach holds: what deleting it with `delete_evidence=true` removes, and archiving keeps."""

    model_config = ConfigDict(from_attributes=True)
    trials: int
    metrics: int
    log_bytes: int
    artifacts: int
    traces: int = Field(description="Of the artifacts, the profiler traces read for the model.")
    status_changes: int
    settles: int = Field(description="Settle / repeat records naming it.")
    active_trial: int | None = Field(description="A trial of it still queued or running (delete and archive wait).")
    adopted: bool = Field(description="Adopted: its trials are the evidence the campaign's decision rests on.")
    summary: str = Field(description="The same, as a sentence.")


class ApproachDeleted(BaseModel):
    """The answer to a delete: what went with the approach."""

    deleted: str = Field(description="The approach's key.")
    removed: EvidencePublic


# ---- trials, runners, share links and comparisons (read by scripts through /api) ---------------------


class AttemptPublic(BaseModel):
    """One dispatch of a trial to a runner; a retry after a lost runner is a new attempt."""

    model_config = ConfigDict(from_attributes=True)
    id: str
    number: int
    state: str
    runner_id: int | None
    created_at: datetime
    ended_at: datetime | None

    _utc = field_validator("created_at", "ended_at", mode="before")(_utc)


# Output shapes built on a table's field declarations: every field is in every answer, so the schema says required.
_ALWAYS_SENT: Any = {"json_schema_serialization_defaults_required": True}


class TrialSummary(TrialListed):
    """A trial as a list row: its listed fields (app/models.py declares them, with their titles), with its
    campaign, approach and runner by name."""

    model_config = _ALWAYS_SENT
    id: int = Field(title="Trial")
    campaign: str = Field(title="Campaign", description="The campaign's slug.")
    approach: str = Field(title="Approach", description="The approach's key.")
    approach_title: str
    state: TrialState = Field(title="State")  # the table's text, as the API names its values
    runner: str | None = Field(
        title="Runner", description="The runner's name (null until dispatched, or once it is deleted)."
    )
    proposed: str = Field(
        "", title="Proposed", description="The verdict its failure signature proposed (empty: none matched)."
    )

    _utc = field_validator("created_at", "dispatched_at", "started_at", "finished_at", mode="before")(_utc)


class SettleRequest(SettleFields):
    """ "Settle A vs B" (with b) or "Repeat A N times" (without): interleaved trials through the queue. Its budget
    and metric: SettleFields (app/models.py)."""

    model_config = {"extra": "forbid", "str_strip_whitespace": True}
    a: str = Field(pattern=SLUG_PATTERN, description="The first approach (the reference).")
    b: str | None = Field(None, pattern=SLUG_PATTERN, description="The approach settled against A; none: Repeat A.")


class SettleForm(SettleRequest):
    """The pages' Settle and Repeat forms: the request, and the trial page's "take the proposal and repeat"."""

    model_config = {"extra": "ignore"}  # a page's form also posts its CSRF token
    taking: int | None = Field(
        None, ge=1, le=2**63 - 1, description="The trial whose proposal is recorded as the verdict first."
    )


class SettlePublic(SettleFields):
    model_config = _ALWAYS_SENT
    id: int
    a: str
    b: str | None
    state: Literal["open", "decided", "spent", "stopped"]
    outcome: str
    queued: list[int] = Field(description="The trials this request queued (the first round).")


class RunResultPublic(BaseModel):
    """What "run next candidate" and "run this approach" did: started a trial, queued one, or neither (why)."""

    started: bool = Field(description="A trial was dispatched to a runner now.")
    queued: bool = Field(
        description="A trial was made but waits in the campaign's queue: the runners that can run it are busy."
    )
    trial_id: int | None = Field(description="The trial started or queued (null when neither).")
    approach: str | None = Field(description="The approach's key.")
    runner: str | None = Field(description="The runner it was dispatched to (null unless started).")
    reason: str = Field(description="Why nothing started (empty when a trial started).")


class QueuedTrialPublic(BaseModel):
    """A trial waiting in a campaign's queue for a free runner."""

    position: int = Field(ge=1, description="1 = the next of this campaign's queued trials to start.")
    trial_id: int
    approach: str = Field(description="The approach's key.")
    approach_title: str
    priority: int = Field(description="The approach's position in the campaign (queued trials start in this order).")
    requested_by: str = Field(description="Who queued it.")
    queued_at: datetime
    blocked: str = Field("", description="Why no connected runner can take it now (empty when one can).")

    _utc = field_validator("queued_at", mode="before")(_utc)


class TrialPublic(TrialOutcome, TrialSummary):
    """A trial in full: its attempts, the stack it ran on, timings, the verdict it proposes (its own fields:
    TrialListed and TrialOutcome in app/models.py)."""

    attempts: list[AttemptPublic]
    duration_s: float | None = Field(description="Start to end (to now while it runs); null before it starts.")


NO_PROPOSAL = "none"  # the proposal filter's value for "no failure signature matched"
_NAME = r"^[^\x00-\x1f\x7f]+$"


_NUMBER = re.compile(r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")


class TrialFilter(BaseModel):
    """What the trials page, `GET /api/trials`, its export and `campaign trials` filter by (each optional, all
    ANDed). Declared once: the API reads it as query parameters, the page from its URL (so a filtered view can
    be shared), the CLI from its options. (Other query parameters sit beside it: no "extra": "forbid".)"""

    model_config = {"str_strip_whitespace": True}

    campaign: str | None = Field(None, pattern=SLUG_PATTERN, description="A campaign's slug.")
    approach: str | None = Field(
        None, pattern=SLUG_PATTERN, description="An approach's key (in `campaign`, or in any)."
    )
    state: TrialState | None = None
    runner: str | None = Field(None, min_length=1, max_length=120, pattern=_NAME, description="A runner's name.")
    proposal: str | None = Field(
        None,
        min_length=1,
        max_length=60,
        pattern=_NAME,
        description=f"The verdict the trial's failure signature proposed (e.g. oom); {NO_PROPOSAL!r}: none matched.",
    )
    tag: str | None = Field(
        None,
        min_length=3,
        max_length=200,
        pattern=_NAME,
        description="A metric tag or condition, name=value (e.g. world_size=8): the trial printed a metric with it.",
    )
    since: datetime | None = Field(None, description="Created at or after (ISO 8601; UTC when no zone is given).")
    until: datetime | None = Field(None, description="Created before (ISO 8601; UTC when no zone is given).")
    requested_by: str | None = Field(None, min_length=1, max_length=120, pattern=_NAME, description="Who started it.")

    _utc = field_validator("since", "until", mode="after")(_utc)

    @field_validator("since", "until", mode="before")
    @classmethod
    def _iso_only(cls, value: object) -> object:
        """ISO 8601 text only: a bare number (which pydantic would read as seconds since 1970) is refused."""
        if isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER.fullmatch(value.strip())):
            raise ValueError("a date and time in ISO 8601, like 2026-12-07 or 2026-12-07T10:00:00Z")
        return value

    def items(self) -> list[tuple[str, str]]:
        """The filter as URL query items (the page's links keep it)."""
        out = []
        for name, value in self.model_dump(exclude_none=True).items():
            out.append((name, value.isoformat() if isinstance(value, datetime) else str(value)))
        return out


TRIAL_SORTS = ("id", "campaign", "approach", "state", "runner", "requested_by", "created", "started", "finished")


class TrialPage(BaseModel):
    items: list[TrialSummary]
    next_before: int | None = Field(
        description="Pass as `before` for the next (older) page; null on the last page or when sorted otherwise."
    )
    total: int = Field(description="How many trials the filter finds (every page).")
    page: int = Field(description="This page's number (from 1) when paged by `page`.")


class MetricPublic(BaseModel):
    """One metric line of a trial's log (`@@campaign-metric {json}`), as stored."""

    name: str
    value: float
    unit: str
    tags: dict[str, Any]
    seq: int = Field(description="The log chunk the line was read from.")
    index: int = Field(description="The line's position among the chunk's metric lines.")
    recorded_at: datetime

    _utc = field_validator("recorded_at", mode="before")(_utc)


class RunnerTrial(BaseModel):
    id: int
    state: TrialState
    phase: str


class RunnerPublic(RunnerFields):
    """A runner: its fields (app/models.py declares them, with their titles), its status and the trial it runs."""

    model_config = _ALWAYS_SENT
    id: int
    status: Literal["online", "busy", "offline", "revoked"] = Field(title="Status")
    summary: str = Field(description="The fingerprint in one line: GPUs, SM, software versions.")
    trial: RunnerTrial | None = Field(title="Current trial", description="The trial it runs now.")

    _utc = field_validator("last_seen_at", "revoked_at", mode="before")(_utc)


class ShareLinkCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    # No control characters (PostgreSQL text cannot hold NUL; a name is one line).
    name: str = Field(
        "", max_length=120, pattern=r"^[^\x00-\x1f\x7f]*$", description="Who the link is for; empty: 'status page'."
    )


class ShareLinkPublic(BaseModel):
    id: int
    name: str
    created_by: str
    created_at: datetime
    revoked_at: datetime | None
    url: str | None = Field(description="The read-only status page; null once revoked.")

    _utc = field_validator("created_at", "revoked_at", mode="before")(_utc)


class ComparedTrialPublic(BaseModel):
    id: int
    approach: str
    approach_title: str
    state: TrialState
    runner: str | None
    started_at: datetime | None
    finished_at: datetime | None

    _utc = field_validator("started_at", "finished_at", mode="before")(_utc)


class RatioPublic(BaseModel):
    value: float = Field(description="The column's median over the first column's.")
    low: float | None = Field(
        description="The interval's low end; null when no verdict can be given (one trial a side)."
    )
    high: float | None


FindingValue = Literal["faster", "slower", "equivalent", "below_min_effect", "inconclusive", "no_verdict"]


class PairStatsPublic(BaseModel):
    """One column against the first at this point (docs/statistics.md: the trial is the unit)."""

    column: int = Field(description="The column's index (1 = the second column).")
    ratio: RatioPublic | None
    p_value: float | None = Field(
        description="Welch's t-test over the trials' log medians; null below 2 trials a side."
    )
    verdict: FindingValue | None = Field(
        description="faster / slower: the interval excludes 1 and the effect reaches the minimum; below_min_effect: "
        "it excludes 1 with a smaller effect; equivalent: it holds 1 inside +/- the minimum; inconclusive; "
        "no_verdict: one trial a side and no known run-to-run spread (repeat), or see no_verdict_reason. null: not compared (see not_compared)."
    )
    trials_needed: int | None = Field(
        description="For an inconclusive row: trials a side at which the rule decides with 80% power, at the "
        "observed run-to-run spread."
    )
    no_verdict_reason: str = Field(
        "",
        description="Why there is no verdict where the numbers alone would not say: an unstable trial (no ratio "
        "either), or an interval too wide to mean anything (not given); '' if none.",
    )
    spread: str = Field("", description="The known run-to-run spread a one-trial side used, named; '' if none.")
    stack_difference: str | None = Field(
        description="The column's stack against the first's, e.g. 'torch 2.10 -> 2.11'."
    )
    not_compared: str = Field("", description="Why no verdict: a different stack (not asked), not measured on both.")


class RowStatsPublic(BaseModel):
    """The row's statistics: the top-level ratio, p_value, verdict and trials_needed are the second column's
    against the first's; `each` holds every column after the first."""

    ratio: RatioPublic | None
    p_value: float | None
    verdict: FindingValue | None
    cv: list[float | None] = Field(description="Each column's within-run coefficient of variation (its trials' mean).")
    between_cv: list[float | None] = Field(
        description="Each column's run-to-run coefficient of variation (across its trials; null below 2)."
    )
    unstable: list[bool] = Field(description="Each column: a coefficient of variation over 10%.")
    trials_needed: int | None
    no_verdict_reason: str = Field("", description="The second column's `no_verdict_reason`, if any.")
    trials: list[int] = Field(description="Each column's number of trials at this point.")
    n: list[int] = Field(description="Each column's number of samples at this point (over its trials).")
    spread: str = ""
    stack_difference: str | None
    not_compared: str = ""
    each: list[PairStatsPublic]


class ComparedMetricRow(BaseModel):
    point: dict[str, Any] = Field(description="The tags that place this row (tokens, batch, ...; never spread tags).")
    values: list[float | None] = Field(description="One per compared column, in their order; null: not measured.")
    differs: bool
    stats: RowStatsPublic | None = Field(description="null with a single column.")


class ComparedMetric(BaseModel):
    name: str
    unit: str
    x_tag: str | None = Field(description="The numeric tag the rows run along (the chart's x), if any.")
    lower_is_better: bool = Field(description="The metric's direction: 'faster' is a ratio below 1 when true.")
    rows: list[ComparedMetricRow]


class ComparedColumnPublic(BaseModel):
    key: str = Field(description="'trial-12' or 'approach-nccl'.")
    label: str
    approach: str
    trials: list[int] = Field(
        description="The column's trials, each one observation (its figure is the mean of their medians)."
    )
    stack_difference: str | None
    left_out: int = Field(description="Succeeded trials of the approach on another stack, not pooled.")


class ComparedComponent(BaseModel):
    component: str
    label: str
    values: list[str | None] = Field(description="One per compared trial; null: not reported.")
    differs: bool


class ComparisonRulePublic(BaseModel):
    confidence: float
    min_effect: float
    unstable_cv: float
    power: float = Field(description="The power trials_needed is computed for.")


class ComparisonPublic(BaseModel):
    campaign: str
    by: Literal["trial", "approach"]
    across_stacks: bool
    rule: ComparisonRulePublic
    columns: list[ComparedColumnPublic]
    trials: list[ComparedTrialPublic]
    metrics: list[ComparedMetric]
    stack: list[ComparedComponent]
    conditions: list[ComparedComponent] = Field(
        default_factory=list,
        description="The conditions the columns' metrics name (world_size, mode, context, dtype, experts_dtype, ...): "
        "each column's values, several where its trials or metrics ran under more than one.",
    )
