"""Speculation over (batch b, draft tokens k): where EAGLE-3 pays, with which allreduce, with what confidence.

The batch-1 model of `profitability/model.py`, extended over a grid (docs/profitability.md, "The batch model"):

    T_base(b)     plain decode step at batch b (the `decode_step_ms` sweep)
    T_draft(b, k) = k x draft step at batch b (chain drafts, top-k 1)
    T_verify(b,k) = verify compute at b(k+1) tokens + N_ar x t_ar(b(k+1) x hidden x 2 bytes)
    tau*(b, k)    = (T_draft + T_verify) / T_base          the accept length speculation must beat
    speedup(b, k) = tau(k) x T_base / (T_draft + T_verify) with tau(k) known

t_ar is interpolated log-log on the approach's measured allreduce curve and never extrapolated: a message
size outside the measured sizes leaves the cell open and says so. World size 1 has no allreduce.

Confidence, from the statistics home (`app/domain/statistics.py`, docs/statistics.md): each measured input is
a `Value` holding its trials (the unit of replication), valued as the trials' estimate; the whole grid is
recomputed on hierarchical bootstrap resamples of every input (`trial_resamples_many`: trials with
replacement, then each drawn trial's median), inputs measured in the same runs resampled together (the speedup
per run first, then over the runs: `paired_runs`, `_run_slots`), the others independently, so tau* and
speedup carry percentile intervals (`percentile_intervals`) at the campaign's `stats_confidence` that propagate
every input's run-to-run spread, and tau's when tau is measured. An entered or derived value is exact (no
interval; said). An input measured by one trial carries only its within-run noise: a figure that reads one is
marked `within_run_only`, and "pays" is then decided only on a margin of at least the campaign's
`stats_min_effect` (docs/profitability.md, "Deciding with one trial"). An input whose spread exceeds the
statistics home's unstable CV is *unstable*, and so is anything computed from it.

Pure (numpy): `app/domain/answer/loader.py` reads a campaign's inputs and `read.py` calls `speculation_answer`.
No database, no FastAPI here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from app.domain.answer import model as formula
from app.domain.answer.values import Conditions, Missing, Value, measured
from app.domain.statistics import (
    FINDING_WORDS,
    Finding,
    Rule,
    finding_of,
)

# Bootstrap resamples of the grid: fewer than the comparisons' Rule.n_resamples (1,000) because one answer
# resamples some thousand inputs at once; 400 keeps the 95% bounds within about 1% of their 1,000-resample
# values (bench/speculation_model.py --resamples) and the answer under 50 ms at 20 approaches.
RESAMPLES = 400
ALGORITHM = "EAGLE-3"
__all__ = ["Value", "measured", "Missing", "Conditions"]

# Figure kinds, as the answer names them.
DECODE, DRAFT, VERIFY, ALLREDUCE, ACCEPT = "decode step", "draft step", "verify compute", "allreduce", "accept length"


# ---- figures ------------------------------------------------------------------------------------


class Interval(NamedTuple):
    """A figure with its 95% interval (None without samples), and whether it is unstable.

    A named tuple, not a frozen dataclass: the answer makes some 3,700 of them, and a tuple is built in one C call
    (`_intervals_of` builds them with `map`), a frozen dataclass in about a microsecond each."""

    value: float
    low: float | None
    high: float | None
    unstable: bool = False
    no_samples: bool = False  # exact: every input entered or derived (no trial measured it)
    within_run_only: bool = False  # an input measured by one trial: the interval holds within-run noise only

    def overlaps(self, other: Interval) -> bool:
        """Intervals overlap (a point estimate without an interval is its own interval)."""
        lo1, hi1 = (self.low, self.high) if self.low is not None else (self.value, self.value)
        lo2, hi2 = (other.low, other.high) if other.low is not None else (other.value, other.value)
        return lo1 <= hi2 and lo2 <= hi1  # type: ignore[operator]

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(_INTERVAL_KEYS, self, strict=True))


_INTERVAL_KEYS = Interval._fields


def accept_length_from_alphas(alphas: Sequence[float], k: int) -> float:
    """tau(k) = 1 + sum_{i<=k} prod_{j<=i} alpha_j (the 1 is the bonus token); alpha_i is position i's
    acceptance given all before it were accepted."""
    if k > len(alphas):
        raise ValueError(f"{len(alphas)} per-position acceptance rates cannot give tau at {k} draft tokens")
    return 1.0 + float(np.sum(np.cumprod(np.asarray(alphas[:k], dtype=float))))


# ---- the inputs of one approach -------------------------------------------------------------------


@dataclass(frozen=True)
class ApproachInputs:
    """Everything one approach's grid reads, each figure with its source. Keys: batch b, (b, k)."""

    approach_id: int
    key: str
    title: str
    status: str
    t_base: dict[int, Value]
    draft_step: dict[int, Value]
    verify_compute: dict[tuple[int, int], Value]
    curve: list[tuple[int, Value]]  # (bytes, t_ar us), sorted by bytes
    curve_how: str  # "nccl graph, world 2" ...
    world_size: int  # 1: no allreduce
    deployable: bool = True  # False for a dead end: compared, never the one to deploy


@dataclass(frozen=True)
class SpeculationInputs:
    batches: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    n_ar: int | None
    hidden_size: int
    tau: dict[int, Value]  # per k
    approaches: tuple[ApproachInputs, ...]
    bytes_per_element: int  # of the activations an allreduce carries (bf16: 2)
    draft_steps: int | None = None  # the campaign's: the draft length tau* is quoted at without a speedup
    set_aside: tuple[tuple[str, str], ...] = ()  # (what, why) of entered inputs the loader could not use
    conditions: Conditions | None = None  # the condition set every figure of this grid was measured under
    missing: tuple[Missing, ...] = ()  # what the loader found only under other conditions, or not at all
    flags: tuple[str, ...] = ()  # contradictory inputs (an accept length above k + 1, ...)
    confidence: float = Rule.confidence
    min_effect: float = Rule.min_effect


# ---- the grid ---------------------------------------------------------------------------------------


class Cell(NamedTuple):
    """One (batch, draft tokens) cell of an approach's grid (a named tuple, as `Interval`: 1,120 per answer)."""

    batch: int
    draft_tokens: int
    t_base_ms: float | None
    t_draft_ms: float | None
    t_verify_ms: float | None
    t_ar_us: float | None
    verify_bytes: int
    tau_star: Interval | None
    speedup: Interval | None
    note: str  # why a figure is open, or how t_ar was obtained
    min_effect: float = 0.0  # the campaign's: the margin "pays" needs when an input was measured once
    inputs: tuple[int, ...] = ()  # the figures it reads: indexes into SpeculationAnswer.inputs
    verify_compute_ms: float | None = None  # the verify step without its communication
    tau: float | None = None  # the accept length tau(k) it reads (None: not known at k)
    n_ar: int = 0  # allreduces per verify (0: world size 1, none)

    @property
    def comm_ms(self) -> float | None:
        """The verify step's communication N_ar x t_ar (0 at world size 1)."""
        if self.t_verify_ms is None or self.verify_compute_ms is None:
            return None
        return self.t_verify_ms - self.verify_compute_ms

    @property
    def savings_ms(self) -> float | None:
        """tau x T_base - T_draft - T_verify_compute (model.savings_ms); None without tau or an input."""
        if self.tau is None or self.t_base_ms is None or self.t_draft_ms is None or self.verify_compute_ms is None:
            return None
        return float(formula.savings_ms(self.tau, self.t_base_ms, self.t_draft_ms, self.verify_compute_ms))

    @property
    def break_even_t_ar_us(self) -> float | None:
        """t_ar* = savings / N_ar; None at world size 1 (no allreduce decides it) or without the savings."""
        savings = self.savings_ms
        return float(formula.break_even_t_ar_us(savings, self.n_ar)) if savings is not None and self.n_ar else None

    @property
    def profitable(self) -> bool | None:
        """Whether speculation pays here, by the one rule (`pays`: the interval, issue 43 item 13): True for "yes",
        False for "no", None where it is unclear or there is no speedup. Never the point estimate alone."""
        return {"yes": True, "no": False}.get(self.pays or "")

    @property
    def verdict(self) -> Finding | None:
        """The speedup against 1 as the comparisons label a ratio (statistics.finding_of, higher is better, at
        the campaign's minimum effect): faster (pays by at least the minimum effect), below_min_effect, equivalent,
        slower, inconclusive; None without a speedup."""
        s = self.speedup
        if s is None or s.value <= 0:
            return None
        low = s.low if s.low is not None else s.value
        high = s.high if s.high is not None else s.value
        return finding_of(s.value, low, high, False, self.min_effect)

    @property
    def pays(self) -> str | None:
        """ "yes", "no", "unclear", None (no speedup), from `verdict`: faster is "yes" and slower "no"; a
        difference below the minimum effect decides only with run-to-run spread in its interval (where an input
        was measured by one trial the interval is within-run noise only: docs/profitability.md, "Deciding with
        one trial"); equivalent and inconclusive are "unclear"."""
        verdict = self.verdict
        if verdict is None:
            return None
        if verdict == Finding.faster:
            return "yes"
        if verdict == Finding.slower:
            return "no"
        if verdict == Finding.below_min_effect and not self.speedup.within_run_only:  # type: ignore[union-attr]
            return "yes" if self.speedup.value > 1 else "no"  # type: ignore[union-attr]
        return "unclear"


@dataclass(frozen=True)
class ApproachAnswer:
    key: str
    title: str
    status: str
    world_size: int
    cells: tuple[Cell, ...]
    tau_star: Interval | None  # at the smallest batch, its best (or the campaign's) draft length
    headline_k: int | None
    best_draft_tokens: dict[int, int]  # batch -> k (0: do not speculate: its best cell does not pay by the interval)
    best_speedup: dict[int, Interval]  # batch -> the speedup at its best k (k >= 1)
    break_even_batch: int | None  # largest measured batch whose best speedup > 1
    first_losing_batch: int | None  # the smallest measured batch above B* where it does not pay
    unstable_inputs: tuple[str, ...]
    deployable: bool = True
    # batch -> its best cell's `pays` ("yes", "no", "unclear"): the one rule, which best_draft_tokens follows (on only
    # for "yes"), and the grid, the sentence and the configs read
    decision: dict[int, str] = field(default_factory=dict)

    def cell(self, batch: int, k: int) -> Cell | None:
        return next((c for c in self.cells if c.batch == batch and c.draft_tokens == k), None)

    @property
    def headline(self) -> Interval | None:
        """The figure approaches are compared by: the best speedup at the break-even batch (at the smallest
        batch when none pays), else tau* at the smallest batch (no accept length known)."""
        if self.best_speedup:
            at = self.break_even_batch if self.break_even_batch is not None else min(self.best_speedup)
            return self.best_speedup[at]
        return self.tau_star


class InputFigure(NamedTuple):
    """One input as the answer shows it: its figure, its source (trials) and the conditions it was measured
    under (the stand-in it came from included)."""

    name: str
    approach: str | None
    figure: Interval
    source: str
    trial_ids: tuple[int, ...] = ()
    conditions: str = ""


@dataclass(frozen=True)
class TierFinding:
    """One approach against its tier's leader, as the comparisons label a pair (app/domain/statistics.py): the
    ratio of their headline figures (this one's over the leader's) with its interval at the campaign's
    confidence, from the same bootstrap replicates as the cells, and the verdict at the campaign's minimum
    effect. In the leader's tier only when not shown faster or slower."""

    leader: str
    verdict: Finding
    ratio: float
    low: float | None
    high: float | None

    @property
    def words(self) -> str:
        """ "equivalent", "not shown to differ" (inconclusive), "different, below the minimum effect"."""
        return "not shown to differ" if self.verdict == Finding.inconclusive else FINDING_WORDS[self.verdict]


@dataclass(frozen=True)
class SpeculationAnswer:
    batches: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    approaches: tuple[ApproachAnswer, ...]
    tiers: tuple[tuple[str, ...], ...]  # approach keys, best first; keys within a tier are not shown to differ
    inputs: tuple[InputFigure, ...]
    missing: tuple[Missing, ...]
    n_ar: int | None
    tau: dict[int, Interval]
    tau_sources: dict[int, str]
    sentence: str
    resamples: int = RESAMPLES
    confidence: float = Rule.confidence
    conditions: Conditions | None = None
    flags: tuple[str, ...] = ()
    min_effect: float = Rule.min_effect
    # Each tier member's label against its tier's leader (statistics.finding_of: "equivalent", "inconclusive",
    # "below_min_effect"), with the ratio of their headline figures and its interval; leaders are not listed.
    tier_verdicts: dict[str, TierFinding] = field(default_factory=dict)  # not shown to differ by the minimum effect
    runs: int = 0  # the runs its inputs were paired over (paired_runs: each speedup per run, then over them); 0: none

    @property
    def within_run_only(self) -> bool:
        """Some figure reads an input measured by one trial: its interval is within-run noise only."""
        return any(f.figure.within_run_only for f in self.inputs)

    def approach(self, key: str) -> ApproachAnswer | None:
        return next((a for a in self.approaches if a.key == key), None)

    def inputs_of(self, cell: Cell) -> tuple[InputFigure, ...]:
        """The input figures one cell reads (their trials and conditions)."""
        return tuple(self.inputs[i] for i in cell.inputs)

    @property
    def chosen(self) -> ApproachAnswer | None:
        return _chosen(list(self.approaches), self.tiers)


def _chosen(answers: list[ApproachAnswer], tiers: tuple[tuple[str, ...], ...]) -> ApproachAnswer | None:
    """The approach to deploy: the best tier's first usable one (dead ends cannot be deployed)."""
    by_key = {a.key: a for a in answers}
    for tier in tiers:
        for key in tier:
            if by_key[key].deployable:
                return by_key[key]
    return None


WORLD_1 = "world size 1: no allreduce"  # a cell's note where the verify step runs no allreduce
