"""app/domain/comparison.py on SQLite and PostgreSQL: rows aligned by their point (never by spread tags),
each row's statistics, the same-stack rule, approaches compared over their repeated trials."""

from __future__ import annotations

import numpy as np
import pytest

from app.db import session_scope
from app.domain import comparison
from app.domain.statistics import Finding
from tests.support.verdicts import NEW_TORCH, OLD_STACK, approach, campaign, end_trial, runner, seed


def _latency(tokens: int, center: float, seed: int, n: int = 20, name: str = "allreduce_latency_us") -> dict:
    """An allreduce line as the recipe prints it: the median, its spread tags, the raw samples."""
    samples = sorted(np.random.default_rng(seed).normal(center, center * 0.01, n))
    return {
        "name": name,
        "value": float(np.median(samples)),
        "unit": "us",
        "tags": {
            "tokens": tokens,
            "bytes": tokens * 7168 * 2,
            "backend": "gloo",
            "mode": "eager",
            "p10_us": samples[2],
            "p90_us": samples[-3],
            "min_us": samples[0],
            "max_us": samples[-1],
        },
        "samples": [float(x) for x in samples],
    }


def test_two_gloo_trials_line_up_by_tokens_not_by_spread_tags(engine):
    """Issue 21 item 4: 4 pairs, not 8 half-empty rows keyed by p10/p90/min/max. Issue 34: one trial a side
    gives no verdict until the campaign holds earlier repeats on that runner, whose spread is then named."""
    seed(engine, {"key": "gloo"}, {"key": "fast"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        a, fast = approach(s, "gloo"), approach(s, "fast")
        lines = lambda shift, seed: [  # noqa: E731
            _latency(t, (50 + t) * shift, seed + t, name=name)
            for name in ("allreduce_latency_us", "allreduce_per_call_us")
            for t in (1, 4, 8, 64)
        ]
        first = end_trial(s, a, node, metrics=lines(1.0, 100))
        second = end_trial(s, fast, node, metrics=lines(0.9, 200))

        def pairs(ids=(first.id, second.id)):
            result = comparison.compare_trials(s, campaign(s), list(ids))
            assert [g.name for g in result.metrics] == ["allreduce_latency_us", "allreduce_per_call_us"]
            for group in result.metrics:
                assert [r.point for r in group.rows] == [(("tokens", t),) for t in (1, 4, 8, 64)]
                assert all(None not in r.values for r in group.rows) and group.x_tag == "tokens"
                for row in group.rows:
                    assert row.stats is not None
                    assert [(side.trials, side.samples) for side in row.stats.sides] == [(1, 20), (1, 20)]
                    yield row.stats.pairs[0]

        for pair in pairs():  # 10% lower latency, but one trial a side: no verdict, and why
            assert pair.stats is not None and pair.stats.verdict == Finding.no_verdict and pair.spread == ""
            assert pair.stats.ratio is not None and pair.stats.ratio.low is None
        for n in range(3):  # repeats of the approach on this runner, after the pair: not earlier, not used
            end_trial(s, a, node, metrics=lines(1.0 + 0.005 * n, 300 + 10 * n))
        for pair in pairs():
            assert pair.stats is not None and pair.stats.verdict == Finding.no_verdict and pair.spread == ""
        # A pair that ran after those repeats: their spread decides (issue 43: only earlier trials).
        third = end_trial(s, a, node, metrics=lines(1.0, 400))
        fourth = end_trial(s, fast, node, metrics=lines(0.9, 500))
        for pair in pairs((third.id, fourth.id)):
            assert pair.stats is not None and pair.stats.verdict == Finding.faster and pair.stats.known_spread
            assert pair.spread.startswith("run-to-run spread ") and "from 4 earlier trials of GLOO" in pair.spread


def test_trials_on_different_stacks_are_compared_only_when_asked(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = approach(s, "a")
        old = end_trial(s, a, runner(s, "node-a", OLD_STACK), metrics=[_latency(4, 50.0, 1)])
        new = end_trial(s, a, runner(s, "node-b", NEW_TORCH), metrics=[_latency(4, 40.0, 2)])
        result = comparison.compare_trials(s, campaign(s), [old.id, new.id])  # type: ignore[list-item]
        (row,) = result.metrics[0].rows
        pair = row.stats.pairs[0]  # type: ignore[union-attr]
        assert pair.stats is None and pair.not_compared == "different stack: torch 2.10.0+cu128 -> 2.11.0"
        assert result.columns[1].stack_difference == "torch 2.10.0+cu128 -> 2.11.0"
        # The spread is still shown for each side.
        assert [side.samples for side in row.stats.sides] == [20, 20]  # type: ignore[union-attr]

        asked = comparison.compare_trials(s, campaign(s), [old.id, new.id], across_stacks=True)  # type: ignore[list-item]
        pair = asked.metrics[0].rows[0].stats.pairs[0]  # type: ignore[union-attr]
        assert pair.stats is not None and pair.stats.verdict == Finding.no_verdict  # one trial a side
        assert pair.stack_difference == "torch 2.10.0+cu128 -> 2.11.0" and pair.not_compared == ""


def test_approaches_pool_their_repeated_trials_on_the_first_ones_stack(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        node, other = runner(s, "node-a", OLD_STACK), runner(s, "node-b", NEW_TORCH)
        a, b = approach(s, "a"), approach(s, "b")
        line = lambda v: {"name": "verify_time_ms", "value": v, "unit": "ms", "tags": {"tokens": 4}}  # noqa: E731
        for v in (10.0, 10.1, 9.9, 10.05, 9.95, 10.02):
            end_trial(s, a, node, metrics=[line(v)])
        for v in (9.0, 9.1, 8.9, 9.05, 8.95, 9.02):
            end_trial(s, b, node, metrics=[line(v)])
        end_trial(s, b, other, metrics=[line(5.0)])  # another stack: left out
        end_trial(s, b, node, outcome="exited", exit_code=1, metrics=[line(1.0)])  # failed: left out
        result = comparison.compare_approaches(s, campaign(s), ["a", "b"])
        assert [c.label for c in result.columns] == ["A", "B"] and result.by == "approach"
        assert [len(c.trial_ids) for c in result.columns] == [6, 6] and result.columns[1].left_out == 1
        (row,) = result.metrics[0].rows
        assert row.values == pytest.approx([10.00333, 9.00333])  # each the mean of its trials' figures
        stats = row.stats
        assert stats is not None and [side.trials for side in stats.sides] == [6, 6]
        pair = stats.pairs[0].stats
        assert pair is not None and pair.verdict == Finding.faster and pair.p_value is not None
        # Across stacks the other stack's trial joins, its difference named.
        wide = comparison.compare_approaches(s, campaign(s), ["a", "b"], across_stacks=True)
        assert len(wide.columns[1].trial_ids) == 7 and "torch" in (wide.columns[1].stack_difference or "")
