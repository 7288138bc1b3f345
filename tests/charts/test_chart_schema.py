"""Every chart builder of the app/charts package (found by walking the package, not listed here) returns a
plain dict that Plotly's own schema accepts (validated once here, never at request time), and the demo
campaigns' charts draw what issue 21 found missing or misleading: the reported 38 tok/s, dead ends drawn
whole, a log axis where latencies span decades, and the message size named on every point measured at
another size than the axis says."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable
from typing import Any

import plotly.io as pio
import pytest
from sqlmodel import col, select

from app import charts
from app.charts import base
from app.db import session_scope
from app.domain import campaigns
from app.domain.answer import (
    WhatIf,
    latency_series,
    load_campaign_metrics,
    profitability_report,
    throughput_rows,
)
from app.domain.answer.read import read_answer
from app.domain.changes import Series, SeriesPoint
from app.domain.comparison import compare
from app.domain.demo import load_demo
from app.domain.timeline import campaign_timeline
from app.models import Campaign, ChangePoint, Trial
from app.state import app_state
from app.web.answer_view import answer_figures, throughput_figure
from tests.support.charts import SLUG, add_metrics, build_fixture_campaign


@pytest.fixture
def session(app):
    with session_scope(app_state(app).engine) as s:
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
        approach = campaigns.get_approach(session, campaign, key)
        assert campaign.id is not None and approach.id is not None and approach.recipe is not None
        trial = Trial(campaign_id=campaign.id, approach_id=approach.id, recipe=approach.recipe, state="succeeded")
        session.add(trial)
        session.flush()
        add_metrics(session, trial, metrics)
    session.flush()


def builders() -> dict[str, Callable[..., Any]]:
    """Every public function of the package's figure modules that returns a Figure (base holds the shared
    parts, not figures): a builder added to any module, present or future, is found here."""
    found: dict[str, Callable[..., Any]] = {}
    for info in pkgutil.iter_modules(charts.__path__):
        module = importlib.import_module(f"app.charts.{info.name}")
        if module is base:
            continue
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_"):
                if "Figure" in str(inspect.signature(fn).return_annotation):
                    found[f"{info.name}.{name}"] = fn
    return found


def _changes_sample() -> dict[str, Any]:
    """A series with a slower and a faster change point (app/domain/changes.py's shapes)."""
    points = [SeriesPoint(trial_id=i, value=v, fingerprint=None) for i, v in enumerate([10, 10.2, 14.1, 14, 9], 1)]
    marked = [
        ChangePoint(
            campaign_id=1,
            approach_id=1,
            runner_id=1,
            metric="lat",
            trial_id=3,
            before_trial_id=2,
            ratio=1.38,
            verdict="slower",
            stack_diff="torch 2.10 -> 2.11",
        ),
        ChangePoint(
            campaign_id=1,
            approach_id=1,
            runner_id=1,
            metric="lat",
            trial_id=5,
            before_trial_id=4,
            ratio=0.64,
            verdict="faster",
        ),
    ]
    return {
        "series: Series": Series("allreduce_latency_us", "us", "tokens=8", True, points),
        "runner_name: str": "h200 <node>",
        "points: Sequence[ChangePoint]": marked,
    }


def _samples(session, campaign: Campaign) -> list[dict[str, Any]]:
    """Each builder parameter's value for this campaign, keyed by "name: annotation" as the builders' signatures
    spell them; a what-if report too (accept length 1.2: nothing pays)."""
    answer = read_answer(session, campaign)
    metrics = load_campaign_metrics(session, campaign)
    approaches = campaigns.approaches(session, campaign)
    report = answer.report
    trial_ids = list(session.exec(select(Trial.id).where(Trial.campaign_id == campaign.id).order_by(col(Trial.id))))
    common = {
        "series: list[LatencySeries]": latency_series(metrics, approaches),
        "verify_bytes: int": report.inputs.verify_bytes,
        "references: tuple[ReferencePoint, ...]": report.references,
        "rows: list[ThroughputRow]": throughput_rows(metrics, approaches),
        "baseline_tok_s: float | None": 82.0,
        "reported: Sequence[ReportedRate]": charts.reported_rates(
            campaign.reported, {a.key: a.title for a in approaches}
        ),
        "timeline: Timeline": campaign_timeline(session, campaign),
        "answer: SpeculationAnswer": _sweep_answer(session),
    }
    if len(trial_ids) >= 2:  # the compare page needs two trials
        common["comparison: Comparison"] = compare(session, campaign, trial_ids[:4], [])
    what_if = profitability_report(session, campaign, WhatIf(accept_length=1.2))
    return [{**common, "report: ProfitabilityReport": r} for r in (report, what_if)]


def _sweep_answer(session):
    """The answer over (batch, k) of the sweep the answer's tests use (its inputs under one condition set)."""
    from tests.support.speculation import SLUG as SWEEP
    from tests.support.speculation import build_sweep_campaign

    if session.exec(select(Campaign).where(Campaign.slug == SWEEP)).first() is None:
        build_sweep_campaign(session)
    return read_answer(session, campaigns.get_campaign(session, SWEEP)).speculation


def _call(builder: Callable[..., Any], sample: dict[str, Any]) -> Any:
    args = {}
    for name, param in inspect.signature(builder).parameters.items():
        key = f"{name}: {param.annotation}"
        if key in sample:
            args[name] = sample[key]
        elif param.default is inspect.Parameter.empty:
            raise AssertionError(f"{builder.__qualname__}: no sample for its parameter {key!r}: add one to _samples")
    return builder(**args)


def test_every_builder_of_the_package_validates_against_plotlys_schema(session):
    found = builders()
    assert {
        "profitability.verify_comm_vs_savings",
        "speculation.speedup_heatmap",
        "changes.series_with_changes",
        "comparison.trial_comparison",
        "timeline.campaign_timeline",
    } <= set(found)
    kimi = campaigns.get_campaign(session, "kimi-k25-eagle3")
    shootout = campaigns.get_campaign(session, "allreduce-shootout")
    _measure_shootout(session, shootout)
    fixture = campaigns.get_campaign(session, SLUG)
    samples = [s for c in (kimi, shootout, fixture) for s in _samples(session, c)] + [_changes_sample()]
    drawn: dict[str, int] = {}
    for name, builder in found.items():
        for sample in samples:
            if not all(
                p.default is not inspect.Parameter.empty or f"{n}: {p.annotation}" in sample
                for n, p in inspect.signature(builder).parameters.items()
            ):
                continue  # this sample is of another family (the changes series)
            fig = _call(builder, sample)
            if fig is None:
                continue
            assert json.loads(json.dumps(fig)) == fig  # plain JSON, nothing plotly-specific inside
            assert fig["layout"]["template"] == base.template(), name  # every figure carries the template
            assert {t["type"] for t in fig["data"]} <= {"scatter", "bar", "heatmap"}  # the vendored bundle
            _validate(fig)
            drawn[name] = drawn.get(name, 0) + 1
    assert set(drawn) == set(found), f"builders never drawn from the samples: {set(found) - set(drawn)}"


# What the charts page draws for each campaign checked below (its guards skip the rest): a guard that
# stopped drawing a figure, or a page that drew none, fails here instead of validating nothing.
PAGE_FIGURES = {
    "kimi-k25-eagle3": {"chart_break_even", "chart_latency", "chart_throughput"},
    "allreduce-shootout": {"chart_comparison", "chart_latency"},
    SLUG: {"chart_break_even", "chart_latency", "chart_throughput", "chart_verify"},
}


def test_the_pages_figures_validate_too(session):
    """The page's own guards pick the figures (answer_figures, throughput_figure): each campaign's page has
    the figures it is expected to draw (PAGE_FIGURES), each of them validates, and every kind of figure the
    page can draw is among them."""
    kinds: set[str] = set()
    for slug, expected in PAGE_FIGURES.items():
        campaign = campaigns.get_campaign(session, slug)
        answer = read_answer(session, campaign)
        figures = {**answer_figures(answer), "chart_throughput": throughput_figure(answer, campaign)}
        kinds |= set(figures)
        drawn = {name: fig for name, fig in figures.items() if fig is not None}
        assert set(drawn) == expected, f"{slug}: drawn {sorted(drawn)}, expected {sorted(expected)}"
        for name, fig in drawn.items():
            assert fig["data"], f"{slug} {name}: a figure without traces"
            _validate(fig)
    assert kinds == {"chart_break_even", "chart_verify", "chart_comparison", "chart_latency", "chart_throughput"}
    assert set().union(*PAGE_FIGURES.values()) == kinds, "a kind of figure no campaign here draws is never checked"


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
    kimi = campaigns.get_campaign(session, "kimi-k25-eagle3")
    fig = throughput_figure(read_answer(session, kimi), kimi)
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
    # Each dead end's reason is a note beside its marker, clear of it and of a reported diamond there (issue 32).
    notes = {n["y"]: n for n in fig["layout"]["annotations"]}
    assert set(notes) == set(dead["y"]) and "mode" in dead and "text" not in dead["mode"]
    ipc = notes["SGLang custom allreduce (IPC)"]
    assert ipc["x"] == 38.0 and ipc["xanchor"] == "left" and ipc["xshift"] >= 14


def test_shootout_latency_is_on_a_log_axis_once_cpu_floors_join(session):
    shootout = campaigns.get_campaign(session, "allreduce-shootout")
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
    kimi = campaigns.get_campaign(session, "kimi-k25-eagle3")
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
    from tests.support.colours import colours

    assert STATUS_COLORS == colours()
    assert base.status_color("dead_end") == colours()["dead_end"]
    assert base.status_color("queued") == colours()["queued"]
