"""Each chart's figure data from the fixture campaign: traces, points, the break-even line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app import charts
from app.domain import campaigns
from app.domain.answer import (
    WhatIf,
    latency_series,
    load_campaign_metrics,
    profitability_report,
    throughput_rows,
)
from app.domain.timeline import campaign_timeline
from tests.support.charts import SLUG


@pytest.fixture
def campaign(session):
    return campaigns.get_campaign(session, SLUG)


def _series(session, campaign):
    return latency_series(load_campaign_metrics(session, campaign), campaigns.approaches(session, campaign))


def _throughput(session, campaign):
    return throughput_rows(load_campaign_metrics(session, campaign), campaigns.approaches(session, campaign))


def figure(fig: dict[str, Any] | None) -> dict[str, Any]:
    """A chart the data is enough for."""
    assert fig is not None
    return fig


def _trace(fig, name):
    return next(t for t in fig["data"] if t.get("name") == name)


def test_figures_are_plain_json(session, campaign):
    report = profitability_report(session, campaign)
    for fig in (
        charts.verify_comm_vs_savings(report),
        charts.break_even_accept_length(report),
        charts.latency_comparison(report),
        charts.allreduce_latency_vs_size(_series(session, campaign), report.inputs.verify_bytes),
        charts.throughput_vs_baseline(_throughput(session, campaign), 82.0),
        charts.campaign_timeline(campaign_timeline(session, campaign)),
    ):
        assert json.loads(json.dumps(fig)) == fig


def test_chart1_points_and_break_even_line(session, campaign):
    report = profitability_report(session, campaign)
    fig = figure(charts.verify_comm_vs_savings(report))
    line = _trace(fig, "break-even (communication = savings)")
    assert line["mode"] == "lines" and line["x"] == line["y"]  # y = x
    points = {t["name"]: t for t in fig["data"] if t.get("mode") == "markers"}
    assert set(points) == {p.title for p in report.points}
    pcie = points["NCCL on PCIe (seed node)"]
    assert pcie["x"] == [pytest.approx(24.4)] and pcie["y"] == [pytest.approx(2.4 * 1000 / 82 - 10.5)]
    assert pcie["y"][0] < pcie["x"][0]  # below the line: not profitable
    two = points["torch symm-mem two-shot"]
    assert two["y"][0] > two["x"][0]  # above the line: profitable
    hover = pcie["customdata"][0]
    assert hover[0] == "NCCL on PCIe (seed node)" and hover[1] == "dead end"
    assert hover[2] == "torch 2.10.0+cu128 / CUDA 12.8 / SM 12.0" and hover[3] == "2.40"
    assert hover[5].startswith("#") and "not profitable" in hover[9]
    assert fig["layout"]["meta"]["break_even_t_ar_us"] == pytest.approx(153.838, abs=1e-3)
    assert "153.8 us" in fig["layout"]["title"]["subtitle"]["text"]
    # The line spans every point.
    assert max(line["x"]) >= max(t["x"][0] for t in points.values())


def test_chart1_follows_the_what_if(session, campaign):
    before = figure(charts.verify_comm_vs_savings(profitability_report(session, campaign)))
    after = figure(charts.verify_comm_vs_savings(profitability_report(session, campaign, WhatIf(accept_length=1.2))))
    y = lambda fig: _trace(fig, "NCCL eager")["y"][0]  # noqa: E731
    assert y(after) == pytest.approx(1.2 * 1000 / 82 - 10.5) and y(after) < y(before)


def test_chart2_log_log_with_the_verify_size_marked(session, campaign):
    fig = figure(charts.allreduce_latency_vs_size(_series(session, campaign), 57344))
    assert fig["layout"]["xaxis"]["type"] == "log" and fig["layout"]["yaxis"]["type"] == "log"
    graph = _trace(fig, "NCCL in a CUDA graph")
    assert graph["x"] == [14336, 114688, 917504, 3670016] and graph["y"] == [16.6, 16.7, 22.4, 42.3]
    assert _trace(fig, "torch symm-mem two-shot")["y"] == [8.8, 8.8, 11.4]
    marker = _trace(fig, "verify message (56 KiB)")
    assert marker["x"] == [57344, 57344] and marker["mode"] == "lines"
    # Approaches without an allreduce curve have no trace.
    assert "NCCL on PCIe (seed node)" not in {t["name"] for t in fig["data"]}


def test_chart3_bars_baseline_and_dead_ends(session, campaign):
    fig = charts.throughput_vs_baseline(_throughput(session, campaign), 82.0)
    bars = next(t for t in fig["data"] if t["type"] == "bar")
    assert bars["orientation"] == "h"
    values = dict(zip(bars["y"], bars["x"]))
    assert values == {
        "NCCL on PCIe (seed node)": 82.0,
        "FlashInfer PCIe-IPC allreduce": 117.6,
        "SGLang custom allreduce (IPC)": 38.0,
    }
    baseline = _trace(fig, "baseline 82 tok/s")
    assert set(baseline["x"]) == {82.0} and len(baseline["y"]) == 10  # across every approach
    dead = _trace(fig, "dead end")
    assert dead["y"] == ["NCCL on PCIe (seed node)", "SGLang custom allreduce (IPC)", "FlashInfer allreduce fusion"]
    assert dead["x"] == [82.0, 38.0, 0]  # never measured: marked at zero
    reasons = [c[0] for c in dead["customdata"]]
    assert reasons[2] == "FlashInfer JIT has no SM120 target" and "PCIe switch" in reasons[1]


def test_chart4_timeline(session, campaign):
    fig = charts.campaign_timeline(campaign_timeline(session, campaign))
    trials = _trace(fig, "trials")
    # Nine trials, aggregated per approach and state: NCCL on PCIe's two succeeded trials are one span.
    assert trials["x"].count(None) == 8
    assert "2 trials succeeded" in trials["text"]
    dead = _trace(fig, "→ dead end")
    assert set(dead["y"]) == {
        "NCCL on PCIe (seed node)",
        "SGLang custom allreduce (IPC)",
        "FlashInfer allreduce fusion",
    }
    assert all(x.startswith("2026-01-0") for x in dead["x"])
    assert fig["layout"]["xaxis"]["type"] == "date"


def test_chart1_without_points_still_has_the_line():
    from app.domain.answer import CycleCosts, Input, ModelInputs, ProfitabilityReport

    inputs = ModelInputs(
        Input(82.0), Input(1000 / 82), Input(2.0), Input(0), Input(0.0), Input(0.0), Input(122), 4, 7168
    )
    fig = figure(
        charts.verify_comm_vs_savings(ProfitabilityReport(inputs, inputs.curve(), inputs.costs(), (), (), (), (), True))
    )
    assert [t["name"] for t in fig["data"]] == ["profitable region", "break-even (communication = savings)"]
    assert isinstance(inputs.costs(), CycleCosts)


def test_many_approaches_draw_one_trace_per_status():
    from app.domain.answer import ApproachPoint, Input, LatencyEstimate, ModelInputs, ProfitabilityReport

    inputs = ModelInputs(
        Input(82.0), Input(1000 / 82), Input(None), Input(3), Input(None), Input(None), Input(122), 4, 7168
    )
    curve = inputs.curve()
    assert curve is not None
    points = tuple(
        ApproachPoint(
            i,
            f"a{i}",
            f"approach {i}",
            "promising" if i % 2 else "dead_end",
            "",
            "",
            LatencyEstimate(10.0 + i, "measured", "", i),
            curve.tau_star(10.0 + i),
            None,
            "",
            122 * (10.0 + i) / 1000,
            None,
            None,
        )
        for i in range(charts.MAX_TRACES + 10)
    )
    report = ProfitabilityReport(inputs, inputs.curve(), None, points, (), (), (), True)
    fig = figure(charts.break_even_accept_length(report))
    markers = [t for t in fig["data"] if t.get("mode") == "markers"]
    assert sorted(t["name"] for t in markers) == ["dead end (20 approaches)", "promising (20 approaches)"]
    assert sum(len(t["x"]) for t in markers) == len(points)
    assert {c[0] for t in markers for c in t["customdata"]} == {p.title for p in points}  # each still named on hover
    assert json.loads(json.dumps(fig)) == fig


def test_the_heatmaps_colour_scale_spans_the_data_with_white_at_one(session):
    """Issue 32 item 15: zmid 1.0 mirrored the range around 1, so speedups up to 2.5 started the scale at -0.5.
    On the sweep the answer's tests use (its inputs measured under one condition set)."""
    from app.domain.answer.read import read_answer
    from tests.support.speculation import SLUG as SWEEP
    from tests.support.speculation import build_sweep_campaign

    build_sweep_campaign(session)
    answer = read_answer(session, campaigns.get_campaign(session, SWEEP)).speculation
    fig = figure(charts.speedup_heatmap(answer))
    cells = fig["data"][0]
    values = [v for row in cells["z"] for v in row if v is not None]
    assert cells["zmin"] == pytest.approx(max(0.0, min(min(values), 1.0))) and cells["zmin"] >= 0
    assert cells["zmax"] == pytest.approx(max(max(values), 1.0))
    stop, white = cells["colorscale"][1]
    assert white == "#f5f5f5" and cells["zmin"] + stop * (cells["zmax"] - cells["zmin"]) == pytest.approx(1.0)
    assert "zmid" not in cells


def test_an_empty_campaigns_timeline_says_no_history_instead_of_the_year_2000():
    from app.charts.base import template
    from app.domain.timeline import Timeline

    fig = charts.campaign_timeline(Timeline((), (), 0, 0))
    assert fig["data"] == [] and fig["layout"]["xaxis"] == {"visible": False}  # no date axis to default
    assert fig["layout"]["annotations"][0]["text"].startswith("No history yet")
    assert fig["layout"]["template"] == template()
    import plotly.io as pio

    pio.from_json(json.dumps(fig), skip_invalid=False)  # Plotly's schema accepts it
