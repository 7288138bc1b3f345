"""Regressions and improvements over time: change points of each series (docs/statistics.md, "Change points").

A **series** is one approach's figure at one metric point on one runner, over its succeeded trials in the
order they ran: one value per trial (the median of the row's samples, else its value). Candidates come from
Apache Otava's E-divisive detection (`otava.analysis.compute_change_points`, Hunter's windowed variant
with a t-test between the segments, MAX_PVALUE over WINDOW points): Otava's own significance test decides
that a change exists. Each candidate is then placed between its neighbours (`_relocate`: the split with the
most posterior mass within NEAR points, the Bayes estimator for "within two points") and labelled by the board's own rule (statistics.compare_rows of the segments around it, one value per
trial, after over before): it is kept only when that interval excludes 1 and the effect is at least the
campaign's minimum, so a change point always says "faster" or "slower" with its ratio and interval; the
rule can drop a candidate, never add one. Derived series (DERIVED_FROM: bandwidths from the latency) are
not searched: their primary metric is. Each carries the stack difference between
the trials around it ("torch 2.10.0+cu128 -> 2.11.0").

Incremental: change_scan remembers, per (approach, runner), the newest trial the pass has read; `dirty`
finds the pairs with a newer succeeded trial in one query, and only those are recomputed (`recompute`).
The pass runs in the hub's background (app/services/changes.py), never on a page's request path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import delete, func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.domain import comparison, notifications, statistics
from app.models import (
    Approach,
    ApproachStatus,
    Campaign,
    ChangePoint,
    ChangeScan,
    Metric,
    NotificationEvent,
    Runner,
    Trial,
    TrialState,
    utcnow,
)
from app.protocol.metrics import MetricName


def compute_change_points(series: Any, **options: Any) -> Any:
    """Otava's `compute_change_points`, imported at first use: Otava imports scipy.stats, half a second that every
    process importing the app (a server, its page worker, a CLI command) would otherwise pay at start."""
    from otava.analysis import compute_change_points as otava_change_points  # type: ignore[import-untyped]

    return otava_change_points(series, **options)


MAX_PVALUE = 1e-3  # Otava's significance for a split (its own default); the false-alarm budget below
WINDOW = 100  # Otava's sliding window (its default is 50; a wider one finds more of the 5% shifts)
NEAR = 2  # a change point is placed to be within this many points of the shift (issue 34 item 3)
MIN_POINTS = 6  # a series shorter than this has no change points
MAX_SERIES_POINTS = 500  # the newest trials a series is read over (bounds the CPU per new trial)
# Figures derived from another metric's samples in the same trial (the allreduce bandwidths are the message
# size over the latency's median): their series is the primary's, re-expressed, so only the primary is
# searched and listed (issue 32 item 10: the bandwidths were listed twice, the latency not at all).
DERIVED_FROM = {
    MetricName.ALLREDUCE_ALGBW_GBPS: MetricName.ALLREDUCE_LATENCY_US,
    MetricName.ALLREDUCE_BUSBW_GBPS: MetricName.ALLREDUCE_LATENCY_US,
}


@dataclass(frozen=True)
class Detected:
    """A change point of a series of values: the index of the first value after it, and the segments'
    statistics (after against before)."""

    index: int
    stats: statistics.PairStats


def detect(
    values: Sequence[float], *, lower_better: bool = True, rule: statistics.Rule | None = None
) -> list[Detected]:
    """The change points of one series, in order (see the module's docstring)."""
    rule = rule or statistics.Rule()
    series = [float(v) for v in values]
    if len(series) < MIN_POINTS:
        return []
    # Otava slices the series with slice objects and wants a list (a numpy array makes its t-test fail).
    found, _ = compute_change_points(series, window_len=WINDOW, max_pvalue=MAX_PVALUE)
    indexes = sorted(int(c.index) for c in found if 0 < int(c.index) < len(series))
    bounds = [0, *indexes, len(series)]
    indexes = [_relocate(series, bounds[i], bounds[i + 2]) for i in range(len(indexes))]
    bounds = [0, *indexes, len(series)]
    # Otava's test above decided that each change exists; the relocation only places it and the board's
    # rule only labels it (or drops one under the minimum effect): neither can add a change point.
    segments = [
        [[[v] for v in series[bounds[i] : at]], [[v] for v in series[at : bounds[i + 2]]]]  # one value per trial
        for i, at in enumerate(indexes)
    ]
    if not segments:
        return []
    rows = statistics.compare_rows(segments, lower_better=[lower_better] * len(segments), rule=rule)
    return [
        Detected(at, row.pairs[0])
        for at, row in zip(indexes, rows, strict=True)
        if row.pairs[0].verdict in (statistics.Finding.faster, statistics.Finding.slower)
    ]


def _relocate(series: list[float], start: int, stop: int) -> int:
    """Where in series[start:stop] its one shift of the mean most likely lies within NEAR points: the split
    with the most posterior mass within +/- NEAR of it, the posterior over splits that of one shift (uniform
    over the splits, flat priors on the two means, 1 / sigma on the common noise: the mass of split k is
    proportional to (k (n - k))^(-1/2) RSS_k^(-(n - 2) / 2)). That is the Bayes estimator for "within NEAR
    points"; the maximum-likelihood split (the least RSS) lands there less often (bench/change_points.py
    --detection)."""
    segment = np.asarray(series[start:stop], dtype=float)
    n = segment.size
    if n <= 2:
        return start + 1
    centred = segment - segment.mean()
    split = np.arange(1, n)
    left, squares = np.cumsum(centred)[:-1], np.cumsum(centred**2)[:-1]
    right, right_squares = -left, float(np.sum(centred**2)) - squares
    rss = squares - left**2 / split + right_squares - right**2 / (n - split)
    floor = max(float(np.sum(centred**2)), 1e-300) * 1e-12  # identical sides: a finite log
    log_mass = -0.5 * np.log(split * (n - split)) - 0.5 * (n - 2) * np.log(np.maximum(rss, floor))
    mass = np.exp(log_mass - log_mass.max())
    near = np.convolve(mass, np.ones(2 * NEAR + 1), mode="same")  # near[i]: the mass of splits i - NEAR..i + NEAR
    # Windows that tie (a sharp step's whole mass on one split lies in 2 NEAR + 1 of them): its likeliest split.
    best = np.flatnonzero(near >= near.max() * (1 - 1e-9))
    return start + int(split[best[int(np.argmax(mass[best]))]])


@dataclass(frozen=True)
class SeriesPoint:
    trial_id: int
    value: float
    fingerprint: dict[str, Any] | None


@dataclass(frozen=True)
class Series:
    metric: str
    unit: str
    point: str
    lower_better: bool
    points: list[SeriesPoint]


def load_series(session: Session, approach_id: int, runner_id: int) -> list[Series]:
    """Every series of one approach on one runner: per metric name and point, one value per succeeded trial
    (derived figures, DERIVED_FROM, left out: their primary carries the change)."""
    trials = session.exec(
        select(Trial.id, Trial.fingerprint)
        .where(Trial.approach_id == approach_id, Trial.runner_id == runner_id, Trial.state == TrialState.succeeded)
        .order_by(col(Trial.id).desc())
        .limit(MAX_SERIES_POINTS)
    ).all()
    if not trials:
        return []
    fingerprint_of: dict[int, dict[str, Any] | None] = {
        t_id: dict(fp) if fp else None for t_id, fp in trials if t_id is not None
    }
    rows = session.execute(
        sa_select(*comparison.ROW_COLUMNS)  # type: ignore[call-overload]
        .where(Metric.approach_id == approach_id, col(Metric.trial_id).in_(list(fingerprint_of)))
        .order_by(Metric.trial_id, Metric.seq, Metric.index)
    ).all()
    by_name: dict[str, list[Any]] = {}
    for row in rows:
        if row.name not in DERIVED_FROM:
            by_name.setdefault(row.name, []).append(row)
    out = []
    for name in sorted(by_name):
        named = by_name[name]
        keyed = comparison.point_tags(named)
        latest: dict[str, dict[int, Any]] = {}
        for m in named:  # within a trial, a later row for the same point wins (as on the compare page)
            tags = m.tags or {}
            label = ", ".join(f"{k}={comparison._hashable(tags.get(k))}" for k in keyed)
            latest.setdefault(label, {})[m.trial_id] = m
        unit = next((m.unit for m in named if m.unit), "")
        for label in sorted(latest):
            per_trial = latest[label]
            points = [SeriesPoint(t_id, _value(per_trial[t_id]), fingerprint_of[t_id]) for t_id in sorted(per_trial)]
            out.append(Series(name, unit, label, statistics.lower_is_better(name, unit), points))
    return out


def _value(m: Any) -> float:
    """A row's one value per trial: its samples' median (stored with them, comparison.trial_of), else its value."""
    trial = comparison.trial_of(m)
    return trial.median if isinstance(trial, statistics.TrialSummary) else float(np.median(trial))


def dirty(session: Session, limit: int = 200) -> list[tuple[int, int, int]]:
    """(approach_id, runner_id, newest trial id) of the pairs with a succeeded trial the pass has not read."""
    newest = func.max(Trial.id)
    query = (
        sa_select(Trial.approach_id, Trial.runner_id, newest)  # type: ignore[call-overload]
        .outerjoin(
            ChangeScan, (ChangeScan.approach_id == Trial.approach_id) & (ChangeScan.runner_id == Trial.runner_id)
        )
        .where(Trial.state == TrialState.succeeded, col(Trial.runner_id).is_not(None))
        .group_by(Trial.approach_id, Trial.runner_id, ChangeScan.last_trial_id)
        .having(newest > func.coalesce(ChangeScan.last_trial_id, 0))
        .order_by(newest)
        .limit(limit)
    )
    return [(int(a), int(r), int(t)) for a, r, t in session.execute(query).all()]


def recompute(session: Session, approach_id: int, runner_id: int, newest_trial_id: int) -> list[ChangePoint]:
    """Recompute the change points of one approach's series on one runner; returns the change points that
    are new (not stored before at the same series and trial). Emits regression.detected for a new "slower"
    change point of an adopted approach."""
    approach = session.get(Approach, approach_id)
    if approach is None:
        return []
    campaign = session.get(Campaign, approach.campaign_id)
    rule = comparison.rule_of(campaign) if campaign is not None else statistics.Rule()
    before = {
        (c.metric, c.point, c.trial_id)
        for c in session.exec(
            select(ChangePoint).where(ChangePoint.approach_id == approach_id, ChangePoint.runner_id == runner_id)
        )
    }
    session.execute(
        delete(ChangePoint).where(col(ChangePoint.approach_id) == approach_id, col(ChangePoint.runner_id) == runner_id)
    )
    found: list[ChangePoint] = []
    for series in load_series(session, approach_id, runner_id):
        values = [p.value for p in series.points]
        for d in detect(values, lower_better=series.lower_better, rule=rule):
            after, prior = series.points[d.index], series.points[d.index - 1]
            ratio = d.stats.ratio
            assert ratio is not None  # a called change always has its ratio
            found.append(
                ChangePoint(
                    campaign_id=approach.campaign_id,
                    approach_id=approach_id,
                    runner_id=runner_id,
                    metric=series.metric,
                    unit=series.unit,
                    point=series.point,
                    trial_id=after.trial_id,
                    before_trial_id=prior.trial_id,
                    ratio=ratio.value,
                    low=ratio.low,
                    high=ratio.high,
                    p_value=d.stats.p_value,
                    verdict=d.stats.verdict.value,
                    stack_diff=(comparison.same_stack_difference(prior.fingerprint, after.fingerprint) or "")[:500],
                )
            )
    session.add_all(found)
    scan = session.exec(
        select(ChangeScan).where(ChangeScan.approach_id == approach_id, ChangeScan.runner_id == runner_id)
    ).first()
    if scan is None:
        scan = ChangeScan(approach_id=approach_id, runner_id=runner_id, last_trial_id=newest_trial_id)
    scan.last_trial_id = max(scan.last_trial_id, newest_trial_id)
    scan.computed_at = utcnow()
    session.add(scan)
    new = [c for c in found if (c.metric, c.point, c.trial_id) not in before]
    if approach.status == ApproachStatus.adopted and campaign is not None:
        for c in new:
            if c.verdict == statistics.Finding.slower:
                _regression_detected(session, campaign, approach, c)
    return new


def describe(c: ChangePoint) -> str:
    """'allreduce_latency_us (tokens=8) slower x1.062 [1.041, 1.080] at trial #42 (torch 2.10.0 -> 2.11.0)'."""
    where = f" ({c.point})" if c.point else ""
    interval = f" [{c.low:.3f}, {c.high:.3f}]" if c.low is not None and c.high is not None else ""
    stack = f" ({c.stack_diff})" if c.stack_diff else " (same stack)"
    return f"{c.metric}{where} {c.verdict} x{c.ratio:.3f}{interval} at trial #{c.trial_id}{stack}"


def _regression_detected(session: Session, campaign: Campaign, approach: Approach, c: ChangePoint) -> None:
    notifications.record(
        session,
        notifications.Event(
            NotificationEvent.regression_detected,
            f"regression.detected:{approach.id}:{c.runner_id}:{c.metric}:{c.point}:{c.trial_id}",
            f"{campaign.slug}/{approach.key}: regression",
            f"{approach.key} is adopted, and its figures moved: {describe(c)}.\nProposal: re-open it.",
            f"/campaigns/{campaign.slug}/approaches/{approach.key}",
            campaign.id,
            approach.id,
        ),
    )


def pass_once(session: Session, limit: int = 200) -> list[tuple[int, int]]:
    """Recompute every dirty pair (up to `limit`); returns (campaign_id, approach_id) of those recomputed."""
    touched = []
    for approach_id, runner_id, newest in dirty(session, limit):
        recompute(session, approach_id, runner_id, newest)
        approach = session.get(Approach, approach_id)
        if approach is not None:
            touched.append((approach.campaign_id, approach_id))
    return touched


def of_approach(session: Session, approach: Approach) -> list[ChangePoint]:
    return list(
        session.exec(
            select(ChangePoint)
            .where(ChangePoint.approach_id == approach.id, col(ChangePoint.metric).not_in(list(DERIVED_FROM)))
            .order_by(col(ChangePoint.trial_id).desc())
        )
    )


def of_campaign(session: Session, campaign: Campaign, limit: int = 50) -> list[tuple[ChangePoint, str]]:
    """The campaign's newest change points with their approach's key."""
    rows = session.exec(
        select(ChangePoint, Approach.key)
        .join(Approach, col(Approach.id) == ChangePoint.approach_id)
        .where(ChangePoint.campaign_id == campaign.id, col(ChangePoint.metric).not_in(list(DERIVED_FROM)))
        .order_by(col(ChangePoint.trial_id).desc())
        .limit(limit)
    ).all()
    return [(c, key) for c, key in rows]


def reopen_proposal(approach: Approach, points: Sequence[ChangePoint]) -> str | None:
    """On an adopted approach whose newest change point is a regression: the proposal to re-open it."""
    if approach.status != ApproachStatus.adopted or not points:
        return None
    newest = max(points, key=lambda c: c.trial_id)
    if newest.verdict != statistics.Finding.slower:
        return None
    return f"Re-open {approach.key}: it regressed since it was adopted: {describe(newest)}."


MAX_CHARTS = 3  # series drawn on the approach page: those with the newest change points


@dataclass(frozen=True)
class ApproachChanges:
    """What the approach page shows: its change points (newest first), the runners' names, the series to
    draw (with their runner's name and change points) and the re-open proposal, if any."""

    points: list[ChangePoint]
    runner_names: dict[int, str]
    charted: list[tuple[Series, str, list[ChangePoint]]]
    proposal: str | None


def approach_changes(session: Session, approach: Approach) -> ApproachChanges:
    """Stored change points only: nothing is detected here (the pass does that, off the request path)."""
    points = of_approach(session, approach)
    names = _runner_names(session, {c.runner_id for c in points})
    charted: list[tuple[Series, str, list[ChangePoint]]] = []
    wanted: dict[tuple[int, str, str], list[ChangePoint]] = {}
    for c in points:
        key = (c.runner_id, c.metric, c.point)
        if key in wanted or len(wanted) < MAX_CHARTS:
            wanted.setdefault(key, []).append(c)
    for runner_id in dict.fromkeys(k[0] for k in wanted):
        for series in load_series(session, approach.id, runner_id):  # type: ignore[arg-type]
            marked = wanted.get((runner_id, series.metric, series.point))
            if marked:
                charted.append((series, names.get(runner_id, f"runner #{runner_id}"), marked))
    return ApproachChanges(points, names, charted, reopen_proposal(approach, points))


def _runner_names(session: Session, ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    return {r.id: r.name for r in session.exec(select(Runner).where(col(Runner.id).in_(ids)))}  # type: ignore[misc]
