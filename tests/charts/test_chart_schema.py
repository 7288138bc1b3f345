"""Every chart builder's figure is a plain dict that Plotly's own schema accepts (validated once here, never
at request time), and the demo campaigns' charts draw what issue 21 found missing or misleading: the
reported 38 tok/s, dead ends drawn whole, a log axis where latencies span decades, and the message size
named on every point measured at another size than the axis says."""

from __future__ import annotations

import json
from typing import Any

import plotly.io as pio
import pytest

from app import charts
from app.db import session_scope
from app.domain import inventory
from app.domain.answer import latency_series, load_campaign_metrics, profitability_report, throughput_rows
from app.domain.demo import load_demo
from app.domain.timeline import campaign_timeline
from app.models import Campaign, Trial
from app.web.charts import answer_figures, campaign_answer, throughput_figure
from tests.support.charts import SLUG, add_metrics, build_fixture_campaign


@pytest.fixture
def session(app):
    with session_scope(app.state.engine) as s:
        load_demo(s)
        build_fixture_campaign(s)  # measured speculation: the verify-vs-savings chart too
        s.flush()
        yield s


def _validate(fig: dict[str, Any]) -> None:
    """Plotly's validators over the whole figure (data, layout and template); raises on any unknown or
    ill-typed attribute."""
    pio.from_json(json.dumps(fig), skip_invalid=False)


def _measure_shootout(session, campaign: Campaign) -> None:
    """A GPU node's NCCL graph figure and the two CPU floors of issue 21 (1,819 and 3,829 us)."""
    gpu = {"device": "cuda", "world_size": 2, "dtype": "bf16"}
    cpu = {"device": "cpu", "backend": "gloo", "world_size": 2, "bytes": 57344}
    for key, metrics in (
        ("nccl-graph", [("allreduce_latency_us", 17.4, {**gpu, "backend": "nccl", "mode": "graph", "bytes": 57344})]),
        ("gloo-cpu", [("allreduce_latency_us", 1819.0, cpu)]),
        ("verify-step-gloo-cpu", [("allreduce_latency_us", 3829.0, cpu)]),
    ):
        approach = inventory.get_approach(session, campaign, key)
        assert campaign.id is not None and approach.id is not None and approach.recipe is not None
        trial = Trial(campaign_id=campaign.id, approach_id=approach.id, recipe=approach.recipe, state="succeeded")
        session.add(trial)
        session.flush()
        add_metrics(session, trial, metrics)
    session.flush()


def _every_figure(session, campaign: Campaign) -> list[dict[str, Any]]:
    answer = campaign_answer(session, campaign)
    metrics = load_campaign_metrics(session, campaign)
    approaches = inventory.approaches(session, campaign)
    figures = [
        *answer_figures(answer).values(),  # the page's own guards: each figure the data is enough for
        throughput_figure(answer, campaign),
        charts.allreduce_latency_vs_size(latency_series(metrics, approaches), answer.report.inputs.verify_bytes),
        charts.throughput_vs_baseline(throughput_rows(metrics, approaches), 82.0),
        charts.campaign_timeline(campaign_timeline(session, campaign)),
    ]
    return [f for f in figures if f is not None]


def test_every_figure_validates_against_plotlys_schema(session):
    kimi = inventory.get_campaign(session, "kimi-k25-eagle3")
    shootout = inventory.get_campaign(session, "allreduce-shootout")
    _measure_shootout(session, shootout)
    fixture = inventory.get_campaign(session, SLUG)
    figures = [f for c in (kimi, shootout, fixture) for f in _every_figure(session, c)]
    assert len(figures) >= 15 and any(f["layout"]["title"]["text"].startswith("Verify communication") for f in figures)
    kinds = {t["type"] for f in figures for t in f["data"]}
    assert kinds <= {"scatter", "bar", "heatmap"}, kinds  # what the vendored bundle draws (test_assets.py)
    for fig in figures:
        assert json.loads(json.dumps(fig)) == fig  # plain JSON, nothing plotly-specific inside
        _validate(fig)


def test_the_validator_refuses_what_plotly_js_would_ignore():
    """The check above can fail: a misspelt attribute or a wrong trace type is refused."""
    for bad in (
        {"data": [{"type": "scatter", "colour": "red"}], "layout": {}},
        {"data": [{"type": "bar"}], "layout": {"xaxis": {"title_txt": "x"}}},
        {"data": [{"type": "scaterr"}], "layout": {}},
    ):
        with pytest.raises(ValueError):
            _validate(bad)


def test_kimi_throughput_draws_the_reported_38_tok_s_and_whole_dead_ends(session):
    kimi = inventory.get_campaign(session, "kimi-k25-eagle3")
    fig = throughput_figure(campaign_answer(session, kimi), kimi)
    assert fig is not None
    traces = {t["name"]: t for t in fig["data"]}
    reported = traces["reported elsewhere (not measured here)"]
    assert reported["y"] == ["SGLang custom allreduce (IPC)"] and reported["x"] == [38.0]
    assert "38 tok/s against 82 tok/s" in reported["customdata"][0][1]
    dead = traces["dead end"]
    at = dict(zip(dead["y"], dead["x"]))
    assert at["SGLang custom allreduce (IPC)"] == 38.0  # at its reported figure, not at 0
    assert at["FlashInfer allreduce fusion"] == 0 and dead["cliponaxis"] is False  # drawn whole at the start
    assert fig["layout"]["xaxis"]["range"][1] > 82.0 and fig["layout"]["xaxis"]["automargin"] is True
    assert set(traces["baseline 82 tok/s"]["x"]) == {82.0}


def test_shootout_latency_is_on_a_log_axis_once_cpu_floors_join(session):
    shootout = inventory.get_campaign(session, "allreduce-shootout")
    before = charts.latency_comparison(profitability_report(session, shootout))
    assert before is not None and before["layout"]["xaxis"].get("type") is None  # 6.5-38 us: linear is fine
    _measure_shootout(session, shootout)
    fig = charts.latency_comparison(profitability_report(session, shootout))
    assert fig is not None
    axis = fig["layout"]["xaxis"]
    assert axis["type"] == "log" and axis["exponentformat"] == "none"
    values = [x for t in fig["data"] for x in t["x"]]
    assert 10 ** axis["range"][0] < min(values) <= 6.5 and 10 ** axis["range"][1] > max(values) == 3829.0
    floor = next(t for t in fig["data"] if t["name"] == "CPU floor (not comparable)")
    assert sorted(floor["text"]) == ["1,819 us", "3,829 us"]
    assert not any("e+" in text for t in fig["data"] for text in t["text"])


def test_kimi_break_even_names_the_size_of_flashinfers_12_kib_figure(session):
    kimi = inventory.get_campaign(session, "kimi-k25-eagle3")
    fig = charts.break_even_accept_length(profitability_report(session, kimi))
    assert fig is not None
    names = [t["name"] for t in fig["data"]]
    assert "FlashInfer PCIe-IPC allreduce (reported at 12 KiB)" in names
    assert "NCCL on PCIe (the baseline) (reported)" in names  # no size given: the axis' size
    assert fig["layout"]["xaxis"]["title"]["text"] == (
        "per-allreduce latency t_ar (us) at 56 KiB, unless a point names its size"
    )
    labels = [a["text"] for a in fig["layout"]["annotations"]]
    # The name may be shortened, the size never is.
    assert any(label.startswith("FlashInfer PCIe-IPC") and " at 12 KiB: τ* " in label for label in labels), labels


def test_chart_colours_are_the_badges_colours():
    """One source: the charts read static/app.css's --status-* properties (tests/web/test_status_colours.py
    checks the CSS side)."""
    from app.templating import STATUS_COLORS
    from tests.web.test_status_colours import colours

    assert STATUS_COLORS == colours()
    assert charts._color("dead_end") == colours()["dead_end"] and charts._color("queued") == colours()["queued"]
