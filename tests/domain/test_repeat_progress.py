"""Issue 45 item 4 on SQLite and PostgreSQL: a Repeat says how far it is (n of N done, the interval over its
trials so far) while it runs; an approach's history shows decisions first, its trials' events folded under them."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from scipy import stats as sps

from app.db import session_scope
from app.domain import history, queue, repeats
from app.models import StatusChange, utcnow
from tests.support.verdicts import OLD_STACK, approach, campaign, run_to_end, runner, seed

pytestmark = pytest.mark.both_databases  # repeat claims (SKIP LOCKED) and the history's paging SQL


def _line(center: float, seed_: int) -> list[dict]:
    samples = [float(x) for x in np.random.default_rng(seed_).normal(center, center * 0.01, 10)]
    return [{"name": "verify_time_ms", "value": float(np.median(samples)), "unit": "ms", "samples": samples}]


def test_repeat_progress_counts_and_narrows_its_interval(engine):
    seed(engine, {"key": "a"})
    centers = [10.0, 10.4, 9.8, 10.1]
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        a = approach(s, "a")
        settle, _ = repeats.start(s, campaign(s), a, None, 4, "alice")
        (p,) = repeats.approach_progress(s, a)
        assert (p.done, p.total, p.active, p.metric) == (0, 4, 1, None)
        medians: list[float] = []
        for n, center in enumerate(centers):
            started = queue.start_queued(s, node.id)  # type: ignore[arg-type]
            assert started is not None and started.trial is not None
            run_to_end(s, started.trial, metrics=_line(center, n))
            repeats.advance_open(s)  # the next round queued (or the repeat spent)
            medians.append(float(np.median(_line(center, n)[0]["samples"])))
            (p,) = repeats.approach_progress(s, a)
            assert p.done == n + 1 and p.total == 4 and p.metric == "verify_time_ms" and p.unit == "ms"
            (side,) = p.sides
            assert side.value is not None and side.trials == n + 1 and abs(side.value - np.mean(medians)) < 1e-9
            if n == 0:
                assert side.low is None  # one trial: no run-to-run spread, no interval
                continue
            assert side.low is not None and side.high is not None and side.low < side.value < side.high
            assert p.active == (1 if n < 3 else 0)
            if n >= 2:
                # the posterior of the mean over trials: about the t interval of the medians
                t = sps.t.interval(0.95, len(medians) - 1, loc=np.mean(medians), scale=sps.sem(medians))
                assert (
                    abs(side.low - t[0]) / np.mean(medians) < 0.03 and abs(side.high - t[1]) / np.mean(medians) < 0.03
                )
            assert repeats.progress_line(p).startswith(f"{a.title} repeated: {n + 1} of 4 done")
        s.refresh(settle)
        (p,) = repeats.approach_progress(s, a)
        assert p.settle.state == "spent" and p.active == 0
        assert repeats.progress_json(p)["done"] == 4


def _change(s, approach_id: int | None, frm: str, to: str, at, trial_id: int | None = None, **extra) -> StatusChange:
    assert approach_id is not None
    row = StatusChange(approach_id=approach_id, from_status=frm, to_status=to, actor="x", trial_id=trial_id, at=at)
    for k, v in extra.items():
        setattr(row, k, v)
    s.add(row)
    s.flush()
    return row


def test_history_folds_trial_events_under_decisions_and_pages_at_decisions(engine, monkeypatch):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = approach(s, "a")
        t0 = utcnow() + timedelta(days=1)  # after the seed's own creation entry
        # decision 1, then a trial's events (queued, started, ended: kind "trial", the decided status kept), ...
        d1 = _change(s, a.id, "untested", "deferred", t0)
        events = [
            _change(s, a.id, "deferred", "deferred", t0 + timedelta(seconds=1), kind="trial"),
            _change(s, a.id, "deferred", "deferred", t0 + timedelta(seconds=2), kind="trial"),
            _change(s, a.id, "deferred", "deferred", t0 + timedelta(seconds=3), kind="trial"),
        ]
        d2 = _change(s, a.id, "deferred", "promising", t0 + timedelta(seconds=4))
        late = _change(s, a.id, "promising", "promising", t0 + timedelta(seconds=5), kind="trial")
        groups, more = history.folded_history(s, a, limit=50)
        decisions = [g.decision for g in groups]
        assert decisions[:2] == [d2, d1] and more is None
        assert groups[0].events == [late] and groups[1].events == events[::-1]
        assert all(g.events == [] for g in groups[2:])  # the creation entry
        # paging cuts at decisions: each decision comes with all its events
        first, more = history.folded_history(s, a, limit=1)
        assert [g.decision for g in first] == [d2] and more == d2.id
        second, _ = history.folded_history(s, a, before=more, limit=1)
        assert second[0].decision == d1 and second[0].events == events[::-1]
        # any kind other than a person's decision that names a trial folds; an unknown kind naming no trial
        # stays a decision
        trial_kind = StatusChange(approach_id=1, kind="trial", trial_id=None, from_status="x", to_status="x")
        new_kind = StatusChange(approach_id=1, kind="verdict_note", trial_id=None, from_status="x", to_status="x")
        unknown_with_trial = StatusChange(
            approach_id=1, kind="verdict_note", trial_id=7, from_status="x", to_status="x"
        )
        person = StatusChange(approach_id=1, kind="status", trial_id=7, from_status="untested", to_status="adopted")
        assert not history.is_decision(unknown_with_trial)
        assert not history.is_decision(trial_kind) and history.is_decision(new_kind) and history.is_decision(person)
        lines = history.history_lines(groups)
        assert lines[0].endswith("deferred -> promising by x") and lines[1].startswith("    ")
