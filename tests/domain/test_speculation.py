"""The model over (batch, draft tokens): cases worked by hand, refusal to extrapolate, indistinguishable
approaches, and the bootstrap's coverage (seeded). Pure: inputs built directly, no database."""

from __future__ import annotations

import numpy as np
import pytest

from app.cli.answer import tier_lines
from app.domain.answer.cells import bracket
from app.domain.answer.grid import ApproachAnswer, Cell, Interval, accept_length_from_alphas, measured
from app.domain.answer.grid import (
    Value as Measured,
)
from app.domain.answer.speculation import speculation_answer
from tests.support.speculation import approach, linear_curve, spec

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def cell(a: ApproachAnswer | None, batch: int, k: int) -> Cell:
    assert a is not None
    found = a.cell(batch, k)
    assert found is not None
    return found


def fig(figure: Interval | None) -> Interval:
    assert figure is not None
    return figure


def bounds(figure: Interval | None) -> tuple[float, float]:
    f = fig(figure)
    assert f.low is not None and f.high is not None
    return f.low, f.high


def samples(values) -> list[float]:
    return [float(x) for x in values]


def fig_of(a: ApproachAnswer | None) -> Interval | None:
    assert a is not None
    return a.headline


def test_break_even_batch_in_closed_form():
    # By hand (docs/profitability.md, worked example): T_base = 10, draft 1, verify compute 11 ms at every
    # batch; t_ar = bytes / 4096 us, so at k = 1 one allreduce takes b us and N_ar = 10 of them b / 100 ms.
    # tau(1) = 2: speedup(b) = 20 / (12 + b / 100) > 1  <=>  b < 800, so B* = 512 on this grid and 1024 loses.
    curve = linear_curve(1 / 4096, [4096, 4096 * 64, 4096 * 2048])
    answer = speculation_answer(spec([approach("nccl", BATCHES, [1], curve=curve)], BATCHES, [1], {1: 2.0}))
    a = answer.approaches[0]
    assert a.break_even_batch == 512
    assert a.first_losing_batch == 1024
    assert a.best_draft_tokens[512] == 1 and a.best_draft_tokens[1024] == 0
    c = cell(a, 512, 1)
    assert c.t_ar_us == pytest.approx(512.0)  # log-log interpolation is exact on a power law
    assert c.t_verify_ms == pytest.approx(11 + 5.12)
    assert fig(c.tau_star).value == pytest.approx((1 + 11 + 5.12) / 10)
    assert fig(c.speedup).value == pytest.approx(20 / 17.12)
    assert fig(cell(a, 1024, 1).speedup).value == pytest.approx(20 / 22.24)
    assert fig(c.speedup).no_samples and fig(c.speedup).low is None  # no samples: a point estimate, said so
    assert answer.sentence == (
        "On this node EAGLE-3 pays up to batch 512 with 1 draft token using nccl; above batch 512 turn it off "
        "(at batch 1024 it does not pay)."
    )


def test_best_draft_length_per_batch_from_alphas():
    # tau(k) from alpha = 0.8, 0.5, 0.25: 1.8, 2.2, 2.3. World size 1 (no allreduce): cycle = k + 11 ms.
    # speedup(k) = 10 tau(k) / (k + 11): 18/12 = 1.5, 22/13 = 1.692, 23/14 = 1.643: k = 2 everywhere.
    taus = {k: accept_length_from_alphas([0.8, 0.5, 0.25], k) for k in (1, 2, 3)}
    assert taus == pytest.approx({1: 1.8, 2: 2.2, 3: 2.3})
    answer = speculation_answer(spec([approach("tp1", [1, 8], [1, 2, 3], world=1)], [1, 8], [1, 2, 3], taus))
    a = answer.approaches[0]
    assert a.best_draft_tokens == {1: 2, 8: 2}
    assert fig(cell(a, 8, 3).speedup).value == pytest.approx(23 / 14)
    assert cell(a, 8, 3).note == "world size 1: no allreduce"
    with pytest.raises(ValueError, match="cannot give tau at 4"):
        accept_length_from_alphas([0.8, 0.5, 0.25], 4)


def test_outside_the_measured_sizes_is_refused_and_said():
    assert bracket([4096, 65536], 1 << 20).outside.endswith("not extrapolated")
    curve = linear_curve(1 / 4096, [4096, 4096 * 4])  # measured up to batch 4 at k = 1
    answer = speculation_answer(spec([approach("symm", [1, 4, 16], [1], curve=curve)], [1, 4, 16], [1], {1: 2.0}))
    a = answer.approaches[0]
    assert cell(a, 4, 1).speedup is not None
    open_cell = cell(a, 16, 1)
    assert open_cell.speedup is None and open_cell.tau_star is None and open_cell.t_verify_ms is None
    assert "64 KiB is outside the measured allreduce sizes (4 KiB-16 KiB): not extrapolated" in open_cell.note
    assert 16 not in a.best_draft_tokens
    assert any(m.approach == "symm" and m.what == "allreduce latency at 64 KiB" for m in answer.missing)
    assert a.break_even_batch == 4
    assert answer.sentence.endswith("above batch 4 it is not measured.")


def _noisy(rng, mean, sd, n=20):
    return measured(mean, samples(rng.normal(mean, sd, n)), "synthetic")


def test_approaches_not_shown_to_differ_share_a_tier_with_the_comparisons_label():
    rng = np.random.default_rng(3)
    sizes = [4096, 4096 * 8]
    # Two allreduces 2% apart with 10% noise per sample: their intervals overlap. A third is far slower.
    a1 = approach("one-shot", [1], [1], verify=_noisy(rng, 11.0, 1.1), curve={n: _noisy(rng, 100.0, 10) for n in sizes})
    a2 = approach("two-shot", [1], [1], verify=_noisy(rng, 11.0, 1.1), curve={n: _noisy(rng, 102.0, 10) for n in sizes})
    a3 = approach(
        "nccl-eager", [1], [1], verify=_noisy(rng, 11.0, 1.1), curve={n: _noisy(rng, 400.0, 10) for n in sizes}
    )
    answer = speculation_answer(spec([a3, a2, a1], [1], [1], {1: 2.0}))
    assert answer.tiers[0] == tuple(sorted(answer.tiers[0], key=lambda k: -fig(fig_of(answer.approach(k))).value))
    assert set(answer.tiers[0]) == {"one-shot", "two-shot"}
    assert answer.tiers[1] == ("nccl-eager",)
    assert "not shown to differ from it by the minimum effect at the campaign's confidence" in answer.sentence
    # The tier is the comparisons' rule (statistics.finding_of), not an overlap of intervals: the ratio of the two
    # headline speedups over the same replicates, labelled; the far slower one is shown slower, so not listed.
    member = next(k for k in answer.tiers[0][1:])
    label = answer.tier_verdicts[member]
    assert label.leader == answer.tiers[0][0] and label.verdict in ("inconclusive", "equivalent")
    assert label.low is not None and label.high is not None and label.low < 1 < label.high
    assert label.words in ("not shown to differ", "equivalent") and "nccl-eager" not in answer.tier_verdicts
    # `campaign answer` prints the same label, the rule and the ratio with its interval.
    (line,) = tier_lines(answer)
    assert line.startswith(f"not ranked: {member} against {label.leader}: {label.words} by the minimum effect (")
    assert f"ratio {label.ratio:.3f} [{label.low:.3f}, {label.high:.3f}]" in line
    s1, s2 = (fig(cell(answer.approach(k), 1, 1).speedup) for k in ("one-shot", "two-shot"))
    low, high = bounds(s1)
    assert s1.overlaps(s2) and low < s1.value < high
    slow = fig(cell(answer.approach("nccl-eager"), 1, 1).speedup)
    assert not slow.overlaps(s1)


def test_a_dead_end_is_never_the_one_to_deploy():
    curve = linear_curve(1 / 4096, [4096, 4096 * 64])
    fast = approach("fast", [1], [1], curve=curve, status="dead_end")
    slow = approach("slow", [1], [1], curve=linear_curve(400 / 4096, [4096, 4096 * 64]))  # 8% slower: shown
    answer = speculation_answer(spec([fast, slow], [1], [1], {1: 2.0}))
    assert answer.tiers[0] == ("fast",)
    assert answer.chosen is not None and answer.chosen.key == "slow"


def test_unstable_inputs_are_marked():
    rng = np.random.default_rng(5)
    noisy = measured(11.0, samples(rng.normal(11.0, 2.2, 30)), "noisy")  # CV ~ 20%
    assert noisy.unstable
    a = approach("tp1", [1], [1], verify=noisy, world=1)
    answer = speculation_answer(spec([a], [1], [1], {1: 2.0}))
    c = cell(answer.approaches[0], 1, 1)
    assert fig(c.speedup).unstable and fig(c.tau_star).unstable
    assert answer.approaches[0].unstable_inputs == ("verify compute at batch 1, 1 draft tokens",)
    figure = next(f.figure for f in answer.inputs if f.name.startswith("verify compute"))
    low, high = bounds(figure)
    assert figure.unstable and low < figure.value < high


def test_no_accept_length_gives_tau_star_only_and_asks_for_it():
    curve = linear_curve(1 / 4096, [4096, 4096 * 64])
    answer = speculation_answer(spec([approach("nccl", [1, 4], [1, 2], curve=curve)], [1, 4], [1, 2], {}))
    a = answer.approaches[0]
    assert all(c.speedup is None for c in a.cells) and a.break_even_batch is None
    # The campaign's draft steps (1) at the smallest batch: 4 KiB per allreduce, 1 us each, 10 of them.
    assert a.headline_k == 1
    assert fig(a.tau_star).value == pytest.approx((1 + 11 + 10 * 1.0 / 1000) / 10)
    assert answer.sentence.startswith("On this node EAGLE-3 needs an accept length above")
    assert any(m.what == "accept length tau at 1, 2 draft tokens" for m in answer.missing)


def test_bootstrap_interval_covers_the_true_speedup():
    """200 seeded runs: samples from known distributions (normal decode and verify steps, a lognormal
    allreduce), the speedup's 95% interval must cover the true speedup in at least 90% of them."""
    t_base, verify, t_ar, n_ar, tau = 10.0, 11.0, 50.0, 10, 2.0
    lognormal_mean = t_ar  # lognormal with this mean: mu = log(mean) - s^2 / 2
    s = 0.3
    true = tau * t_base / (1.0 + verify + n_ar * t_ar / 1000.0)
    covered = 0
    for run in range(200):
        rng = np.random.default_rng(run)
        ar = samples(rng.lognormal(np.log(lognormal_mean) - s**2 / 2, s, 25))
        a = approach(
            "x",
            [1],
            [1],
            base=measured(0, samples(rng.normal(t_base, 1.0, 25)), ""),
            verify=measured(0, samples(rng.normal(verify, 1.5, 25)), ""),
            curve={4096: measured(0, ar, ""), 4096 * 8: Measured(t_ar)},
        )
        answer = speculation_answer(spec([a], [1], [1], {1: tau}, n_ar=n_ar), seed=run)
        low, high = bounds(cell(answer.approaches[0], 1, 1).speedup)
        covered += low <= true <= high
    assert covered >= 180, f"covered {covered} of 200"


def test_figures_with_different_sample_counts_are_resampled_together():
    """Figures of 20 and of 10 samples (graph replays and eager samples in one campaign), in groups of different
    sizes: one bootstrap still gives every figure its interval (scipy wants its samples of one shape)."""
    rng = np.random.default_rng(11)
    base = measured(10.0, samples(rng.normal(10.0, 0.1, 20)), "base")
    draft = measured(1.0, samples(rng.normal(1.0, 0.01, 20)), "draft")
    verify = measured(11.0, samples(rng.normal(11.0, 0.2, 10)), "verify")  # the only one of 10 samples
    a = approach("tp1", [1], [1], base=base, draft=draft, verify=verify, world=1)
    answer = speculation_answer(spec([a], [1], [1], {1: 2.0}))
    c = cell(answer.approaches[0], 1, 1)
    low, high = bounds(c.speedup)
    assert low < fig(c.speedup).value < high  # speedup = 2 x 10 / (1 + 11) = 1.67
    assert fig(c.speedup).value == pytest.approx(2.0 * 10.0 / 12.0, rel=0.02)


def test_a_difference_below_the_minimum_effect_shares_the_tier_and_is_labelled_so():
    """Exact inputs 0.1% apart: shown different (no interval holds 1), but below the campaign's minimum effect,
    so not a reason to rank; the label says which (issue 34 item 2's labels), where the overlap rule split them."""
    curve = linear_curve(1 / 4096, [4096, 4096 * 64])
    a = approach("a", [1], [1], curve=curve)
    b = approach("b", [1], [1], curve=linear_curve(2 / 4096, [4096, 4096 * 64]))
    answer = speculation_answer(spec([a, b], [1], [1], {1: 2.0}))
    assert answer.tiers == (("a", "b"),)
    label = answer.tier_verdicts["b"]
    assert label.verdict == "below_min_effect" and label.words == "different, below the minimum effect"
    assert label.low is None and label.ratio == pytest.approx(1.6639 / 1.6653, abs=1e-3)  # exact: no interval
    cell_b = answer.approach("b").cell(1, 1)  # type: ignore[union-attr]
    assert cell_b is not None and cell_b.verdict == "faster" and cell_b.pays == "yes"  # 1.66 against 1
