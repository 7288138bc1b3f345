"""Two or more trials of a campaign side by side, or two or more approaches over their repeated trials:
their metrics aligned row by row, each row's statistics (app/domain/statistics.py), their stacks diffed.

A row is a metric's **point**: the tags that say where it was measured (POINT_TAGS: tokens, batch,
draft_tokens, scope; bytes when there are no tokens), plus any other tag that varies within a trial (a
number only when it separates rows those leave together: `point_tags`), except spread tags (p10_us,
max_ms, ...: they describe the samples, not the point). Tags that are the same within each trial (backend,
mode, torch) describe the trial, and numbers that follow from the point (a MoE step's read bytes from its
batch) describe the row: both are left out of the alignment, so trial A's 8-token latency sits beside
trial B's.

A column (a trial, or an approach) holds, per point, its trials, each its metric row's samples as their
stored summary (median, CV, count: `trial_of`; the samples themselves for a row written without one, and a
row without samples counts its value once): the trial is the unit (statistics.compare_rows), never the
pooled samples. A one-trial column gets a verdict only when the campaign holds the run-to-run spread
of that metric point on that runner and stack (`run_to_run_spreads`: the CV across the trials of each
approach that ran there more than once), named beside the verdict. Columns are compared with the first
one only on the same stack (SAME_STACK components): a column on another stack is compared when asked
(`across_stacks`), its stack difference named beside the verdict. A handful of queries, whatever the
trials hold.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import JSON, Text, case, cast, func, null, type_coerce
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.domain import statistics
from app.domain.errors import Invalid, NotFound
from app.domain.fingerprint import STACK_COMPONENTS, component_value, stack_difference
from app.domain.runners import gpu_count
from app.models import Approach, Campaign, Metric, Runner, Trial, TrialState, aware
from app.protocol.metrics import ConditionTag, MetricName

MIN_TRIALS = 2
MAX_TRIALS = 8
MAX_COLUMNS = MAX_TRIALS  # approaches side by side, as many as trials
# Tags that place a metric row (its point) whenever a row has them; `bytes` only where `tokens` is absent
# (the two say the same thing for one geometry, and trials of two geometries should still line up by tokens).
POINT_TAGS = ("tokens", "bytes", "batch", "draft_tokens", "scope", "node")
# Tags that describe a row's samples, never its point: p10_us, p90_ms, min_us, max_ms, median_us, ...
SPREAD_TAG = re.compile(r"(p\d{1,2}|min|max|median|mean|std|stdev|iqr)(_[a-z]+)?")
# Two trials are "on the same stack" when these components are equal (fingerprint.component_value).
SAME_STACK = ("gpu", "driver", "cuda", "torch", "nccl", "sglang")
# A comparison's deciding metric when none is named: the first of these both sides measured, else the
# first in name order (a Settle's stop rule and a success proposal read it).
HEADLINE_METRICS = (
    MetricName.OUTPUT_THROUGHPUT,
    MetricName.VERIFY_TIME_MS,
    MetricName.ALLREDUCE_LATENCY_US,
    MetricName.ALLREDUCE_IN_SITU_US,
    MetricName.DRAFT_STEP_MS,
)


@dataclass(frozen=True)
class ComparedTrial:
    id: int
    approach_key: str
    approach_title: str
    state: str
    runner_name: str | None
    fingerprint: dict[str, Any] | None
    started_at: datetime | None
    finished_at: datetime | None
    runner_id: int | None = None

    @property
    def label(self) -> str:
        return f"#{self.id} {self.approach_title}"


@dataclass(frozen=True)
class Column:
    """One compared side: a trial, or an approach's trials on the compared stack."""

    key: str  # "trial-12" or "approach-nccl": unique among the columns
    label: str
    approach_key: str
    trial_ids: list[int]
    fingerprint: dict[str, Any] | None  # the stack the column's trials ran on (the newest one's)
    stack_difference: str | None  # against the first column; None: the same stack
    left_out: int = 0  # an approach's succeeded trials on another stack than the compared one

    @property
    def trial_id(self) -> int | None:
        return self.trial_ids[0] if self.key.startswith("trial-") else None


@dataclass(frozen=True)
class PairFinding:
    """A column against the first one at a point: the statistics, or why they were not computed."""

    stats: statistics.PairStats | None
    stack_difference: str | None = None  # named beside the verdict (compared across stacks when asked)
    not_compared: str = ""  # "different stack: torch 2.10 -> 2.11", "not measured on both"
    spread: str = ""  # the known run-to-run spread a one-trial side used, named: Spread.note


@dataclass(frozen=True)
class RowStats:
    sides: list[statistics.Side]
    pairs: list[PairFinding]  # pairs[i]: column i + 1 against column 0


class _ValuesRow:
    """A row of the comparison: one value per column, which may differ."""

    values: Sequence[object]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


@dataclass(frozen=True)
class MetricRow(_ValuesRow):
    """One point of a metric, with each column's value (None: not measured) and the row's statistics."""

    point: tuple[tuple[str, Any], ...]
    values: list[float | None]  # each column's figure: its trial's value, or the mean of its trials' medians
    trials: list[list[statistics.Trial]]  # trials[c]: column c's trials at this point (statistics.Trial)
    trial_ids: list[list[int]]  # trial_ids[c]: the trials of trials[c], in order
    stats: RowStats | None = None

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.point)


@dataclass(frozen=True)
class MetricGroup:
    """Every row of one metric name. `x_tag`: the numeric tag the rows run along (a chart's x), if any."""

    name: str
    unit: str
    x_tag: str | None
    rows: list[MetricRow]
    lower_is_better: bool = True


@dataclass(frozen=True)
class StackRow(_ValuesRow):
    component: str
    label: str
    values: list[str | None]


@dataclass(frozen=True)
class Comparison:
    campaign: Campaign
    columns: list[Column]
    trials: list[ComparedTrial]  # every compared trial (trial mode: one per column, in column order)
    metrics: list[MetricGroup]
    stack: list[StackRow]
    rule: statistics.Rule
    across_stacks: bool = False
    by: str = "trial"  # "trial" or "approach"
    # The conditions the columns' metrics were measured under (CONDITIONS), a row each any column names.
    conditions: list[StackRow] = field(default_factory=list)


def parse_trial_ids(ids: list[int]) -> list[int]:
    """Distinct ids in the order given, between MIN_TRIALS and MAX_TRIALS of them."""
    distinct = list(dict.fromkeys(ids))
    if not MIN_TRIALS <= len(distinct) <= MAX_TRIALS:
        raise Invalid(
            f"Pick between {MIN_TRIALS} and {MAX_TRIALS} different trials to compare ({len(distinct)} given).",
            field="trial",
        )
    return distinct


def rule_of(campaign: Campaign) -> statistics.Rule:
    """The campaign's decision rule (its confidence and minimum effect; the other settings are defaults)."""
    return statistics.Rule(confidence=campaign.stats_confidence, min_effect=campaign.stats_min_effect)


def same_stack_difference(reference: dict[str, Any] | None, other: dict[str, Any] | None) -> str | None:
    """'torch 2.10.0 -> 2.11.0, NCCL 2.27 -> 2.28' over SAME_STACK, or None when those are equal."""
    return stack_difference(reference, other, list(SAME_STACK))


def compare(
    session: Session, campaign: Campaign, trial_ids: list[int], approach_keys: list[str], across_stacks: bool = False
) -> Comparison:
    """Trials or approaches (exactly one of the two lists), as the page and the API take them."""
    if trial_ids and approach_keys:
        raise Invalid("Compare trials or approaches, not both.", field="approach")
    if approach_keys:
        return compare_approaches(session, campaign, approach_keys, across_stacks=across_stacks)
    return compare_trials(session, campaign, trial_ids, across_stacks=across_stacks)


def _compared_trials(session: Session, campaign: Campaign, ids: list[int]) -> dict[int, ComparedTrial]:
    """The trials as the comparison shows them: their columns, not ORM objects, and each distinct fingerprint
    text parsed once (the trials of one runner share a stack; the replay report reads a thousand trials)."""
    found = session.execute(
        sa_select(  # type: ignore[call-overload]
            Trial.id,
            Approach.key,
            Approach.title,
            Trial.state,
            Runner.name,
            Trial.runner_id,
            cast(Trial.fingerprint, Text),
            Trial.started_at,
            Trial.finished_at,
        )
        .join(Approach, col(Approach.id) == Trial.approach_id)
        .outerjoin(Runner, col(Runner.id) == Trial.runner_id)
        .where(col(Trial.id).in_(ids), Trial.campaign_id == campaign.id)
    ).all()
    parsed: dict[str, Any] = {}

    def fingerprint(text: str | None) -> dict[str, Any] | None:
        if text is None:
            return None
        if text not in parsed:
            parsed[text] = json.loads(text)
        return parsed[text]

    return {
        trial_id: ComparedTrial(
            id=trial_id,
            approach_key=key,
            approach_title=title,
            state=state,
            runner_name=runner,
            runner_id=runner_id,
            fingerprint=fingerprint(text),
            started_at=aware(started),
            finished_at=aware(finished),
        )
        for trial_id, key, title, state, runner, runner_id, text, started, finished in found
    }


def _trial_columns(trials: list[ComparedTrial]) -> list[Column]:
    """A column per trial, each naming how its stack differs from the first's."""
    reference = trials[0].fingerprint
    return [
        Column(
            key=f"trial-{t.id}",
            label=t.label,
            approach_key=t.approach_key,
            trial_ids=[t.id],
            fingerprint=t.fingerprint,
            stack_difference=same_stack_difference(reference, t.fingerprint) if n else None,
        )
        for n, t in enumerate(trials)
    ]


def compare_trials(
    session: Session, campaign: Campaign, trial_ids: list[int], *, across_stacks: bool = False
) -> Comparison:
    """Trial against trial: a column per trial, in the order given."""
    ids = parse_trial_ids(trial_ids)
    by_id = _compared_trials(session, campaign, ids)
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise NotFound(f"No trial {', '.join(f'#{i}' for i in missing)} in campaign {campaign.slug!r}.", field="trial")
    trials = [by_id[i] for i in ids]
    columns = _trial_columns(trials)
    return _comparison(session, campaign, columns, trials, across_stacks, "trial")


def compare_trial_pairs(
    session: Session,
    campaign: Campaign,
    pairs: list[tuple[int, int]],
    *,
    across_stacks: bool = False,
    deciding_only: bool = False,
) -> dict[tuple[int, int], Comparison]:
    """`compare_trials` of each (before, after) pair, in two queries whatever the number of pairs (the
    replay report). A pair with a trial not in the campaign is left out. `deciding_only`: each comparison
    holds only its deciding metric (`deciding_group`), the only one the replay report shows, so statistics
    are computed for that metric alone (the same seeded method; its draws are its own)."""
    ids = sorted({i for pair in pairs for i in pair})
    by_id = _compared_trials(session, campaign, ids) if ids else {}
    kept = [pair for pair in pairs if pair[0] != pair[1] and all(i in by_id for i in pair)]
    if deciding_only:
        groups_of = _deciding_groups_of(session, kept)
    else:
        rows_of = _rows_by_trial(_metric_rows(session, ids))
        groups_of = {
            pair: metric_groups({i: n for n, i in enumerate(pair)}, 2, [r for i in pair for r in rows_of.get(i, [])])
            for pair in kept
        }
    rule = rule_of(campaign)
    columns_of = {pair: _trial_columns([by_id[i] for i in pair]) for pair in kept}
    spreads = run_to_run_spreads(session, campaign, [(groups_of[pair], [by_id[i] for i in pair]) for pair in kept])
    computed = _with_statistics_of(
        [(groups_of[pair], columns_of[pair]) for pair in kept], rule, across_stacks, by_id, spreads
    )
    return {
        pair: Comparison(
            campaign,
            columns_of[pair],
            [by_id[i] for i in pair],
            groups,
            stack_rows(columns_of[pair]),
            rule,
            across_stacks,
            "trial",
        )
        for pair, groups in zip(kept, computed, strict=True)
    }


def _rows_by_trial(rows: Iterable[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for row in rows:
        out.setdefault(row.trial_id, []).append(row)
    return out


class _Row(NamedTuple):
    """A metric row as `_metric_rows` gives it (the attributes `metric_groups` reads)."""

    trial_id: int
    name: str
    value: float | None
    unit: str
    tags: dict[str, Any] | None
    samples_median: float | None
    samples_cv: float | None
    samples_n: int | None
    samples: list[float] | None


def _deciding_groups_of(session: Session, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], list[MetricGroup]]:
    """`_deciding_groups` of each pair, in one query whatever the number of pairs, decoding a row's tags (and
    samples, for a row without their summary) only for the names that can decide: each pair's first candidate (HEADLINE_METRICS first,
    then by name), and every name of the few pairs whose first candidate had no point both measured (the
    replay report's thousand trials hold about eleven metrics each, one or two of which decide). The JSON
    columns come as text: filtering by name in SQL made SQLite walk the name index over every trial."""
    ids = sorted({i for pair in pairs for i in pair})
    if not ids:
        return {}
    raw: dict[int, list[tuple[Any, ...]]] = {}
    for line in session.execute(
        sa_select(  # type: ignore[call-overload]
            Metric.trial_id,
            Metric.name,
            Metric.value,
            Metric.unit,
            cast(Metric.tags, Text),
            Metric.samples_median,
            Metric.samples_cv,
            Metric.samples_n,
            cast(case((col(Metric.samples_n).is_(None), col(Metric.samples)), else_=null()), Text),
        )
        .where(col(Metric.trial_id).in_(ids))
        .order_by(col(Metric.trial_id), col(Metric.seq), col(Metric.index))
    ):
        raw.setdefault(line[0], []).append(tuple(line))

    def rows(pair: tuple[int, int], names: set[str]) -> list[_Row]:
        return [
            _Row(
                t,
                n,
                v,
                u,
                None if tags is None else json.loads(tags),
                med,
                cv,
                k,
                None if sam is None else json.loads(sam),
            )
            for i in pair
            for t, n, v, u, tags, med, cv, k, sam in raw.get(i, [])
            if n in names
        ]

    out: dict[tuple[int, int], list[MetricGroup]] = {}
    for pair in pairs:
        both = {line[1] for line in raw.get(pair[0], [])} & {line[1] for line in raw.get(pair[1], [])}
        candidates = [n for n in HEADLINE_METRICS if n in both] + sorted(n for n in both if n not in HEADLINE_METRICS)
        column_of = {i: n for n, i in enumerate(pair)}
        out[pair] = _deciding_groups(column_of, rows(pair, set(candidates[:1]))) if candidates else []
        if not out[pair] and len(candidates) > 1:
            out[pair] = _deciding_groups(column_of, rows(pair, both))
    return out


def _deciding_groups(column_of: dict[int, int], rows: list[Any]) -> list[MetricGroup]:
    """The one group `deciding_group` would pick of `metric_groups(column_of, 2, rows)`, built alone: names
    both trials reported, in its order (HEADLINE_METRICS first, then by name), the first with a point both
    measured."""
    by_name: dict[str, list[Any]] = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r)
    both = sorted(n for n, found in by_name.items() if len({column_of[r.trial_id] for r in found}) == 2)
    order = [n for n in HEADLINE_METRICS if n in both] + [n for n in both if n not in HEADLINE_METRICS]
    for name in order:
        (group,) = metric_groups(column_of, 2, by_name[name])
        if any(r.values[0] is not None and r.values[1] is not None for r in group.rows):
            return [group]
    return []


def compare_approaches(
    session: Session, campaign: Campaign, keys: list[str], *, across_stacks: bool = False
) -> Comparison:
    """Approach against approach: a column per approach, holding its succeeded trials on the stack of the
    first approach's newest succeeded trial (every succeeded trial with `across_stacks`)."""
    distinct = list(dict.fromkeys(keys))
    if not MIN_TRIALS <= len(distinct) <= MAX_COLUMNS:
        raise Invalid(
            f"Pick between {MIN_TRIALS} and {MAX_COLUMNS} different approaches to compare ({len(distinct)} given).",
            field="approach",
        )
    approaches = {
        a.key: a
        for a in session.exec(
            select(Approach).where(Approach.campaign_id == campaign.id, col(Approach.key).in_(distinct))
        )
    }
    missing = [k for k in distinct if k not in approaches]
    if missing:
        raise NotFound(f"No approach {', '.join(missing)} in campaign {campaign.slug!r}.", field="approach")
    done = session.exec(
        select(Trial)
        .where(
            col(Trial.approach_id).in_([approaches[k].id for k in distinct]),
            Trial.state == TrialState.succeeded,
        )
        .order_by(col(Trial.id))
    ).all()
    of: dict[int, list[Trial]] = {}
    for t in done:
        of.setdefault(t.approach_id, []).append(t)
    first = of.get(approaches[distinct[0]].id, [])  # type: ignore[arg-type]
    reference = first[-1].fingerprint if first else None
    columns = []
    for key in distinct:
        mine = of.get(approaches[key].id, [])  # type: ignore[arg-type]
        same = [t for t in mine if same_stack_difference(reference, t.fingerprint) is None]
        kept = mine if across_stacks else same
        differences = sorted({d for t in kept if (d := same_stack_difference(reference, t.fingerprint))})
        columns.append(
            Column(
                key=f"approach-{key}",
                label=approaches[key].title,
                approach_key=key,
                trial_ids=[t.id for t in kept],  # type: ignore[misc]
                fingerprint=kept[-1].fingerprint if kept else reference,
                stack_difference="; ".join(differences) or None,
                left_out=len(mine) - len(kept),
            )
        )
    ids = [i for c in columns for i in c.trial_ids]
    by_id = _compared_trials(session, campaign, ids) if ids else {}
    trials = [by_id[i] for i in ids]
    return _comparison(session, campaign, columns, trials, across_stacks, "approach")


def _comparison(
    session: Session,
    campaign: Campaign,
    columns: list[Column],
    trials: list[ComparedTrial],
    across_stacks: bool,
    by: str,
) -> Comparison:
    rule = rule_of(campaign)
    ids = [i for c in columns for i in c.trial_ids]
    column_of = {i: n for n, c in enumerate(columns) for i in c.trial_ids}
    rows = _metric_rows(session, ids)
    groups = metric_groups(column_of, len(columns), rows)
    spreads = run_to_run_spreads(session, campaign, [(groups, trials)])
    groups = with_statistics(groups, columns, rule, across_stacks, {t.id: t for t in trials}, spreads)
    conditions = condition_rows(column_of, len(columns), rows)
    return Comparison(campaign, columns, trials, groups, stack_rows(columns), rule, across_stacks, by, conditions)


# The tags that name the conditions a figure was measured under, as the compare page lists them: what the
# answer pairs on, and what tells one model stand-in from another (the rest of ConditionTag are coordinates).
CONDITIONS = (
    *ConditionTag.PAIRING,
    ConditionTag.STANDIN,
    ConditionTag.GEOMETRY,
    ConditionTag.LAYERS,
    ConditionTag.HIDDEN,
    ConditionTag.EXPERTS,
    ConditionTag.EXPERTS_TOP_K,
    ConditionTag.EXPERTS_DTYPE,
    ConditionTag.DRAFT_VOCAB,
    ConditionTag.TOPK,
)
CONDITION_SET = frozenset(CONDITIONS)


def _mixed_conditions(rows: list[Any], column_of: dict[int, int], keyed: list[str]) -> list[str]:
    """The conditions (CONDITIONS) a column's trials differ in, beyond the point's tags: each keys the rows too,
    so a column never pools an FP8 trial with a BF16 one, or a context of 1,024 with one of 4,096, into one
    figure. Columns that differ from each other are compared as asked (the page lists their conditions)."""
    wanted = CONDITION_SET.difference(keyed)
    values: dict[tuple[str, int], set[str]] = {}
    for m in rows:
        for tag, value in (m.tags or {}).items():
            if tag in wanted:
                values.setdefault((tag, column_of[m.trial_id]), set()).add(repr(value))
    mixed = {tag for (tag, _), found in values.items() if len(found) > 1}
    return [tag for tag in CONDITIONS if tag in mixed]


def condition_rows(column_of: dict[int, int], width: int, rows: Iterable[Any]) -> list[StackRow]:
    """Each condition some column's metric rows name, with each column's values ("1024"; "1024, 4096" for a
    column whose trials, or whose metrics, ran under several): a comparison across conditions is shown as
    one, as a comparison across stacks is."""
    seen: dict[str, list[dict[str, Any]]] = {}  # tag -> per column, {text: value}
    for m in rows:
        for tag, value in (m.tags or {}).items():
            if tag in CONDITION_SET and value is not None:
                seen.setdefault(tag, [{} for _ in range(width)])[column_of[m.trial_id]][str(value)] = value
    return [
        StackRow(tag, tag.replace("_", " "), [_listed(found) for found in seen[tag]])
        for tag in CONDITIONS
        if tag in seen
    ]


def _listed(found: dict[str, Any]) -> str | None:
    """One column's values of a condition, in value order ("1024, 4096"); None when it names none."""
    return ", ".join(text for text, _ in sorted(found.items(), key=lambda item: _sort_key(item[1]))) or None


def _metric_rows(session: Session, trial_ids: list[int]) -> list[Any]:
    """The columns of these trials' metric rows a comparison reads, in logged order: plain rows, not ORM
    objects (8 trials x 200 points: the objects' bookkeeping would cost as much as the statistics)."""
    if not trial_ids:
        return []
    return list(
        session.execute(
            sa_select(*ROW_COLUMNS)  # type: ignore[call-overload]
            .where(col(Metric.trial_id).in_(trial_ids))
            .order_by(col(Metric.trial_id), col(Metric.seq), col(Metric.index))
        )
    )


# What a comparison reads of a metric row (the attributes `metric_groups` reads): the samples' stored summary,
# and the samples themselves only for a row written without one (statistics.summary_columns).
ROW_COLUMNS = (
    Metric.trial_id,
    Metric.name,
    Metric.value,
    Metric.unit,
    Metric.tags,
    Metric.samples_median,
    Metric.samples_cv,
    Metric.samples_n,
    type_coerce(case((col(Metric.samples_n).is_(None), col(Metric.samples)), else_=null()), JSON).label("samples"),
)


def trial_of(m: Any) -> statistics.Trial:
    """A metric row as one trial: its samples' stored summary, else its samples, else its value alone."""
    if m.samples_n is not None:
        return statistics.TrialSummary(m.samples_median, m.samples_cv, m.samples_n)
    return m.samples if m.samples else [m.value]


def _hashable(value: Any) -> Any:
    # Tag values are JSON: a list or an object becomes its canonical text, so it can key a point.
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _sort_key(value: Any) -> tuple[int, float, str]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def point_tags(rows: list[Any]) -> list[str]:
    """The tags that make a point for these rows of one metric name (see the module's docstring): the
    POINT_TAGS they carry, then each other tag (by name; never a spread tag, nor bytes beside tokens) that
    varies within a trial: a text always (a method, a derivation, a backend), a number only when it
    separates rows of one trial the tags so far leave together. A number that follows from them, as a MoE
    step's read bytes and experts touched follow from its batch, describes a row and does not place it:
    keyed, it kept an FP8 trial's rows from ever meeting a BF16 trial's."""
    present = {k for m in rows for k in (m.tags or {})}
    keyed = [k for k in POINT_TAGS if k in present]
    if "tokens" in keyed and "bytes" in keyed:
        keyed.remove("bytes")
    candidates = sorted(
        k for k in present - set(keyed) if not SPREAD_TAG.fullmatch(k) and not (k == "bytes" and "tokens" in keyed)
    )
    if not candidates:
        return sorted(keyed)
    tagged = [(m.tags or {}) for m in rows]
    by_trial = [(m.trial_id,) for m in rows]
    groups = [(m.trial_id, *(repr(tags.get(k)) for k in keyed)) for m, tags in zip(rows, tagged, strict=True)]
    for k in candidates:
        # A number that follows from the point re-expresses it: it keys only rows the point leaves together.
        # A text (a method, a derivation, a backend) names what was measured: it keys whenever a trial holds two.
        number = all(_sort_key(tags[k])[0] == 0 for tags in tagged if k in tags)
        if _separates(groups if number else by_trial, tagged, k):
            keyed.append(k)
            groups = [(*group, repr(tags.get(k))) for group, tags in zip(groups, tagged, strict=True)]
    return sorted(keyed)


def _separates(groups: list[tuple[Any, ...]], tagged: list[dict[str, Any]], k: str) -> bool:
    """Whether two rows of one group hold different values of tag k."""
    seen: dict[tuple[Any, ...], str] = {}
    return any(
        k in tags and seen.setdefault(group, text := repr(tags[k])) != text
        for group, tags in zip(groups, tagged, strict=True)
    )


def metric_groups(column_of: dict[int, int], width: int, metrics: list[Any]) -> list[MetricGroup]:
    """Metric rows (in logged order) aligned by name and point. Within a trial a later row for the same
    point wins; a column of several trials keeps each trial apart (the trial is the unit) and shows the
    mean of their medians."""
    by_name: dict[str, list[Any]] = {}
    for m in metrics:
        by_name.setdefault(m.name, []).append(m)
    groups = []
    for name in sorted(by_name):
        rows = by_name[name]
        keyed = point_tags(rows)
        keyed = sorted([*keyed, *_mixed_conditions(rows, column_of, keyed)])
        latest: dict[tuple, dict[int, Any]] = {}
        for m in rows:
            tags = m.tags or {}
            point = tuple((k, _hashable(tags.get(k))) for k in keyed)
            latest.setdefault(point, {})[m.trial_id] = m
        numeric = [k for i, k in enumerate(keyed) if all(_sort_key(p[i][1])[0] == 0 for p in latest)]
        metric_rows = []
        for point in sorted(latest, key=lambda p: [_sort_key(v) for _, v in p]):
            values: list[float | None] = [None] * width
            trials: list[list[statistics.Trial]] = [[] for _ in range(width)]
            ids: list[list[int]] = [[] for _ in range(width)]
            for trial_id, m in sorted(latest[point].items()):
                c = column_of[trial_id]
                trials[c].append(trial_of(m))
                ids[c].append(trial_id)
                values[c] = m.value
            for c in range(width):
                if len(trials[c]) > 1:  # the column's figure over its trials
                    estimate = statistics.trial_estimate(trials[c])
                    values[c] = estimate.value if estimate else None
            metric_rows.append(MetricRow(point, values, trials, ids))
        unit = next((m.unit for m in rows if m.unit), "")
        groups.append(
            MetricGroup(
                name, unit, numeric[0] if numeric else None, metric_rows, statistics.lower_is_better(name, unit)
            )
        )
    return groups


@dataclass(frozen=True)
class Spread:
    """A run-to-run spread the campaign holds for one metric point on one runner and stack: the pooled CV
    across the trials of each approach that ran there more than once."""

    known: statistics.KnownSpread
    trials: int
    approaches: tuple[str, ...]  # their titles

    @property
    def note(self) -> str:
        names = " and ".join(self.approaches) if len(self.approaches) <= 2 else f"{len(self.approaches)} approaches"
        return f"run-to-run spread {self.known.cv:.1%} from {self.trials} earlier trials of {names} on this runner"


SPREAD_TRIALS = 400  # the newest succeeded trials per runner a spread is estimated from
# The conditions a spread must share with the trial it is used for, beside the runner, the stack and the
# point (a condition the compared rows do not vary is not in the point): ConditionTag's, the model's.
SPREAD_CONDITIONS = (*ConditionTag.PAIRING, *ConditionTag.GEOMETRY_KEYS)
Conditions = tuple[tuple[str, Any], ...]
# runner, stack, metric, point, conditions
SpreadKey = tuple[int, tuple[Any, ...], str, tuple[tuple[str, Any], ...], Conditions]
Point = tuple[int, str, tuple[tuple[str, Any], ...]]  # trial, metric, point


def _stack_key(fingerprint: dict[str, Any] | None) -> tuple[Any, ...]:
    return tuple(component_value(fingerprint, c) for c in SAME_STACK)


def _conditions(tags: dict[str, Any], point: tuple[tuple[str, Any], ...]) -> Conditions:
    named = {k for k, _ in point}
    return tuple((k, _hashable(tags.get(k))) for k in SPREAD_CONDITIONS if k not in named)


class Spreads:
    """The log values a spread is estimated from, per key and approach; `of` leaves out the trials being
    judged (each comparison its own) and every trial that had not ended before the comparison's newest one,
    so a spread never judges the trials it was measured on, is never measured on later runs, and a pair
    gets the same spread alone as among the replay report's thousand. `conditions_of`: a trial's conditions
    at a point (the key's last part: a spread is only ever read under the same conditions)."""

    def __init__(
        self,
        logs: dict[SpreadKey, dict[int, dict[int, float]]],
        titles: dict[int, str],
        ended: dict[int, datetime] | None = None,
        conditions: dict[Point, Conditions] | None = None,
    ) -> None:
        self._logs = logs
        self._titles = titles
        self._ended = ended or {}
        self._conditions = conditions or {}
        self._cache: dict[tuple[SpreadKey, frozenset[int]], Spread | None] = {}
        self._asked: dict[tuple[SpreadKey, frozenset[int], datetime | None], Spread | None] = {}

    def conditions_of(self, trial_id: int, name: str, point: tuple[tuple[str, Any], ...]) -> Conditions | None:
        return self._conditions.get((trial_id, name, point))

    def of(self, key: SpreadKey, judged: frozenset[int], before: datetime | None = None) -> Spread | None:
        """The spread at `key` from the trials not judged here that ended before `before` (None: no bound)."""
        asked = (key, judged, before)
        if asked in self._asked:  # every one-trial column of a row asks the same
            return self._asked[asked]
        by_approach = self._logs.get(key)
        found = None
        if by_approach:
            skip = frozenset(
                t
                for trials in by_approach.values()
                for t in trials
                if t in judged or (before is not None and not (t in self._ended and self._ended[t] < before))
            )
            if (key, skip) not in self._cache:
                self._cache[(key, skip)] = self._pooled(by_approach, skip)
            found = self._cache[(key, skip)]
        self._asked[asked] = found
        return found

    def _pooled(self, by_approach: dict[int, dict[int, float]], skip: frozenset[int]) -> Spread | None:
        parts = []
        for approach_id, by_trial in by_approach.items():
            values = [v for t, v in by_trial.items() if t not in skip]
            if len(values) >= 2:
                parts.append((len(values), float(np.var(values, ddof=1)), approach_id))
        if not parts:
            return None
        df = sum(n - 1 for n, _, _ in parts)
        variance = sum((n - 1) * v for n, v, _ in parts) / df
        cv = math.sqrt(math.expm1(variance))  # the CV of a log-normal of that log variance
        return Spread(
            statistics.KnownSpread(cv, df), sum(n for n, _, _ in parts), tuple(self._titles[a] for _, _, a in parts)
        )


NO_SPREADS = Spreads({}, {})


def run_to_run_spreads(
    session: Session, campaign: Campaign, items: list[tuple[list[MetricGroup], list[ComparedTrial]]]
) -> Spreads:
    """The spreads the one-trial columns of these comparisons could use, keyed by (runner, stack, metric,
    point, conditions): from the campaign's succeeded trials on those runners (the newest SPREAD_TRIALS
    each; Spreads.of leaves out the compared ones and those that ended after the comparison's newest),
    per approach with 2 trials or more at the point on the same stack under the same conditions, the
    variance of their log figures (each its samples' median, else its value) pooled over the approaches
    (df = trials - approaches). Two queries; none when no column has one trial."""
    wanted_runners: set[int] = set()
    keyed_of: dict[str, list[str]] = {}
    names: set[str] = set()
    compared: set[int] = set()
    for groups, trials in items:
        runners = {t.runner_id for t in trials if t.runner_id is not None}
        if not runners:
            continue
        for g in groups:
            if any(len(side) == 1 for row in g.rows for side in row.trials):
                wanted_runners |= runners
                compared |= {t.id for t in trials}
                names.add(g.name)
                if g.rows:
                    keyed_of.setdefault(g.name, [k for k, _ in g.rows[0].point])
    if not wanted_runners:
        return NO_SPREADS
    found = session.execute(
        sa_select(  # type: ignore[call-overload]
            Trial.id,
            Trial.approach_id,
            Trial.runner_id,
            cast(Trial.fingerprint, Text),
            Approach.title,
            Trial.finished_at,
        )
        .join(Approach, col(Approach.id) == Trial.approach_id)
        .where(
            Trial.campaign_id == campaign.id,
            col(Trial.runner_id).in_(sorted(wanted_runners)),
            Trial.state == TrialState.succeeded,
        )
        .order_by(col(Trial.id).desc())
        .limit(SPREAD_TRIALS * len(wanted_runners))
    ).all()
    stack_of: dict[str, tuple[Any, ...]] = {}
    about: dict[int, tuple[int, int, tuple[Any, ...], str]] = {}
    ended: dict[int, datetime] = {}
    for trial_id, approach_id, runner_id, text, title, finished_at in found:
        if text not in stack_of:
            stack_of[text] = _stack_key(json.loads(text) if text else None)
        about[trial_id] = (approach_id, runner_id, stack_of[text], title)
        if finished_at is not None:
            ended[trial_id] = aware(finished_at)
    logs: dict[SpreadKey, dict[int, dict[int, float]]] = {}
    titles: dict[int, str] = {}
    conditions: dict[Point, Conditions] = {}
    # Each trial's figure, as the comparison reads it: its samples' median, else its value. The compared
    # trials are read too, for their conditions (Spreads.of leaves their figures out).
    figure = func.coalesce(col(Metric.samples_median), col(Metric.value))
    for trial_id, name, value, tags in session.execute(
        sa_select(Metric.trial_id, Metric.name, figure, cast(Metric.tags, Text))  # type: ignore[call-overload]
        .where(col(Metric.trial_id).in_(sorted(set(about) | compared)), col(Metric.name).in_(sorted(names)))
        .order_by(col(Metric.trial_id), col(Metric.seq), col(Metric.index))
    ):
        if name not in keyed_of:
            continue
        parsed = json.loads(tags) if tags else {}
        point = tuple((k, _hashable(parsed.get(k))) for k in keyed_of[name])
        where = _conditions(parsed, point)
        conditions[(trial_id, name, point)] = where
        if value is None or value <= 0 or trial_id not in about:
            continue
        approach_id, runner_id, stack, title = about[trial_id]
        titles[approach_id] = title
        # Within a trial a later row for the same point wins, as in metric_groups.
        key = (runner_id, stack, name, point, where)
        logs.setdefault(key, {}).setdefault(approach_id, {})[trial_id] = math.log(value)
    return Spreads(logs, titles, ended, conditions)


def with_statistics(
    groups: list[MetricGroup],
    columns: list[Column],
    rule: statistics.Rule,
    across_stacks: bool,
    trials: dict[int, ComparedTrial] | None = None,
    spreads: Spreads = NO_SPREADS,
) -> list[MetricGroup]:
    """Each row with its statistics: every column against the first, one vectorized pass for the lot."""
    return _with_statistics_of([(groups, columns)], rule, across_stacks, trials or {}, spreads)[0]


def _with_statistics_of(
    items: list[tuple[list[MetricGroup], list[Column]]],
    rule: statistics.Rule,
    across_stacks: bool,
    trials: dict[int, ComparedTrial],
    spreads: Spreads,
) -> list[list[MetricGroup]]:
    """`with_statistics` of several comparisons in one vectorized pass (a row's figures do not depend on
    the rows computed with it: `statistics.compare_rows`)."""
    flat = [
        (k, g, r)
        for k, (groups, columns) in enumerate(items)
        if len(columns) >= 2
        for g, group in enumerate(groups)
        for r in range(len(group.rows))
    ]
    if not flat:
        return [groups for groups, _ in items]

    judged = [frozenset(i for c in columns for i in c.trial_ids) for _, columns in items]
    # Each comparison's newest trial: a spread reads only trials that ended before it (none unbounded
    # while one of them has not ended: every ended trial is earlier).
    newest: list[datetime | None] = []
    for ids in judged:
        ends = [trials[i].finished_at if i in trials else None for i in ids]
        newest.append(None if not ends or None in ends else max(aware(e) for e in ends if e is not None))
    stack_of: dict[int, tuple[Any, ...]] = {}  # trial id -> its SAME_STACK values

    def spread_of(k: int, name: str, row: MetricRow, c: int) -> Spread | None:
        if len(row.trial_ids[c]) != 1 or spreads is NO_SPREADS:
            return None
        t = trials.get(row.trial_ids[c][0])
        if t is None or t.runner_id is None:
            return None
        where = spreads.conditions_of(t.id, name, row.point)
        if where is None:
            return None
        if t.id not in stack_of:
            stack_of[t.id] = _stack_key(t.fingerprint)
        return spreads.of((t.runner_id, stack_of[t.id], name, row.point, where), judged[k], newest[k])

    notes: dict[int, str] = {}

    def note_of(spread: Spread) -> str:  # one text per spread, however many rows use it
        if id(spread) not in notes:
            notes[id(spread)] = spread.note
        return notes[id(spread)]

    used = [
        [spread_of(k, items[k][0][g].name, items[k][0][g].rows[r], c) for c in range(len(items[k][1]))]
        for k, g, r in flat
    ]
    computed = statistics.compare_rows(
        [items[k][0][g].rows[r].trials for k, g, r in flat],
        lower_better=[items[k][0][g].lower_is_better for k, g, _ in flat],
        rule=rule,
        known=[[s.known if s else None for s in row] for row in used],
    )
    out = [
        [MetricGroup(g.name, g.unit, g.x_tag, list(g.rows), g.lower_is_better) for g in groups] for groups, _ in items
    ]
    for (k, g, r), row_stats, row_spreads in zip(flat, computed, used, strict=True):
        columns = items[k][1]
        row = out[k][g].rows[r]
        pairs = []
        for c, pair in enumerate(row_stats.pairs, start=1):
            difference = columns[c].stack_difference
            if not row.trials[0] or not row.trials[c]:
                pairs.append(PairFinding(None, difference, "not measured on both"))
            elif difference and not across_stacks:
                pairs.append(PairFinding(None, difference, f"different stack: {difference}"))
            else:
                applied = (row_spreads[0], row_spreads[c]) if pair.known_spread else ()
                named = dict.fromkeys(note_of(s) for s in applied if s)
                pairs.append(PairFinding(pair, difference, spread="; ".join(named)))
        out[k][g].rows[r] = MetricRow(
            row.point, row.values, row.trials, row.trial_ids, RowStats(row_stats.sides, pairs)
        )
    return out


def deciding_group(result: Comparison, metric: str | None = None) -> MetricGroup | None:
    """The metric that decides between the first two columns: `metric` if both measured it, else the
    first of HEADLINE_METRICS both measured, else the first both measured (None: nothing in common)."""
    both = [g for g in result.metrics if any(r.values[0] is not None and r.values[1] is not None for r in g.rows)]
    if metric is not None:
        return next((g for g in both if g.name == metric), None)
    by_name = {g.name: g for g in both}
    return next((by_name[n] for n in HEADLINE_METRICS if n in by_name), both[0] if both else None)


def stack_rows(columns: list[Column]) -> list[StackRow]:
    """The stack components any of the columns reported (GPU count first), each column's value."""
    fps = [c.fingerprint for c in columns]
    rows = [StackRow("gpu_count", "GPUs", [str(gpu_count(fp)) if fp else None for fp in fps])]
    for component, label in STACK_COMPONENTS.items():
        rows.append(StackRow(component, label, [component_value(fp, component) for fp in fps]))
    return [r for r in rows if any(v is not None for v in r.values)]
