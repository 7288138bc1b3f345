"""app/domain/changes.py: change points of each series (Otava's E-divisive, held to the board's interval
rule), the stack diff around them, the incremental pass, the regression notice; SQLite and PostgreSQL."""

from __future__ import annotations

import numpy as np
import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain import changes, notifications
from app.domain.runners import mark_connected
from app.models import ApproachStatus, ChangePoint, ChangeScan, NotificationEvent, NotificationOutbox, Runner
from tests.support.verdicts import NEW_TORCH, OLD_STACK, approach, campaign, end_trial, runner, seed

# The detection-rate property, measured on this seed: planted 5% shifts at 3% noise, in series of 3 m points
# with at least m on each side of the shift. Found within two points, m = 20: 176 of 200 on this seed (173 with
# the maximum-likelihood split); m = 30: 1,794 of 2,000. The bench's 10,000 series give 88.2% and 90.1%: the
# 90% issues 24 and 34 ask is reached from 30 points on each side (docs/statistics.md says why not at 20).
REACHED = {20: (200, 0.87), 30: (2000, 0.89)}


def _planted(rng: np.random.Generator, n: int = 60) -> tuple[list[float], int]:
    side = n // 3
    at = int(rng.integers(side, 2 * side + 1))
    values = 100 * (1 + 0.03 * rng.standard_normal(n))
    values[at:] *= 1.05
    return [float(v) for v in values], at


@pytest.mark.parametrize("side", sorted(REACHED))
def test_planted_5_percent_shifts_at_3_percent_noise_are_found_within_two_points(side):
    rng = np.random.default_rng(24)
    trials, reached = REACHED[side]
    found = 0
    for _ in range(trials):
        values, at = _planted(rng, 3 * side)
        found += any(abs(d.index - at) <= 2 for d in changes.detect(values))
    assert found / trials >= reached


def _least_squares_split(values: list[float]) -> int:
    """The maximum-likelihood location of one shift (the split with the least residual sum of squares)."""
    v = np.asarray(values) - np.mean(values)
    k = np.arange(1, v.size)
    left = np.cumsum(v)[:-1]
    return int(k[np.argmax(left**2 / k + left**2 / (v.size - k))])


def test_the_locator_lands_within_two_points_more_often_than_the_maximum_likelihood_split():
    # The most posterior mass within +/- 2 is the Bayes estimator for "within two points": on 2,000 planted
    # shifts it is there 90.2% of the time, the least-squares split 85.5% (seed 31).
    rng = np.random.default_rng(31)
    board = least_squares = 0
    for _ in range(2000):
        values, at = _planted(rng)
        board += abs(changes._relocate(values, 0, len(values)) - at) <= 2
        least_squares += abs(_least_squares_split(values) - at) <= 2
    assert board / 2000 >= 0.89
    assert board - least_squares >= 60


def test_the_locator_places_a_clear_step_exactly_and_a_flat_run_without_failing():
    step = [10.0, 10.1, 9.9, 10.0, 10.05, 12.0, 12.1, 11.9, 12.0, 12.05, 11.95]
    assert changes._relocate(step, 0, len(step)) == 5
    assert changes._relocate([0.0, *step], 1, len(step) + 1) == 6  # an index into the whole series
    assert 1 <= changes._relocate([3.0] * 8, 0, 8) <= 7
    assert changes._relocate([1.0, 2.0], 0, 2) == 1


def test_at_most_one_false_change_point_per_thousand_points_without_a_shift():
    rng = np.random.default_rng(25)
    points = 0
    false = 0
    while points < 3000:
        values = [float(v) for v in 100 * (1 + 0.03 * rng.standard_normal(60))]
        false += len(changes.detect(values))
        points += len(values)
    assert false <= points / 1000


def test_a_change_point_says_its_direction_ratio_and_interval():
    values = [10.0 + 0.05 * (i % 3) for i in range(15)] + [11.0 + 0.05 * (i % 3) for i in range(15)]
    [latency] = changes.detect(values, lower_better=True)
    [throughput] = changes.detect(values, lower_better=False)
    assert latency.index == 15 and latency.stats.verdict == "slower"
    assert throughput.stats.verdict == "faster"
    ratio = latency.stats.ratio
    assert ratio is not None and ratio.low is not None and ratio.high is not None
    assert ratio.low <= ratio.value <= ratio.high and ratio.low > 1.05
    assert changes.detect(values[:5]) == []  # too short to say


def _line(value: float, seed: int) -> dict:
    samples = [float(x) for x in np.random.default_rng(seed).normal(value, value * 0.01, 10)]
    return {"name": "allreduce_latency_us", "value": value, "unit": "us", "tags": {"tokens": 8}, "samples": samples}


def test_a_regression_after_a_torch_upgrade_is_found_with_its_stack_diff_and_told(engine):
    seed(engine, {"key": "nccl"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        a = approach(s, "nccl")
        notifications.create_target(
            s, "json://localhost/hook", [NotificationEvent.regression_detected], campaign=campaign(s), actor="t"
        )
        old = [end_trial(s, a, node, metrics=[_line(100.0, i)]) for i in range(10)]
        mark_connected(s, node, NEW_TORCH, [])
        new = [end_trial(s, a, node, metrics=[_line(106.0, 100 + i)]) for i in range(10)]
        a.status = ApproachStatus.adopted  # adopted on the old stack, say; the pass reads it as it is now
        s.add(a)
    with session_scope(engine) as s:
        assert changes.pass_once(s) == [(campaign(s).id, approach(s, "nccl").id)]
    with session_scope(engine) as s:
        [point] = changes.of_approach(s, approach(s, "nccl"))
        assert (point.trial_id, point.before_trial_id) == (new[0].id, old[-1].id)
        assert point.metric == "allreduce_latency_us" and point.point == "tokens=8" and point.verdict == "slower"
        assert point.low is not None and point.high is not None and point.low < point.ratio < point.high
        assert point.ratio == pytest.approx(1.06, abs=0.01)
        assert point.stack_diff == "torch 2.10.0+cu128 -> 2.11.0"
        proposal = changes.reopen_proposal(approach(s, "nccl"), [point])
        assert proposal is not None and "Re-open nccl" in proposal and "torch 2.10.0+cu128 -> 2.11.0" in proposal
        [told] = s.exec(select(NotificationOutbox).where(NotificationOutbox.event == "regression.detected")).all()
        assert "torch 2.10.0+cu128 -> 2.11.0" in told.body and told.link == "/campaigns/c/approaches/nccl"
        assert [(c, key) for c, key in changes.of_campaign(s, campaign(s))] == [(point, "nccl")]
    with session_scope(engine) as s:  # nothing new: nothing recomputed, nothing told again
        assert changes.pass_once(s) == []
        assert len(s.exec(select(NotificationOutbox)).all()) == 1


def test_only_series_that_got_a_new_trial_are_recomputed(engine, monkeypatch):
    seed(engine, {"key": "nccl"}, {"key": "symm"})
    with session_scope(engine) as s:
        node_a, node_b = runner(s, "node-a", OLD_STACK), runner(s, "node-b", NEW_TORCH)
        nccl, symm = approach(s, "nccl"), approach(s, "symm")
        for i in range(4):
            for a, r in ((nccl, node_a), (nccl, node_b), (symm, node_a)):
                end_trial(s, a, r, metrics=[_line(100.0, i)])
        ids = {"nccl": nccl.id, "symm": symm.id, "a": node_a.id, "b": node_b.id}
    calls: list[tuple[int, int]] = []
    real = changes.load_series

    def counted(session, approach_id: int, runner_id: int) -> list[changes.Series]:
        calls.append((approach_id, runner_id))
        return real(session, approach_id, runner_id)

    monkeypatch.setattr(changes, "load_series", counted)
    with session_scope(engine) as s:
        changes.pass_once(s)
    assert sorted(calls) == sorted([(ids["nccl"], ids["a"]), (ids["nccl"], ids["b"]), (ids["symm"], ids["a"])])
    calls.clear()
    with session_scope(engine) as s:
        end_trial(s, approach(s, "nccl"), s.get_one(Runner, ids["b"]), metrics=[_line(100.0, 9)])
    with session_scope(engine) as s:
        changes.pass_once(s)
        assert changes.pass_once(s) == []
        scans = {(c.approach_id, c.runner_id): c.last_trial_id for c in s.exec(select(ChangeScan))}
    assert calls == [(ids["nccl"], ids["b"])]
    assert len(scans) == 3
    with session_scope(engine) as s:
        assert s.exec(select(ChangePoint)).all() == []  # flat series: no change points


def _allreduce(latency: float, seed: int) -> list[dict]:
    """The allreduce recipe's lines at one size: the latency with its samples, then the bandwidths derived
    from its median (algbw = bytes / latency, busbw = algbw x 2(n-1)/n)."""
    line = _line(latency, seed)
    median = float(np.median(line["samples"]))
    line["value"] = median
    algbw = 57344 / (median * 1e-6) / 1e9
    tags = {"tokens": 8}
    return [
        line,
        {"name": "allreduce_algbw_gbps", "value": algbw, "unit": "GB/s", "tags": tags},
        {"name": "allreduce_busbw_gbps", "value": algbw * 1.75, "unit": "GB/s", "tags": tags},
    ]


def test_a_change_is_found_on_the_latency_once_not_on_the_bandwidths_derived_from_it(engine):
    """Issue 32 item 10: a 3% latency improvement was listed twice on algbw/busbw (identical numbers) and
    not at all on the latency: the threshold was not symmetric (1.03 in bandwidth is 0.971 in latency)."""
    seed(engine, {"key": "nccl"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        a = approach(s, "nccl")
        for i in range(12):
            end_trial(s, a, node, metrics=_allreduce(100.0, i))
        for i in range(12):
            end_trial(s, a, node, metrics=_allreduce(100.0 / 1.035, 100 + i))
    with session_scope(engine) as s:
        changes.pass_once(s)
        stored = s.exec(select(ChangePoint)).all()
        assert [(c.metric, c.verdict) for c in stored] == [("allreduce_latency_us", "faster")]
        assert [c.metric for c, _ in changes.of_campaign(s, campaign(s))] == ["allreduce_latency_us"]
        assert {x.metric for x in changes.load_series(s, approach(s, "nccl").id, node.id)} == {"allreduce_latency_us"}  # type: ignore[arg-type]


def test_the_board_rule_labels_otavas_change_points_and_never_adds_one(monkeypatch):
    """The split is tested by Otava's own significance test; the relocation and the interval only place
    and label it (or drop it under the minimum effect), so a series Otava finds flat has no change point."""
    values = [10.0 + 0.05 * (i % 3) for i in range(15)] + [11.0 + 0.05 * (i % 3) for i in range(15)]
    monkeypatch.setattr(changes, "compute_change_points", lambda *a, **k: ([], None))
    assert changes.detect(values) == []
    small = [10.0 + 0.05 * (i % 3) for i in range(15)] + [10.1 + 0.05 * (i % 3) for i in range(15)]
    monkeypatch.undo()
    assert [int(c.index) for c in changes.compute_change_points(small, window_len=100, max_pvalue=1e-3)[0]]
    assert changes.detect(small) == []  # a 1% step Otava finds: under the 3% minimum, dropped
