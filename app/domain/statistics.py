"""Is a difference real? The board's one home for comparison statistics (docs/statistics.md).

Per metric point, each side (a trial, or an approach's repeated trials) is a set of samples: the raw
samples its metric lines carry, else their values. Between a side and the first (the reference) side:

- the **ratio of medians** (other / reference) with a bootstrap percentile interval at `Rule.confidence`;
- a **Mann-Whitney U** two-sided p-value (`scipy.stats.mannwhitneyu`) when each side has at least
  `Rule.min_mwu_samples` samples (Google Benchmark's U test asks for about 9 repetitions), else None;
- a **verdict**: "faster" / "slower" when the interval excludes 1 and the effect |ratio - 1| is at least
  `Rule.min_effect` (asv's rule: a change is called only when its interval allows it and it is larger
  than a threshold), else "indistinguishable" with **samples_needed**: how many samples a side would
  need to resolve an effect of `min_effect` at the observed spread (80% power, the medians' efficiency);
- each side's **coefficient of variation**; over `Rule.unstable_cv` the side is **unstable** (pyperf
  warns about unstable benchmarks the same way).

The bootstrap is vectorized over every sample set of a comparison at once (8 trials x 200 points in one
pass). Resampling n values with replacement and taking the median is the same, in distribution, as
taking the k-th order statistic of the sorted values at floor(n U_(k)), U_(k) ~ Beta(k, n - k + 1) the
k-th of n uniform order statistics: so a resample's median costs O(1), not O(n), and the intervals match
`scipy.stats.bootstrap(..., method="percentile")`'s within Monte Carlo error (tests/domain/test_statistics.py
checks it). Seeded: the same samples give the same interval on every page load.

Pure functions over numbers (numpy, scipy); no database, no web. `compare` is the one-pair call;
`compare_rows` the vectorized one; both answer with the same dataclasses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats as sps

from runners.recipes.metric import MetricName


class Verdict(StrEnum):
    faster = "faster"
    slower = "slower"
    indistinguishable = "indistinguishable"


@dataclass(frozen=True)
class Rule:
    """The decision rule; `confidence` and `min_effect` are per campaign (Campaign.stats_confidence,
    Campaign.stats_min_effect), the rest fixed defaults named in docs/statistics.md."""

    confidence: float = 0.95
    min_effect: float = 0.03
    unstable_cv: float = 0.10
    min_mwu_samples: int = 6
    power: float = 0.80
    n_resamples: int = 1000
    seed: int = 20261201

    def __post_init__(self) -> None:
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence must be in [0.5, 1), not {self.confidence}")
        if not 0 < self.min_effect < 1:
            raise ValueError(f"min_effect must be in (0, 1), not {self.min_effect}")
        if not 10 <= self.n_resamples <= 100_000:
            raise ValueError(f"n_resamples must be in [10, 100000], not {self.n_resamples}")


@dataclass(frozen=True)
class Ratio:
    """Other side's median over the reference side's; low / high None when a side has one sample."""

    value: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Side:
    n: int
    median: float | None
    cv: float | None  # standard deviation (ddof 1) over |mean|; None below 2 samples or at mean 0
    unstable: bool


@dataclass(frozen=True)
class PairStats:
    """One side against the reference side (the ratio is theirs over the reference's)."""

    ratio: Ratio | None  # None: no samples on a side, or a reference median of 0 or below
    p_value: float | None
    verdict: Verdict
    samples_needed: int | None  # only for "indistinguishable" with a known spread on both sides


@dataclass(frozen=True)
class RowStats:
    sides: list[Side]
    pairs: list[PairStats]  # pairs[i]: side i + 1 against side 0


# Higher is better for rates (tok/s, GB/s) and for these counts; everything else measured here is a
# time or a cost (us, ms, s, a share of the step, processes left behind): lower is better.
_HIGHER_IS_BETTER = frozenset((*MetricName.ACCEPT_LENGTH, *MetricName.THROUGHPUT, MetricName.ALLREDUCE_CHECK_PASSED))


def lower_is_better(name: str, unit: str) -> bool:
    """The one place a metric's direction is named: "faster" means a ratio below 1 where this is True."""
    return not (name in _HIGHER_IS_BETTER or unit.strip().endswith("/s"))


def side(samples: Sequence[float], rule: Rule = Rule()) -> Side:
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        return Side(0, None, None, False)
    cv = _cv(values)
    return Side(int(values.size), float(np.median(values)), cv, cv is not None and cv > rule.unstable_cv)


def _cv(values: np.ndarray) -> float | None:
    mean = float(np.mean(values))
    if values.size < 2 or mean == 0:
        return None
    return float(np.std(values, ddof=1) / abs(mean))


@functools.lru_cache(maxsize=64)
def _z(confidence: float, power: float) -> float:
    return float(sps.norm.ppf(1 - (1 - confidence) / 2) + sps.norm.ppf(power))


def samples_needed(cv_reference: float, cv_other: float, rule: Rule = Rule()) -> int:
    """Samples per side to tell medians `rule.min_effect` apart (two-sided, at `rule.confidence`, with
    `rule.power`), at these coefficients of variation. The median's variance is pi/2 times the mean's
    for normal noise, hence the factor."""
    z = _z(rule.confidence, rule.power)
    need = (math.pi / 2) * (z / rule.min_effect) ** 2 * (cv_reference**2 + cv_other**2)
    return max(2, math.ceil(need))


def compare(
    reference: Sequence[float], other: Sequence[float], *, lower_better: bool = True, rule: Rule = Rule()
) -> tuple[Side, Side, PairStats]:
    """One pair: the reference side, the other side, and the other against the reference."""
    row = compare_rows([[reference, other]], lower_better=[lower_better], rule=rule)[0]
    return row.sides[0], row.sides[1], row.pairs[0]


def compare_rows(
    rows: Sequence[Sequence[Sequence[float]]], *, lower_better: Sequence[bool], rule: Rule = Rule()
) -> list[RowStats]:
    """Every row's sides against its first side, in one vectorized pass. rows[r][c]: the samples of side
    c at point r (2 sides or more; a side may be empty); lower_better[r]: row r's direction."""
    if len(lower_better) != len(rows):
        raise ValueError("one direction per row")
    if any(len(r) < 2 for r in rows):
        raise ValueError("a row compares at least two sides")
    sets = _sorted([[np.asarray(s, dtype=float) for s in row] for row in rows])
    boot = _median_resamples(sets, rule.n_resamples, rule.seed)
    alpha = 1 - rule.confidence
    pair_index = [(r, c) for r, row in enumerate(sets) for c in range(1, len(row))]
    intervals = _intervals(sets, boot, pair_index, alpha)
    p_values = _mann_whitney(sets, pair_index, rule.min_mwu_samples)
    every_side = _sides(sets, rule)
    out: list[RowStats] = []
    at = 0
    for r, row in enumerate(sets):
        sides = every_side[r]
        pairs: list[PairStats] = []
        for c in range(1, len(row)):
            ratio = _ratio(sides[0], sides[c], intervals[at])
            pairs.append(_pair(ratio, p_values[at], sides[0], sides[c], lower_better[r], rule))
            at += 1
        out.append(RowStats(sides, pairs))
    return out


def _sorted(sets: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Each set sorted: one sort per sample size over the stacked sets (each set a view of its row)."""
    by_size: dict[int, list[tuple[int, int]]] = {}
    for r, row in enumerate(sets):
        for c, s in enumerate(row):
            by_size.setdefault(int(s.size), []).append((r, c))
    out = [list(row) for row in sets]
    for members in by_size.values():
        stacked = np.sort(np.stack([sets[r][c] for r, c in members]), axis=1)
        for i, (r, c) in enumerate(members):
            out[r][c] = stacked[i]
    return out


def _sides(sets: list[list[np.ndarray]], rule: Rule) -> list[list[Side]]:
    """side() of every set, vectorized over the sets of one size (the page's hot path)."""
    out: list[list[Side | None]] = [[None] * len(row) for row in sets]
    by_size: dict[int, list[tuple[int, int]]] = {}
    for r, row in enumerate(sets):
        for c, s in enumerate(row):
            by_size.setdefault(int(s.size), []).append((r, c))
    for n, members in by_size.items():
        if n < 2:  # no spread: the one value is the median (most compared figures are single values)
            for r, c in members:
                out[r][c] = Side(n, float(sets[r][c][0]), None, False) if n else Side(0, None, None, False)
            continue
        data = np.stack([sets[r][c] for r, c in members])  # each row sorted
        medians = 0.5 * (data[:, (n - 1) // 2] + data[:, n // 2])
        means = data.mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cvs = data.std(axis=1, ddof=1) / np.abs(means)
        for i, (r, c) in enumerate(members):
            cv = float(cvs[i]) if means[i] != 0 else None
            out[r][c] = Side(n, float(medians[i]), cv, cv is not None and cv > rule.unstable_cv)
    return out  # type: ignore[return-value]


def _median_resamples(sets: list[list[np.ndarray]], n_resamples: int, seed: int) -> dict:
    """(row, side) -> n_resamples bootstrap medians, for every set of 2 samples or more.

    Sets of one size share one pool of order-statistic draws (one column gather for all of them), seeded by
    (seed, size): a row's draws depend on its own sizes and width, never on the other rows compared with it
    (the replay report computes its pairs in one call, and gets each pair's figures as alone). Each side's
    medians are then rolled by an offset of its own (side c by c x n_resamples / sides), so the two medians
    of a ratio never come from the same draw (their resamples stay independent, as in a two-sample
    bootstrap)."""
    by_size: dict[int, list[tuple[int, int]]] = {}
    for r, row in enumerate(sets):
        for c, s in enumerate(row):
            if s.size >= 2:
                by_size.setdefault(int(s.size), []).append((r, c))
    out: dict[tuple[int, int], np.ndarray] = {}
    for n, members in by_size.items():
        k = (n + 1) // 2  # the (lower) median's rank, 1-based
        rng = np.random.default_rng((seed, n))
        u = rng.beta(k, n - k + 1, size=n_resamples)
        lo = np.minimum((u * n).astype(np.intp), n - 1)
        data = np.stack([sets[r][c] for r, c in members])
        medians = data[:, lo]
        if n % 2 == 0:  # the next order statistic, given this one: u + (1 - u) x the least of n - k uniforms
            v = u + (1 - u) * rng.beta(1, n - k, size=n_resamples)
            medians = 0.5 * (medians + data[:, np.minimum((v * n).astype(np.intp), n - 1)])
        rolled = [i for i, (_, c) in enumerate(members) if c]  # the reference sides (c = 0) keep the pool's order
        if rolled:
            offsets = np.array([members[i][1] * max(1, n_resamples // len(sets[members[i][0]])) for i in rolled])
            take = (np.arange(n_resamples)[None, :] + offsets[:, None]) % n_resamples
            medians[rolled] = np.take_along_axis(medians[rolled], take, axis=1)
        for i, key in enumerate(members):
            out[key] = medians[i]
    return out


def _intervals(
    sets: list[list[np.ndarray]], boot: dict, pairs: list[tuple[int, int]], alpha: float
) -> list[tuple[float, float] | None]:
    """Percentile interval of other / reference over the paired resamples (None where a side has < 2)."""
    usable = [i for i, (r, c) in enumerate(pairs) if (r, 0) in boot and (r, c) in boot]
    out: list[tuple[float, float] | None] = [None] * len(pairs)
    if not usable:
        return out
    reference = np.stack([boot[(pairs[i][0], 0)] for i in usable])
    other = np.stack([boot[pairs[i]] for i in usable])
    b = reference.shape[1]
    # The percentile interval's ends as order statistics of the resampled ratios (outward-rounded ranks):
    # one partition, where np.quantile would interpolate between four.
    k_low, k_high = math.floor(alpha / 2 * (b - 1)), math.ceil((1 - alpha / 2) * (b - 1))
    with np.errstate(divide="ignore", invalid="ignore"):  # a reference median of 0: no interval (below)
        ratios = np.partition(other / reference, [k_low, k_high], axis=1)
    for j, i in enumerate(usable):
        low, high = float(ratios[j, k_low]), float(ratios[j, k_high])
        if np.all(reference[j] > 0) and math.isfinite(low) and math.isfinite(high):
            out[i] = (low, high)
    return out


def _mann_whitney(sets: list[list[np.ndarray]], pairs: list[tuple[int, int]], minimum: int) -> list[float | None]:
    """Two-sided U-test p-values, one vectorized call per pair of sample sizes."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (r, c) in enumerate(pairs):
        a, b = sets[r][0], sets[r][c]
        if a.size >= minimum and b.size >= minimum:
            groups.setdefault((a.size, b.size), []).append(i)
    out: list[float | None] = [None] * len(pairs)
    for members in groups.values():
        x = np.stack([sets[pairs[i][0]][0] for i in members])
        y = np.stack([sets[pairs[i][0]][pairs[i][1]] for i in members])
        p = np.atleast_1d(sps.mannwhitneyu(x, y, alternative="two-sided", axis=1).pvalue)
        for i, value in zip(members, p, strict=True):
            out[i] = float(value) if math.isfinite(value) else None
    return out


def _ratio(reference: Side, other: Side, interval: tuple[float, float] | None) -> Ratio | None:
    if reference.median is None or other.median is None or reference.median <= 0:
        return None
    value = other.median / reference.median
    return Ratio(value, *interval) if interval is not None else Ratio(value, None, None)


def _pair(
    ratio: Ratio | None, p_value: float | None, reference: Side, other: Side, lower_better: bool, rule: Rule
) -> PairStats:
    if ratio is not None and ratio.low is not None and ratio.high is not None:
        excludes_one = ratio.high < 1 or ratio.low > 1
        if excludes_one and abs(ratio.value - 1) >= rule.min_effect:
            better = ratio.value < 1 if lower_better else ratio.value > 1
            return PairStats(ratio, p_value, Verdict.faster if better else Verdict.slower, None)
    needed = None
    if reference.cv is not None and other.cv is not None:
        needed = samples_needed(reference.cv, other.cv, rule)
    return PairStats(ratio, p_value, Verdict.indistinguishable, needed)


# --- The trial as the unit (issue 34; the answer of issue 33 uses the same code) ---------------------------


@dataclass(frozen=True)
class TrialEstimate:
    """One side's figure over its trials: `value` the mean of the trials' medians; `trials` how many;
    `between_cv` the run-to-run spread (CV of the trials' medians, None below 2 trials) and `within_cv`
    the mean within-trial CV (None where no trial has 2 samples)."""

    value: float
    trials: int
    between_cv: float | None
    within_cv: float | None


def trial_estimate(trials: Sequence[Sequence[float]]) -> TrialEstimate | None:
    """The side's estimate when the trial is the unit: None when no trial has a sample."""
    medians = [float(np.median(t)) for t in trials if len(t)]
    if not medians:
        return None
    within = [c for c in (_cv(np.asarray(t, dtype=float)) for t in trials if len(t) >= 2) if c is not None]
    return TrialEstimate(
        float(np.mean(medians)),
        len(medians),
        _cv(np.asarray(medians)) if len(medians) >= 2 else None,
        float(np.mean(within)) if within else None,
    )


def trial_resamples(
    trials: Sequence[Sequence[float]], n_resamples: int, rng: np.random.Generator, *, between_cv: float | None = None
) -> np.ndarray | None:
    """The bootstrap distribution of `trial_estimate(...).value`, hierarchically: each resample draws the
    trials with replacement, then each drawn trial's samples with replacement, and averages the drawn
    trials' medians (the unit of replication is the trial; samples within one only estimate that trial).

    `between_cv`: a run-to-run spread known from elsewhere (the campaign's earlier repeats of this metric on
    this runner and stack). When given, each drawn trial is also scaled by a log-normal factor of that CV,
    which is what lets one trial a side carry a honest interval; without it, one trial's resamples carry the
    within-run noise alone and callers must not decide on them. None when no trial has a sample."""
    kept = [np.sort(np.asarray(t, dtype=float)) for t in trials if len(t)]
    if not kept:
        return None
    m = len(kept)
    pick = rng.integers(0, m, size=(n_resamples, m))
    # Each trial's resampled medians, once per trial (order statistics, as in _median_resamples).
    medians_of = []
    for t in kept:
        n = t.size
        if n == 1:
            medians_of.append(np.full(n_resamples, t[0]))
            continue
        k = (n + 1) // 2
        u = rng.beta(k, n - k + 1, size=n_resamples)
        med = t[np.minimum((u * n).astype(np.intp), n - 1)]
        if n % 2 == 0:
            v = u + (1 - u) * rng.beta(1, n - k, size=n_resamples)
            med = 0.5 * (med + t[np.minimum((v * n).astype(np.intp), n - 1)])
        medians_of.append(med)
    table = np.stack(medians_of)  # [trial, resample]
    per_trial = table[pick, np.arange(n_resamples)[:, None]]
    if between_cv:
        sigma = math.sqrt(math.log1p(between_cv**2))
        per_trial = per_trial * rng.lognormal(-(sigma**2) / 2, sigma, size=per_trial.shape)
    return per_trial.mean(axis=1)


def percentile_interval(resamples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of a bootstrap distribution at `confidence` (outward-rounded ranks)."""
    b = resamples.size
    alpha = 1 - confidence
    k_low, k_high = math.floor(alpha / 2 * (b - 1)), math.ceil((1 - alpha / 2) * (b - 1))
    part = np.partition(resamples, [k_low, k_high])
    return float(part[k_low]), float(part[k_high])


@functools.lru_cache(maxsize=64)
def _median_rank_table(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact distribution of a resampled median's order statistics for n sorted samples: (cumulative
    probabilities, lower index, upper index), the median being the mean of the two samples at those indices.

    Resampling n values with replacement and sorting the draws, where the k-th smallest lands is counted by
    binomials: C_j ~ Bin(n, (j + 1) / n) draws fall on samples <= j,
    so P(X_(k) <= j) = P(C_j >= k). For even n the median pairs X_(k) with X_(k+1): P(X_(k) = j, X_(k+1) = l)
    is P(C_j = k, C_(j-1) < k) times the chance that the smallest of the other n - k draws (uniform over the samples above
    j) is l, for l > j; and P(C_(j-1) < k, C_j >= k + 1) for l = j. The same distribution `trial_resamples`
    draws through Beta order statistics, tabulated once per n so a draw costs one uniform."""
    k = (n + 1) // 2
    j = np.arange(n)
    sf = sps.binom.sf(k - 1, n, (j + 1) / n)  # P(C_j >= k)
    if n % 2:
        pmf = np.diff(np.concatenate([[0.0], sf]))
        return np.cumsum(pmf), j, j
    lows, highs, probs = [], [], []
    at_k = sps.binom.pmf(k, n, (j + 1) / n)  # P(C_j = k)
    below = np.concatenate([[0.0], sps.binom.sf(k - 1, n, j[:-1] / n + 1 / n)])  # P(C_(j-1) >= k), 0 at j = 0
    for lo in range(n):
        # l == j: C_(j-1) <= k - 1 and C_j >= k + 1.
        same = sps.binom.sf(k, n, (lo + 1) / n) - (below[lo] - _both_at(n, k, lo))
        lows.append(lo)
        highs.append(lo)
        probs.append(max(same, 0.0))
        rest = n - lo - 1
        exactly = at_k[lo] - _both_at(n, k, lo)  # k draws on samples <= j, at least one of them on j
        if rest and exactly > 0:
            hi = np.arange(lo + 1, n)
            above = ((n - hi) / rest) ** (n - k) - ((n - hi - 1) / rest) ** (n - k)
            lows.extend([lo] * hi.size)
            highs.extend(hi.tolist())
            probs.extend((exactly * above).tolist())
    p = np.asarray(probs)
    return np.cumsum(p / p.sum()), np.asarray(lows), np.asarray(highs)


def _both_at(n: int, k: int, j: int) -> float:
    """P(C_(j-1) = k and C_j = k): k draws on samples below j and none on j."""
    if j == 0:
        return 0.0
    return float(sps.binom.pmf(k, n, j / n) * ((n - j - 1) / (n - j)) ** (n - k))


_BINS = 1 << 14


@functools.lru_cache(maxsize=64)
def _rank_bins(cum_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    """For `_BINS` equal slices of [0, 1): the rank a uniform in the slice draws, and whether the slice straddles
    a step of the cumulative distribution (there the rank is looked up exactly)."""
    cum = np.frombuffer(cum_bytes)
    edges = np.arange(_BINS + 1) / _BINS
    at = np.minimum(np.searchsorted(cum, edges, side="right"), cum.size - 1)
    return at[:-1], at[:-1] != at[1:]


def _draw_ranks(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    """searchsorted(cum, u, "right") (clipped), through a table: exact, one gather for all but the few uniforms
    that land in a slice holding a step."""
    first, straddles = _rank_bins(cum.tobytes())
    slot = (u * _BINS).astype(np.intp)
    pick = first[slot]
    fix = straddles[slot]
    if fix.any():
        pick[fix] = np.minimum(np.searchsorted(cum, u[fix], side="right"), cum.size - 1)
    return pick


def trial_resamples_many(
    figures: Sequence[Sequence[Sequence[float]]], n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """`trial_resamples` for many figures at once (each a list of trials, each its samples): a
    [figure, resample] array with the same hierarchical distribution (trials drawn with replacement, each
    drawn trial's median resampled), vectorized over every figure and trial of one sample count. The answer's
    grid resamples some thousand figures this way. Figures without a sample give NaN rows."""
    sets = [[t for t in f if len(t)] for f in figures]
    by_n: dict[int, list[tuple[int, int]]] = {}
    for fi, trials in enumerate(sets):
        for ti, t in enumerate(trials):
            by_n.setdefault(len(t), []).append((fi, ti))
    # Every trial's resampled medians, one row each, in one matrix; `row_of[(figure, trial)]` finds them.
    blocks: list[np.ndarray] = []
    row_of: dict[tuple[int, int], int] = {}
    for n, where in by_n.items():
        values = np.sort(np.array([sets[fi][ti] for fi, ti in where], dtype=float), axis=1)  # [trial, n], sorted
        if n == 1:
            draws = np.repeat(values, n_resamples, axis=1)
        else:
            cum, lo, hi = _median_rank_table(n)
            pick = _draw_ranks(cum, rng.random((len(where), n_resamples)))
            rows = np.arange(len(where))[:, None]
            draws = 0.5 * (values[rows, lo[pick]] + values[rows, hi[pick]])
        start = sum(len(b) for b in blocks)
        row_of.update((key, start + i) for i, key in enumerate(where))
        blocks.append(draws)
    out = np.full((len(sets), n_resamples), np.nan)
    if not blocks:
        return out
    medians = np.concatenate(blocks)  # [trial, R]
    by_m: dict[int, list[int]] = {}
    for fi, trials in enumerate(sets):
        if trials:
            by_m.setdefault(len(trials), []).append(fi)
    for m, group in by_m.items():
        rows_m = np.array([[row_of[(fi, ti)] for ti in range(m)] for fi in group])  # [fig, m]
        if m == 1:
            out[group] = medians[rows_m[:, 0]]  # one trial: its resampled medians are the figure's
            continue
        pick = rng.integers(0, m, size=(len(group), m, n_resamples))  # which trial each draw takes
        drawn = medians[np.take_along_axis(rows_m[:, :, None], pick, axis=1), np.arange(n_resamples)]
        out[group] = drawn.mean(axis=1)
    return out


def percentile_intervals(resamples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """`percentile_interval` of each row of a [figure, resample] array (the same ranks)."""
    b = resamples.shape[-1]
    alpha = 1 - confidence
    k_low, k_high = math.floor(alpha / 2 * (b - 1)), math.ceil((1 - alpha / 2) * (b - 1))
    part = np.partition(resamples, [k_low, k_high], axis=-1)
    return part[..., k_low], part[..., k_high]


def trial_estimates_many(figures: Sequence[Sequence[Sequence[float]]]) -> list[TrialEstimate | None]:
    """`trial_estimate` of many figures at once (each a list of trials, each its samples), the per-trial medians
    and CVs computed vectorized over every trial of one sample count (the answer reads some thousand figures)."""
    by_n: dict[int, list[tuple[int, int]]] = {}
    for fi, trials in enumerate(figures):
        for ti, t in enumerate(trials):
            if len(t):
                by_n.setdefault(len(t), []).append((fi, ti))
    medians: dict[tuple[int, int], float] = {}
    cvs: dict[tuple[int, int], float | None] = {}
    for n, where in by_n.items():
        values = np.array([figures[fi][ti] for fi, ti in where], dtype=float)  # [trial, n]
        med = np.median(values, axis=1).tolist()
        if n >= 2:
            mean = values.mean(axis=1)
            sd = values.std(axis=1, ddof=1)
            cv = np.where(mean != 0, sd / np.where(mean != 0, np.abs(mean), 1.0), np.nan).tolist()
        else:
            cv = [float("nan")] * len(where)
        for key, m, c in zip(where, med, cv, strict=True):
            medians[key] = m
            cvs[key] = None if c != c else c
    out: list[TrialEstimate | None] = []
    for fi, trials in enumerate(figures):
        keys = [(fi, ti) for ti, t in enumerate(trials) if len(t)]
        if not keys:
            out.append(None)
            continue
        meds = [medians[k] for k in keys]
        within = [c for k in keys if (c := cvs[k]) is not None]
        out.append(
            TrialEstimate(
                sum(meds) / len(meds),
                len(meds),
                _cv(np.asarray(meds)) if len(meds) >= 2 else None,
                sum(within) / len(within) if within else None,
            )
        )
    return out
