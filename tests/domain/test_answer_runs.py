"""Issue 43 item 12: the answer pairs what was measured in the same run. Each run's speedup is computed from that
run's own figures, then the interval is taken over the runs, so it is as wide as the runs disagree (plus their
within-run noise), not the product of every input's independent 1-degree-of-freedom t posterior."""

from __future__ import annotations

import numpy as np
import pytest

from app.domain.answer.cells import paired_runs
from app.domain.answer.read import read_answer
from app.domain.answer.speculation import speculation_answer
from app.domain.answer.values import exact, of_trials
from tests.support.results import ALPHAS, import_results
from tests.support.speculation import approach, spec

pytestmark = pytest.mark.both_databases  # the answer's metric loading queries (samples JSON cast to text)


def _two_runs(value: float, slower: float, first: int, rng: np.random.Generator):
    """A figure measured once per run: run 1 (trial `first`) and run 2 (trial `first` + 10), run 2 on a machine
    `slower` times slower (it moves every figure of that run), each with 0.2% within-run noise."""
    runs = [list(rng.normal(value * f, value * f * 0.002, 20)) for f in (1.0, slower)]
    return of_trials(runs, "synthetic", (first, first + 10))


def test_figures_of_one_run_move_together_and_the_interval_is_the_runs_spread():
    rng = np.random.default_rng(3)
    base, draft, verify = _two_runs(10.0, 1.3, 1, rng), _two_runs(1.0, 1.3, 2, rng), _two_runs(12.0, 1.3, 3, rng)
    one = approach("one-gpu", [1], [2], base=base, draft=draft, verify=verify, world=1)
    found = speculation_answer(spec([one], [1], [2], {2: exact(2.5, "entered")}))
    cell = found.approaches[0].cell(1, 2)
    assert cell is not None and cell.speedup is not None
    # Both runs' own speedups: 2.5 x 10 / (2 x 1 + 12), the 30% slower run's identical (every figure scaled).
    per_run = 2.5 * 10.0 / (2 * 1.0 + 12.0)
    assert cell.speedup.value == pytest.approx(per_run, rel=0.01)
    half = (cell.speedup.high - cell.speedup.low) / 2 / cell.speedup.value  # type: ignore[operator]
    # Independent inputs drew each from a t with 1 degree of freedom over runs 30% apart: [~0.3, ~6]. Paired,
    # only the within-run noise is left.
    assert half < 0.01, cell.speedup
    assert cell.pays == "yes"


def test_runs_that_disagree_give_an_interval_as_wide_as_their_disagreement():
    rng = np.random.default_rng(4)
    base = of_trials([list(rng.normal(10.0, 0.01, 20)), list(rng.normal(10.4, 0.01, 20))], "s", (1, 11))
    draft = _two_runs(1.0, 1.0, 2, rng)
    verify = _two_runs(12.0, 1.0, 3, rng)
    one = approach("one-gpu", [1], [2], base=base, draft=draft, verify=verify, world=1)
    cell = speculation_answer(spec([one], [1], [2], {2: exact(2.5, "entered")})).approaches[0].cell(1, 2)
    assert cell is not None and cell.speedup is not None
    runs = [2.5 * t / 14.0 for t in (10.0, 10.4)]  # the runs' own speedups: 1.786 and 1.857, 4% apart
    assert cell.speedup.low == pytest.approx(runs[0], rel=0.005)
    assert cell.speedup.high == pytest.approx(runs[1], rel=0.005)


def test_trials_that_interleave_are_not_paired():
    a = of_trials([[1.0, 1.1], [1.2, 1.3]], "s", (1, 3))
    b = of_trials([[1.0, 1.1], [1.2, 1.3]], "s", (2, 4))  # run 1 = #1, #2; run 2 = #3, #4
    assert paired_runs([a, b]) == (2, [0, 1])
    c = of_trials([[1.0, 1.1], [1.2, 1.3]], "s", (1, 4))
    d = of_trials([[1.0, 1.1], [1.2, 1.3]], "s", (5, 6))  # d's first trial is newer than c's second
    assert paired_runs([c, d]) is None


def test_the_committed_sweep_intervals_follow_its_two_runs(session):
    campaign = import_results(session, "speculation-sweep-h200x1", ALPHAS)
    (a,) = read_answer(session, campaign).speculation.approaches
    halves = [
        (c.speedup.high - c.speedup.low) / 2 / c.speedup.value  # type: ignore[operator]
        for c in a.cells
        if c.speedup is not None and c.speedup.low is not None
    ]
    assert len(halves) == 56
    # The two runs' own speedups agree within 0.2-1.9%; the median half-width was 29% (every input a t with 1
    # degree of freedom, drawn independently).
    assert float(np.median(halves)) < 0.02 and max(halves) < 0.05
    assert all(a.cell(b, k).pays == "yes" for b, k in ((1, 4), (8, 3), (128, 1)))  # type: ignore[union-attr]


def test_the_answer_says_how_many_runs_it_pairs():
    rng = np.random.default_rng(5)
    one = approach(
        "one-gpu",
        [1],
        [2],
        base=_two_runs(10.0, 1.1, 1, rng),
        draft=_two_runs(1.0, 1.1, 2, rng),
        verify=_two_runs(12.0, 1.1, 3, rng),
        world=1,
    )
    assert speculation_answer(spec([one], [1], [2], {2: exact(2.5, "entered")})).runs == 2
