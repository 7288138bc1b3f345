"""The demo campaigns answer what they can from their own files: the Kimi-K2.5 campaign from the seed
figures alone, the allreduce shootout as a latency comparison until speculation is measured."""

from __future__ import annotations

from typing import Any

import pytest
from sqlmodel import select

from app import charts
from app.db import session_scope
from app.domain import campaigns
from app.domain.answer import profitability_report
from app.domain.demo import load_demo
from app.domain.timeline import campaign_timeline
from app.models import Metric, Trial
from app.schemas import CampaignUpdate
from app.state import app_state
from tests.support.charts import add_metrics

T_BASE = 1000 / 82


def figure(fig: dict[str, Any] | None) -> dict[str, Any]:
    """A chart the data is enough for."""
    assert fig is not None
    return fig


@pytest.fixture
def session(app):
    with session_scope(app_state(app).engine) as s:
        load_demo(s)
        s.flush()
        yield s


def test_kimi_demo_answers_from_the_seed_alone(session):
    campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
    report = profitability_report(session, campaign)
    assert report.speculative and report.points == ()  # nothing measured here yet
    assert report.curve is not None
    assert report.curve.lower_bound and report.curve.t_base_ms == pytest.approx(T_BASE)
    assert report.inputs.t_base.source.startswith("1000 / 82 tok/s (entered: seed campaign")
    refs = {r.label: r for r in report.references}
    # Accept length must exceed 2.0 just to pay for NCCL's communication: 122 x 0.2 ms / 12.195 ms.
    base = refs["NCCL on PCIe (the baseline)"]
    assert base.baseline and base.tau_star == pytest.approx(2.0008, abs=1e-4)
    # FlashInfer PCIe-IPC's reported 5.3 us would move that to 122 x 5.3 us / 12.195 ms = 0.053.
    ipc = refs["FlashInfer PCIe-IPC allreduce"]
    assert ipc.latency.method == "reported" and ipc.tau_star == pytest.approx(0.6466 / T_BASE)
    assert "docstring" in ipc.latency.note and ipc.bytes == 12288
    # The IPC custom allreduce's 38 tok/s: 200 us + (26.32 - 12.20) ms / 122 = 315.7 us, tau* 3.16.
    custom = refs["SGLang custom allreduce (IPC)"]
    t_ar = 200 + (1000 / 38 - T_BASE) / 122 * 1000
    assert custom.latency.method == "derived" and custom.latency.t_ar_us == pytest.approx(t_ar)
    assert custom.tau_star == pytest.approx(122 * t_ar / 1000 / T_BASE) and custom.tau_star == pytest.approx(
        3.16, abs=0.01
    )
    fig = figure(charts.break_even_accept_length(report))
    assert fig["layout"]["meta"]["lower_bound"] is True
    xs = [x for t in fig["data"] if t["mode"] == "markers" for x in t["x"]]
    ys = [y for t in fig["data"] if t["mode"] == "markers" for y in t["y"]]
    assert len(xs) == 3
    # Axes fit the data: log x (5.3 to 316 us) holding every point, y from 0 above the highest tau*.
    assert fig["layout"]["xaxis"]["type"] == "log"
    lo, hi = fig["layout"]["xaxis"]["range"]
    assert all(10**lo < x < 10**hi for x in xs) and hi - lo < 3
    assert fig["layout"]["yaxis"]["range"][0] == 0 and max(ys) < fig["layout"]["yaxis"]["range"][1] < 2 * max(ys)
    latency = figure(charts.allreduce_latency_vs_size([], report.inputs.verify_bytes, report.references))
    # The seed's NCCL figure is at the verify step's 56 KiB (issue 43 item 5), so it is drawn at its size too.
    assert [t["name"] for t in latency["data"] if t["mode"] == "markers"] == [
        "NCCL on PCIe (the baseline) (reported)",
        "FlashInfer PCIe-IPC allreduce (reported)",
    ]


def test_kimi_demo_history_carries_the_seed_order(session):
    campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
    timeline = campaign_timeline(session, campaign)
    verdicts = [e.approach_title for e in timeline.status_events if e.to_status != "untested"]
    assert verdicts == [
        "FlashInfer allreduce fusion",
        "SGLang custom allreduce (IPC)",
        "NCCL Tree algorithm",
        "NCCL fewer channels",
        "MSCCL++",
        "torch symmetric memory (--enable-torch-symm-mem)",
    ]
    assert {e.at.date().isoformat() for e in timeline.status_events} == {"2026-02-09", "2026-02-10"}


def test_shootout_without_speculation_is_a_latency_comparison_until_measured(session):
    campaign = campaigns.get_campaign(session, "allreduce-shootout")
    report = profitability_report(session, campaign)
    assert not report.speculative and report.curve is None and report.points == ()
    # Shipped with a 2x H200 node's figures as references: the comparison draws before anything runs here.
    shipped = figure(charts.latency_comparison(report))
    assert [t["name"] for t in shipped["data"]] == ["reported elsewhere (not this node)"]
    assert min(shipped["data"][0]["x"]) == 6.5 and shipped["layout"]["xaxis"]["range"] == [0, pytest.approx(38.0 * 1.2)]
    # A GPU node's shootout: measured allreduces, a decode step and a draft head answer tau* per approach.
    graph = campaigns.get_approach(session, campaign, "nccl-graph")
    symm = campaigns.get_approach(session, campaign, "verify-step-symm-mem")
    gloo = campaigns.get_approach(session, campaign, "gloo-cpu")
    assert campaign.id is not None and symm.id is not None
    gpu = {"device": "cuda", "world_size": 2, "dtype": "bf16"}
    rows = [
        (graph, [("allreduce_latency_us", 17.4, {**gpu, "backend": "nccl", "mode": "graph", "bytes": 57344})]),
        (
            symm,
            [
                ("allreduce_in_situ_us", 9.0, {**gpu, "backend": "symm_mem_two_shot", "tokens": 4}),
                ("verify_compute_ms", 9.08, {**gpu, "tokens": 4}),
                ("decode_step_ms", 10.0, {**gpu, "tokens": 1}),
            ],
        ),
        (gloo, [("allreduce_latency_us", 300.0, {"device": "cpu", "backend": "gloo", "bytes": 57344})]),
    ]
    for approach, metrics in rows:
        assert approach.id is not None and approach.recipe is not None
        trial = Trial(campaign_id=campaign.id, approach_id=approach.id, recipe=approach.recipe, state="succeeded")
        session.add(trial)
        session.flush()
        add_metrics(session, trial, metrics)
    session.flush()
    report = profitability_report(session, campaign)
    assert not report.speculative  # no draft head measured yet: still a comparison
    assert report.fastest is not None
    assert report.fastest.key == "verify-step-symm-mem" and [f.title for f in report.cpu_floor] == [
        "gloo on CPU (2 processes)"
    ]
    fig = figure(charts.latency_comparison(report))
    assert fig["data"][0]["y"] == ["Verify step, symmetric memory two-shot, eager", "NCCL in a CUDA graph of 122"]
    assert fig["data"][1]["name"] == "reported elsewhere (not this node)"
    assert fig["data"][1]["y"][0] == "symmetric memory one-shot in a CUDA graph, 2x H200 (reported)"
    assert fig["data"][2]["y"] == ["gloo on CPU (2 processes) (CPU floor)"]
    draft = session.exec(select(Trial).where(Trial.approach_id == symm.id)).first()
    assert draft is not None
    session.add(
        Metric(
            trial_id=draft.id,
            approach_id=symm.id,
            campaign_id=campaign.id,
            seq=1,
            index=0,
            name="draft_step_ms",
            value=0.3,
            tags={**gpu, "mode": "graph"},
        )
    )
    session.flush()
    report = profitability_report(session, campaign)
    assert report.curve is not None
    assert report.speculative and not report.curve.lower_bound  # everything but the accept length measured
    points = {p.key: p for p in report.points}
    fixed = 3 * 0.3 + 9.08
    assert points["verify-step-symm-mem"].tau_star == pytest.approx((fixed + 122 * 9.0 / 1000) / 10.0)
    assert points["nccl-graph"].tau_star == pytest.approx((fixed + 122 * 17.4 / 1000) / 10.0)
    assert points["verify-step-symm-mem"].speedup is None  # the accept length needs the real model
    assert any(m.what.startswith("accept length") for m in report.missing)


def _status(session, campaign, what_if=None):
    from app.domain.answer import load_campaign_metrics, throughput_rows
    from app.domain.sharing import status_report

    rows = campaigns.approaches(session, campaign)
    metrics = load_campaign_metrics(session, campaign)
    report = profitability_report(session, campaign, what_if, metrics=metrics, approach_rows=rows)
    return report, status_report(session, campaign, report, throughput_rows(metrics, rows), rows)


def test_kimi_status_headline_is_todays_break_even(session):
    campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
    report, status = _status(session, campaign)
    assert status.speculative and status.unknown == ("draft cost", "verify compute")
    head = status.headline
    assert head is not None and head.baseline and head.label == "NCCL on PCIe (the baseline)"
    # Nothing but communication is known: tau* counts communication only, a lower bound; no accept length yet.
    assert head.contains == "communication only" and not head.exact
    assert round(head.tau_star, 2) == 2.0 and head.profitable is None and head.margin is None
    assert [(a.label, round(a.tau_star, 2)) for a in status.others] == [
        ("FlashInfer PCIe-IPC allreduce", 0.05),
        ("SGLang custom allreduce (IPC)", 3.16),
    ]


@pytest.mark.both_databases  # the answer's metric loading queries
def test_kimi_answer_with_every_input_known(session):
    """Issue 21's numbers: tau 2.4, 3 draft steps x 0.8 ms, verify compute 9.5 ms, 122 allreduces at the
    82 tok/s baseline. NCCL's 200 us: tau* = (2.4 + 9.5 + 24.4) / 12.195 = 2.98 > 2.4, not profitable;
    FlashInfer PCIe-IPC's 5.3 us: tau* = (11.9 + 0.647) / 12.195 = 1.03, it would pay."""
    campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
    campaigns.update_campaign(
        session,
        campaign,
        CampaignUpdate.model_validate(
            {"accept_length": 2.4, "draft_steps": 3, "draft_step_ms": 0.8, "verify_compute_ms": 9.5}
        ),
    )
    report, status = _status(session, campaign)
    answers = {a.label: a for a in report.answers}
    nccl = answers["NCCL on PCIe (the baseline)"]
    assert nccl.contains == "the full break-even" and nccl.exact
    assert nccl.tau_star == pytest.approx((2.4 + 9.5 + 24.4) / T_BASE) and round(nccl.tau_star, 2) == 2.98
    assert nccl.tau == 2.4 and nccl.tau_source.startswith("entered") and nccl.profitable is False
    assert nccl.margin == pytest.approx(2.4 - nccl.tau_star)
    # The margin in ms is savings - communication: 2.4 x 12.195 - 11.9 - 24.4 = -7.03 ms; S = 0.81.
    assert nccl.margin_ms == pytest.approx(2.4 * T_BASE - 11.9 - 24.4)
    assert nccl.speedup == pytest.approx(2.4 * T_BASE / 36.3)
    ipc = answers["FlashInfer PCIe-IPC allreduce"]
    assert round(ipc.tau_star, 2) == 1.03 and ipc.profitable is True and ipc.usable
    assert ipc.speedup == pytest.approx(2.4 * T_BASE / (11.9 + 122 * 5.3 / 1000))
    custom = answers["SGLang custom allreduce (IPC)"]
    assert custom.profitable is False and not custom.usable  # a dead end: never offered as "would pay"
    assert status.headline == nccl and status.accept_length == 2.4
    assert [a.label for a in status.others] == ["FlashInfer PCIe-IPC allreduce", "SGLang custom allreduce (IPC)"]


def test_kimi_answer_decides_no_from_a_lower_bound(session):
    """With the draft cost and verify compute still unknown, an accept length below the communication-only
    tau* is already a "no" (unknown costs only raise tau*); above it, the answer waits for them."""
    from app.domain.answer import WhatIf

    campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
    report, status = _status(session, campaign, WhatIf(accept_length=1.8))
    assert status.headline is not None and status.headline.contains == "communication only"
    assert status.headline.profitable is False and status.headline.margin == pytest.approx(1.8 - 24.4 / T_BASE)
    assert status.headline.margin_ms is None  # the ms margin needs every cost
    report, status = _status(session, campaign, WhatIf(accept_length=2.4, draft_steps=3, draft_step_ms=0.8))
    head = status.headline
    assert head is not None and head.contains == "communication and draft" and head.profitable is None
    assert head.tau_star == pytest.approx((2.4 + 24.4) / T_BASE)
    _, status = _status(session, campaign, WhatIf(accept_length=2.4, verify_compute_ms=9.5))
    assert status.headline is not None and status.headline.contains == "communication and verify compute"
