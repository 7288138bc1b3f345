"""The grid's cells over (batch b, draft tokens k) and their trial-level intervals: each approach's plan of
what every cell reads (t_ar interpolated log-log on its allreduce curve, never extrapolated), the cells
evaluated at the point estimates and on bootstrap resamples of every input (inputs measured in the same runs
resampled together: `paired_runs`). The model and its confidence are described in grid.py. Pure (numpy).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from app.domain.answer import model as formula
from app.domain.answer.grid import (
    ACCEPT,
    ALLREDUCE,
    DECODE,
    DRAFT,
    VERIFY,
    WORLD_1,
    ApproachInputs,
    Cell,
    InputFigure,
    Interval,
    SpeculationInputs,
)
from app.domain.answer.values import Value
from app.domain.statistics import (
    percentile_intervals,
    trial_resamples_many,
)
from app.domain.units import size_label

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
    the same sizes share them. Pure-math memoisation keyed by plain values (the curve's sizes), not a cache of the
    answer: `read.py` holds the answer's one cache."""
    del curve_bytes  # the cache key
    return {}


_NO_AR = Bracket(0, 0, 0.0)
_CELL_ROWS = 64  # cells (or figures) a replicate block holds: 64 x 400 floats, 100 KB a temporary


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
            why = [] if base and draft and verify else _absent(b, k, base, draft, verify)
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
                open_cells.append(_open_cell(b, k, base, draft, nbytes, why))
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
                lo, hi = _curve_position(ai, br.lo, point_at, model), _curve_position(ai, br.hi, point_at, model)
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
    columns = (c_base, c_draft, c_k, c_verify, c_lo, c_hi, c_frac, c_tau)
    plan = _as_plan(valid, columns, has_ar, notes, c_positions)
    plan.unstable.extend(_bools(_reads(plan, np.asarray(model.unstable, dtype=bool))))
    return plan, open_cells, gaps


def _absent(b: int, k: int, base: Value | None, draft: Value | None, verify: Value | None) -> list[str]:
    """A cell's missing step inputs, in words."""
    why = []
    if base is None:
        why.append(f"no plain decode step at batch {b}")
    if draft is None:
        why.append(f"no draft step at batch {b}")
    if verify is None:
        why.append(f"no verify compute at batch {b}, {k} draft tokens")
    return why


def _open_cell(b: int, k: int, base: Value | None, draft: Value | None, nbytes: int, why: list[str]) -> Cell:
    """A cell missing an input: what it has, and why it stays open."""
    draft_ms = draft.value * k if draft and draft.value is not None else None
    return Cell(b, k, base.value if base else None, draft_ms, None, None, nbytes, None, None, "; ".join(why))


def _curve_position(ai: ApproachInputs, point: int, point_at: dict[int, int], model: _Model) -> int:
    """The model position of the approach's allreduce curve point (placed the first time a cell reads it)."""
    found = point_at.get(point)
    if found is None:
        nbytes, value = ai.curve[point]
        found = point_at[point] = model.add(value, ALLREDUCE, "{}", _Size(nbytes))
    return found


def _as_plan(
    valid: list[tuple[int, int]],
    columns: tuple[list[int], list[int], list[int], list[int], list[int], list[int], list[float], list[int]],
    has_ar: bool,
    notes: list[str],
    positions: list[tuple[int, ...]],
) -> _Plan:
    """The valid cells' columns as the plan's arrays."""
    c_base, c_draft, c_k, c_verify, c_lo, c_hi, c_frac, c_tau = columns
    return _Plan(
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
        positions=positions,
    )


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
