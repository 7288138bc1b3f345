"""app/domain/statistics.py on seeded samples: the three verdicts, the interval against scipy's own
bootstrap, the Mann-Whitney p-value, coefficients of variation, samples needed, the metric direction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from app.domain import statistics as st
from app.domain.statistics import Rule, Verdict


def _noise(seed: int, center: float, cv: float, n: int) -> list[float]:
    return list(np.random.default_rng(seed).normal(center, center * cv, n))


def test_a_clear_five_percent_shift_is_faster_or_slower_by_direction():
    a, b = _noise(1, 10.0, 0.01, 20), _noise(2, 9.5, 0.01, 20)  # latency: B 5% lower
    ref, other, pair = st.compare(a, b, lower_better=True)
    assert pair.verdict == Verdict.faster
    assert pair.ratio is not None and pair.ratio.low is not None and pair.ratio.high is not None
    assert pair.ratio.low <= pair.ratio.value <= pair.ratio.high < 1
    assert pair.ratio.value == pytest.approx(np.median(b) / np.median(a))
    assert pair.p_value is not None and pair.p_value < 1e-5
    assert pair.samples_needed is None  # decided: nothing more to gather
    assert not ref.unstable and not other.unstable and ref.n == other.n == 20
    # The same samples read as a throughput (higher is better): slower.
    assert st.compare(a, b, lower_better=False)[2].verdict == Verdict.slower


def test_no_shift_is_indistinguishable_with_the_samples_needed():
    a, b = _noise(3, 10.0, 0.02, 30), _noise(4, 10.0, 0.02, 30)
    ref, other, pair = st.compare(a, b)
    assert pair.verdict == Verdict.indistinguishable
    assert pair.ratio is not None and pair.ratio.low is not None and pair.ratio.high is not None
    assert pair.ratio.low < 1 < pair.ratio.high
    assert pair.p_value is not None and pair.p_value > 0.05
    assert pair.samples_needed == st.samples_needed(ref.cv, other.cv)  # type: ignore[arg-type]
    assert pair.samples_needed is not None and 2 <= pair.samples_needed < 100


def test_a_shift_hidden_by_fifteen_percent_noise_is_unstable_and_needs_many_samples():
    a, b = _noise(5, 10.0, 0.15, 10), _noise(6, 9.5, 0.15, 10)
    ref, other, pair = st.compare(a, b)
    assert pair.verdict == Verdict.indistinguishable
    assert ref.unstable and other.unstable and ref.cv > 0.10 and other.cv > 0.10  # type: ignore[operator]
    # At 15% noise a 3% effect needs hundreds of samples a side, far more than the 10 taken.
    assert pair.samples_needed is not None and pair.samples_needed > 200


def test_a_small_but_real_effect_under_the_minimum_is_indistinguishable():
    a, b = _noise(7, 10.0, 0.002, 50), _noise(8, 9.9, 0.002, 50)  # 1% faster, tight
    pair = st.compare(a, b)[2]
    assert pair.ratio is not None and pair.ratio.high is not None and pair.ratio.high < 1  # real ...
    assert pair.verdict == Verdict.indistinguishable  # ... but under 3%
    assert st.compare(a, b, rule=Rule(min_effect=0.005))[2].verdict == Verdict.faster


@pytest.mark.parametrize("n", [25, 26])  # odd and even: one order statistic, or the mean of two
def test_the_interval_is_scipys_percentile_bootstrap(n):
    a, b = _noise(9, 10.0, 0.05, n), _noise(10, 10.4, 0.05, n)
    rule = Rule(n_resamples=20000)
    pair = st.compare(a, b, rule=rule)[2]

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    ref = sps.bootstrap(
        (np.array(a), np.array(b)), ratio, vectorized=True, paired=False, n_resamples=20000,
        method="percentile", rng=np.random.default_rng(0),
    )  # fmt: skip
    assert pair.ratio is not None
    assert pair.ratio.low == pytest.approx(ref.confidence_interval.low, abs=0.006)
    assert pair.ratio.high == pytest.approx(ref.confidence_interval.high, abs=0.006)


def test_seeded_the_same_samples_give_the_same_interval():
    a, b = _noise(11, 5.0, 0.05, 40), _noise(12, 5.1, 0.05, 40)
    assert st.compare(a, b)[2] == st.compare(a, b)[2]


def test_mann_whitney_needs_six_samples_a_side_and_matches_scipy():
    a, b = _noise(13, 10.0, 0.05, 6), _noise(14, 10.5, 0.05, 7)
    assert st.compare(a, b)[2].p_value == pytest.approx(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert st.compare(a[:5], b)[2].p_value is None


def test_one_sample_a_side_has_a_ratio_but_no_interval_and_no_verdict():
    ref, other, pair = st.compare([10.0], [9.0])
    assert pair.ratio == st.Ratio(0.9, None, None) and pair.verdict == Verdict.indistinguishable
    assert ref.cv is None and pair.samples_needed is None and pair.p_value is None


def test_rows_of_many_sides_and_sizes_in_one_pass_match_one_pair_at_a_time():
    rows = [
        [_noise(20, 10.0, 0.02, 12), _noise(21, 9.0, 0.02, 12), _noise(22, 10.0, 0.02, 30)],
        [_noise(23, 3.0, 0.02, 9), [], _noise(24, 3.3, 0.02, 9)],
    ]
    out = st.compare_rows(rows, lower_better=[True, False])
    assert [p.verdict for p in out[0].pairs] == [Verdict.faster, Verdict.indistinguishable]
    assert out[1].pairs[0].ratio is None and out[1].sides[1].n == 0
    assert out[1].pairs[1].verdict == Verdict.faster  # higher is better there
    for r, row in enumerate(rows):
        for c in range(1, len(row)):
            alone = st.compare(row[0], row[c], lower_better=[True, False][r])[2]
            assert alone.verdict == out[r].pairs[c - 1].verdict
            if alone.ratio is not None:
                assert alone.ratio.value == pytest.approx(out[r].pairs[c - 1].ratio.value)  # type: ignore[union-attr]


def test_a_zero_reference_median_has_no_ratio():
    pair = st.compare([0.0, 0.0, 0.0], [1.0, 1.1, 0.9])[2]
    assert pair.ratio is None and pair.verdict == Verdict.indistinguishable


@pytest.mark.parametrize(
    ("name", "unit", "lower"),
    [
        ("allreduce_latency_us", "us", True),
        ("verify_time_ms", "ms", True),
        ("verify_comm_share", "", True),
        ("output_throughput_tok_s", "tok/s", False),
        ("allreduce_busbw_gbps", "GB/s", False),
        ("accept_length", "", False),
    ],
)
def test_the_direction_of_a_metric(name, unit, lower):
    assert st.lower_is_better(name, unit) is lower


@pytest.mark.parametrize(
    "kwargs", [{"confidence": 1.0}, {"confidence": 0.2}, {"min_effect": 0}, {"min_effect": 1.5}, {"n_resamples": 5}]
)
def test_a_bad_rule_is_refused_with_its_field(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Rule(**kwargs)


def test_a_row_of_one_side_is_refused():
    with pytest.raises(ValueError, match="two sides"):
        st.compare_rows([[[1.0, 2.0]]], lower_better=[True])
