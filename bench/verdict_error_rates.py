"""How often the board's verdicts are wrong, and how often they find a real shift (issue 34, docs/statistics.md).

Simulated trials as the board gets them: each trial's true figure moves by the run-to-run spread (normal,
CV `between`), its samples around it by the within-run CV (`within`), 20 samples a trial, 1-10 trials a
side. For every cell `--reps` comparisons go through `statistics.compare_rows` in one call (the code the
compare page, Settle and the proposals run):

- **false**: identical configurations called faster or slower (the target: at most 5% in every cell);
  **excl. 1**: the interval excluded 1 at all (faster, slower or below the minimum effect);
- **power**: a true 5% shift (B 5% lower latency) called faster;
- **decided**: any verdict but inconclusive / no verdict, at the 5% shift.

One trial a side gives no verdict unless the run-to-run spread is known: the "1 + known" rows take it
from 4 earlier trials of the reference configuration (3 degrees of freedom, estimated afresh each time).
`--naive` adds, for contrast, the hierarchical bootstrap that resamples trials with replacement (then
samples within each), which the board does not use: it calls identical configurations different far too
often below about 10 trials a side.

    .venv/bin/python bench/verdict_error_rates.py              # the table in docs/statistics.md
    .venv/bin/python bench/verdict_error_rates.py --reps 400 --naive
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from app.domain import statistics as st  # noqa: E402

SAMPLES = 20


def simulate(
    rng: np.random.Generator, reps: int, trials: int, between: float, within: float, shift: float
) -> list[list[list[list[float]]]]:
    """reps rows of two sides (trials x SAMPLES each); side B's true figure is (1 - shift) x A's."""
    rows = []
    for _ in range(reps):
        row = []
        for centre in (10.0, 10.0 * (1 - shift)):
            figures = centre * (1 + between * rng.standard_normal(trials))
            row.append([list(f * (1 + within * rng.standard_normal(SAMPLES))) for f in figures])
        rows.append(row)
    return rows


def known_spreads(rng: np.random.Generator, reps: int, between: float, within: float) -> list[list[st.KnownSpread]]:
    """Each rep's spread as the campaign would hold it: the CV of 4 earlier trials' medians."""
    out = []
    for _ in range(reps):
        figures = 10.0 * (1 + between * rng.standard_normal(4))
        medians = [float(np.median(f * (1 + within * rng.standard_normal(SAMPLES)))) for f in figures]
        spread = st.KnownSpread(float(np.std(medians, ddof=1) / np.mean(medians)), 3)
        out.append([spread, spread])
    return out


def rates(rows, rule: st.Rule, known=None) -> tuple[float, float, float]:
    """(faster or slower, interval excluding 1, decided) fractions over the rows."""
    out = st.compare_rows(rows, lower_better=[True] * len(rows), rule=rule, known=known)
    verdicts = [r.pairs[0].verdict for r in out]
    called = sum(v in (st.Finding.faster, st.Finding.slower) for v in verdicts) / len(verdicts)
    excludes = sum(v in (st.Finding.faster, st.Finding.slower, st.Finding.below_min_effect) for v in verdicts)
    decided = sum(v in st.DECIDED for v in verdicts) / len(verdicts)
    return called, excludes / len(verdicts), decided


def naive_false_rate(rows, rule: st.Rule, rng: np.random.Generator) -> float:
    """The hierarchical bootstrap (trials, then samples) with the same labels: false faster / slower."""
    wrong = 0
    for a, b in rows:
        boot = []
        for side in (a, b):
            m = len(side)
            pick = rng.integers(0, m, size=(rule.n_resamples, m))
            medians = np.stack([np.median(rng.choice(t, size=(rule.n_resamples, len(t))), axis=1) for t in side])
            boot.append(medians[pick, np.arange(rule.n_resamples)[:, None]].mean(axis=1))
        ratio = float(np.mean([np.median(t) for t in b]) / np.mean([np.median(t) for t in a]))
        low, high = st.percentile_interval(boot[1] / boot[0], rule.confidence)
        wrong += st.finding_of(ratio, low, high, True, rule.min_effect) in (st.Finding.faster, st.Finding.slower)
    return wrong / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--between", type=float, nargs="+", default=[0.01, 0.02, 0.03, 0.05])
    parser.add_argument("--within", type=float, nargs="+", default=[0.001, 0.01, 0.03])
    parser.add_argument("--trials", type=int, nargs="+", default=list(range(1, 11)))
    parser.add_argument("--shift", type=float, default=0.05)
    parser.add_argument("--naive", action="store_true", help="also the trial-resampling bootstrap's false rate")
    args = parser.parse_args()
    rule = st.Rule()
    rng = np.random.default_rng(20261203)
    started = time.perf_counter()
    worst = 0.0
    print(f"{args.reps} comparisons a cell, {SAMPLES} samples a trial, minimum effect {rule.min_effect:.0%}, "
          f"{rule.confidence:.0%} intervals; power and decided at a true {args.shift:.0%} shift")  # fmt: skip
    for between in args.between:
        for within in args.within:
            print(f"\nrun-to-run {between:.1%}, within-run {within:.1%}")
            head = f"{'trials a side':>16} {'false':>7} {'excl. 1':>8} {'power':>7} {'decided':>8}"
            print(head + (f" {'naive false':>12}" if args.naive else ""))
            for m in args.trials:
                cases = [(str(m), None)] if m > 1 else [("1", None), ("1 + known", True)]
                for label, with_known in cases:
                    same = simulate(rng, args.reps, m, between, within, 0.0)
                    moved = simulate(rng, args.reps, m, between, within, args.shift)
                    known = known_spreads(rng, args.reps, between, within) if with_known else None
                    false, excludes, _ = rates(same, rule, known)
                    power, _, decided = rates(moved, rule, known)
                    worst = max(worst, false)
                    line = f"{label:>16} {false:7.1%} {excludes:8.1%} {power:7.1%} {decided:8.1%}"
                    if args.naive and not with_known and m > 1:
                        line += f" {naive_false_rate(same[: min(args.reps, 300)], rule, rng):12.1%}"
                    print(line)
    print(f"\nworst false faster/slower rate over every cell: {worst:.1%} (target <= 5%); "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    if math.isnan(worst):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
