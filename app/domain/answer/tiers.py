"""The grid's tiers and B*: which approach is chosen, which are indistinguishable from it, and each
approach's break-even batch against the others (grid.py: TierFinding). Pure.
"""

from __future__ import annotations

import operator

import numpy as np

from app.domain.answer.grid import ApproachAnswer, Cell, TierFinding
from app.domain.statistics import (
    Finding,
    finding_of,
    percentile_intervals,
)

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
) -> tuple[tuple[tuple[str, ...], ...], dict[str, TierFinding]]:
    """Best first: the highest break-even batch, then the headline figure. An approach with the same break-even
    batch as its tier leader shares the tier, unranked, unless the comparisons' rule (statistics.finding_of, at
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
    verdicts: dict[str, TierFinding] = {}
    for a in ranked:
        leader = tiers[-1][0] if tiers else None
        if leader is None or leader.break_even_batch != a.break_even_batch:
            tiers.append([a])
            continue
        found = _against(a, leader, cell_index, rows, confidence, min_effect, lower_better=not higher_better)
        if found is None or found.verdict in (Finding.faster, Finding.slower):
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
) -> TierFinding | None:
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
    verdict = finding_of(ratio, low, high, lower_better, min_effect)
    exact = rows is None  # every input exact: the ratio has no interval
    return TierFinding(leader.key, verdict, ratio, None if exact else low, None if exact else high)
