"""The committed 2x H200 results campaign (docs/results/, made by bench/results_campaign.py from the
shootout that ran through the product on the node) imports and answers with no further input: every
model input but the accept length is measured, the break-even curve is exact (not a lower bound), and
each measured allreduce sits on it at the tau* the model gives."""

from __future__ import annotations

import re

import pytest

from app import charts
from app.db import session_scope
from app.domain.answer import profitability_report
from app.state import app_state
from tests.support.results import import_results


@pytest.fixture
def report(app):
    with session_scope(app_state(app).engine) as session:
        campaign = import_results(session, "allreduce-shootout-h200x2")
        yield profitability_report(session, campaign)


def test_the_results_campaign_answers_on_import(report):
    assert report.speculative
    inputs = report.inputs
    # The accept length is the one input that needs the real model; everything else was measured.
    assert [m.what for m in inputs.missing] == ["accept length (tau, incl. the bonus token)"]
    assert inputs.t_base.value == pytest.approx(1000 / inputs.baseline_tok_s.value)
    assert "decode step" in inputs.baseline_tok_s.source and "2x H200" in inputs.baseline_tok_s.source
    curve = report.curve
    assert curve is not None and not curve.lower_bound
    refs = {r.label: r for r in report.references}
    one_shot = refs["torch symmetric memory one-shot, in a CUDA graph of 122, measured"]
    nccl_eager = refs["NCCL, eager, measured"]
    # tau* = (T_draft + T_verify_compute + 122 x t_ar) / T_base, from the file's own inputs.
    for ref in (one_shot, nccl_eager):
        assert ref.tau_star == pytest.approx(curve.tau_star(ref.latency.t_ar_us))
    # What the node measured: symmetric memory in a graph beats eager NCCL by several times at 56 KiB.
    assert one_shot.latency.t_ar_us * 3 < nccl_eager.latency.t_ar_us
    assert 1.0 < one_shot.tau_star < nccl_eager.tau_star < 2.0
    assert report.best_reference is one_shot


def test_the_results_campaign_draws_its_break_even_chart(report):
    fig = charts.break_even_accept_length(report)
    assert fig is not None and fig["layout"]["meta"]["lower_bound"] is False
    markers = [t for t in fig["data"] if t.get("mode") == "markers"]
    # 13 figures in one trace (each named in its hover), not 13 legend entries crushing the plot.
    assert len(markers) == 1 and len(markers[0]["x"]) == len(report.references) >= 10
    assert [c[0] for c in markers[0]["customdata"]] == [r.label for r in report.references]
    lo, hi = fig["layout"]["xaxis"]["range"]
    assert all(lo <= x <= hi for x in markers[0]["x"])
    # Every tau* is above 1, so the axis starts at 1 (tau counts the bonus token) and holds them all.
    y_lo, y_hi = fig["layout"]["yaxis"]["range"]
    assert y_lo == 1.0 and all(y_lo < y < y_hi for y in markers[0]["y"])
    # The best approaches are labelled, without two labels on top of each other.
    labels = fig["layout"]["annotations"]
    assert 1 < len(labels) <= charts.MAX_LABELS
    assert labels[0]["text"] == "torch symmetric memory one-…: τ* 1.32"


def test_the_results_campaign_page_says_its_answer(app, operator_client):
    with session_scope(app_state(app).engine) as session:
        import_results(session, "allreduce-shootout-h200x2")
    html = operator_client.get("/campaigns/allreduce-shootout-h200x2/charts").text
    text = " ".join(re.sub(r"<[^>]+>", "", html).split())
    assert (
        "from the reported figures, speculation pays only above τ* = 1.32 with torch symmetric memory one-shot, "
        "in a CUDA graph of 122, measured (tar 6.5 us, reported): the full break-even (communication, draft and "
        "verify compute)"
    ) in text
    assert 'id="figure-throughput">null' in html  # no throughput measured: no empty bar chart


def test_the_verify_chart_draws_each_measured_allreduce_at_its_point_with_tau_2_4(app):
    """Issue 32 item 6: with tau 2.4 the chart drew the region and y = x over 0-1.15 ms and no point: the
    results campaign's measurements are reported figures, which the chart did not draw."""
    from app.domain.answer import WhatIf

    with session_scope(app_state(app).engine) as session:
        campaign = import_results(session, "allreduce-shootout-h200x2")
        report = profitability_report(session, campaign, WhatIf(accept_length=2.4))
    fig = charts.verify_comm_vs_savings(report)
    assert fig is not None and report.costs is not None
    points = [(x, y) for t in fig["data"] if t.get("mode") == "markers" for x, y in zip(t["x"], t["y"])]
    assert len(points) == len(report.points) + len(report.references) >= 2
    lo, hi = fig["layout"]["xaxis"]["range"]
    assert fig["layout"]["yaxis"]["range"] == [lo, hi]
    for x, y in points:
        assert lo <= x < hi and lo <= y < hi, (x, y, lo, hi)
        assert y == pytest.approx(report.costs.savings_ms)
    xs = sorted(x for x, _ in points)
    refs = sorted(report.costs.comm_ms(r.latency.t_ar_us) for r in report.references)
    assert xs == pytest.approx(sorted(refs + [p.comm_ms for p in report.points]))


def test_approaches_with_a_figure_at_the_verify_size_are_not_listed_as_without_one(report):
    """Issue 43 item 8: the page listed the 13 figures at 56 KiB, then 'No GPU allreduce latency at 56 KiB yet'
    for every approach. An approach reported at the verify size is placed; one measured at another size says it."""
    placed = {r.approach_key for r in report.references if r.bytes == report.inputs.verify_bytes}
    assert len(placed) >= 10
    titles = set(report.unmeasured)
    assert not any(t.startswith(("NCCL, eager", "NCCL in a CUDA graph", "torch symmetric memory")) for t in titles)
    assert "Decode step (1 token), NCCL in a CUDA graph (its recipe runs 1 token: 14 KiB)" in titles
    assert len(titles) == 4  # the two decode steps (14 KiB) and the two CPU gloo approaches
