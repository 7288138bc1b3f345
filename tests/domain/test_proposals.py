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


def _with_baseline(s, center: float = 10.0):
    node = runner(s, "node-a", OLD_STACK)
    base = end_trial(s, approach(s, "base"), node, metrics=_verify(center, 0.01, 20, 1))
    c = campaign(s)
    c.baseline_trial_id = base.id
    s.add(c)
    s.flush()
    return node


def test_a_significant_improvement_over_the_baseline_is_promising(engine):
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = _with_baseline(s)
        trial = end_trial(s, approach(s, "cand"), node, metrics=_verify(9.0, 0.01, 20, 2))
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("promising", ApproachStatus.promising)
        assert re.search(r"; faster than BASE: verify_time_ms x0\.8\d\d \[0\.8\d\d, 0\.9\d\d\] at tokens=4$", p.reason)
        assert p.settle is None


def test_a_success_not_significant_is_downgraded_to_inconclusive_and_offers_repeat(engine):
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = _with_baseline(s)
        # 1% better on the median, at 8% noise over 5 samples: nothing a person should act on.
        trial = end_trial(s, approach(s, "cand"), node, metrics=_verify(9.9, 0.08, 5, 3))
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("inconclusive", ApproachStatus.untested)
        assert "inconclusive: indistinguishable from BASE after 5 sample(s)" in p.reason
        assert p.settle == ("base", "cand")


def test_a_significant_slowdown_proposes_a_dead_end(engine):
    seed(engine, {"key": "base"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = _with_baseline(s)
        trial = end_trial(s, approach(s, "cand"), node, metrics=_verify(11.0, 0.01, 20, 4))
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("slower", ApproachStatus.dead_end) and "slower than BASE" in p.reason


def test_faster_than_the_adopted_best_proposes_adopt(engine):
    seed(engine, {"key": "best"}, {"key": "cand"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        best = approach(s, "best")
        first = end_trial(s, best, node, metrics=_verify(10.0, 0.01, 20, 5))
        verdicts.confirm(s, best, first, "adopted", "the fastest so far", [], "alice")
        trial = end_trial(s, approach(s, "cand"), node, metrics=_verify(9.0, 0.01, 20, 6))
        p = proposals.propose(s, trial)
        assert (p.label, p.status) == ("adopt", ApproachStatus.adopted) and "the adopted best" in p.reason


def test_the_baseline_itself_has_nothing_to_compare_with(engine):
    seed(engine, {"key": "base"})
    with session_scope(engine) as s:
        _with_baseline(s)
        again = end_trial(s, approach(s, "base"), runner(s, "node-b", OLD_STACK), metrics=_verify(10.0, 0.01, 20, 7))
        p = proposals.propose(s, again)
        assert (p.label, p.status) == ("measured", ApproachStatus.untested)
