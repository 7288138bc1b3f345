"""Is a difference real? The board's one home for comparison statistics (docs/statistics.md).

**The trial is the unit.** Samples inside one trial (graph replays, repeated calls) share the process,
the clocks and the GPU's state: they estimate that trial's figure (its median), nothing more. A side of
a comparison is a list of trials, each a list of samples or their `TrialSummary` (median, CV, count: what
a metric row stores with its samples); its figure is the mean of its trials' medians.
Between a side and the first (the reference) side, per metric point:

- the **ratio** of the two figures (other / reference) with a percentile interval at `Rule.confidence`,
  from draws of each side's figure (`_side_draws`):
  - 2 trials or more: the figure's posterior over trials, Student's t: log(figure) + (s / sqrt(m)) x
    t_(m-1), s the standard deviation of the trials' log medians (it carries the within-run noise too). A
    bootstrap that resamples 2-5 trials with replacement cannot show more spread than those few trials
    show, and calls identical configurations different far more often than its confidence says
    (bench/verdict_error_rates.py measures both);
  - 1 trial: only with a **known run-to-run spread** (`KnownSpread`: the campaign's earlier repeats of
    that metric on that runner and stack), and then the pair's interval is computed, not drawn
    (`_known_intervals`): the prediction form, log ratio +/- t_df x sqrt(sigma_a^2 + sigma_b^2), sigma^2 =
    log(1 + cv^2), df the spread's own degrees of freedom (exact when both sides read one estimate; else
    Welch-Satterthwaite's, a side of m trials contributing s^2 / m with m - 1); without one the side gives
    **no verdict**;
- a **Welch t-test** p-value over the trials' log medians (2 trials a side or more), else None;
- a **verdict**, against the campaign's minimum effect m (`Rule.min_effect`):
  **faster** / **slower** when the interval excludes 1 and the ratio is at least 1 + m or at most
  1 / (1 + m); **below_min_effect** when it excludes 1 with a smaller effect (a real difference too small
  to matter); **equivalent** when it holds 1 and lies inside (1 / (1 + m), 1 + m) (equivalence,
  TOST-style); **inconclusive** otherwise;
  **no_verdict** when a side has one trial and no known spread, and, with no ratio at all, when a trial of
  either side is **unstable**: its samples' CV over `Rule.unstable_cv` (`PairStats.unstable` says so);
- **trials_needed** for an inconclusive row: trials a side at which this rule decides (any verdict but
  inconclusive) with `Rule.power` whatever the true effect, at the observed run-to-run spread;
- each side's within-run and run-to-run **coefficients of variation**; over `Rule.unstable_cv` the side
  is **unstable** (pyperf warns about unstable benchmarks the same way).

Vectorized over every row of a comparison at once (8 trials x 200 points in one pass): the t draws of
sides of 2 trials or more come from a pool seeded by (seed, df), each side reading it at an offset of its
own column; the known-spread pairs are closed-form: a row's figures depend on its own samples alone, the
same on every page load.

Pure functions over numbers (numpy, scipy); no database, no web. `compare` is the one-pair call;
`compare_rows` the vectorized one; both answer with the same dataclasses. `trial_estimate`,
`trial_resamples` and `percentile_interval` are the same method for one side (the answer's cells).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict

import numpy as np

from app.protocol.metrics import MetricName


class _Scipy:
    """scipy.stats, imported at first use: half a second of import that every process importing the app (a server,
    its page worker, each CLI command) would otherwise pay before it needs an interval."""

    def __getattr__(self, name: str) -> Any:
        from scipy import stats

        return getattr(stats, name)


sps = _Scipy()


def ndtr(x: Any) -> Any:
    """The standard normal CDF (scipy.special.ndtr), imported at first use."""
    from scipy.special import ndtr as _ndtr

    return _ndtr(x)


@dataclass(frozen=True, slots=True)
class TrialSummary:
    """One trial's samples as every method here reads them: their median (the trial's figure), their CV (None
    under 2 samples or at a zero mean) and how many there were. Stored with each metric row as it is
    written (`Metric.samples_median`, `samples_cv`, `samples_n`: `summary_columns`), so a comparison of 8 x
    200 points need not decode 160,000 samples to read 1,600 trials."""

    median: float
    cv: float | None
    n: int


Trial = Sequence[float] | TrialSummary  # one trial: its samples, or their summary
Trials = Sequence[Trial]  # a side: its trials


class Finding(StrEnum):
    faster = "faster"
    slower = "slower"
    equivalent = "equivalent"
    below_min_effect = "below_min_effect"
    inconclusive = "inconclusive"
    no_verdict = "no_verdict"


# What the page and the messages say for each verdict (the API carries the values above).
FINDING_WORDS = {
    Finding.faster: "faster",
    Finding.slower: "slower",
    Finding.equivalent: "equivalent",
    Finding.below_min_effect: "different, below the minimum effect",
    Finding.inconclusive: "inconclusive",
    Finding.no_verdict: "no verdict",
}
# The verdicts that answer the question: a Settle stops on them.
DECIDED = frozenset((Finding.faster, Finding.slower, Finding.equivalent, Finding.below_min_effect))
MAX_TRIALS_NEEDED = 1000  # beyond this "trials needed" is None: fix the noise first
MAX_INTERVAL_SPAN = 1000.0  # an interval whose ends are further apart than this factor says nothing: not shown


@dataclass(frozen=True)
class Rule:
    """The decision rule; `confidence` and `min_effect` are per campaign (Campaign.stats_confidence,
    Campaign.stats_min_effect), the rest fixed defaults named in docs/statistics.md."""

    confidence: float = 0.95
    min_effect: float = 0.03
    unstable_cv: float = 0.10
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
class KnownSpread:
    """A run-to-run spread known from elsewhere: the coefficient of variation across trials and its
    degrees of freedom (trials it was measured over, less one per group they came in)."""

    cv: float
    df: int

    def __post_init__(self) -> None:
        if not (self.cv >= 0 and math.isfinite(self.cv)) or self.df < 1:
            raise ValueError(f"a known spread needs cv >= 0 and df >= 1, not {self.cv}, {self.df}")


@dataclass(frozen=True)
class Ratio:
    """Other side's figure over the reference side's; low / high None when no interval can be given."""

    value: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Side:
    trials: int
    samples: int
    value: float | None  # the mean of the trials' medians
    cv: float | None  # within-run: the mean of the trials' CVs (None: no trial with 2 samples)
    between_cv: float | None  # run-to-run: the CV of the trials' medians (None below 2 trials)
    unstable: bool
    worst_cv: float | None = None  # the widest within-run CV of its trials: over Rule.unstable_cv, no verdict


@dataclass(frozen=True)
class PairStats:
    """One side against the reference side (the ratio is theirs over the reference's)."""

    ratio: Ratio | None  # None: no samples on a side, or a reference figure of 0 or below
    p_value: float | None
    verdict: Finding
    trials_needed: int | None  # for "inconclusive" with a known spread on both sides
    known_spread: bool = False  # a one-trial side's interval used a KnownSpread
    # Why there is no verdict where the numbers alone would not say: "unstable: a trial's samples vary 73% (over
    # 10%)" (no ratio either: a trial too noisy to decide anything), or "no interval: ..." (an interval too wide
    # to mean anything, [0.000, 221632438781.093] once, is not shown).
    why_no_finding: str = ""


@dataclass(frozen=True)
class RowStats:
    sides: list[Side]
    pairs: list[PairStats]  # pairs[i]: side i + 1 against side 0


# Higher is better for rates (tok/s, GB/s) and for these counts; everything else measured here is a
# time or a cost (us, ms, s, a share of the step, processes left behind): lower is better.
_HIGHER_IS_BETTER = frozenset(
    (*MetricName.ACCEPT_LENGTH, *MetricName.ACCEPT_RATES, *MetricName.THROUGHPUT, MetricName.ALLREDUCE_CHECK_PASSED)
)


def lower_is_better(name: str, unit: str) -> bool:
    """The one place a metric's direction is named: "faster" means a ratio below 1 where this is True."""
    return not (name in _HIGHER_IS_BETTER or unit.strip().endswith("/s"))


def _cv(values: np.ndarray) -> float | None:
    mean = float(np.mean(values))
    if values.size < 2 or mean == 0:
        return None
    return float(np.std(values, ddof=1) / abs(mean))


def trial_value(samples: Sequence[float]) -> float | None:
    """One trial's figure: the median of its samples (None without any)."""
    return float(np.median(samples)) if len(samples) else None


def summarize(samples: Sequence[float] | None) -> TrialSummary | None:
    """The summary of one trial's samples (None without any): the same median and CV `_side_data` computes
    over stacked trials (tests/domain/test_statistics.py checks they agree)."""
    if not samples:
        return None
    values = np.asarray(samples, dtype=float)
    return TrialSummary(float(np.median(values)), _cv(values), int(values.size))


class SummaryColumns(TypedDict):
    """A metric row's columns that hold its samples' summary (app.models.Metric)."""

    samples_median: float | None
    samples_cv: float | None
    samples_n: int | None


def summary_columns(samples: Sequence[float] | None) -> SummaryColumns:
    """A metric row's summary columns for these samples (all None without samples), for every writer."""
    found = summarize(samples)
    if found is None:
        return SummaryColumns(samples_median=None, samples_cv=None, samples_n=None)
    return SummaryColumns(samples_median=found.median, samples_cv=found.cv, samples_n=found.n)


# --- The rule --------------------------------------------------------------------------------------------


def finding_of(ratio: float, low: float, high: float, lower_better: bool, min_effect: float) -> Finding:
    """The label for a ratio and its interval (the module's docstring). The minimum effect is symmetric on
    the log scale: a ratio of 1 + m or 1 / (1 + m) reaches it, so a 3% higher bandwidth and the 2.9% lower
    latency it comes from are the same effect."""
    bound = math.log1p(min_effect)
    if high < 1 or low > 1:
        if abs(math.log(ratio)) >= bound - 1e-12:
            better = ratio < 1 if lower_better else ratio > 1
            return Finding.faster if better else Finding.slower
        return Finding.below_min_effect
    if -bound < math.log(low) and math.log(high) < bound:
        return Finding.equivalent
    return Finding.inconclusive


@functools.lru_cache(maxsize=256)
def _difference_quantile(df: int, confidence: float) -> float:
    """The two-sided `confidence` quantile of T1 - T2, T iid Student t with df degrees of freedom: the
    interval's half-width in units of one side's standard error (Monte Carlo, seeded, once per df)."""
    p = 1 - (1 - confidence) / 2
    if df > 40:  # close to normal: the difference has variance 2 df / (df - 2)
        return float(sps.norm.ppf(p) * math.sqrt(2 * df / (df - 2)))
    rng = np.random.default_rng((7, df))
    d = rng.standard_t(df, size=200_000) - rng.standard_t(df, size=200_000)
    return float(np.quantile(np.abs(d), confidence))


def decide_probability(trials: int, spread_cv: float, effect: float | np.ndarray, rule: Rule = Rule()) -> np.ndarray:
    """P(the rule decides) with `trials` a side, each trial's figure of CV `spread_cv`, at a true relative
    effect `effect` (a number or an array of them): undecided only when the interval holds 1 (|d| <= h)
    and reaches past the minimum (|d| >= m - h), d ~ N(effect, 2 cv^2 / trials) on the log scale, h the
    interval's half-width (`_difference_quantile` standard errors of one side)."""
    d = np.log1p(np.asarray(effect, dtype=float))
    if trials < 2:
        return np.zeros_like(d)
    se = spread_cv / math.sqrt(trials)
    h = se * _difference_quantile(trials - 1, rule.confidence)
    sd = se * math.sqrt(2)
    lo, hi = max(0.0, math.log1p(rule.min_effect) - h), h
    if lo >= hi or sd == 0:
        return np.ones_like(d)
    undecided = (ndtr((hi - d) / sd) - ndtr((lo - d) / sd)) + (ndtr((-lo - d) / sd) - ndtr((-hi - d) / sd))
    return 1 - undecided


def trials_needed(spread_cv: float, rule: Rule = Rule()) -> int | None:
    """Trials a side at which the rule decides with `rule.power` whatever the true effect (the hardest is
    about half the minimum effect: the interval must then show either a difference or that none reaches the
    minimum), at a run-to-run spread of `spread_cv` (a trial's CV). None past MAX_TRIALS_NEEDED."""
    return _trials_needed(float(f"{spread_cv:.3g}"), rule.confidence, rule.min_effect, rule.power)


@functools.lru_cache(maxsize=4096)
def _trials_needed(spread_cv: float, confidence: float, min_effect: float, power: float) -> int | None:
    rule = Rule(confidence=confidence, min_effect=min_effect, power=power)
    effects = np.linspace(0, 2 * min_effect, 81)

    def worst(k: int) -> float:
        return float(decide_probability(k, spread_cv, effects, rule).min())

    if worst(MAX_TRIALS_NEEDED) < power:
        return None
    low, high = 2, MAX_TRIALS_NEEDED  # worst(k) grows with k: bisect for the first k that reaches the power
    while low < high:
        mid = (low + high) // 2
        if worst(mid) >= power:
            high = mid
        else:
            low = mid + 1
    return low


# --- One side's figure: the trial as the unit ------------------------------------------------------------


@dataclass(frozen=True)
class TrialEstimate:
    """One side's figure over its trials: `value` the mean of the trials' medians; `trials` how many;
    `between_cv` the run-to-run spread (CV of the trials' medians, None below 2 trials) and `within_cv`
    the mean within-trial CV (None where no trial has 2 samples)."""

    value: float
    trials: int
    between_cv: float | None
    within_cv: float | None


def trial_estimate(trials: Trials) -> TrialEstimate | None:
    """The side's estimate when the trial is the unit: None when no trial has a sample."""
    summaries = [t if isinstance(t, TrialSummary) else summarize(t) for t in trials]
    medians = [t.median for t in summaries if t is not None]
    if not medians:
        return None
    within = [t.cv for t in summaries if t is not None and t.cv is not None]
    return TrialEstimate(
        float(np.mean(medians)),
        len(medians),
        _cv(np.asarray(medians)) if len(medians) >= 2 else None,
        float(np.mean(within)) if within else None,
    )


def _bootstrap_medians(sorted_trial: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """n_resamples bootstrap medians of one sorted trial: the order statistic at floor(n U)."""
    n = sorted_trial.size
    if n == 1:
        return np.full(n_resamples, sorted_trial[0])
    k = (n + 1) // 2
    u = rng.beta(k, n - k + 1, size=n_resamples)
    med = sorted_trial[np.minimum((u * n).astype(np.intp), n - 1)]
    if n % 2 == 0:  # the next order statistic, given this one: u + (1 - u) x the least of n - k uniforms
        v = u + (1 - u) * rng.beta(1, n - k, size=n_resamples)
        med = 0.5 * (med + sorted_trial[np.minimum((v * n).astype(np.intp), n - 1)])
    return med


def trial_resamples(
    trials: Sequence[Sequence[float]],
    n_resamples: int,
    rng: np.random.Generator,
    *,
    between_cv: float | None = None,
    between_df: int | None = None,
) -> np.ndarray | None:
    """Draws of `trial_estimate(...).value`'s uncertainty, one side alone (`compare_rows` computes a pair with
    a known spread in closed form instead):

    - `between_cv` given (the run-to-run spread known from the campaign's earlier repeats of this metric on
      this runner and stack; `between_df` its degrees of freedom, None: taken as exact): each trial's
      samples are resampled (its bootstrap median) and scaled by exp(sigma x t_df) (a log-normal factor
      when exact), and the trials averaged: one trial then carries an honest interval;
    - else, 2 trials or more: the posterior of the mean over trials, log(value) + (s / sqrt(m)) x t_(m-1),
      s the standard deviation of the trials' log medians (carrying the within-run noise);
    - else (one trial, nothing known): that trial's bootstrap medians, the within-run noise alone: callers
      must not decide on them.

    None when no trial has a sample."""
    kept = [np.sort(np.asarray(t, dtype=float)) for t in trials if len(t)]
    if not kept:
        return None
    if between_cv is not None:
        sigma = math.sqrt(math.log1p(between_cv**2))
        shape = (len(kept), n_resamples)
        spread = rng.standard_t(between_df, size=shape) if between_df else rng.standard_normal(size=shape)
        per_trial = np.stack([_bootstrap_medians(t, n_resamples, rng) for t in kept]) * np.exp(sigma * spread)
        return per_trial.mean(axis=0)
    if len(kept) == 1:
        return _bootstrap_medians(kept[0], n_resamples, rng)
    medians = np.array([float(np.median(t)) for t in kept])
    if np.any(medians <= 0):  # no log scale: the same posterior on the values themselves
        scale = float(np.std(medians, ddof=1)) / math.sqrt(medians.size)
        return float(np.mean(medians)) + scale * rng.standard_t(medians.size - 1, size=n_resamples)
    s = float(np.std(np.log(medians), ddof=1)) / math.sqrt(medians.size)
    with np.errstate(over="ignore"):  # Student-t with 1-2 df: a far tail draw is +inf, a resample like any other
        return float(np.mean(medians)) * np.exp(s * rng.standard_t(medians.size - 1, size=n_resamples))


def percentile_interval(resamples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of a bootstrap distribution at `confidence` (outward-rounded ranks)."""
    b = resamples.size
    alpha = 1 - confidence
    k_low, k_high = math.floor(alpha / 2 * (b - 1)), math.ceil((1 - alpha / 2) * (b - 1))
    part = np.partition(resamples, [k_low, k_high])
    return float(part[k_low]), float(part[k_high])


# --- Rows: every side of every row in one pass -----------------------------------------------------------


def side(trials: Trials, rule: Rule = Rule()) -> Side:
    """One side's figures (see compare_rows for many)."""
    return compare_rows([[trials, trials]], lower_better=[True], rule=rule)[0].sides[0]


def compare(
    reference: Trials,
    other: Trials,
    *,
    lower_better: bool = True,
    rule: Rule = Rule(),
    known: tuple[KnownSpread | None, KnownSpread | None] = (None, None),
) -> tuple[Side, Side, PairStats]:
    """One pair: the reference side, the other side, and the other against the reference."""
    row = compare_rows([[reference, other]], lower_better=[lower_better], rule=rule, known=[list(known)])[0]
    return row.sides[0], row.sides[1], row.pairs[0]


@dataclass
class _SideData:
    trials: int
    samples: int
    medians: np.ndarray  # each trial's median
    within_cv: float | None
    worst_cv: float | None = None  # the widest of its trials' within-run CVs
    log_value: float = math.nan  # log of the side's figure (NaN: no trial, or a median <= 0)
    log_var: float = math.nan  # 2 trials or more: the variance of log_value, s^2 / m over the log medians


def compare_rows(
    rows: Sequence[Sequence[Trials]],
    *,
    lower_better: Sequence[bool],
    rule: Rule = Rule(),
    known: Sequence[Sequence[KnownSpread | None]] | None = None,
) -> list[RowStats]:
    """Every row's sides against its first side, in one vectorized pass. rows[r][c]: side c at point r, a
    list of trials (each a list of samples; 2 sides or more; a side may hold no trial); lower_better[r]:
    row r's direction; known[r][c]: the run-to-run spread a one-trial side may use (None: unknown)."""
    if len(lower_better) != len(rows):
        raise ValueError("one direction per row")
    if any(len(r) < 2 for r in rows):
        raise ValueError("a row compares at least two sides")
    data = _side_data(rows)
    known_of: list[list[KnownSpread | None]] = (
        [list(k) + [None] * (len(rows[r]) - len(k)) for r, k in enumerate(known)]
        if known is not None
        else [[None] * len(row) for row in rows]
    )
    sides = [[_side(d, rule) for d in row] for row in data]
    # Which sides can carry an interval: 2 trials or more, or one trial with a known spread.
    usable = {
        (r, c)
        for r, row in enumerate(data)
        for c, d in enumerate(row)
        if d.trials >= 2 or (d.trials == 1 and known_of[r][c] is not None)
    }
    wanted = {(r, c) for r, row in enumerate(data) for c in range(1, len(row)) if (r, 0) in usable and (r, c) in usable}
    # Both sides of 2 trials or more: draws of each side's t posterior; a one-trial side (its spread known): the
    # t interval of the prediction form, exact, computed (no draws).
    drawn = sorted((r, c) for r, c in wanted if data[r][0].trials >= 2 and data[r][c].trials >= 2)
    need = {key for pair in drawn for key in (pair, (pair[0], 0))}
    intervals = _intervals(_side_draws(data, need, rule), drawn, rule.confidence)
    intervals.update(_known_intervals(data, known_of, sorted(wanted.difference(drawn)), rule.confidence))
    p_values = _welch(data, [(r, c) for r, row in enumerate(data) for c in range(1, len(row))])
    out: list[RowStats] = []
    for r, row in enumerate(data):
        pairs: list[PairStats] = []
        for c in range(1, len(row)):
            pairs.append(
                _pair(
                    sides[r][0],
                    sides[r][c],
                    intervals.get((r, c)),
                    p_values.get((r, c)),
                    lower_better[r],
                    rule,
                    known_of[r],
                    c,
                )
            )
        out.append(RowStats(sides[r], pairs))
    return out


def _side_data(rows: Sequence[Sequence[Trials]]) -> list[list[_SideData]]:
    """Each trial's median and CV: a summary's as stored, samples' in one numpy pass per sample size over the
    stacked trials."""
    where: list[tuple[int, int]] = []  # each trial's side, in order
    sizes: list[int] = []  # each trial's sample count
    sampled: dict[int, list[tuple[int, Sequence[float]]]] = {}  # sample count -> (trial, its samples)
    summarized: list[tuple[int, TrialSummary]] = []
    for r, row in enumerate(rows):
        for c, trials in enumerate(row):
            for t in trials:
                if isinstance(t, TrialSummary):
                    summarized.append((len(where), t))
                    sizes.append(t.n)
                elif len(t):
                    sampled.setdefault(len(t), []).append((len(where), t))
                    sizes.append(len(t))
                else:
                    continue
                where.append((r, c))
    median_of = np.empty(len(where))
    cv_of = np.full(len(where), np.nan)
    for n, of_size in sampled.items():
        # One conversion for every trial of this size (not one numpy call per trial).
        at = [i for i, _ in of_size]
        stacked = np.array([t for _, t in of_size], dtype=float)
        median_of[at] = np.median(stacked, axis=1)
        if n >= 2:
            means = stacked.mean(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                cvs = stacked.std(axis=1, ddof=1) / np.abs(means)
            cv_of[at] = np.where(means != 0, cvs, np.nan)
    if summarized:
        at = [i for i, _ in summarized]
        median_of[at] = [t.median for _, t in summarized]
        cv_of[at] = [math.nan if t.cv is None else t.cv for _, t in summarized]
    grouped: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(where):
        grouped.setdefault(key, []).append(i)
    cvs_of = cv_of.tolist()
    medians_of = median_of.tolist()
    empty = _SideData(0, 0, np.empty(0), None)
    out = []
    for r, row in enumerate(rows):
        line = []
        for c in range(len(row)):
            members = grouped.get((r, c), [])
            if not members:
                line.append(empty)
            elif len(members) == 1:  # most compared columns are one trial: no numpy call per side
                (i,) = members
                cv, median = cvs_of[i], medians_of[i]
                log_value = math.log(median) if median > 0 else math.nan
                within = cv if cv == cv else None
                line.append(_SideData(1, sizes[i], median_of[i : i + 1], within, within, log_value))
            else:
                cvs = [cvs_of[i] for i in members if cvs_of[i] == cvs_of[i]]  # NaN: no spread within
                medians = median_of[members]
                log_value = log_var = math.nan
                if all(medians_of[i] > 0 for i in members):
                    log_value = math.log(float(medians.mean()))
                    log_var = float(np.var(np.log(medians), ddof=1)) / len(members)
                line.append(
                    _SideData(
                        len(members),
                        sum(sizes[i] for i in members),
                        medians,
                        sum(cvs) / len(cvs) if cvs else None,
                        max(cvs) if cvs else None,
                        log_value,
                        log_var,
                    )
                )
        out.append(line)
    return out


def _side(d: _SideData, rule: Rule) -> Side:
    if d.trials == 0:
        return Side(0, 0, None, None, None, False)
    if d.trials == 1:
        value, between = float(d.medians[0]), None
    else:
        value, between = float(d.medians.mean()), _cv(d.medians)
    unstable = (d.within_cv or 0) > rule.unstable_cv or (between or 0) > rule.unstable_cv
    return Side(d.trials, d.samples, value, d.within_cv, between, unstable, d.worst_cv)


def _read_at(pool: np.ndarray, columns: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """[side, resample]: the pool read at each side's own column offset (the reference column at 0), so two
    sides of one row never share a draw, and a row's draws depend on its own width alone. Each row is a
    contiguous window of the pool repeated twice (a copy, no modulo per draw)."""
    b = pool.size
    offsets = (columns * np.maximum(1, b // widths)) % b
    return np.lib.stride_tricks.sliding_window_view(np.concatenate([pool, pool]), b)[offsets]


@functools.lru_cache(maxsize=512)
def _t_pool(seed: int, b: int, df: int) -> np.ndarray:
    """b Student t draws with df degrees of freedom, stratified: one in each 1/b-quantile slice, shuffled. The
    same pool serves every page load and every row, so an unlucky plain sample would shift every interval
    the same way. Cached (read-only) across calls."""
    rng = np.random.default_rng((seed, 1, df))
    u = rng.permutation((np.arange(b) + rng.random(b)) / b)
    out = sps.t.ppf(u, df).astype(np.float32)
    out.flags.writeable = False
    return out


def _side_draws(
    data: list[list[_SideData]], need: set[tuple[int, int]], rule: Rule
) -> tuple[dict[tuple[int, int], int], np.ndarray]:
    """Draws of each needed side's figure (2 trials or more) on the log scale, log(mean of medians) +
    s / sqrt(m) x t_(m-1): (side -> row of the matrix, the [side, n_resamples] matrix)."""
    b = rule.n_resamples
    keys = sorted(need)
    at = {key: i for i, key in enumerate(keys)}
    out = np.empty((len(keys), b), dtype=np.float32)  # ample for interval ends to 3 decimals
    by_m: dict[int, list[tuple[int, int]]] = {}
    for key in keys:
        by_m.setdefault(data[key[0]][key[1]].trials, []).append(key)
    for m, members in by_m.items():
        medians = np.stack([data[r][c].medians for r, c in members])
        positive = np.all(medians > 0, axis=1)
        logs = np.log(np.where(medians > 0, medians, 1.0))
        centre = np.log(np.where(positive, medians.mean(axis=1), np.nan))
        scale = logs.std(axis=1, ddof=1) / math.sqrt(m)
        spread = _read_at(
            _t_pool(rule.seed, b, m - 1),
            np.array([c for _, c in members]),
            np.array([len(data[r]) for r, _ in members]),
        )
        out[[at[k] for k in members]] = centre[:, None] + scale[:, None] * spread
    return at, out


def _known_intervals(
    data: list[list[_SideData]],
    known: list[list[KnownSpread | None]],
    pairs: list[tuple[int, int]],
    confidence: float,
) -> dict[tuple[int, int], tuple[float, float]]:
    """The pairs with a one-trial side that uses a known run-to-run spread: the t interval of the log ratio
    (the prediction form for a new trial). Each side's log figure has a variance and its degrees of freedom:
    a one-trial side its known spread's (sigma^2 = log(1 + cv^2), the spread's df: the spread was estimated
    from trial medians, so it carries the within-run noise too), a side of m trials s^2 / m with m - 1 (s
    over its trials' log medians). Two one-trial sides reading the same estimate: (log b - log a) / (sigma
    sqrt 2) is exactly Student t with the estimate's df; otherwise Welch-Satterthwaite's df. The spread's own
    uncertainty is in the t quantile, computed, not drawn."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    kept, centre, variance, dof = [], [], [], []
    for r, c in pairs:
        a, b = data[r][0], data[r][c]
        if not (a.log_value == a.log_value and b.log_value == b.log_value):
            continue  # NaN: no log scale, no interval
        ka, kb = known[r][0], known[r][c]
        va, fa = (math.log1p(ka.cv**2), ka.df) if ka is not None and a.trials == 1 else (a.log_var, a.trials - 1)
        vb, fb = (math.log1p(kb.cv**2), kb.df) if kb is not None and b.trials == 1 else (b.log_var, b.trials - 1)
        v = va + vb
        if a.trials == 1 and b.trials == 1 and ka == kb:
            f = float(fa)  # one estimate for both sides: its error moves them together
        else:
            f = v * v / (va * va / fa + vb * vb / fb) if v > 0 else float(min(fa, fb))
        kept.append((r, c))
        centre.append(b.log_value - a.log_value)
        variance.append(v)
        dof.append(f)
    if kept:
        half = sps.t.ppf(1 - (1 - confidence) / 2, np.array(dof)) * np.sqrt(np.array(variance))
        low, high = np.exp(np.array(centre) - half), np.exp(np.array(centre) + half)
        out.update(zip(kept, zip(low.tolist(), high.tolist(), strict=True), strict=True))
    return out


def _intervals(
    draws: tuple[dict[tuple[int, int], int], np.ndarray], pairs: list[tuple[int, int]], confidence: float
) -> dict[tuple[int, int], tuple[float, float]]:
    """Percentile interval of other / reference over the paired draws (one partition for every pair)."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    if not pairs:
        return out
    at, matrix = draws
    log_ratio = matrix[[at[(r, c)] for r, c in pairs]] - matrix[[at[(r, 0)] for r, _ in pairs]]
    b = log_ratio.shape[1]
    alpha = 1 - confidence
    k_low, k_high = math.floor(alpha / 2 * (b - 1)), math.ceil((1 - alpha / 2) * (b - 1))
    ok = np.isfinite(log_ratio)
    finite = ok.all(axis=1)
    ends = np.exp(np.partition(np.where(ok, log_ratio, 0.0), [k_low, k_high], axis=1)[:, [k_low, k_high]])
    for j, key in enumerate(pairs):
        if finite[j]:
            out[key] = (float(ends[j, 0]), float(ends[j, 1]))
    return out


def _welch(data: list[list[_SideData]], pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Welch's two-sided t-test over the trials' log medians, one vectorized call per pair of trial counts."""
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r, c in pairs:
        a, b = data[r][0], data[r][c]
        if a.trials >= 2 and b.trials >= 2 and np.all(a.medians > 0) and np.all(b.medians > 0):
            groups.setdefault((a.trials, b.trials), []).append((r, c))
    out: dict[tuple[int, int], float] = {}
    for members in groups.values():
        x = np.log(np.stack([data[r][0].medians for r, _ in members]))
        y = np.log(np.stack([data[r][c].medians for r, c in members]))
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.atleast_1d(sps.ttest_ind(x, y, axis=1, equal_var=False).pvalue)
        for key, value in zip(members, p, strict=True):
            if math.isfinite(value):
                out[key] = float(value)
    return out


def _spread_cv(s: Side, known: KnownSpread | None) -> float | None:
    """A side's run-to-run CV of one trial's figure: its own (2 trials or more), else the known one."""
    if s.trials >= 2:
        return s.between_cv
    return known.cv if known is not None else None


def _pair(
    reference: Side,
    other: Side,
    interval: tuple[float, float] | None,
    p_value: float | None,
    lower_better: bool,
    rule: Rule,
    known: list[KnownSpread | None],
    c: int,
) -> PairStats:
    if reference.value is None or other.value is None or reference.value <= 0:
        return PairStats(None, p_value, Finding.no_verdict, None)
    worst = max((s.worst_cv for s in (reference, other) if s.worst_cv is not None), default=None)
    if worst is not None and worst > rule.unstable_cv:
        why = f"unstable: a trial's samples vary {worst:.0%} (over {rule.unstable_cv:.0%}), too noisy to decide"
        return PairStats(None, None, Finding.no_verdict, None, why_no_finding=why)
    value = other.value / reference.value
    used_known = (reference.trials == 1 and known[0] is not None) or (other.trials == 1 and known[c] is not None)
    if interval is None:
        return PairStats(Ratio(value, None, None), p_value, Finding.no_verdict, None, used_known)
    low, high = interval
    if not (math.isfinite(low) and math.isfinite(high) and low > 0 and high / low <= MAX_INTERVAL_SPAN):
        why = (
            f"no interval: at {rule.confidence:.0%} it would span more than a factor of {MAX_INTERVAL_SPAN:g} "
            "(the spread behind it rests on too few trials); repeat the trials"
        )
        return PairStats(Ratio(value, None, None), p_value, Finding.no_verdict, None, used_known, why)
    verdict = finding_of(value, *interval, lower_better, rule.min_effect)
    needed = None
    if verdict == Finding.inconclusive:
        first, second = _spread_cv(reference, known[0]), _spread_cv(other, known[c])
        if first is not None and second is not None:
            needed = trials_needed(math.sqrt((first**2 + second**2) / 2), rule)
    return PairStats(Ratio(value, *interval), p_value, verdict, needed, used_known)


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
_RESAMPLE_ROWS = 64  # rows of uniforms drawn at a time by trial_resamples_many (64 x 400 doubles: 200 KB)


@functools.lru_cache(maxsize=64)
def _rank_bins(cum_bytes: bytes) -> np.ndarray:
    """For `_BINS` equal slices of [0, 1): the rank a uniform in the slice draws, or -1 where the slice straddles
    a step of the cumulative distribution (there the rank is looked up exactly). int32: the gathers move half the
    bytes of intp."""
    cum = np.frombuffer(cum_bytes)
    edges = np.arange(_BINS + 1) / _BINS
    at = np.minimum(np.searchsorted(cum, edges, side="right"), cum.size - 1)
    return np.where(at[:-1] != at[1:], -1, at[:-1]).astype(np.int32)


def _draw_ranks(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    """searchsorted(cum, u, "right") (clipped), through a table: exact, one gather for all but the few uniforms
    that land in a slice holding a step. int32 ranks. `u` is scaled in place (by 2^14: exact, and undone where a
    rank is looked up), so no second array of its size is made."""
    table = _rank_bins(cum.tobytes())
    np.multiply(u, _BINS, out=u)
    pick = table[u.astype(np.int32)]
    fix = pick < 0
    if fix.any():
        pick[fix] = np.minimum(np.searchsorted(cum, u[fix] / _BINS, side="right"), cum.size - 1)
    return pick


def trial_resamples_many(
    figures: Sequence[Sequence[Sequence[float]]], n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """`trial_resamples` for many figures at once (each a list of trials, each its samples): a
    [figure, resample] array with the same distribution (one trial: its resampled medians, the within-run
    noise alone; 2 or more: the t posterior over the trials' medians), vectorized over every figure and
    trial of one sample count. The answer's
    grid resamples some thousand figures this way. Figures without a sample give NaN rows.

    The random stream is drawn in one order whatever is kept of it (every trial's uniforms per sample count,
    then the t draws per trial count), so a seed gives the same draws however the work below is arranged."""
    sets = [[t for t in f if len(t)] for f in figures]
    by_n: dict[int, list[tuple[int, int]]] = {}
    for fi, trials in enumerate(sets):
        for ti, t in enumerate(trials):
            by_n.setdefault(len(t), []).append((fi, ti))
    out = np.empty((len(sets), n_resamples))
    empty = [fi for fi, trials in enumerate(sets) if not trials]
    out[empty] = np.nan
    # One trial: its resampled medians are the figure's, written straight into `out`. A figure of 2 trials or
    # more reads only its trials' medians (below), but their uniforms are drawn all the same (the stream).
    for n, where in by_n.items():
        figure_of = np.fromiter((fi for fi, _ti in where), dtype=np.intp, count=len(where))
        single = np.fromiter((len(sets[fi]) == 1 for fi, _ti in where), dtype=bool, count=len(where))
        values = np.sort(np.array([sets[fi][ti] for fi, ti in where], dtype=float), axis=1)  # [trial, n], sorted
        if n == 1:
            out[figure_of[single]] = values[single]
            continue
        cum, lo, hi = _median_rank_table(n)
        if not single.any():
            for start in range(0, len(where), _RESAMPLE_ROWS):  # the stream: these trials' uniforms, never read
                rng.random((min(_RESAMPLE_ROWS, len(where) - start), n_resamples))
            continue
        # Each trial's possible bootstrap medians (one per (lo, hi) rank pair), then the drawn ones: the same
        # numbers as averaging the two drawn order statistics, with one gather instead of four.
        candidates = 0.5 * (values[:, lo] + values[:, hi])  # [trial, pair]
        index: type[np.signedinteger] = np.int32 if len(where) * lo.size < 2**31 else np.intp
        flat = candidates.ravel()
        in_order = single.all() and figure_of.size == len(sets) and (figure_of == np.arange(len(sets))).all()
        # In blocks of rows: the uniforms of one call are those of consecutive calls (the stream, so the seed, is
        # unchanged), and block-sized scratch is reused by the allocator where whole [trial, resample] arrays
        # were fresh pages each call (some 2,000 page faults per answer).
        for start in range(0, len(where), _RESAMPLE_ROWS):
            stop = min(start + _RESAMPLE_ROWS, len(where))
            pick = _draw_ranks(cum, rng.random((stop - start, n_resamples))).astype(index, copy=False)
            pick += np.arange(start * lo.size, stop * lo.size, lo.size, dtype=index)[:, None]
            if in_order:
                np.take(flat, pick, out=out[start:stop], mode="clip")  # every figure one trial of n samples
            else:
                keep = single[start:stop]
                out[figure_of[start:stop][keep]] = np.take(flat, pick[keep], mode="clip")
    by_m: dict[int, list[int]] = {}
    for fi, trials in enumerate(sets):
        if len(trials) >= 2:
            by_m.setdefault(len(trials), []).append(fi)
    for m, group in by_m.items():
        # 2 trials or more: trial_resamples' posterior of the mean over trials (a t over the trials' log
        # medians), the same method as the comparisons' (a bootstrap over 2-3 trials is too narrow).
        point = np.array([[float(np.median(sets[fi][ti])) for ti in range(m)] for fi in group])  # [fig, m]
        draws = rng.standard_t(m - 1, size=(len(group), n_resamples))
        if np.all(point > 0):
            s = np.std(np.log(point), axis=1, ddof=1)[:, None] / math.sqrt(m)
            with np.errstate(over="ignore"):  # as in trial_resamples: a far t tail is +inf
                out[group] = point.mean(axis=1)[:, None] * np.exp(s * draws)
        else:
            s = np.std(point, axis=1, ddof=1)[:, None] / math.sqrt(m)
            out[group] = point.mean(axis=1)[:, None] + s * draws
    return out


def percentile_intervals(resamples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """`percentile_interval` of each row of a [figure, resample] array (the same ranks)."""
    b = resamples.shape[-1]
    alpha = 1 - confidence
    k_low, k_high = math.floor(alpha / 2 * (b - 1)), math.ceil((1 - alpha / 2) * (b - 1))
    # A full sort, not np.partition with two ranks: the same order statistics (NaN last in both), and numpy's
    # vectorized sort of short rows is several times faster than its per-row introselect.
    part = np.sort(resamples, axis=-1)
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
