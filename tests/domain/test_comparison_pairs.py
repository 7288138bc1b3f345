"""`compare_trial_pairs(deciding_only=True)` (the replay report's path) against the full comparison, on SQLite
and PostgreSQL: for every pair the same deciding metric, points and verdicts as `deciding_group` of
`compare_trials`, whether the first headline metric decides, or both trials reported it at points that do
not meet (the next one decides), or the two trials have nothing in common; and the query count does not
grow with the pairs."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import event

from app.db import session_scope
from app.domain import comparison
from tests.support.verdicts import OLD_STACK, approach, campaign, end_trial, runner, seed

pytestmark = pytest.mark.both_databases  # statement counts of the deciding path


def _metric(name: str, center: float, seed: int, unit: str = "ms", **tags) -> dict:
    samples = [float(x) for x in np.random.default_rng(seed).normal(center, center * 0.02, 8)]
    return {"name": name, "value": float(np.median(samples)), "unit": unit, "tags": tags, "samples": samples}


# Per trial pair (before, after): what each reported.
PAIRS = {
    # the first headline metric (output throughput) decides
    "throughput": (
        [_metric("output_throughput_tok_s", 80, 1, "tok/s"), _metric("verify_time_ms", 20, 2)],
        [_metric("output_throughput_tok_s", 90, 3, "tok/s"), _metric("verify_time_ms", 18, 4)],
    ),
    # both report throughput, at batch sizes that do not meet: verify time decides
    "apart": (
        [_metric("output_throughput_tok_s", 80, 5, "tok/s", batch=1), _metric("verify_time_ms", 20, 6, batch=4)],
        [_metric("output_throughput_tok_s", 90, 7, "tok/s", batch=8), _metric("verify_time_ms", 25, 8, batch=4)],
    ),
    # no headline metric in common: the first common name decides
    "other": ([_metric("accept_length", 2.4, 9, "")], [_metric("accept_length", 2.5, 10, "")]),
    # nothing in common
    "nothing": ([_metric("draft_step_ms", 1.0, 11)], [_metric("decode_step_ms", 16.0, 12)]),
}


@pytest.fixture
def pairs(engine) -> list[tuple[int, int]]:
    seed(engine, *({"key": key} for key in PAIRS))
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        out = []
        for key, (before, after) in PAIRS.items():
            a = approach(s, key)
            out.append((end_trial(s, a, node, metrics=before).id, end_trial(s, a, node, metrics=after).id))
        return out  # type: ignore[return-value]


def _view(group: comparison.MetricGroup | None):
    if group is None:
        return None
    return (
        group.name,
        group.unit,
        [
            (r.point, r.values, [p.stats.verdict if p.stats else p.not_compared for p in r.stats.pairs])
            for r in group.rows
            if r.stats is not None
        ],
        [r.point for r in group.rows if r.stats is None],  # none: every row has its statistics
    )


def test_the_deciding_metric_alone_is_the_full_comparisons_deciding_metric(engine, pairs):
    with session_scope(engine, write=False) as s:
        c = campaign(s)
        fast = comparison.compare_trial_pairs(s, c, pairs, across_stacks=True, deciding_only=True)
        seen = {}
        for key, pair in zip(PAIRS, pairs, strict=True):
            full = comparison.deciding_group(comparison.compare_trials(s, c, list(pair), across_stacks=True))
            alone = comparison.deciding_group(fast[pair])
            assert _view(alone) == _view(full), key
            seen[key] = alone.name if alone else None
    assert seen == {
        "throughput": "output_throughput_tok_s",
        "apart": "verify_time_ms",
        "other": "accept_length",
        "nothing": None,
    }
    (row,) = fast[pairs[1]].metrics[0].rows  # only the metric that decides was built
    assert row.values[0] == pytest.approx(20, rel=0.05) and row.values[1] == pytest.approx(25, rel=0.05)
    assert len(fast[pairs[1]].metrics) == 1


def _statements(engine, run) -> int:
    seen: list[str] = []

    def count(conn, cursor, statement, *args) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return len(seen)


def test_the_deciding_path_reads_as_many_statements_for_one_pair_as_for_four(engine, pairs):
    with session_scope(engine, write=False) as s:
        c = campaign(s)
        one = _statements(engine, lambda: comparison.compare_trial_pairs(s, c, pairs[:1], deciding_only=True))
        four = _statements(engine, lambda: comparison.compare_trial_pairs(s, c, pairs, deciding_only=True))
    # The trials' columns, their metric rows, then the run-to-run spreads' trials and values (one-trial sides).
    assert one == four == 4
