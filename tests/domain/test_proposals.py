"""Success proposals that wait for evidence (app/domain/proposals.py), on SQLite and PostgreSQL: measured
without a reference, promising / adopt only when the comparison is significant, else inconclusive with
"Repeat" offered."""

from __future__ import annotations

import re

import numpy as np

from app.db import session_scope
from app.domain import proposals, verdicts
from app.models import ApproachStatus
from tests.support.verdicts import OLD_STACK, approach, campaign, end_trial, runner, seed


def _verify(center: float, cv: float, n: int, seed: int) -> list[dict]:
    samples = [float(x) for x in np.random.default_rng(seed).normal(center, center * cv, n)]
    return [
        {
            "name": "verify_time_ms",
            "value": float(np.median(samples)),
            "unit": "ms",
            "tags": {"tokens": 4},
            "samples": samples,
        }
    ]


def _with_baseline(s, center: float = 10.0, trials: int = 3):
    """The baseline approach with `trials` trials (2% apart: the run-to-run spread of this node)."""
    node = runner(s, "node-a", OLD_STACK)
    base = approach(s, "base")
    first = None
    for n in range(trials):
        t = end_trial(s, base, node, metrics=_verify(center * (1 + 0.02 * (n - 1)), 0.01, 20, 1 + n))
        first = first or t
    c = campaign(s)
    c.baseline_trial_id = first.id  # type: ignore[union-attr]
    s.add(c)
    s.flush()
    return node


def _candidate(s, node, centers: list[float], seed: int = 10):
    cand = approach(s, "cand")
    return [end_trial(s, cand, node, metrics=_verify(c, 0.01, 20, seed + n)) for n, c in enumerate(centers)][-1]


def test_a_significant_improvement_over_the_baseline_is_promising(engine):
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = _with_baseline(s)
        trial = _candidate(s, node, [8.0, 8.1, 7.9])
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("promising", ApproachStatus.promising)
        assert re.search(r"; faster than BASE: verify_time_ms x0\.[78]\d\d \[0\.\d+, 0\.\d+\] at tokens=4$", p.reason)
        assert p.settle is None


def test_one_trial_a_side_proposes_no_verdict_and_offers_repeat(engine):
    """Issue 34: a 5% gain on one trial says nothing while the run-to-run spread is unknown (2% here)."""
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        base = end_trial(s, approach(s, "base"), node, metrics=_verify(10.0, 0.01, 20, 1))
        c = campaign(s)
        c.baseline_trial_id = base.id
        s.add(c)
        trial = _candidate(s, node, [9.5])
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("inconclusive", ApproachStatus.untested)
        assert "inconclusive: no verdict against BASE with 1 trial a side" in p.reason
        assert "one trial a side: no interval" in p.reason and p.settle == ("base", "cand")


def test_a_success_within_the_minimum_effect_is_inconclusive_or_equivalent_and_offers_repeat(engine):
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = _with_baseline(s)
        # 1% better at a 2% run-to-run spread over 3 trials a side: nothing a person should act on.
        trial = _candidate(s, node, [9.7, 9.9, 10.1])
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("inconclusive", ApproachStatus.untested)
        assert "after 3 trials a side (inconclusive)" in p.reason and p.settle == ("base", "cand")


def test_a_significant_slowdown_proposes_a_dead_end(engine):
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = _with_baseline(s)
        trial = _candidate(s, node, [12.0, 12.1, 11.9])
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("slower", ApproachStatus.dead_end) and "slower than BASE" in p.reason


def test_faster_than_the_adopted_best_proposes_adopt(engine):
    seed(engine, {"key": "best"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        best = approach(s, "best")
        first = [end_trial(s, best, node, metrics=_verify(v, 0.01, 20, 5 + n)) for n, v in enumerate((10.0, 10.2, 9.8))]
        verdicts.confirm(s, best, first[0], "adopted", "the fastest so far", [], "alice")
        trial = _candidate(s, node, [8.0, 8.1, 7.9])
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("adopt", ApproachStatus.adopted) and "the adopted best" in p.reason


def test_the_baseline_itself_has_nothing_to_compare_with(engine):
    seed(engine, {"key": "base"})
    with session_scope(engine) as s:
        _with_baseline(s, trials=1)
        again = end_trial(s, approach(s, "base"), runner(s, "node-b", OLD_STACK), metrics=_verify(10.0, 0.01, 20, 7))
        p = proposals.propose(s, again)
        assert (p.label, p.status) == ("measured", ApproachStatus.untested)
