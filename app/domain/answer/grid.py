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

import bisect
import functools
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

import numpy as np

from app.domain.answer import model as formula
from app.domain.answer.values import Conditions, Missing, Value, measured
from app.domain.statistics import (
    VERDICT_WORDS,
    Rule,
    Verdict,
    percentile_intervals,
    trial_resamples_many,
    verdict_of,
)
from app.domain.wording import size_label

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


# ---- interpolation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bracket:
    """Where a message size falls on a measured curve: between points lo and hi at `frac` in log-log
    (lo == hi at a measured size), or outside the curve (`outside` says how)."""

    lo: int
    hi: int
    frac: float
    outside: str = ""


def bracket(curve_bytes: Sequence[int], nbytes: int) -> Bracket:
    """Bracket `nbytes` on sorted measured sizes; outside them it refuses (no silent extrapolation)."""
    if not curve_bytes:
        return Bracket(0, 0, 0.0, "no allreduce curve measured")
    if nbytes < curve_bytes[0] or nbytes > curve_bytes[-1]:
        return Bracket(
            0,
            0,
            0.0,
            f"{size_label(nbytes)} is outside the measured allreduce sizes "
            f"({size_label(curve_bytes[0])}-{size_label(curve_bytes[-1])}): not extrapolated",
        )
    hi = bisect.bisect_left(curve_bytes, nbytes)
    if curve_bytes[hi] == nbytes:
        return Bracket(hi, hi, 0.0)
    lo = hi - 1
    frac = (math.log(nbytes) - math.log(curve_bytes[lo])) / (math.log(curve_bytes[hi]) - math.log(curve_bytes[lo]))
    return Bracket(lo, hi, frac)


def interpolate_loglog(lo_us: Any, hi_us: Any, frac: Any) -> Any:
    """exp(log lo + frac (log hi - log lo)): elementwise, so it runs on bootstrap replicates too."""
    return np.exp(np.log(lo_us) + frac * (np.log(hi_us) - np.log(lo_us)))


class _Size(int):
    """A byte count that formats as its label (only when a name is made)."""

    def __format__(self, spec: str) -> str:
        return size_label(int(self))


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
    def verdict(self) -> Verdict | None:
        """The speedup against 1 as the comparisons label a ratio (statistics.verdict_of, higher is better, at
        the campaign's minimum effect): faster (pays by at least the minimum effect), below_min_effect, equivalent,
        slower, inconclusive; None without a speedup."""
        s = self.speedup
        if s is None or s.value <= 0:
            return None
        low = s.low if s.low is not None else s.value
        high = s.high if s.high is not None else s.value
        return verdict_of(s.value, low, high, False, self.min_effect)

    @property
    def pays(self) -> str | None:
        """ "yes", "no", "unclear", None (no speedup), from `verdict`: faster is "yes" and slower "no"; a
        difference below the minimum effect decides only with run-to-run spread in its interval (where an input
        was measured by one trial the interval is within-run noise only: docs/profitability.md, "Deciding with
        one trial"); equivalent and inconclusive are "unclear"."""
        verdict = self.verdict
        if verdict is None:
            return None
        if verdict == Verdict.faster:
            return "yes"
        if verdict == Verdict.slower:
            return "no"
        if verdict == Verdict.below_min_effect and not self.speedup.within_run_only:  # type: ignore[union-attr]
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
class TierVerdict:
    """One approach against its tier's leader, as the comparisons label a pair (app/domain/statistics.py): the
    ratio of their headline figures (this one's over the leader's) with its interval at the campaign's
    confidence, from the same bootstrap replicates as the cells, and the verdict at the campaign's minimum
    effect. In the leader's tier only when not shown faster or slower."""

    leader: str
    verdict: Verdict
    ratio: float
    low: float | None
    high: float | None

    @property
    def words(self) -> str:
        """ "equivalent", "not shown to differ" (inconclusive), "different, below the minimum effect"."""
        return "not shown to differ" if self.verdict == Verdict.inconclusive else VERDICT_WORDS[self.verdict]


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
    # Each tier member's label against its tier's leader (statistics.verdict_of: "equivalent", "inconclusive",
    # "below_min_effect"), with the ratio of their headline figures and its interval; leaders are not listed.
    tier_verdicts: dict[str, TierVerdict] = field(default_factory=dict)  # not shown to differ by the minimum effect
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


@dataclass
class _Model:
    """The figures of every approach's grid as one vector, so one statistic evaluates all of them on a
    bootstrap replicate. Exact figures (entered, derived) and measured ones (their replicate estimates) mix."""

    values: list[float] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)  # which entries of `values` have something to resample
    trials: list[tuple[tuple[float, ...], ...]] = field(default_factory=list)  # theirs, in `sampled` order
    measured: list[bool] = field(default_factory=list)  # from trials (else exact)
    one_trial: list[bool] = field(default_factory=list)  # measured by one trial: within-run noise only
    unstable: list[bool] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    index: dict[int, int] = field(default_factory=dict)  # id(Value) -> position
    figures: list[Value] = field(default_factory=list)  # each position's Value

    def add(self, m: Value, kind: str, where: str, *args: Any) -> int:
        """The figure's position, adding it (named "<kind> at <where formatted with args>") the first time."""
        key = id(m)
        found = self.index.get(key)
        if found is not None:
            return found
        name = f"{kind} at {where.format(*args)}"
        pos = len(self.values)
        self.index[key] = pos
        assert m.value is not None, f"{name} has no value"
        self.values.append(m.value)
        self.figures.append(m)
        self.unstable.append(m.unstable)
        self.measured.append(not m.exact)
        self.one_trial.append(m.one_trial)
        self.names.append(name)
        if m.sampled:
            self.sampled.append(pos)
            self.trials.append(m.trials)
        return pos

    def vector(self, means: np.ndarray, dtype: Any = float) -> np.ndarray:
        """The figures with the sampled ones replaced by `means`: shape (S,), or (S, R) replicates, in `dtype`."""
        if not len(means):
            return np.asarray(self.values, dtype=dtype)
        out = np.empty((len(self.values), *means.shape[1:]), dtype=dtype)
        out[...] = np.asarray(self.values, dtype=dtype).reshape((-1,) + (1,) * (means.ndim - 1))
        out[self.sampled] = means
        return out


@dataclass(frozen=True)
class _Plan:
    """One approach's valid cells as positions into the model vector."""

    cells: list[tuple[int, int]]  # (b, k) of valid cells
    base: np.ndarray
    draft: np.ndarray
    k: np.ndarray
    verify: np.ndarray
    ar_lo: np.ndarray
    ar_hi: np.ndarray
    ar_frac: np.ndarray
    has_ar: np.ndarray  # bool
    tau: np.ndarray  # position, or -1 without tau(k)
    unstable: list[bool]
    notes: list[str]  # per valid cell: how t_ar was obtained
    positions: list[tuple[int, ...]]  # per cell, every figure it reads


def _evaluate(
    plan: _Plan,
    v: np.ndarray,
    n_ar: int,
    logs: tuple[np.ndarray, np.ndarray] | None = None,
    rows: slice = slice(None),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tau*, speedup, T_verify) of a plan's cells (those in `rows`) on figure vector(s) v: shape (F,), or (F, R)
    replicates. `logs`: (each figure's row in `table`, table), the logs of the replicates of the figures the
    allreduce interpolation reads, taken once per figure (not once per cell, nor for every figure)."""
    shape = (-1,) + (1,) * (v.ndim - 1)
    base = v[plan.base[rows]]
    verify = v[plan.verify[rows]]
    draft = v[plan.draft[rows]]
    draft *= plan.k[rows].astype(v.dtype).reshape(shape)
    has_ar = plan.has_ar[rows]
    if has_ar.any():
        every = bool(has_ar.all())
        ar = slice(None) if every else np.flatnonzero(has_ar)
        at_lo, at_hi = plan.ar_lo[rows][ar], plan.ar_hi[rows][ar]
        if logs is None:
            table = np.log(np.where(v > 0, v, np.nan))
        else:
            where, table = logs
            at_lo, at_hi = where[at_lo], where[at_hi]
        lo, hi = table[at_lo], table[at_hi]
        hi -= lo
        hi *= plan.ar_frac[rows][ar].astype(v.dtype).reshape(shape)
        hi += lo
        comm = formula.comm_ms(n_ar, np.exp(hi, out=hi))
        if every:
            verify = formula.verify_ms(verify, comm)
        else:
            verify[ar] = formula.verify_ms(verify[ar], comm)
    tau_at = plan.tau[rows]
    tau = v[np.maximum(tau_at, 0)]
    tau[tau_at < 0] = np.nan
    # The formula itself is model.py's (one definition: the batch-1 report and its curve compute it there too).
    return formula.break_even_tau(base, draft, verify), formula.speedup(tau, base, draft, verify), verify


@functools.lru_cache(maxsize=64)
def _brackets(curve_bytes: tuple[int, ...]) -> dict[int, tuple[Bracket, str]]:
    """A curve's brackets by message size, with the note a cell gets there, filled as asked: approaches measured at
    the same sizes share them."""
    del curve_bytes  # the cache key
    return {}


_NO_AR = Bracket(0, 0, 0.0)
_CELL_ROWS = 64  # cells (or figures) a replicate block holds: 64 x 400 floats, 100 KB a temporary
WORLD_1 = "world size 1: no allreduce"  # a cell's note where the verify step runs no allreduce


def _plan(ai: ApproachInputs, spec: SpeculationInputs, model: _Model) -> tuple[_Plan, list[Cell], list[str]]:
    """Place one approach's cells in the model; cells missing an input stay open with the reason.

    A figure is placed (`_Model.add`) the first time a valid cell reads it, in cell order (base, draft, verify,
    the two allreduce points, tau): the model's order, and so which bootstrap draws each figure gets, is that of
    the cells. Positions already known (a batch's base and draft, a curve point, tau at k) are reused."""
    notes: list[str] = []
    valid: list[tuple[int, int]] = []
    c_base: list[int] = []
    c_draft: list[int] = []
    c_k: list[int] = []
    c_verify: list[int] = []
    c_lo: list[int] = []
    c_hi: list[int] = []
    c_frac: list[float] = []
    c_tau: list[int] = []
    c_positions: list[tuple[int, ...]] = []
    open_cells: list[Cell] = []
    gaps: list[str] = []
    curve_bytes = [b for b, _m in ai.curve]
    brackets = _brackets(tuple(curve_bytes))  # b(k+1) repeats over the grid (2 x 4 = 4 x 2) and the approaches
    index, add = model.index, model.add
    has_ar = ai.world_size > 1
    point_at: dict[int, int] = {}  # curve index -> position
    tau_at: dict[int, int] = {}  # k -> position (-1: no tau)
    per_element = spec.hidden_size * spec.bytes_per_element
    for b in spec.batches:
        base, draft = ai.t_base.get(b), ai.draft_step.get(b)
        base_pos = draft_pos = -1
        for k in spec.draft_tokens:
            nbytes = b * (k + 1) * per_element
            verify = ai.verify_compute.get((b, k))
            br, note = _NO_AR, WORLD_1
            why = []  # worded only when something is missing (most cells have everything)
            if base is None:
                why.append(f"no plain decode step at batch {b}")
            if draft is None:
                why.append(f"no draft step at batch {b}")
            if verify is None:
                why.append(f"no verify compute at batch {b}, {k} draft tokens")
            if has_ar:
                if spec.n_ar is None:
                    why.append("allreduces per verify not known")
                found = brackets.get(nbytes)
                if found is None:
                    found = brackets[nbytes] = _bracketed(curve_bytes, nbytes)
                br, note = found
                if br.outside:
                    why.append(br.outside)
            if why:
                open_cells.append(
                    Cell(
                        b,
                        k,
                        base.value if base else None,
                        draft.value * k if draft and draft.value is not None else None,
                        None,
                        None,
                        nbytes,
                        None,
                        None,
                        "; ".join(why),
                    )
                )
                gaps.extend(why)
                continue
            assert base and draft and verify
            if base_pos < 0:
                base_pos = add(base, DECODE, "batch {}", b)
                draft_pos = add(draft, DRAFT, "batch {}", b)
            verify_pos = index.get(id(verify))
            if verify_pos is None:
                verify_pos = add(verify, VERIFY, "batch {}, {} draft tokens", b, k)
            if has_ar:
                lo = point_at.get(br.lo)
                if lo is None:
                    lo = point_at[br.lo] = add(ai.curve[br.lo][1], ALLREDUCE, "{}", _Size(curve_bytes[br.lo]))
                hi = point_at.get(br.hi)
                if hi is None:
                    hi = point_at[br.hi] = add(ai.curve[br.hi][1], ALLREDUCE, "{}", _Size(curve_bytes[br.hi]))
                positions: tuple[int, ...] = (base_pos, draft_pos, verify_pos, lo, hi)
            else:
                lo = hi = base_pos
                positions = (base_pos, draft_pos, verify_pos)
            notes.append(note)
            tau_pos = tau_at.get(k)
            if tau_pos is None:
                tau = spec.tau.get(k)
                tau_pos = tau_at[k] = add(tau, ACCEPT, "{} draft tokens", k) if tau is not None else -1
            valid.append((b, k))
            c_base.append(base_pos)
            c_draft.append(draft_pos)
            c_k.append(k)
            c_verify.append(verify_pos)
            c_lo.append(lo)
            c_hi.append(hi)
            c_frac.append(br.frac)
            c_tau.append(tau_pos)
            c_positions.append((*positions, tau_pos) if tau_pos >= 0 else positions)
    plan = _Plan(
        cells=valid,
        base=np.asarray(c_base, dtype=int),
        draft=np.asarray(c_draft, dtype=int),
        k=np.asarray(c_k, dtype=float),
        verify=np.asarray(c_verify, dtype=int),
        ar_lo=np.asarray(c_lo, dtype=int),
        ar_hi=np.asarray(c_hi, dtype=int),
        ar_frac=np.asarray(c_frac, dtype=float),
        has_ar=np.full(len(valid), has_ar, dtype=bool),
        tau=np.asarray(c_tau, dtype=int),
        unstable=[],  # filled below, vectorized
        notes=notes,
        positions=c_positions,
    )
    plan.unstable.extend(_bools(_reads(plan, np.asarray(model.unstable, dtype=bool))))
    return plan, open_cells, gaps


def _bracketed(curve_bytes: Sequence[int], nbytes: int) -> tuple[Bracket, str]:
    """`bracket` and the note of a cell whose verify carries `nbytes`."""
    br = bracket(curve_bytes, nbytes)
    if br.outside:
        return br, ""
    if br.lo == br.hi:
        return br, f"t_ar measured at {size_label(nbytes)}"
    return br, (
        f"t_ar interpolated (log-log) between {size_label(curve_bytes[br.lo])} and {size_label(curve_bytes[br.hi])}"
    )


def _ints(x: Any) -> list[int]:
    return cast(list[int], np.asarray(x, dtype=int).tolist())


def _bools(x: Any) -> list[bool]:
    return cast(list[bool], np.asarray(x, dtype=bool).tolist())


def _reads(plan: _Plan, mask: np.ndarray) -> np.ndarray:
    """Per cell: whether any figure it reads is marked in `mask` (one flag per model figure)."""
    if not len(plan.cells):
        return np.zeros(0, dtype=bool)
    out = mask[plan.base] | mask[plan.draft] | mask[plan.verify]
    out |= plan.has_ar & (mask[plan.ar_lo] | mask[plan.ar_hi])
    out |= (plan.tau >= 0) & mask[np.maximum(plan.tau, 0)]
    return out


def _read_by(plan: _Plan) -> set[int]:
    """Every figure some cell of the plan reads (the union of the cells' `positions`)."""
    if not len(plan.cells):
        return set()
    parts = [plan.base, plan.draft, plan.verify, plan.tau[plan.tau >= 0]]
    if plan.has_ar.any():
        parts += [plan.ar_lo[plan.has_ar], plan.ar_hi[plan.has_ar]]
    return set(_ints(np.unique(np.concatenate(parts))))


def _merge(plans: list[_Plan]) -> _Plan:
    """Every approach's cells as one plan, so one evaluation covers the whole answer."""

    def cat(name: str, dtype: Any) -> np.ndarray:
        parts = [getattr(p, name) for p in plans]
        return np.concatenate(parts).astype(dtype) if parts else np.array([], dtype=dtype)

    return _Plan(
        cells=[c for p in plans for c in p.cells],
        base=cat("base", int),
        draft=cat("draft", int),
        k=cat("k", float),
        verify=cat("verify", int),
        ar_lo=cat("ar_lo", int),
        ar_hi=cat("ar_hi", int),
        ar_frac=cat("ar_frac", float),
        has_ar=cat("has_ar", bool),
        tau=cat("tau", int),
        unstable=[u for p in plans for u in p.unstable],
        notes=[n for p in plans for n in p.notes],
        positions=[c for p in plans for c in p.positions],
    )


def _intervals(
    model: _Model, merged: _Plan, n_ar: int, resamples: int, seed: int, confidence: float
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], tuple[np.ndarray, np.ndarray] | None]:
    """Over every approach's cells (`_merge`, in plan order): (tau* point, low, high, speedup point, low, high,
    T_verify point); the figures' own (point, low, high); and the replicates of every cell's (tau*, speedup)
    (None when nothing is sampled), which the tiers compare approaches on.

    Every measured input is resampled on its own at the trial level (`trial_resamples_many`: its trials with
    replacement, then each drawn trial's median; inputs measured by different trials are independent), the
    whole grid is evaluated on each replicate, and each cell's interval is the replicates' percentile interval
    at `confidence` (`percentile_intervals`). Exact inputs (entered, derived) stay at their value."""
    point_v = model.vector(np.array([]))
    tau_star, speedup, verify = _evaluate(merged, point_v, n_ar)
    n_cells = len(merged.cells)
    nan = np.full(n_cells, np.nan)
    t_low, t_high, s_low, s_high = nan, nan, nan.copy(), nan.copy()
    f_low = f_high = np.array([])
    replicates: tuple[np.ndarray, np.ndarray] | None = None
    if model.sampled:
        rng = np.random.default_rng(seed)
        draws = trial_resamples_many(model.trials, resamples, rng)  # [sampled, R]
        # Replicates in single precision: their percentile bounds need 4 digits, not 16, at half the traffic.
        # Inputs measured in the same runs are paired (`_paired_runs`): one figure vector per run slot.
        vectors = [model.vector(d, np.float32) for d in _run_slots(model, draws, resamples, rng)]
        del draws
        curve = np.unique(np.concatenate([merged.ar_lo[merged.has_ar], merged.ar_hi[merged.has_ar]]))
        where = np.full(len(model.values), -1, dtype=np.intp)
        where[curve] = np.arange(curve.size)
        with np.errstate(invalid="ignore", divide="ignore"):
            all_logs = [(where, np.log(v[curve])) for v in vectors]
        known = merged.tau >= 0
        tau_sampled = np.zeros(len(model.values), dtype=bool)
        tau_sampled[model.sampled] = True
        resampled = known & tau_sampled[np.maximum(merged.tau, 0)]
        rep_tau_star = np.empty((n_cells, resamples), dtype=np.float32)
        rep_speedup = np.empty((n_cells, resamples), dtype=np.float32)
        t_low, t_high = np.empty(n_cells, dtype=np.float32), np.empty(n_cells, dtype=np.float32)
        # In blocks of cells: the same numbers (every figure is computed per cell and per replicate), with
        # block-sized scratch the allocator reuses where [cell, resample] temporaries were fresh pages each call.
        for start in range(0, n_cells, _CELL_ROWS):
            rows = slice(start, min(start + _CELL_ROWS, n_cells))
            # Each run's tau* and speedup from that run's own figures, then their mean over the drawn runs.
            block_tau_star, block_speedup, _verify = _evaluate(merged, vectors[0], n_ar, all_logs[0], rows)
            for v, logs in zip(vectors[1:], all_logs[1:], strict=True):
                more_tau_star, more_speedup, _verify = _evaluate(merged, v, n_ar, logs, rows)
                block_tau_star += more_tau_star
                block_speedup += more_speedup
            if len(vectors) > 1:
                block_tau_star /= len(vectors)
                block_speedup /= len(vectors)
            rep_tau_star[rows], rep_speedup[rows] = block_tau_star, block_speedup
            t_low[rows], t_high[rows] = percentile_intervals(block_tau_star, confidence)
            again = resampled[rows]
            if again.any():
                at = np.flatnonzero(again) + start
                s_low[at], s_high[at] = percentile_intervals(block_speedup[again], confidence)
        replicates = (rep_tau_star, rep_speedup)
        if n_cells:
            # An exact tau: speedup = tau / tau* is monotone in tau*, so its percentile bounds are tau over tau*'s
            # (percentile intervals follow monotone maps), without a second pass over the replicates.
            fixed = known & ~resampled
            tau_c = point_v[merged.tau[fixed]]
            s_low[fixed], s_high[fixed] = tau_c / t_high[fixed], tau_c / t_low[fixed]
        sampled = np.asarray(model.sampled, dtype=np.intp)
        f_low, f_high = np.empty(sampled.size, dtype=np.float32), np.empty(sampled.size, dtype=np.float32)
        for start in range(0, sampled.size, _CELL_ROWS):  # the same draws, single precision
            rows = slice(start, start + _CELL_ROWS)
            block = np.mean([v[sampled[rows]] for v in vectors], axis=0)  # a figure over the drawn runs
            f_low[rows], f_high[rows] = percentile_intervals(block, confidence)
    return (tau_star, t_low, t_high, speedup, s_low, s_high, verify), (point_v, f_low, f_high), replicates


def paired_runs(model_trials: Sequence[Value]) -> tuple[int, list[int]] | None:
    """The runs the answer pairs on: (m, the positions among `model_trials` of the figures measured in them), or
    None when nothing can be paired.

    A run is one repetition of the campaign's sweep (bench/gpu_session.sh and bench/moe_gpu_session.sh run every
    recipe once per session): the figures measured by m >= 2 trials (m the count most figures share) are paired
    by rank, their i-th trial (in trial id order) being run i, provided the runs do not interleave (every
    figure's i-th trial is older than every figure's (i+1)-th). Figures of another trial count stay
    independent."""
    counts: dict[int, int] = defaultdict(int)
    for v in model_trials:
        if len(v.trials) >= 2 and len(v.trial_ids) == len(v.trials):
            counts[len(v.trials)] += 1
    if not counts:
        return None
    m = max(counts, key=lambda c: (counts[c], c))
    members = [i for i, v in enumerate(model_trials) if len(v.trials) == m and len(v.trial_ids) == m]
    ids = np.sort(np.array([model_trials[i].trial_ids for i in members], dtype=np.int64), axis=1)  # [figure, run]
    if not all(ids[:, i].max() < ids[:, i + 1].min() for i in range(m - 1)):
        return None  # the trials interleave: they do not fall into runs
    return m, members


def _run_slots(model: _Model, draws: np.ndarray, resamples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The replicates of the sampled figures, one [sampled, R] array per run slot: the hierarchical bootstrap over
    runs (docs/statistics.md, "The answer uses the same home"). Each replicate draws m runs with replacement,
    the same runs for every paired figure (a run's figures move together: what one run's clocks and placement
    do to its decode step they do to its verify step), and within each drawn run its trial's bootstrap median;
    the cells are evaluated per slot and averaged over the slots, so a speedup is computed per run first and its
    interval is the spread of the runs (and their within-run noise). Unpaired figures (`draws`, their own
    trial posteriors) are the same in every slot. One slot, `draws` itself, where nothing is paired."""
    figures = [model.figures[p] for p in model.sampled]
    found = paired_runs(figures)
    if found is None:
        return [draws]
    m, members = found
    runs = []  # [figure, run] -> the run's samples, runs in trial id order
    for i in members:
        v = figures[i]
        order = np.argsort(v.trial_ids)
        runs.append([v.trials[int(j)] for j in order])
    singles = [[t] for trials in runs for t in trials]
    columns = np.arange(resamples)
    slots = []
    pick = rng.integers(0, m, size=(m, resamples))  # the runs each replicate draws, shared by every paired figure
    for slot in range(m):
        within = trial_resamples_many(singles, resamples, rng).reshape(len(members), m, resamples)
        out = draws.copy()
        out[members] = within[:, pick[slot], columns]
        slots.append(out)
    return slots


_NONE = np.array(None, dtype=object)  # None into object arrays (numpy's stubs refuse a bare None)
_new_interval = cast(Callable[[Iterable[Any]], Interval], functools.partial(tuple.__new__, Interval))
_new_cell = cast(Callable[[Iterable[Any]], Cell], functools.partial(tuple.__new__, Cell))
_new_input = cast(Callable[[Iterable[Any]], InputFigure], functools.partial(tuple.__new__, InputFigure))


def _intervals_of(
    value: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    unstable: np.ndarray,
    bounded: np.ndarray,
    no_samples: np.ndarray,
    one_trial: np.ndarray,
    values: list[float] | None = None,
) -> list[Interval]:
    """An `Interval` per row: the bounds where `bounded` and neither is NaN (else None), widened to hold the
    point; plain Python numbers (no numpy scalars on the answer). Built without a Python call per interval."""
    value = np.asarray(value, dtype=float)
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    shown = bounded & ~np.isnan(low) & ~np.isnan(high)
    lows = np.where(low < value, low, value).astype(object)
    highs = np.where(high > value, high, value).astype(object)
    lows[~shown] = _NONE
    highs[~shown] = _NONE
    points = value.tolist() if values is None else values
    rows = zip(points, lows.tolist(), highs.tolist(), _bools(unstable), _bools(no_samples), _bools(one_trial))
    return list(map(_new_interval, rows))


def _cells(
    spec: SpeculationInputs,
    merged: _Plan,
    figures: tuple[np.ndarray, ...],
    values: list[float],
    point_v: np.ndarray,
    masks: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> list[Cell]:
    """Every valid cell of every approach, in `merged`'s order, built column by column: `figures` are
    `_intervals`' per-cell arrays, `masks` the model's (sampled, one trial, unstable) flags per figure."""
    if not merged.cells:
        return []
    t_point, t_low, t_high, s_point, s_low, s_high, verify = figures
    sampled_mask, once_mask, unstable_mask = masks
    sampled, once = _reads(merged, sampled_mask), _reads(merged, once_mask)
    unstable = np.asarray(merged.unstable, dtype=bool)
    known = merged.tau >= 0
    tau_star = _intervals_of(t_point, t_low, t_high, unstable, sampled, ~sampled, once)
    with_tau = unstable | (known & unstable_mask[np.maximum(merged.tau, 0)])
    speedup: list[Interval | None] = [*_intervals_of(s_point, s_low, s_high, with_tau, sampled, ~sampled, once)]
    for i in _ints(np.flatnonzero(~known)):
        speedup[i] = None
    batches, ks = (list(c) for c in zip(*merged.cells, strict=True))
    base = [values[p] for p in _ints(merged.base)]
    draft = list(map(operator.mul, (values[p] for p in _ints(merged.draft)), ks))
    verify_ms = np.asarray(verify, dtype=float)
    compute = point_v[merged.verify]
    t_ar = ((verify_ms - compute) / (spec.n_ar or 1) * 1000.0).astype(object)
    t_ar[~merged.has_ar] = _NONE
    tau = point_v[np.maximum(merged.tau, 0)].astype(object)
    tau[~known] = _NONE
    n_ar = np.where(merged.has_ar, spec.n_ar or 0, 0)
    per_token = spec.hidden_size * spec.bytes_per_element
    nbytes = [b * (k + 1) * per_token for b, k in merged.cells]
    rows = zip(
        batches,
        ks,
        base,
        draft,
        verify_ms.tolist(),
        t_ar.tolist(),
        nbytes,
        tau_star,
        speedup,
        merged.notes,
        itertools.repeat(spec.min_effect),
        merged.positions,
        compute.tolist(),
        tau.tolist(),
        n_ar.tolist(),
    )
    return list(map(_new_cell, rows))


_BATCH_K = operator.attrgetter("batch", "draft_tokens")


def _speedup_value(c: Cell) -> float:
    return c.speedup.value  # type: ignore[union-attr]


def _headline_cell(a: ApproachAnswer) -> tuple[int, int] | None:
    """(b, k) of the cell whose figure is the approach's headline (ApproachAnswer.headline)."""
    if a.best_speedup:
        at = a.break_even_batch if a.break_even_batch is not None else min(a.best_speedup)
        options = [c for c in a.cells if c.batch == at and c.speedup is not None]
        top = max(options, key=lambda c: c.speedup.value)  # type: ignore[union-attr]
        return top.batch, top.draft_tokens
    if a.tau_star is None or a.headline_k is None:
        return None
    b0 = min(c.batch for c in a.cells if c.tau_star is not None)
    return b0, a.headline_k


def _tiers(
    answers: list[ApproachAnswer],
    cell_index: dict[tuple[str, int, int], int],
    replicates: tuple[np.ndarray, np.ndarray] | None,
    confidence: float,
    min_effect: float,
) -> tuple[tuple[tuple[str, ...], ...], dict[str, TierVerdict]]:
    """Best first: the highest break-even batch, then the headline figure. An approach with the same break-even
    batch as its tier leader shares the tier, unranked, unless the comparisons' rule (statistics.verdict_of, at
    the campaign's confidence and minimum effect) shows it slower: the ratio of the two headline figures, with
    its percentile interval over the same bootstrap replicates as the cells (inputs both read, such as tau and
    the draft step, move together), labelled equivalent, below the minimum effect or inconclusive."""
    ranked = [a for a in answers if a.headline is not None]
    higher_better = any(a.best_speedup for a in ranked)
    ranked = [a for a in ranked if bool(a.best_speedup) == higher_better]

    def order(a: ApproachAnswer) -> tuple[float, float]:
        value = a.headline.value  # type: ignore[union-attr]
        return (-(a.break_even_batch or 0), -value if higher_better else value)

    ranked.sort(key=order)
    rows = replicates[1 if higher_better else 0] if replicates is not None else None
    tiers: list[list[ApproachAnswer]] = []
    verdicts: dict[str, TierVerdict] = {}
    for a in ranked:
        leader = tiers[-1][0] if tiers else None
        if leader is None or leader.break_even_batch != a.break_even_batch:
            tiers.append([a])
            continue
        found = _against(a, leader, cell_index, rows, confidence, min_effect, lower_better=not higher_better)
        if found is None or found.verdict in (Verdict.faster, Verdict.slower):
            tiers.append([a])
        else:
            tiers[-1].append(a)
            verdicts[a.key] = found
    return tuple(tuple(a.key for a in tier) for tier in tiers), verdicts


def _against(
    a: ApproachAnswer,
    leader: ApproachAnswer,
    cell_index: dict[tuple[str, int, int], int],
    rows: np.ndarray | None,
    confidence: float,
    min_effect: float,
    *,
    lower_better: bool,
) -> TierVerdict | None:
    """`a`'s headline over the leader's, with its interval and the comparisons' verdict (None: no ratio)."""
    mine, theirs = _headline_cell(a), _headline_cell(leader)
    if mine is None or theirs is None or not leader.headline or not leader.headline.value:
        return None
    ratio = a.headline.value / leader.headline.value  # type: ignore[union-attr]
    low = high = ratio
    i, j = cell_index.get((a.key, *mine)), cell_index.get((leader.key, *theirs))
    if rows is not None and i is not None and j is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = (rows[i].astype(float) / rows[j].astype(float))[None, :]
        if np.isfinite(draws).all():
            lo, hi = percentile_intervals(draws, confidence)
            low, high = min(float(lo[0]), ratio), max(float(hi[0]), ratio)
    if ratio <= 0 or low <= 0:
        return None
    verdict = verdict_of(ratio, low, high, lower_better, min_effect)
    exact = rows is None  # every input exact: the ratio has no interval
    return TierVerdict(leader.key, verdict, ratio, None if exact else low, None if exact else high)


def _batches_text(values: Sequence[int]) -> str:
    values = sorted(set(values))
    return ", ".join(str(v) for v in values)


def _missing(spec: SpeculationInputs, gaps: dict[str, list[str]], measurer: str | None) -> list[Missing]:
    out: list[Missing] = [Missing(what, why) for what, why in spec.set_aside]
    out += spec.missing
    if spec.n_ar is None:
        out.append(Missing("allreduces per verify step", "enter it on the campaign (2 per layer for TP)"))
    if not spec.approaches:
        out.append(
            Missing(
                "a sweep over batch sizes and draft tokens",
                "run the verify_step recipe with `batches` and `draft_tokens` lists (it also reports the plain "
                "decode step per batch) and the draft_step recipe with `batches`",
                None,
            )
        )
    worlds = {ai.key: ai.world_size for ai in spec.approaches}
    for key, why in gaps.items():
        kinds: dict[str, list[str]] = defaultdict(list)
        for text in why:
            if text.startswith("no plain decode step"):
                kinds["decode"].append(text.rsplit(" ", 1)[-1])
            elif text.startswith("no draft step"):
                kinds["draft"].append(text.rsplit(" ", 1)[-1])
            elif text.startswith("no verify compute"):
                kinds["verify"].append(text.removeprefix("no verify compute at "))
            elif "outside the measured allreduce sizes" in text:
                kinds["allreduce"].append(text.split(" is outside")[0])
            elif text.startswith("no allreduce curve"):
                kinds["curve"].append(text)
        if kinds["decode"]:
            out.append(
                Missing(
                    f"plain decode step at batch {_batches_text([int(b) for b in kinds['decode']])}",
                    "run this approach's verify_step recipe with these batches (it reports decode_step_ms per batch)",
                    key,
                )
            )
        if kinds["draft"]:
            world = worlds.get(key, 1)
            out.append(
                Missing(
                    f"draft step at batch {_batches_text([int(b) for b in kinds['draft']])}",
                    f"run the draft_step recipe with these `batches` and `world_size` {world} (the verify step's TP: "
                    "a draft step measured at another world size is not paired)",
                    key,
                )
            )
        if kinds["verify"]:
            cells = sorted(set(kinds["verify"]))
            shown = "; ".join(cells[:6]) + (f"; and {len(cells) - 6} more" if len(cells) > 6 else "")
            out.append(
                Missing(
                    f"verify compute at batch {shown}",
                    "run this approach's verify_step recipe with these `batches` and `draft_tokens`",
                    key,
                )
            )
        if kinds["allreduce"]:
            sizes = sorted(set(kinds["allreduce"]), key=_size_bytes)
            out.append(
                Missing(
                    f"allreduce latency at {sizes[0]}" + (f" to {sizes[-1]}" if len(sizes) > 1 else ""),
                    "run this approach's allreduce recipe with sizes up to these (the model does not extrapolate)",
                    key,
                )
            )
        if kinds["curve"]:
            out.append(Missing("allreduce latency curve", "run this approach's allreduce recipe", key))
    missing_k = [k for k in spec.draft_tokens if k not in spec.tau]
    if missing_k:
        out.append(
            Missing(
                f"accept length tau at {', '.join(str(k) for k in missing_k)} draft tokens",
                "run an sglang_server trial with EAGLE-3 at each k (--speculative-num-steps k "
                "--speculative-num-draft-tokens k+1, top-k 1), or enter tau per k or the per-position acceptance "
                "rates on the campaign",
                measurer,
            )
        )
    if spec.conditions is not None:
        label = spec.conditions.label
        out = [m if m.conditions else replace(m, conditions=label) for m in out]
    return out


def _size_bytes(label: str) -> float:
    number, unit = label.split(" ")
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024 * 1024}[unit]


def _tokens(k: int) -> str:
    return f"{k} draft token" if k == 1 else f"{k} draft tokens"


def _sentence(
    answer_approaches: list[ApproachAnswer], tiers: tuple[tuple[str, ...], ...], chosen: ApproachAnswer | None
) -> str:
    if chosen is None:
        return f"Not known yet whether {ALGORITHM} pays above batch 1 on this node: nothing usable is measured over batch sizes."
    by_key = {a.key: a for a in answer_approaches}
    tier = next((t for t in tiers if chosen.key in t), (chosen.key,))
    peers = [by_key[k].title for k in tier if k != chosen.key]
    named = peers if len(peers) <= 3 else [*peers[:3], f"{len(peers) - 3} more"]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}" if named else ""
    tail = (
        f" ({listed} {'is' if len(peers) == 1 else 'are'} not shown to differ from it by the minimum effect "
        "at the campaign's confidence)"
        if peers
        else ""
    )
    if not chosen.best_speedup:
        t = chosen.tau_star
        b0 = min(c.batch for c in chosen.cells if c.tau_star is not None)
        return (
            f"On this node {ALGORITHM} needs an accept length above {t.value:.2f} at batch {b0} with "  # type: ignore[union-attr]
            f"{_tokens(chosen.headline_k or 0)} using {chosen.title}{tail}; enter or measure tau per draft length "
            f"to find the batch where it stops paying."
        )
    measured_b = sorted(chosen.best_speedup)
    b_star = chosen.break_even_batch
    if b_star is None:
        return (
            f"On this node {ALGORITHM} does not pay at any measured batch ({measured_b[0]}-{measured_b[-1]}) using "
            f"{chosen.title}{tail}: turn it off."
        )
    below = [b for b in measured_b if b <= b_star]
    if {chosen.decision.get(b) for b in below} != {"yes"} or len({chosen.best_draft_tokens[b] for b in below}) > 1:
        # The batches up to B* do not all pay with one k: the sentence names k per batch range, as the grid does.
        return _sentence_by_range(chosen, tail)
    k = chosen.best_draft_tokens[b_star]
    if chosen.first_losing_batch is None:
        return (
            f"On this node {ALGORITHM} pays at every measured batch up to {b_star} with {_tokens(k)} using "
            f"{chosen.title}{tail}; above batch {b_star} it is not measured."
        )
    losing = chosen.first_losing_batch
    how = (
        "it does not pay"
        if chosen.best_speedup[losing].value <= 1
        else "it is not shown to pay: its interval holds 1, or one trial leaves a margin below the minimum effect"
    )
    return (
        f"On this node {ALGORITHM} pays up to batch {b_star} with {_tokens(k)} using {chosen.title}{tail}; "
        f"above batch {b_star} turn it off (at batch {losing} {how})."
    )


def _batches_words(first: int, last: int) -> str:
    return f"batch {first}" if first == last else f"batches {first}-{last}"


def batch_ranges(a: ApproachAnswer) -> list[tuple[int, int, str, int]]:
    """The measured batches in runs of one decision: (first batch, last batch, "yes" / "no" / "unclear", k), k the
    draft length on ("yes") and 0 otherwise; consecutive measured batches with the same decision and k merge."""
    out: list[tuple[int, int, str, int]] = []
    for b in sorted(a.best_speedup):
        state, k = a.decision.get(b, "unclear"), a.best_draft_tokens.get(b, 0)
        if out and out[-1][2] == state and out[-1][3] == k:
            out[-1] = (out[-1][0], b, state, k)
        else:
            out.append((b, b, state, k))
    return out


def _sentence_by_range(chosen: ApproachAnswer, tail: str) -> str:
    """The answer per batch range, from the same decisions the grid shows (ApproachAnswer.decision)."""
    parts = []
    for first, last, state, k in batch_ranges(chosen):
        where = _batches_words(first, last)
        if state == "yes":
            parts.append(f"{_tokens(k)} at {where}")
        elif state == "no":
            parts.append(f"off at {where} (it does not pay)")
        else:
            parts.append(
                f"off at {where} (not shown to pay: the interval holds 1, or one trial leaves a margin below the "
                "minimum effect)"
            )
    top = max(chosen.best_speedup)
    return (
        f"On this node {ALGORITHM} with {chosen.title}{tail}, by batch: {'; '.join(parts)}; above batch {top} it is "
        "not measured."
    )


def speculation_answer(
    spec: SpeculationInputs, *, resamples: int = RESAMPLES, seed: int = Rule.seed, measurer: str | None = None
) -> SpeculationAnswer:
    """The model over (batch, draft tokens) for every approach, with intervals, tiers and the sentence."""
    model = _Model()
    for k, tau in sorted(spec.tau.items()):
        model.add(tau, ACCEPT, "{} draft tokens", k)
    plans: list[_Plan] = []
    open_cells: list[list[Cell]] = []
    gaps: dict[str, list[str]] = {}
    for ai in spec.approaches:
        plan, opened, why = _plan(ai, spec, model)
        plans.append(plan)
        open_cells.append(opened)
        if why:
            gaps[ai.key] = why
    n_figures = len(model.values)
    sampled_mask = np.zeros(n_figures, dtype=bool)
    sampled_mask[model.sampled] = True
    once_mask = np.asarray(model.one_trial, dtype=bool)
    unstable_mask = np.asarray(model.unstable, dtype=bool)
    merged = _merge(plans)
    if plans:
        cell_figures, figures, replicates = _intervals(model, merged, spec.n_ar or 0, resamples, seed, spec.confidence)
        masks = (sampled_mask, once_mask, unstable_mask)
        built = _cells(spec, merged, cell_figures, model.values, figures[0], masks)
    else:
        figures, replicates, built = (np.array([]),) * 3, None, []
    cell_index: dict[tuple[str, int, int], int] = {}  # (approach, b, k) -> its row in the replicates
    for ai, plan in zip(spec.approaches, plans, strict=True):
        base_index = len(cell_index)
        cell_index.update(((ai.key, b, k), base_index + i) for i, (b, k) in enumerate(plan.cells))
    answers: list[ApproachAnswer] = []
    users: dict[int, set[str]] = defaultdict(set)
    unstable = model.unstable
    at = 0
    for ai, plan, opened in zip(spec.approaches, plans, open_cells, strict=False):
        mine = _read_by(plan)
        cells = [*opened, *built[at : at + len(plan.cells)]]
        at += len(plan.cells)
        for p in mine:
            users[p].add(ai.key)
        cells.sort(key=_BATCH_K)
        by_batch: dict[int, list[Cell]] = {}
        for c in cells:
            if c.speedup is not None:
                by_batch.setdefault(c.batch, []).append(c)
        best_k: dict[int, int] = {}
        best_s: dict[int, Interval] = {}
        best_cell: dict[int, Cell] = {}
        for b in spec.batches:
            options = by_batch.get(b)
            if options:
                top = max(options, key=_speedup_value)
                best_s[b] = top.speedup  # type: ignore[assignment]
                # On only where the best cell pays by the interval rule (Cell.pays), as B* below: never the point.
                best_k[b] = top.draft_tokens if top.pays == "yes" else 0
                best_cell[b] = top
        # B*: the largest batch where the best draft length pays by the interval rule (Cell.pays), not by its
        # point estimate alone; above it, the first batch where it does not (or cannot be said to) pay.
        paying = [b for b, c in best_cell.items() if c.pays == "yes"]
        b_star = max(paying) if paying else None
        losing = [b for b, c in best_cell.items() if c.pays != "yes" and (b_star is None or b > b_star)]
        with_tau_star = [c for c in cells if c.tau_star is not None]
        headline_k = None
        tau_star_head = None
        if with_tau_star:
            b0 = min(c.batch for c in with_tau_star)
            at_b0 = {c.draft_tokens: c for c in with_tau_star if c.batch == b0}
            steps = spec.draft_steps
            headline_k = best_k.get(b0) or (int(steps) if steps and int(steps) in at_b0 else min(at_b0))
            headline_k = headline_k if headline_k in at_b0 else min(at_b0)
            tau_star_head = at_b0[headline_k].tau_star
        answers.append(
            ApproachAnswer(
                key=ai.key,
                title=ai.title,
                status=ai.status,
                deployable=ai.deployable,
                world_size=ai.world_size,
                cells=tuple(cells),
                tau_star=tau_star_head,
                headline_k=headline_k,
                best_draft_tokens=best_k,
                best_speedup=best_s,
                break_even_batch=b_star,
                first_losing_batch=min(losing) if losing else None,
                unstable_inputs=tuple(sorted({model.names[p] for p in mine if unstable[p]})),
                decision={b: c.pays or "unclear" for b, c in best_cell.items()},
            )
        )
    point, f_low, f_high = figures
    low, high = np.full(n_figures, np.nan), np.full(n_figures, np.nan)
    if len(f_low):
        low[model.sampled], high[model.sampled] = f_low, f_high
    measured_mask = np.asarray(model.measured, dtype=bool)
    figs = _intervals_of(
        point if len(point) else np.asarray(model.values, dtype=float),
        low,
        high,
        unstable_mask,
        sampled_mask if len(f_low) else np.zeros(n_figures, dtype=bool),
        ~measured_mask,
        once_mask,
        None if len(point) else model.values,
    )
    owner: list[str | None] = [None] * n_figures
    for pos, keys in users.items():
        if len(keys) == 1:
            owner[pos] = next(iter(keys))
    sources: list[str] = []
    labels: list[str] = []
    source_of: dict[tuple[str, int], str] = {}
    label_of: dict[int, str] = {}  # id(Conditions) -> its label (the figures are alive for the whole call)
    label_by_value: dict[Conditions | None, str] = {}
    for v in model.figures:  # model order: a cell's `inputs` index this list
        key = (v.source, len(v.trials))
        source = source_of.get(key)
        if source is None:
            source = source_of[key] = _source(v, spec)
        sources.append(source)
        label = label_of.get(id(v.conditions))
        if label is None:
            label = label_by_value.get(v.conditions)
            if label is None:
                label = label_by_value[v.conditions] = _conditions_label(v.conditions)
            label_of[id(v.conditions)] = label
        labels.append(label)
    rows = zip(model.names, owner, figs, sources, (v.trial_ids for v in model.figures), labels, strict=True)
    inputs = list(map(_new_input, rows))
    tiers, tier_verdicts = _tiers(answers, cell_index, replicates, spec.confidence, spec.min_effect)
    return SpeculationAnswer(
        batches=spec.batches,
        draft_tokens=spec.draft_tokens,
        approaches=tuple(answers),
        tiers=tiers,
        inputs=tuple(inputs),
        missing=tuple(_missing(spec, gaps, measurer)),
        n_ar=spec.n_ar,
        tau={k: next(f.figure for f in inputs if f.name == f"{ACCEPT} at {k} draft tokens") for k in spec.tau},
        tau_sources={k: m.source for k, m in spec.tau.items()},
        sentence=_sentence(answers, tiers, _chosen(answers, tiers)),
        resamples=resamples,
        confidence=spec.confidence,
        conditions=spec.conditions,
        flags=spec.flags,
        min_effect=spec.min_effect,
        tier_verdicts=tier_verdicts,
        runs=paired[0] if (paired := paired_runs([model.figures[p] for p in model.sampled])) else 0,
    )


def _conditions_label(c: Conditions | None) -> str:
    if c is None:
        return ""
    return f"{c.label}; {c.stack_label}" if c.stack_label else c.label


def _source(v: Value, spec: SpeculationInputs) -> str:
    """Where a figure comes from, in words: its trials (or "entered, exact"), and how many of them."""
    if v.exact:
        return f"{v.source} (exact: no trial measured it)" if v.source else "exact: no trial measured it"
    trials = len(v.trials)
    count = "one trial: within-run noise only" if trials == 1 else f"{trials} trials"
    return f"{v.source} ({count})"


def _figure(f: Interval | None) -> dict[str, Any] | None:
    return f.as_dict() if f is not None else None


def answer_json(answer: SpeculationAnswer) -> dict[str, Any]:
    """The answer as `GET /api/campaigns/{slug}/answer` and `campaign answer --json` give it."""
    return {
        "sentence": answer.sentence,
        "batches": list(answer.batches),
        "draft_tokens": list(answer.draft_tokens),
        "allreduces_per_verify": answer.n_ar,
        "confidence": answer.confidence,
        "resamples": answer.resamples,
        "paired_runs": answer.runs,
        "conditions": answer.conditions.key if answer.conditions else None,
        "conditions_label": answer.conditions.label if answer.conditions else None,
        "within_run_only": answer.within_run_only,
        "flags": list(answer.flags),
        "chosen": answer.chosen.key if answer.chosen else None,
        "tiers": [list(t) for t in answer.tiers],
        "indistinguishable": [list(t) for t in answer.tiers if len(t) > 1],  # kept: the tiers not shown to differ
        "tier_verdicts": {
            key: {
                "leader": v.leader,
                "verdict": str(v.verdict),
                "words": v.words,
                "ratio": v.ratio,
                "low": v.low,
                "high": v.high,
            }
            for key, v in answer.tier_verdicts.items()
        },
        "accept_length": [
            {"draft_tokens": k, **answer.tau[k].as_dict(), "source": answer.tau_sources[k]} for k in sorted(answer.tau)
        ],
        "approaches": [
            {
                "key": a.key,
                "title": a.title,
                "status": a.status,
                "world_size": a.world_size,
                "tau_star": _figure(a.tau_star),
                "tau_star_draft_tokens": a.headline_k,
                "break_even_batch": a.break_even_batch,
                "first_losing_batch": a.first_losing_batch,
                "best_draft_tokens": {str(b): k for b, k in sorted(a.best_draft_tokens.items())},
                "pays_by_batch": {str(b): d for b, d in sorted(a.decision.items())},
                "unstable_inputs": list(a.unstable_inputs),
                "by_batch": [
                    {
                        "batch": c.batch,
                        "draft_tokens": c.draft_tokens,
                        "t_base_ms": c.t_base_ms,
                        "t_draft_ms": c.t_draft_ms,
                        "t_verify_ms": c.t_verify_ms,
                        "t_ar_us": c.t_ar_us,
                        "verify_bytes": c.verify_bytes,
                        "tau_star": _figure(c.tau_star),
                        "speedup": _figure(c.speedup),
                        "pays": c.pays,
                        "verdict": str(c.verdict) if c.verdict is not None else None,
                        "note": c.note,
                    }
                    for c in a.cells
                ],
            }
            for a in answer.approaches
        ],
        "inputs": [
            {
                "name": f.name,
                "approach": f.approach,
                **f.figure.as_dict(),
                "source": f.source,
                "trials": list(f.trial_ids),
                "conditions": f.conditions,
            }
            for f in answer.inputs
        ],
        "missing": [
            {"what": m.what, "approach": m.approach, "how": m.how, "conditions": m.conditions} for m in answer.missing
        ],
    }
