"""The batch-1 report is the answer at batch 1, not a second model (issue 33, must-hold 1): on the committed
sweep, the Kimi demo campaign and the MoE results campaign, every figure the report shows for an approach on the
grid is its batch-1 cell's, an approach off the grid shows no speedup and says why, every answer of a measured
approach agrees with its cell, and a reported allreduce figure is answered by the same formula with the grid's
batch-1 inputs."""

from __future__ import annotations

import numpy as np
import pytest

from app.domain import campaigns
from app.domain.answer import model as formula
from app.domain.answer.grid import Cell
from app.domain.answer.inputs import WhatIf
from app.domain.answer.metrics import CampaignMetrics, MetricRow
from app.domain.answer.model import BreakEvenCurve, CycleCosts
from app.domain.answer.query import AnswerQuery
from app.domain.answer.read import Answer, read_answer
from app.domain.answer.report import NO_ALLREDUCE_KINDS, measures_allreduce
from app.domain.demo import load_demo
from app.models import Approach
from app.protocol.metrics import MetricName
from app.schemas import ApproachCreate
from runners.recipes import recipes
from tests.support.results import ALPHAS, import_results
from tests.support.speculation import build_sweep_campaign


def _cell(found: Answer, key: str) -> Cell | None:
    """The approach's grid cell at batch 1 and the campaign's draft steps, read from the grid itself."""
    inputs = found.report.inputs
    k = int(inputs.draft_steps.value or inputs.verify_tokens - 1)
    approach = found.speculation.approach(key)
    cell = approach.cell(1, k) if approach is not None else None
    return cell if cell is not None and cell.tau_star is not None else None


def assert_the_report_is_the_grid_at_batch_1(found: Answer) -> int:
    """Every point and answer of the report against the grid's batch-1 cells; returns the points on the grid."""
    report = found.report
    on_grid = 0
    for p in report.points:
        cell = _cell(found, p.key)
        if cell is None:
            # Off the grid: no speedup and no savings from a second path, and the grid's reason said.
            assert p.speedup is None and p.savings_ms is None and p.cell is None, p.title
            assert p.grid_note.startswith("not on the grid"), p.title
            continue
        on_grid += 1
        assert p.cell == cell and cell.tau_star is not None
        assert p.tau_star == cell.tau_star.value
        assert p.speedup == (cell.speedup.value if cell.speedup is not None else None)
        # Savings and communication from the cell's own inputs (T_verify = compute + N_ar x t_ar).
        n_ar = found.speculation.n_ar if cell.t_ar_us is not None else 0
        comm = (n_ar or 0) * (cell.t_ar_us or 0.0) / 1000.0
        assert p.comm_ms == pytest.approx(comm, rel=1e-9, abs=1e-12)
        tau = found.speculation.tau.get(cell.draft_tokens)
        assert p.tau == (tau.value if tau is not None else None)
        if tau is None:
            assert p.savings_ms is None and p.speedup is None and p.profitable is None
        else:
            assert cell.t_verify_ms is not None and cell.t_base_ms is not None and cell.t_draft_ms is not None
            assert cell.speedup is not None
            compute = cell.t_verify_ms - comm
            savings = tau.value * cell.t_base_ms - cell.t_draft_ms - compute
            assert p.savings_ms == pytest.approx(savings, rel=1e-9)
            assert p.profitable == (cell.speedup.value > 1)
            if n_ar:
                assert p.break_even_t_ar_us == pytest.approx(savings / n_ar * 1000.0, rel=1e-9)
            else:
                assert p.break_even_t_ar_us is None
        verdict = report.answer_of(p)
        assert verdict is not None and verdict.measured
        assert verdict.tau_star == cell.tau_star.value and verdict.tau == p.tau
        assert verdict.speedup == p.speedup and verdict.profitable == p.profitable
    # A reported figure: the formula with the grid's batch-1 inputs (report.inputs is read.at_batch_1's).
    inputs = report.inputs
    for r in report.references:
        if report.curve is None:
            assert r.tau_star is None
            continue
        draft = inputs.draft_ms or 0.0
        compute = inputs.verify_compute_ms.value or 0.0
        allreduces, t_base = inputs.allreduces_per_verify.value, inputs.t_base.value
        assert allreduces is not None and t_base is not None
        expected = (draft + compute + allreduces * r.latency.t_ar_us / 1000.0) / t_base
        assert r.tau_star == pytest.approx(expected, rel=1e-12)
        answer = report.answer_of(r)
        assert answer is not None and answer.tau_star == r.tau_star
    return on_grid


def test_the_committed_sweep_report_is_its_grid_at_batch_1(session):
    campaign = import_results(session, "speculation-sweep-h200x1", ALPHAS)
    found = read_answer(session, campaign)
    assert assert_the_report_is_the_grid_at_batch_1(found) >= 1
    assert any(p.speedup is not None for p in found.report.points)
    # Without an accept length the grid gives tau* alone, and so does the report.
    campaign.accept_alphas = []
    session.flush()
    assert assert_the_report_is_the_grid_at_batch_1(read_answer(session, campaign)) >= 1


def test_the_sweep_report_counts_the_allreduces_it_measured_none_at_world_size_1(session):
    """The sweep ran at world size 1 (TP 1): its verify step runs no allreduce, so the report's N_ar is 0, as its
    grid cells' is, not the campaign's default 122 (which drew a curve and a break-even t_ar of 193.9 us per
    allreduce that nothing measured). The grid's cell still answers."""
    campaign = import_results(session, "speculation-sweep-h200x1", ALPHAS)
    found = read_answer(session, campaign)
    report = found.report
    n_ar = report.inputs.allreduces_per_verify
    assert n_ar.value == 0 and n_ar.source.startswith("world size 1: no allreduces in the verify step"), n_ar
    assert report.world_1 and report.curve is None and not report.missing
    assert report.costs is not None and report.costs.break_even_t_ar_us is None
    assert report.points and all(p.world_1 and p.comm_ms == 0 and p.cell is not None for p in report.points)
    assert all(p.cell.n_ar == 0 for p in report.points if p.cell is not None)
    head = report.headline
    assert head is not None and head.world_1 and head.profitable and head.speedup == report.points[0].speedup
    assert assert_the_report_is_the_grid_at_batch_1(found) == len(report.points)
    # A count asked for in the what-if is the person's: the curve is drawn with it.
    asked = read_answer(session, campaign, AnswerQuery(what_if=WhatIf(allreduces_per_verify=122))).report
    assert asked.inputs.allreduces_per_verify.value == 122 and asked.curve is not None and not asked.world_1
    # A reported allreduce figure is placed on the campaign's curve: N_ar stays the campaign's.
    campaign.reported = [{"label": "NCCL on PCIe", "t_ar_us": 200.0, "baseline": True, "source": "seed"}]
    session.flush()
    reported = read_answer(session, campaign).report
    assert reported.inputs.allreduces_per_verify.value == 122 and reported.curve is not None
    assert not reported.world_1 and reported.curve.n_ar == 122


def test_a_campaign_that_communicates_keeps_its_allreduce_count(session):
    report = read_answer(session, import_results(session, "allreduce-shootout-h200x2")).report
    assert report.inputs.allreduces_per_verify.value == 122 and report.curve is not None and not report.world_1


def test_the_moe_results_report_is_its_grid_at_batch_1(session):
    campaign = import_results(session, "moe-sweep-h200x1")
    assert_the_report_is_the_grid_at_batch_1(read_answer(session, campaign))
    campaign.accept_alphas = ALPHAS
    session.flush()
    assert_the_report_is_the_grid_at_batch_1(read_answer(session, campaign))


def test_the_kimi_demo_report_answers_its_reported_figures_with_the_grid_inputs(session):
    load_demo(session)
    session.flush()
    found = read_answer(session, campaigns.get_campaign(session, "kimi-k25-eagle3"))
    assert_the_report_is_the_grid_at_batch_1(found)
    base = found.report.baseline_reference
    assert base is not None and base.tau_star == pytest.approx(122 * 0.2 / (1000 / 82), abs=1e-12)


def test_the_shootout_report_is_its_grid_at_batch_1(session):
    assert_the_report_is_the_grid_at_batch_1(read_answer(session, import_results(session, "allreduce-shootout-h200x2")))


def test_one_formula_on_floats_and_arrays():
    """The scalar model and the grid call the same functions: a float and a numpy array give the same number."""
    costs = CycleCosts(t_base_ms=1000 / 82, tau=2.6, draft_ms=3 * 0.9, verify_compute_ms=9.08, n_ar=122)
    t_ar = np.array([5.3, 20.0, 200.0])
    verify = formula.verify_ms(costs.verify_compute_ms, formula.comm_ms(costs.n_ar, t_ar))
    grid_tau_star = formula.break_even_tau(costs.t_base_ms, costs.draft_ms, verify)
    grid_speedup = formula.speedup(costs.tau, costs.t_base_ms, costs.draft_ms, verify)
    curve = BreakEvenCurve(costs.t_base_ms, costs.n_ar, costs.draft_ms, costs.verify_compute_ms)
    for i, t in enumerate(t_ar.tolist()):
        assert curve.tau_star(t) == costs.break_even_tau(t) == grid_tau_star[i]
        assert curve.speedup(costs.tau, t) == costs.speedup(t) == grid_speedup[i]
        assert costs.profitable(t) == (grid_speedup[i] > 1)


def test_an_approach_off_the_grid_shows_no_speedup_and_says_why(session):
    """A measured allreduce whose curve does not reach the verify message size: the report places it at its
    nearest measured t_ar on the chart (tau* there) but computes no speedup for it; its answer is undecided and
    names the grid's reason. The synthetic sweep's own approaches stay their cells."""
    b = build_sweep_campaign(session, slug="off-grid", r=4)
    far = campaigns.add_approach(session, b.campaign, ApproachCreate(key="far", title="far curve"), actor="t")
    tags = {"backend": "nccl", "mode": "graph", "method": "graph-replay", "world_size": 2, "device": "cuda"}
    b.trial(
        far, [("allreduce_latency_us", us, {**tags, "bytes": n}, None) for n, us in ((1 << 22, 90.0), (1 << 24, 300.0))]
    )
    session.flush()
    found = read_answer(session, b.campaign)
    assert assert_the_report_is_the_grid_at_batch_1(found) == len(b.allreduces)
    point = next(p for p in found.report.points if p.key == "far")
    assert point.cell is None and point.speedup is None and point.savings_ms is None and point.profitable is None
    assert point.grid_note.startswith("not on the grid at batch 1, 3 draft tokens: ") and "outside" in point.grid_note
    assert point.tau_star == found.report.curve.tau_star(point.latency.t_ar_us)  # type: ignore[union-attr]
    verdict = found.report.answer_of(point)
    assert verdict is not None and verdict.profitable is None and verdict.speedup is None
    assert verdict.grid_note == point.grid_note


def _approach(recipe: dict | None) -> Approach:
    return Approach(id=7, campaign_id=1, key="a", title="A", recipe=recipe)


def _steps(**tags) -> CampaignMetrics:
    """One trial of approach 7 that measured a decode step under `tags`."""
    return CampaignMetrics([MetricRow(3, 7, MetricName.DECODE_STEP_MS, 16.1, tags, 0, 0)])


@pytest.mark.parametrize(
    ("recipe", "metrics", "candidate"),
    [
        ({"kind": "draft_step", "params": {"world_size": 8}}, None, False),  # times a draft head, never a t_ar
        ({"kind": "engine_acceptance", "params": {}}, None, False),  # reads acceptance counters
        ({"kind": "verify_step", "params": {"world_size": 1}}, None, False),  # one GPU: no allreduce
        ({"kind": "moe_step", "params": {"world_size": "1"}}, None, False),  # as the MoE results file spells it
        ({"kind": "sglang_server", "params": {"tp_size": 1}}, None, False),
        ({"kind": "verify_step", "params": {}}, _steps(world_size=1, allreduces=0), False),  # ran on one GPU
        ({"kind": "verify_step", "params": {}}, _steps(world_size=2, allreduces=122), True),
        ({"kind": "verify_step", "params": {}}, None, True),  # not run yet: every visible GPU, maybe several
        ({"kind": "verify_step", "params": {"world_size": 2}}, None, True),
        ({"kind": "allreduce", "params": {"tokens": [1, 4]}}, None, True),
        ({"kind": "sglang_server", "params": {"tp_size": 8}}, None, True),  # the Kimi demo's approaches
        ({"kind": "command", "params": {"argv": ["./all_reduce_perf"]}}, None, True),
        (None, None, True),  # no recipe yet: an inventory item
    ],
)
def test_an_allreduce_candidate_is_an_approach_with_an_allreduce_to_measure(recipe, metrics, candidate):
    assert measures_allreduce(_approach(recipe), metrics or CampaignMetrics([])) is candidate


def test_the_kinds_that_never_measure_an_allreduce_are_recipe_kinds():
    assert NO_ALLREDUCE_KINDS <= set(recipes())


def test_unmeasured_lists_only_allreduce_candidates(session):
    """ "No GPU allreduce latency at 56 KiB yet: ..." names the approaches waiting for an allreduce latency. The
    sweep's decode, verify and draft steps on one GPU have none to measure (it listed all eight of them); a
    draft step never measures one; an allreduce candidate that has not run stays listed."""
    assert read_answer(session, import_results(session, "speculation-sweep-h200x1", ALPHAS)).report.unmeasured == ()
    shootout = import_results(session, "allreduce-shootout-h200x2")
    unmeasured = read_answer(session, shootout).report.unmeasured
    titles = {a.key: a.title for a in campaigns.approaches(session, shootout)}
    for key in ("draft-step-graph", "draft-step-eager", "draft-step-cpu"):
        assert titles[key] not in unmeasured, key
    # Measured at the sizes around the verify step's 56 KiB (issue 43 item 8): no longer waiting.
    for key in ("nccl-graph", "verify-step-nccl-graph"):
        assert not any(u.startswith(titles[key]) for u in unmeasured), key
    # Waiting still, each with why: a decode step's recipe runs 1 token (14 KiB), a CPU one runs gloo.
    for key in ("decode-step-nccl-graph", "gloo-cpu"):
        assert any(u.startswith(titles[key]) for u in unmeasured), key
    assert f"{titles['decode-step-nccl-graph']} (its recipe runs 1 token: 14 KiB)" in unmeasured
    load_demo(session)
    session.flush()
    kimi = campaigns.get_campaign(session, "kimi-k25-eagle3")
    report = read_answer(session, kimi).report
    # None has run: each is listed, with the size a figure was reported at, if any; but the custom allreduce,
    # whose reported 38 tok/s stands for it (a reported figure with a throughput needs no latency).
    waiting = [a.title for a in campaigns.approaches(session, kimi) if a.key != "sglang-custom-allreduce"]
    assert len(report.unmeasured) == len(waiting)
    assert all(any(u == t or u.startswith(f"{t} (") for u in report.unmeasured) for t in waiting)
    assert "FlashInfer PCIe-IPC allreduce (reported only at 12 KiB)" in report.unmeasured
