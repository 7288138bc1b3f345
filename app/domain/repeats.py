"""Repeat to decide: "Settle A vs B" and "Repeat A N times" queue rounds of trials through the normal queue.

A Settle holds a budget (trials per approach). Each round queues one trial of A, then one of B (so trials
land interleaved, A B A B ...: drift in the node hits both alike), with no runner: the queue starts them
(app/domain/queue.py). When every trial of a round has ended, `advance_open` (called in the transaction
in which a runner looks at the queue, app/services/trials.start_queued) compares A and B over their
succeeded trials on the same stack (app/domain/comparison.compare_approaches) on the deciding metric:

- **decided** when each of its rows measured on both has a verdict that answers the question over trials
  (statistics.DECIDED: faster, slower, equivalent, or different but below the minimum effect); an
  inconclusive row, or one with no verdict yet (one trial a side), asks for another round;
- **spent** when A (or B) has had `budget` trials of this settle;
- **stopped** when one of its trials was cancelled or lost (a person stopped it, or its runner went);
- else the next round is queued.

"Repeat A N times" is a Settle without B: rounds of one trial, until N are spent. Functions flush, never
commit.

`progress` is what the pages show while it runs (issue 45): trials done of the most it may take, and each
side's deciding metric so far with its interval over trials (`statistics.trial_resamples`, the trial the unit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlmodel import Session, col, select

from app.domain import comparison, scheduling, statistics
from app.domain.errors import Invalid
from app.domain.units import plural
from app.models import (
    ACTIVE_TRIAL_STATES,
    DEFAULT_SETTLE_BUDGET,
    MAX_SETTLE_BUDGET,
    TERMINAL_TRIAL_STATES,
    Approach,
    Campaign,
    Metric,
    Settle,
    SettleState,
    Trial,
    TrialState,
    utcnow,
)

# Declared with the budget's field (SettleFields in app/models.py): the API, the form and the table share them.
DEFAULT_BUDGET, MAX_BUDGET = DEFAULT_SETTLE_BUDGET, MAX_SETTLE_BUDGET


@dataclass(frozen=True)
class SettleView:
    settle: Settle
    a: Approach
    b: Approach | None
    trials: int  # trials of this settle so far


def start(
    session: Session,
    campaign: Campaign,
    a: Approach,
    b: Approach | None,
    budget: int,
    actor: str,
    metric: str | None = None,
    *,
    online: set[int] | None = None,
) -> tuple[Settle, list[Trial]]:
    """A new Settle of A vs B (Repeat when b is None) and its first round, queued; refused (Invalid, naming
    a or b) when either cannot run now (`scheduling.can_run`: `online` are the runners this server holds)."""
    if not 1 <= budget <= MAX_BUDGET:
        raise Invalid(f"budget: between 1 and {MAX_BUDGET} trials per approach, not {budget}", field="budget")
    if b is not None and b.id == a.id:
        raise Invalid("Settle compares two different approaches.", field="b")
    scheduling.lock_campaign(session, campaign)  # as run this does: one check, then the queue
    for field, approach in (("a", a), ("b", b)):
        if approach is None:
            continue
        check = scheduling.can_run(session, approach, online=online)
        if check.reason:  # a round no runner can take would wait in the queue forever
            raise Invalid(check.reason, field=field)
    settle = Settle(
        campaign_id=campaign.id,  # type: ignore[arg-type]
        approach_a_id=a.id,  # type: ignore[arg-type]
        approach_b_id=b.id if b is not None else None,
        budget=budget,
        metric=metric,
        requested_by=actor,
    )
    session.add(settle)
    session.flush()
    return settle, _queue_round(session, settle, actor)


def _approaches(session: Session, settle: Settle) -> list[Approach]:
    ids = [settle.approach_a_id] + ([settle.approach_b_id] if settle.approach_b_id is not None else [])
    return [session.get(Approach, i) for i in ids]  # type: ignore[misc]


def _queue_round(session: Session, settle: Settle, actor: str) -> list[Trial]:
    queued = []
    for approach in _approaches(session, settle):
        trial = scheduling.create_trial(session, approach, None, actor)
        trial.settle_id = settle.id
        session.add(trial)
        queued.append(trial)
    session.flush()
    return queued


def _end(session: Session, settle: Settle, state: SettleState, outcome: str) -> bool:
    settle.state = state
    settle.outcome = outcome
    settle.ended_at = utcnow()
    session.add(settle)
    session.flush()
    return True


def stop(session: Session, settle: Settle, outcome: str) -> None:
    """End an open settle where it stands (its campaign is being archived): no further round is queued."""
    _end(session, settle, SettleState.stopped, outcome)


def advance_open(session: Session) -> list[int]:
    """Move every open settle whose round has ended on: decide, spend, stop, or queue the next round.
    Returns the campaign ids whose settles changed (their pages refresh). A settle another transaction
    holds is skipped (PostgreSQL: SKIP LOCKED): that transaction advances it."""
    changed = []
    open_ids = session.exec(select(Settle.id).where(Settle.state == SettleState.open)).all()
    for settle_id in open_ids:
        settle = session.exec(
            select(Settle)
            .where(Settle.id == settle_id, Settle.state == SettleState.open)
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        ).first()
        if settle is not None and advance(session, settle):
            changed.append(settle.campaign_id)
    return changed


def advance(session: Session, settle: Settle) -> bool:
    """One settle's step (see the module's docstring); False when its round is still running."""
    mine = list(session.exec(select(Trial).where(Trial.settle_id == settle.id).order_by(col(Trial.id))))
    if any(t.state in ACTIVE_TRIAL_STATES for t in mine):
        return False
    gone = [t for t in mine if t.state in (TrialState.cancelled, TrialState.lost)]
    if gone:
        return _end(session, settle, SettleState.stopped, f"trial #{gone[0].id} {gone[0].state}: settle stopped")
    approaches = _approaches(session, settle)
    rounds = max(sum(1 for t in mine if t.approach_id == a.id) for a in approaches)
    if len(approaches) == 2:
        campaign = session.get(Campaign, settle.campaign_id)
        assert campaign is not None
        decided = decision(session, campaign, approaches[0], approaches[1], settle.metric)
        if decided is not None:
            return _end(session, settle, SettleState.decided, decided)
    if rounds >= settle.budget:
        return _end(
            session,
            settle,
            SettleState.spent,
            f"{plural(rounds, 'trial')} per approach spent" + ("" if len(approaches) == 1 else ", undecided"),
        )
    _queue_round(session, settle, settle.requested_by or "settle")
    return True


def decision(session: Session, campaign: Campaign, a: Approach, b: Approach, metric: str | None) -> str | None:
    """'B vs A on M: faster at 4 of 4 points' once decided (see the module's docstring), else None."""
    result = comparison.compare_approaches(session, campaign, [a.key, b.key])
    group = comparison.deciding_group(result, metric)
    if group is None:
        return None
    verdicts: list[str] = []
    for row in group.rows:
        if row.stats is None or row.stats.pairs[0].stats is None:
            continue
        pair = row.stats.pairs[0].stats
        if pair.verdict not in statistics.DECIDED:  # inconclusive, or no verdict yet (one trial a side)
            return None
        verdicts.append(statistics.FINDING_WORDS[pair.verdict])
    if not verdicts:
        return None
    counts = ", ".join(f"{v} at {verdicts.count(v)}" for v in dict.fromkeys(verdicts))
    return f"{b.title} vs {a.title} on {group.name}: {counts} of {plural(len(verdicts), 'point')}"


def settle_pair(result: comparison.Comparison) -> tuple[str, str] | None:
    """The (A, B) approach keys a comparison of two columns of different approaches could settle."""
    keys = list(dict.fromkeys(c.approach_key for c in result.columns))
    return (keys[0], keys[1]) if len(keys) == 2 else None


def repeat_keys(result: comparison.Comparison) -> list[str]:
    """The approaches of a comparison with a row that has no verdict for want of trials (one trial a side):
    each is offered "Repeat"."""
    short = any(
        p.stats is not None and p.stats.verdict == statistics.Finding.no_verdict
        for g in result.metrics
        for r in g.rows
        if r.stats
        for p in r.stats.pairs
    )
    return list(dict.fromkeys(c.approach_key for c in result.columns)) if short else []


def open_settles(session: Session, campaign: Campaign) -> list[SettleView]:
    """The campaign's settles, newest first (open ones and the last few ended)."""
    settles = session.exec(
        select(Settle).where(Settle.campaign_id == campaign.id).order_by(col(Settle.id).desc()).limit(10)
    ).all()
    out = []
    for s in settles:
        a, *rest = _approaches(session, s)
        count = len(session.exec(select(Trial.id).where(Trial.settle_id == s.id)).all())
        out.append(SettleView(s, a, rest[0] if rest else None, count))
    return out


@dataclass(frozen=True)
class SideSoFar:
    """One side's deciding metric over its succeeded trials of the settle: the mean of the trials' medians and
    its interval at the campaign's confidence (None below 2 trials: one trial has no run-to-run spread)."""

    title: str
    trials: int
    value: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Progress:
    """A settle while it runs: `done` trials ended of `total` at most (budget x sides), `active` still queued or
    running, and each side's figure so far on `metric` at `point`."""

    settle: Settle
    a: Approach
    b: Approach | None
    done: int
    total: int
    active: int
    metric: str | None
    unit: str
    point: str
    sides: tuple[SideSoFar, ...]
    confidence: float

    @property
    def label(self) -> str:
        return f"{self.a.title} vs {self.b.title}" if self.b is not None else f"{self.a.title} repeated"


def _point_label(tags: dict[str, Any]) -> str:
    return ", ".join(f"{k}={tags[k]}" for k in comparison.POINT_TAGS if k in tags)


def _figures(
    session: Session, settle: Settle, approaches: list[Approach], succeeded: dict[int, list[int]], rule: statistics.Rule
) -> tuple[str | None, str, str, tuple[SideSoFar, ...]]:
    """The deciding metric (the settle's, else the first headline metric side A measured, else the first
    name), its point (the tags most of A's trials measured) and each side's trials' medians there."""
    ids = [i for a in approaches for i in succeeded.get(a.id or 0, [])]
    rows = list(
        session.exec(select(Metric).where(col(Metric.trial_id).in_(ids)).order_by(col(Metric.trial_id), col(Metric.id)))
    )
    first = set(succeeded.get(approaches[0].id or 0, []))
    names = {m.name for m in rows if m.trial_id in first}
    metric = settle.metric if settle.metric in names else None
    metric = metric or next((n for n in comparison.HEADLINE_METRICS if n in names), None) or min(names, default=None)
    if metric is None:
        empty = tuple(SideSoFar(a.title, 0, None, None, None) for a in approaches)
        return None, "", "", empty
    mine = [m for m in rows if m.name == metric]
    points: dict[str, set[int]] = {}
    for m in mine:
        key = json.dumps({k: m.tags[k] for k in comparison.POINT_TAGS if k in m.tags}, sort_keys=True, default=str)
        points.setdefault(key, set()).add(m.trial_id)
    point = max(points, key=lambda k: (len(points[k] & first), -list(points).index(k)))
    at = json.loads(point)
    sides = []
    unit = ""
    for a in approaches:
        medians: dict[int, float] = {}
        for m in mine:
            if m.trial_id in succeeded.get(a.id or 0, []) and m.trial_id not in medians:
                if {k: m.tags[k] for k in comparison.POINT_TAGS if k in m.tags} == at:
                    summary = comparison.trial_of(m)
                    value = (
                        summary.median if isinstance(summary, statistics.TrialSummary) else float(np.median(summary))
                    )
                    medians[m.trial_id] = value
                    unit = unit or m.unit
        values = list(medians.values())
        low = high = None
        if len(values) >= 2:
            draws = statistics.trial_resamples(
                [[v] for v in values], rule.n_resamples, np.random.default_rng(rule.seed)
            )
            if draws is not None:
                low, high = statistics.percentile_interval(draws, rule.confidence)
        mean = float(np.mean(values)) if values else None
        sides.append(SideSoFar(a.title, len(values), mean, low, high))
    return metric, unit, _point_label(at), tuple(sides)


def progress(session: Session, settle: Settle) -> Progress:
    """Where one settle stands (see `Progress`)."""
    campaign = session.get(Campaign, settle.campaign_id)
    assert campaign is not None
    approaches = _approaches(session, settle)
    mine = list(session.exec(select(Trial).where(Trial.settle_id == settle.id).order_by(col(Trial.id))))
    succeeded: dict[int, list[int]] = {}
    for t in mine:
        if t.state == TrialState.succeeded:
            succeeded.setdefault(t.approach_id, []).append(t.id)  # type: ignore[arg-type]
    rule = comparison.rule_of(campaign)
    metric, unit, point, sides = _figures(session, settle, approaches, succeeded, rule)
    return Progress(
        settle=settle,
        a=approaches[0],
        b=approaches[1] if len(approaches) == 2 else None,
        done=sum(1 for t in mine if t.state in TERMINAL_TRIAL_STATES),
        total=settle.budget * len(approaches),
        active=sum(1 for t in mine if t.state in ACTIVE_TRIAL_STATES),
        metric=metric,
        unit=unit,
        point=point,
        sides=sides,
        confidence=rule.confidence,
    )


def campaign_progress(session: Session, campaign: Campaign) -> list[Progress]:
    """The campaign's ten newest settles, newest first."""
    settles = session.exec(
        select(Settle).where(Settle.campaign_id == campaign.id).order_by(col(Settle.id).desc()).limit(10)
    ).all()
    return [progress(session, s) for s in settles]


def progress_json(p: Progress) -> dict[str, Any]:
    """A Progress as the API's SettleProgressPublic and the CLI's --json give it."""
    return {
        "id": p.settle.id,
        "a": p.a.key,
        "b": p.b.key if p.b is not None else None,
        "state": p.settle.state,
        "outcome": p.settle.outcome,
        "done": p.done,
        "total": p.total,
        "active": p.active,
        "metric": p.metric,
        "unit": p.unit,
        "point": p.point,
        "confidence": p.confidence,
        "sides": [vars(s) for s in p.sides],
    }


def progress_line(p: Progress) -> str:
    """One line of progress, as the CLI prints it: "A repeated: 2 of 5 done, 1 queued or running; m: ..."."""
    head = f"{p.label}: {p.done} of {p.total} done" + (f", {p.active} queued or running" if p.active else "")
    if p.settle.state != SettleState.open:
        head += f" ({p.settle.state}{': ' + p.settle.outcome if p.settle.outcome else ''})"
    if p.metric is None:
        return head
    figures = []
    for s in p.sides:
        name = f"{s.title} " if p.b is not None else ""
        if s.value is None:
            figures.append(f"{name}no trial yet")
        elif s.low is None:
            figures.append(f"{name}{s.value:.4g} {p.unit} (one trial: no interval yet)")
        else:
            figures.append(
                f"{name}{s.value:.4g} {p.unit} [{s.low:.4g}, {s.high:.4g}] "
                f"({p.confidence:.0%} over {plural(s.trials, 'trial')})"
            )
    at = f" at {p.point}" if p.point else ""
    return f"{head}; {p.metric}{at}: {'; '.join(figures)}"


def approach_progress(session: Session, approach: Approach) -> list[Progress]:
    """The settles of an approach to show on its page: the open ones, and the newest ended one."""
    settles = session.exec(
        select(Settle)
        .where((Settle.approach_a_id == approach.id) | (Settle.approach_b_id == approach.id))
        .order_by(col(Settle.id).desc())
        .limit(10)
    ).all()
    shown = [s for s in settles if s.state == SettleState.open]
    ended = next((s for s in settles if s.state != SettleState.open), None)
    if ended is not None:
        shown.append(ended)
    return [progress(session, s) for s in shown]
