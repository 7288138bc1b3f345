"""`read_answer`: the campaign's answer, the one call every reader makes (the charts page and its what-if, the
campaign page card, the share and status pages, `GET /api/campaigns/{slug}/answer` and its config, `campaign
answer`, planning).

One `Answer` holds: the grid over (batch, draft tokens) under one condition set (`speculation`), every condition
set the campaign holds and which one is the default (the most complete: first the set holding most of the four
inputs an answer needs, a decode step, a draft step, a verify compute and an accept length at a verified draft
length, so a set that can answer comes first; then most approaches on the grid, then most cells with a speedup), the batch-1 report (the profitability card: tau*, the break-even latency, the verdict per
approach), the engine check (prediction.py), and the flags of contradictory inputs. The `AnswerQuery` (query.py)
is laid over all of it inside this computation: the what-if over the grid's inputs too (loader._laid_over), so
B*, the tiers and the configs follow it, and the what-if t_ar over the report (report.with_allreduce_latency).

The result is a pure function of the campaign's data and the query, so a process keeps the last few (`_CACHE`,
an LRU) keyed by (database, campaign, query, `data_version`). The version is one query read before anything else
(the metrics are read only on a miss); it is derived from declarations where it can be: every column the Campaign
table declares (a new input field is in the key the day it is declared), the newest metric id (rows are only ever
inserted), what changes on the approaches and the read traces.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlmodel import Session

from app.domain.answer.grid import Cell, SpeculationAnswer, SpeculationInputs
from app.domain.answer.inputs import ModelInputs, WhatIf, batch_1_missing, model_inputs
from app.domain.answer.loader import answer_rows, condition_sets, speculation_inputs
from app.domain.answer.metrics import CampaignMetrics, database_token, load_campaign_metrics
from app.domain.answer.model import BYTES_PER_ELEMENT
from app.domain.answer.prediction import EngineCheck, engine_check
from app.domain.answer.query import AnswerQuery
from app.domain.answer.report import ProfitabilityReport, profitability_report, with_allreduce_latency
from app.domain.answer.speculation import answer_json, speculation_answer
from app.domain.answer.values import Conditions, Value
from app.domain.campaigns import approaches
from app.domain.errors import Invalid
from app.domain.statistics import Rule
from app.domain.units import size_label
from app.models import Approach, Artifact, Campaign, Metric
from app.protocol.metrics import ConditionTag


@dataclass(frozen=True)
class ConditionSet:
    """One condition set the campaign holds, as the page's select offers it."""

    key: str
    label: str
    approaches: int  # on its grid
    cells: int  # with a speedup
    inputs: int = 0  # of the four an answer needs (T_base, draft step, verify compute, tau) one approach holds
    answers: bool = False  # all four: the set can answer


@dataclass(frozen=True)
class Answer:
    """The campaign's answer (module docstring)."""

    speculation: SpeculationAnswer
    report: ProfitabilityReport  # the answer at batch 1
    conditions: Conditions | None  # the set this answer is given under (None: the campaign states none)
    condition_sets: tuple[ConditionSet, ...]
    default_conditions: str | None  # the key of the default set
    metrics: CampaignMetrics = field(repr=False)
    approaches: list[Approach] = field(repr=False)
    what_if: WhatIf = field(default_factory=WhatIf)
    t_ar_us: float | None = None  # a what-if allreduce latency laid over the report (report.with_allreduce_latency)
    engine_check: EngineCheck | None = field(default=None, repr=False)  # the answer checked against an engine
    # What the pages drew of this answer (app/web/answer_view.py `_drawn`): kept with the answer, so it lives exactly
    # as long as the answer's cache entry and never outlives it; bounded there. Not part of the answer's value.
    drawn: OrderedDict[str, Any] = field(default_factory=OrderedDict, repr=False, compare=False)
    # The default set is the one the campaign declares (Campaign.answer_conditions); False: it declares conditions
    # no set that can answer states (the default is then the most complete); None: it declares none.
    default_declared: bool | None = None
    declared_conditions: dict[str, str] = field(default_factory=dict)  # Campaign.answer_conditions, as read

    @property
    def flags(self) -> tuple[str, ...]:
        return (*self.speculation.flags, *_report_flags(self.report))

    @property
    def is_default(self) -> bool:
        return self.conditions is None or self.conditions.key == self.default_conditions

    @property
    def default_set(self) -> ConditionSet | None:
        return next((c for c in self.condition_sets if c.key == self.default_conditions), None)

    @property
    def draft_vocab_note(self) -> str | None:
        """Which draft vocabulary the draft step was read at and why, where the campaign measured it at more than
        one under these conditions (otherwise the label says it, or no draft step states one)."""
        here = self.conditions.tag_map if self.conditions is not None else {}
        vocab = here.get(ConditionTag.DRAFT_VOCAB)
        if vocab is None:
            return None
        rest = {k: v for k, v in here.items() if k != ConditionTag.DRAFT_VOCAB}
        others = sorted(
            {
                int(tags[ConditionTag.DRAFT_VOCAB])
                for c in self.condition_sets
                for tags in (dict(_parse_key(c.key)),)
                if ConditionTag.DRAFT_VOCAB in tags
                and {k: v for k, v in tags.items() if k != ConditionTag.DRAFT_VOCAB} == _as_text(rest)
                and int(tags[ConditionTag.DRAFT_VOCAB]) != int(vocab)
            }
        )
        if not others:
            return None
        if not self.is_default:
            why = f"as asked (the default is {self.default_label})"
        elif int(vocab) == REFERENCE_DRAFT_VOCAB:
            why = "the EAGLE-3 draft head's reduced vocabulary, the default when several are measured"
        else:
            why = "the most complete set's (the reference 32,000 is not measured here)"
        also = ", ".join(f"{v:,} (draft_vocab={v})" for v in others)
        return f"The draft step is read at draft vocab {int(vocab):,}: {why}. Also measured here: draft vocab {also}."

    @property
    def default_label(self) -> str | None:
        """The default condition set in words (the page and the API name it)."""
        found = self.default_set
        return found.label if found is not None else None


def _parse_key(key: str) -> list[tuple[str, str]]:
    """A `Conditions.key` back into its (tag, text) pairs."""
    return [(k, v) for k, _, v in (part.partition("=") for part in key.split(",") if part)]


def _as_text(tags: dict[str, object]) -> dict[str, str]:
    return {k: str(v) for k, v in tags.items()}


def _report_flags(report: ProfitabilityReport) -> tuple[str, ...]:
    """The baseline's own allreduces cannot take longer than the decode step that contains them, priced at the
    decode step's own message size: at batch 1 it carries 1 x hidden x 2 bytes per allreduce (14 KiB at hidden
    7168), a verify step k + 1 times that. A reported figure without `bytes` is at the verify message size
    (docs/profitability.md), so it says nothing about the decode step: no check then (issue 43 item 5: the Kimi
    demo's 200 us, quoted for the verify step's 56 KiB, was charged 122 times to the 12.2 ms decode step)."""
    inputs = report.inputs
    n_ar, t_base = inputs.allreduces_per_verify.value, inputs.t_base.value
    base = report.baseline_reference
    decode_bytes = inputs.hidden_size * BYTES_PER_ELEMENT
    if not n_ar or not t_base or base is None or base.bytes != decode_bytes:
        return ()
    total = n_ar * base.latency.t_ar_us / 1000.0
    if total <= t_base:
        return ()
    return (
        f"{base.label}: {int(n_ar)} allreduces x {base.latency.t_ar_us:g} us at the decode step's "
        f"{size_label(decode_bytes)} = {total:.1f} ms, longer than the {t_base:.1f} ms decode step that contains them "
        f"({inputs.t_base.source}): N_ar, t_ar or the baseline is wrong",
    )


# The answers this process computed last (an LRU), by (database, campaign, query, data version): a few campaigns'
# worth of queries. A cached `Answer` is never changed by its readers.
_CACHE: OrderedDict[tuple[object, ...], Answer] = OrderedDict()
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()


def _columns(row: object) -> dict[str, object]:
    """Every column the row's table declares."""
    table = type(row).__table__  # type: ignore[attr-defined]
    return {c.name: getattr(row, c.name) for c in table.columns}


def data_version(session: Session, campaign: Campaign) -> tuple[object, ...]:
    """What the answer is a function of, read with one query before anything else is: every column the Campaign
    table declares (the row is already read: a new input field is in the version the day it is declared); the
    campaign's newest metric id (metrics are only ever inserted; they go only with their approach, which the
    approaches' count and newest id see); its approaches' count, newest id, newest `updated_at` and a checksum of
    what changes without `updated_at` (position, the pending proposal, archiving); and its read profiler traces'
    count and newest id (a trace's figures arrive after its upload, with no new metric row)."""
    assert campaign.id is not None
    m, a, art = Metric.__table__, Approach.__table__, Artifact.__table__  # type: ignore[attr-defined]
    mine = a.c.campaign_id == campaign.id
    traces = (art.c.campaign_id == campaign.id, art.c.trace.is_not(None), art.c.removed_at.is_(None))
    row = session.execute(
        sa_select(
            *(
                sa_select(column).where(*where).scalar_subquery()
                for column, where in (
                    (func.max(m.c.id), (m.c.campaign_id == campaign.id,)),
                    (func.count(a.c.id), (mine,)),
                    (func.max(a.c.id), (mine,)),
                    (func.max(a.c.updated_at), (mine,)),
                    (func.sum(a.c.position * a.c.id), (mine,)),
                    (func.sum(func.coalesce(a.c.pending_trial_id, 0) * a.c.id), (mine,)),
                    (func.count(a.c.archived_at), (mine,)),
                    (func.count(art.c.id), traces),
                    (func.max(art.c.id), traces),
                )
            )
        )
    ).one()
    return (json.dumps(_columns(campaign), default=str, sort_keys=True), *row)


def read_answer(session: Session, campaign: Campaign, query: AnswerQuery | None = None) -> Answer:
    """The campaign's answer to `query` (module docstring): the one entry point. Kept per (database, campaign,
    query, `data_version`): the version is one query, and the metrics are read only when it is new."""
    query = query or AnswerQuery()
    key = (database_token(session), campaign.id, query, data_version(session, campaign))
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found
    found = _compute(session, campaign, load_campaign_metrics(session, campaign), approaches(session, campaign), query)
    with _CACHE_LOCK:
        _CACHE[key] = found
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return found


def _compute(
    session: Session, campaign: Campaign, metrics: CampaignMetrics, rows: list[Approach], query: AnswerQuery
) -> Answer:
    conditions, what_if = query.conditions, query.what_if
    batch1 = model_inputs(session, campaign, None, metrics)
    rule = Rule(confidence=campaign.stats_confidence, min_effect=campaign.stats_min_effect)
    found_rows = answer_rows(session, campaign)
    sets: list[Conditions | None] = [*condition_sets(found_rows)] or [None]
    measurer = next(
        (a.key for a in rows if isinstance(a.recipe, dict) and a.recipe.get("kind") == "sglang_server"), None
    )
    answers: dict[Conditions | None, SpeculationAnswer] = {}
    specs: dict[Conditions | None, SpeculationInputs] = {}
    held: dict[Conditions | None, int] = {}
    for c in sets:
        spec = specs[c] = speculation_inputs(campaign, batch1, rows, found_rows, c, rule, what_if)
        answers[c] = speculation_answer(spec, seed=rule.seed, measurer=measurer)
        held[c] = answerable(spec)

    def completeness(c: Conditions | None) -> tuple[int, int, int]:
        a = answers[c]
        cells = sum(1 for x in a.approaches for cell in x.cells if cell.speedup is not None)
        return (held[c], len(a.approaches), cells)

    # The set the campaign declares (`answer_conditions`: the precision a team deploys) when one holding as many of
    # the four inputs as any set states all of them; else the most complete, among equals the one stating most of
    # the reference conditions (REFERENCE: bf16 experts, not a precision stand-in), then the key's text: declared
    # conditions decide, never a trial id (issue 43 item 11: the newest trial made the fp8 stand-in the MoE
    # default). Others are asked for by name.
    declared = campaign.answer_conditions or {}
    most = max(held.values())

    def states_declared(c: Conditions | None) -> bool:
        return bool(declared) and held[c] == most and _matches(c, declared) == len(declared)

    default = min(
        sets,
        key=lambda c: (-states_declared(c), *(-x for x in completeness(c)), -_reference(c), c.key if c else ""),
    )
    chosen = next((c for c in sets if c is not None and c.key == conditions), default)
    listed = tuple(
        ConditionSet(c.key, c.label, n_approaches, cells, inputs, inputs == 4)
        for c in sets
        if c is not None
        for inputs, n_approaches, cells in (completeness(c),)
    )
    # The batch-1 report is the answer at batch 1: the grid's own batch-1 inputs (paired by conditions) and
    # each approach's cell there (or why it has none), not a second pick of inputs nor a second model.
    # Where the grid holds no cell at batch 1 at all (no decode step there under its conditions: a campaign with
    # batch-1 inputs alone), the report evaluates those inputs by the same formula (model.py), on its own.
    own = model_inputs(session, campaign, what_if, metrics) if what_if.any() else batch1
    laid = at_batch_1(own, specs[chosen], answers[chosen])
    cells = batch_1_cells(specs[chosen], answers[chosen])
    on_grid = any(c.tau_star is not None for c in cells.values())
    report = profitability_report(
        session,
        campaign,
        what_if,
        metrics=metrics,
        approach_rows=rows,
        inputs=laid,
        cells=cells if on_grid else None,
        off_grid=off_grid_notes(specs[chosen], answers[chosen], rows) if on_grid else None,
    )
    if query.t_ar_us is not None:
        report = with_allreduce_latency(report, query.t_ar_us)
    return Answer(
        speculation=answers[chosen],
        report=report,
        conditions=chosen,
        condition_sets=listed,
        default_conditions=default.key if default is not None else None,
        default_declared=states_declared(default) if declared else None,
        declared_conditions=dict(declared),
        metrics=metrics,
        approaches=rows,
        what_if=what_if,
        t_ar_us=query.t_ar_us,
        engine_check=engine_check(session, campaign),
    )


def _steps(spec: SpeculationInputs, inputs: ModelInputs) -> int:
    return int(spec.draft_steps or inputs.verify_tokens - 1)


def at_batch_1(inputs: ModelInputs, spec: SpeculationInputs, found: SpeculationAnswer) -> ModelInputs:
    """The batch-1 report's inputs taken from the grid at batch 1 and the draft steps: T_base, the draft step,
    the verify compute and tau of the approach the answer chooses (else the first on the grid holding them),
    each the grid's own Value (its trials and conditions). `inputs` itself where the grid holds none of them
    (no sweep: the batch-1 inputs stand alone)."""
    k = _steps(spec, inputs)
    chosen = found.chosen
    order = sorted(spec.approaches, key=lambda ai: chosen is None or ai.key != chosen.key)
    source = next((ai for ai in order if 1 in ai.t_base and (1, k) in ai.verify_compute), None)
    changes: dict[str, Value] = {}
    if source is not None:
        changes["t_base"] = source.t_base[1]
        changes["verify_compute_ms"] = source.verify_compute[(1, k)]
        if 1 in source.draft_step:
            changes["draft_step_ms"] = source.draft_step[1]
    if k in spec.tau:
        changes["accept_length"] = spec.tau[k]
    if not changes:
        return inputs
    laid = replace(inputs, **changes)  # type: ignore[arg-type]
    return replace(laid, missing=tuple(batch_1_missing(laid)))


def batch_1_cells(spec: SpeculationInputs, found: SpeculationAnswer) -> dict[str, Cell]:
    """Each approach's grid cell at batch 1 and the draft steps (the report's points show its intervals)."""
    k = int(spec.draft_steps or 0)
    out = {}
    for a in found.approaches:
        cell = a.cell(1, k) if k else None
        if cell is not None:
            out[a.key] = cell
    return out


def off_grid_notes(spec: SpeculationInputs, found: SpeculationAnswer, rows: list[Approach]) -> dict[str, str]:
    """Why each approach has no grid cell with a tau* at batch 1 and the draft steps, in the grid's words: the
    open cell's note, else what the grid misses for it."""
    k = int(spec.draft_steps or 0)
    out: dict[str, str] = {}
    for row in rows:
        answer = found.approach(row.key)
        cell = answer.cell(1, k) if answer is not None and k else None
        if cell is not None and cell.tau_star is not None:
            continue
        if cell is not None and cell.note:
            out[row.key] = f"not on the grid at batch 1, {k} draft tokens: {cell.note}"
            continue
        missing = [m.what for m in found.missing if m.approach in (row.key, None)]
        why = "; ".join(missing) if missing else ("no draft steps" if not k else "no cell at batch 1")
        out[row.key] = f"not on the grid at batch 1{f', {k} draft tokens' if k else ''}: {why}"
    return out


# The conditions the default answer is given under when sets are equally complete (docs/profitability.md,
# "Conditions"): the activations' and the experts' dtype of the served model, bf16, CUDA graphs (SGLang decodes
# under them), and the EAGLE-3 draft head's reduced vocabulary, 32,000 (the draft_step recipe's default). A set
# under another precision (fp8, int4 experts) or draft vocabulary (the target's full 163,840) is asked for by name
# (`?experts_dtype=fp8`, `?draft_vocab=163840`).
REFERENCE_DRAFT_VOCAB = 32000
REFERENCE = {
    ConditionTag.EXPERTS_DTYPE: "bf16",
    ConditionTag.DTYPE: "bf16",
    ConditionTag.MODE: "graph",
    ConditionTag.DRAFT_VOCAB: REFERENCE_DRAFT_VOCAB,
}


def _reference(c: Conditions | None) -> int:
    """How many of the REFERENCE conditions `c` states as declared."""
    return _matches(c, REFERENCE)


def _matches(c: Conditions | None, wanted: Mapping[str, object]) -> int:
    """How many of `wanted`'s conditions `c` states with the same value (as text: context 1024 is "1024")."""
    tags = c.tag_map if c is not None else {}
    return sum(k in tags and str(tags[k]) == str(v) for k, v in wanted.items())


def answerable(spec: SpeculationInputs) -> int:
    """How many of the four inputs an answer needs one approach of the set holds (the most of any approach): a
    decode step T_base, a draft step, a verify compute, an accept length at a draft length it verified (4: the set
    can answer; the allreduce curve aside, a missing one is said per cell)."""
    return max(
        (
            bool(ai.t_base)
            + bool(ai.draft_step)
            + bool(ai.verify_compute)
            + any(k in spec.tau for _b, k in ai.verify_compute)
            for ai in spec.approaches
        ),
        default=0,
    )


def pick_conditions(session: Session, campaign: Campaign, key: str | None = None, **stated: object) -> str | None:
    """The condition-set key a reader asks for: `key` as given, else the first set whose tags include every
    `stated` one that is not None (`context=4096, mode="graph"`), else None (the default). Asking for conditions
    the campaign does not hold is Invalid, naming the sets it does hold."""
    wanted = {k: v for k, v in stated.items() if v is not None}
    if key is None and not wanted:
        return None
    sets = condition_sets(answer_rows(session, campaign))
    # Among the sets that match, the one stating most of the campaign's declared conditions, then of the REFERENCE
    # ones (then the key's text): asking for context 1,024 gives the declared precision (else bf16 experts) unless
    # another is asked for by name, whichever trial is newest.
    declared = campaign.answer_conditions or {}
    for c in sorted(sets, key=lambda c: (-_matches(c, declared), -_reference(c), c.key)):
        tags = c.tag_map
        if (key is not None and c.key == key) or (key is None and all(tags.get(k) == v for k, v in wanted.items())):
            return c.key
    held = "; ".join(c.key for c in sets) or "none"
    raise Invalid(f"no condition set {key or wanted} in this campaign (it holds: {held})", field="conditions")


def answer_document(found: Answer) -> dict[str, object]:
    """The answer as `GET /api/campaigns/{slug}/answer` and `campaign answer --json` give it."""
    return {
        **answer_json(found.speculation),
        "default_conditions": found.default_conditions,
        "default_conditions_label": found.default_label,
        "default_conditions_declared": found.default_declared,
        "draft_vocab_note": found.draft_vocab_note,
        "condition_sets": [c.__dict__ for c in found.condition_sets],
        "flags": list(found.flags),
    }
