"""The profitability model (shared/domain.md "Is speculation profitable?") against hand-computed values,
and where its inputs come from on a real database."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sqlmodel import select

from app.domain import campaigns
from app.domain.answer import (
    CycleCosts,
    LatencyPoint,
    WhatIf,
    latency_at,
    leviathan_expected_tokens,
    leviathan_speedup,
    model_inputs,
    profitability_report,
    stack_summary,
    t_base_ms,
)
from app.models import Campaign, Metric
from tests.support.charts import SLUG

T_BASE = 1000 / 82  # 12.1951... ms


# ---- the model, by hand ---------------------------------------------------------------------


def test_seed_numbers():
    assert t_base_ms(82) == pytest.approx(12.195, abs=5e-4)
    seed = CycleCosts(t_base_ms=T_BASE, tau=2.0, draft_ms=0.0, verify_compute_ms=0.0, n_ar=122)
    assert seed.comm_ms(200) == pytest.approx(24.4)  # 122 x 0.2 ms: two whole decode steps
    # "tau must exceed 2 before any draft or verify compute is paid"
    assert seed.break_even_tau(200) == pytest.approx(24.4 / (1000 / 82))  # = 24.4 x 82 / 1000 = 2.0008
    assert seed.break_even_tau(200) == pytest.approx(2.0008, abs=1e-4)
    assert not seed.profitable(200) and seed.speedup(200) < 1
    just_above = CycleCosts(T_BASE, 2.001, 0.0, 0.0, 122)
    assert just_above.profitable(200) and just_above.speedup(200) > 1


def test_savings_break_even_and_speedup():
    costs = CycleCosts(t_base_ms=T_BASE, tau=2.4, draft_ms=3 * 0.5, verify_compute_ms=9.0, n_ar=122)
    savings = 2.4 * 12.195121951 - 1.5 - 9.0  # 18.7683 ms
    assert costs.savings_ms == pytest.approx(savings)
    assert costs.break_even_t_ar_us == pytest.approx(savings / 122 * 1000)  # 153.84 us
    assert costs.break_even_t_ar_us == pytest.approx(153.838, abs=1e-3)
    # At t_ar* the speedup is exactly 1; communication equals the savings.
    t_star = costs.break_even_t_ar_us
    assert t_star is not None
    assert costs.speedup(t_star) == pytest.approx(1.0)
    assert costs.comm_ms(t_star) == pytest.approx(costs.savings_ms)
    assert costs.break_even_tau(t_star) == pytest.approx(2.4)
    # S = tau T_base / (T_draft + T_verify_compute + N_ar t_ar)
    assert costs.speedup(8.8) == pytest.approx(2.4 * T_BASE / (1.5 + 9.0 + 122 * 0.0088))
    assert costs.speedup(200) == pytest.approx(29.26829 / 34.9, rel=1e-5)
    assert costs.profitable(153.0) and not costs.profitable(154.0)


def test_no_allreduces_means_no_break_even_latency():
    assert CycleCosts(T_BASE, 2.0, 0, 0, 0).break_even_t_ar_us is None


def test_leviathan():
    assert leviathan_expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)  # 3.3616
    assert leviathan_expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert leviathan_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)  # 2.8013
    assert leviathan_expected_tokens(0.0, 3) == 1.0
    assert leviathan_expected_tokens(1.0, 3) == 4.0  # the limit alpha -> 1
    assert leviathan_speedup(0.5, 2, 0.0) == pytest.approx(1.75)


def test_latency_at_exact_interpolated_and_nearest():
    curve = [LatencyPoint(14336, 16.6, 1), LatencyPoint(114688, 16.7, 1), LatencyPoint(917504, 22.4, 1)]
    assert latency_at(curve, 14336) == (16.6, "measured", "measured at 14 KiB")
    found = latency_at(curve, 57344)
    assert found is not None
    value, method, note = found  # 4 tokens: 2/3 of the way from 1 to 8 tokens on log2
    assert method == "interpolated" and "14 KiB and 112 KiB" in note and "not measured at 56 KiB" in note
    assert value == pytest.approx(math.exp(math.log(16.6) + 2 / 3 * (math.log(16.7) - math.log(16.6))))
    found = latency_at(curve, 8 * 1024 * 1024)
    assert found is not None
    value, method, note = found
    assert (value, method) == (22.4, "nearest") and "nearest measured size 896 KiB" in note
    assert latency_at([], 1) is None


def test_stack_summary_reads_versions_only():
    fp = {"hostname": "node-7", "sm": "9.0", "torch": "2.11.0", "cuda": "12.8", "gpus": [{"name": "H200", "sm": "9.0"}]}
    assert stack_summary(fp) == "torch 2.11.0 / CUDA 12.8 / SM 9.0"
    assert stack_summary({"gpus": [{"sm": "12.0"}]}) == "SM 12.0"
    assert stack_summary(None) == ""


# ---- inputs from the fixture campaign --------------------------------------------------------


def _campaign(session) -> Campaign:
    return campaigns.get_campaign(session, SLUG)


def test_inputs_and_their_sources(session):
    campaign = _campaign(session)
    assert model_inputs(session, campaign).baseline_tok_s.source == "entered on the campaign"  # typed wins
    campaign.baseline_tok_s = None
    inputs = model_inputs(session, campaign)
    assert inputs.baseline_tok_s.value == 82.0 and "output_throughput_tok_s" in inputs.baseline_tok_s.source
    assert inputs.accept_length.value == 2.4 and inputs.accept_length.source.startswith("entered on the campaign")
    # The typed value wins over the measured one, and says the measurement exists.
    assert "used in place of the measured 2.6 (trial #" in inputs.accept_length.source
    assert inputs.verify_bytes == 4 * 7168 * 2 == 57344
    assert inputs.missing == ()


def test_report_points_by_hand(session):
    report = profitability_report(session, _campaign(session))
    assert report.costs is not None
    assert report.costs.break_even_t_ar_us == pytest.approx(153.838, abs=1e-3)
    points = {p.key: p for p in report.points}
    assert set(points) == {
        "nccl-pcie",
        "nccl-graph",
        "nccl-eager",
        "symm-mem-two-shot",
        "symm-mem-one-shot",
        "flashinfer-pcie-ipc",
    }
    # 56 KiB lies between the measured 14 and 112 KiB: interpolated (8.8 us at both ends).
    two = points["symm-mem-two-shot"]
    assert two.latency.method == "interpolated" and two.latency.t_ar_us == pytest.approx(8.8)
    assert two.speedup == pytest.approx(2.4 * T_BASE / (1.5 + 9.0 + 122 * 8.8 / 1000))
    eager = points["nccl-eager"]
    assert eager.latency.t_ar_us == pytest.approx(44.9 * (47.4 / 44.9) ** (2 / 3))
    assert "mode eager" in eager.latency.note and "interpolated (log-log)" in eager.latency.note
    # Graph mode is the one SGLang decodes with; its curve is taken as measured.
    assert points["nccl-graph"].latency.t_ar_us == pytest.approx(16.6 * (16.7 / 16.6) ** (2 / 3))
    # In situ from a verify step: 200 us x 122 = 24.4 ms > 18.77 ms of savings.
    pcie = points["nccl-pcie"]
    assert pcie.latency.method == "in situ" and pcie.latency.t_ar_us == 200.0
    assert pcie.comm_ms == pytest.approx(24.4) and not pcie.profitable
    assert pcie.speedup == pytest.approx(29.26829 / 34.9, rel=1e-5)
    # Derived from the speculative trial: (2.6 x 8.5 - 1.5 - 9.0) / 122 ms, with its own accept length.
    ipc = points["flashinfer-pcie-ipc"]
    assert ipc.latency.method == "derived"
    assert ipc.latency.t_ar_us == pytest.approx((2.6 * 8.5 - 10.5) / 122 * 1000)
    assert ipc.tau == 2.6 and "accept_length" in ipc.tau_source
    assert ipc.savings_ms == pytest.approx(2.6 * T_BASE - 10.5)
    # Best usable (dead ends excluded) and the verdict.
    assert report.best and report.profitable_now
    assert report.best.key == "symm-mem-two-shot" and report.profitable_now.key == "symm-mem-two-shot"
    assert set(report.unmeasured) == {
        "SGLang custom allreduce (IPC)",
        "FlashInfer allreduce fusion",
        "Expert parallelism",
        "MSCCL++",
    }


def test_nearest_size_is_said_so(session):
    campaign = _campaign(session)
    report = profitability_report(session, campaign, WhatIf(verify_tokens=1024))  # 14 MiB, beyond every curve
    graph = next(p for p in report.points if p.key == "nccl-graph")
    assert graph.latency.method == "nearest" and graph.latency.t_ar_us == 42.3
    assert "nearest measured size" in graph.latency.note


def test_what_if_overrides_without_storing(session):
    campaign = _campaign(session)
    report = profitability_report(session, campaign, WhatIf(accept_length=3.0, draft_steps=0, verify_compute_ms=0.0))
    assert report.inputs.accept_length.source == "what-if"
    assert report.costs is not None
    assert report.costs.savings_ms == pytest.approx(3.0 * T_BASE)
    # A what-if accept length applies to every approach, also those with their own measured tau.
    assert {p.tau for p in report.points} == {3.0}
    session.expire_all()
    assert session.exec(select(Campaign).where(Campaign.slug == SLUG)).one().accept_length == 2.4


def test_missing_inputs_are_listed_not_guessed(session):
    campaign = _campaign(session)
    campaign.accept_length = None
    campaign.draft_step_ms = None
    campaign.verify_compute_ms = None
    campaign.baseline_trial_id = None
    campaign.baseline_tok_s = None
    session.add(campaign)
    # The speculative trial's accept length now stands in for the campaign's: remove it to see it missing.
    for metric in session.exec(select(Metric).where(Metric.name == "accept_length")):
        session.delete(metric)
    session.flush()
    report = profitability_report(session, campaign)
    whats = [m.what for m in report.missing]
    assert any(w.startswith("plain decode step T_base") for w in whats)
    assert any(w.startswith("accept length") for w in whats)
    assert any(w.startswith("draft cost") for w in whats)
    assert any(w.startswith("verify compute") for w in whats)
    accept = next(m for m in report.missing if m.what.startswith("accept length"))
    assert "sglang_server trial with EAGLE-3" in accept.how and "enter it" in accept.how
    assert report.costs is None and report.curve is None
    # t_ar measurements are still known (for the communication-only bound once a baseline exists).
    assert report.latencies and all(p.speedup is None and p.tau_star is None for p in report.points)


def test_accept_length_falls_back_to_a_measurement(session):
    campaign = _campaign(session)
    campaign.accept_length = None
    session.add(campaign)
    session.flush()
    inputs = model_inputs(session, campaign)
    assert inputs.accept_length.value == 2.6 and "accept_length" in inputs.accept_length.source


def test_verify_compute_falls_back_to_the_verify_step_metric(session):
    campaign = _campaign(session)
    campaign.verify_compute_ms = None
    session.add(campaign)
    pcie = campaigns.get_approach(session, campaign, "nccl-pcie")
    trial_id = session.exec(select(Metric.trial_id).where(Metric.name == "allreduce_in_situ_us")).first()
    assert pcie.id is not None and campaign.id is not None
    session.add(
        Metric(
            trial_id=trial_id,
            approach_id=pcie.id,
            campaign_id=campaign.id,
            seq=1,
            index=0,
            name="verify_compute_ms",
            value=7.25,
            unit="ms",
            tags={"tokens": 4},
        )
    )
    session.flush()
    inputs = model_inputs(session, campaign)
    assert inputs.verify_compute_ms.value == 7.25 and "synthetic verify step" in inputs.verify_compute_ms.source


def test_an_accept_length_below_one_means_no_speculation(session):
    campaign = _campaign(session)
    campaign.accept_length = None
    session.add(campaign)
    for metric in session.exec(select(Metric).where(Metric.name == "accept_length")):
        session.delete(metric)
    pcie = campaigns.get_approach(session, campaign, "nccl-pcie")
    assert campaign.baseline_trial_id is not None and pcie.id is not None and campaign.id is not None
    session.add(
        Metric(
            trial_id=campaign.baseline_trial_id,
            approach_id=pcie.id,
            campaign_id=campaign.id,
            seq=2,
            index=0,
            name="server_avg_spec_accept_length",
            value=0.0,
            unit="",
            tags={},
        )
    )
    session.flush()
    assert model_inputs(session, campaign).accept_length.value is None


# ---- the break-even curve: a lower bound, tightened as draft and verify compute become known ----


def test_lower_bound_then_tightened_by_hand():
    from app.domain.answer import BreakEvenCurve

    # Seed: T_base 12.195 ms, 122 x 0.2 ms = 24.4 ms: tau* > 2.0008 before anything else is paid.
    bound = BreakEvenCurve(t_base_ms=T_BASE, n_ar=122, draft_ms=None, verify_compute_ms=None)
    assert bound.lower_bound and bound.unknown == ("draft cost", "verify compute")
    assert bound.tau_star(200) == pytest.approx(2.0008, abs=1e-4)
    assert "lower bound" in bound.label
    # The draft cost known (3 steps x 0.5 ms): still a bound, tighter: (1.5 + 24.4) / 12.195.
    draft = replace(bound, draft_ms=1.5)
    assert draft.lower_bound and draft.unknown == ("verify compute",)
    assert draft.tau_star(200) == pytest.approx(25.9 / T_BASE) == pytest.approx(2.1238, abs=1e-4)
    # Both known: the break-even itself, (1.5 + 9.0 + 24.4) / 12.195 = 2.8618, and the same as CycleCosts says.
    exact = replace(draft, verify_compute_ms=9.0)
    assert not exact.lower_bound and exact.tau_star(200) == pytest.approx(2.8618, abs=1e-4)
    assert exact.tau_star(200) == pytest.approx(CycleCosts(T_BASE, 2.4, 1.5, 9.0, 122).break_even_tau(200))
    assert bound.tau_star(200) < draft.tau_star(200) < exact.tau_star(200)


def test_inputs_build_the_curve_and_t_base_from_a_gpu_decode_step(session):
    campaign = _campaign(session)
    campaign.baseline_trial_id = None
    campaign.baseline_tok_s = None
    campaign.draft_step_ms = None
    campaign.verify_compute_ms = None
    session.add(campaign)
    graph = campaigns.get_approach(session, campaign, "nccl-graph")
    trial_id = session.exec(select(Metric.trial_id).where(Metric.approach_id == graph.id)).first()
    gpu = {"device": "cuda", "backend": "nccl", "mode": "graph", "tokens": 1}
    cpu = {"device": "cpu", "scaled": True, "backend": "gloo", "tokens": 1}
    for index, (name, value, tags) in enumerate(
        [
            ("decode_step_ms", 10.25, gpu),
            ("decode_step_ms", 0.5, cpu),
            ("draft_step_ms", 0.31, {**gpu, "mode": "graph"}),
            ("verify_compute_ms", 1033.0, {**cpu, "tokens": 4}),
        ]
    ):
        assert graph.id is not None and campaign.id is not None
        session.add(
            Metric(
                trial_id=trial_id,
                approach_id=graph.id,
                campaign_id=campaign.id,
                seq=9,
                index=index,
                name=name,
                value=value,
                unit="ms",
                tags=tags,
            )
        )
    session.flush()
    report = profitability_report(session, campaign)
    inputs = report.inputs
    # T_base from the GPU decode step (the CPU one is faster but a floor), draft from the draft head.
    assert inputs.t_base.value == 10.25 and "decode_step_ms" in inputs.t_base.source
    assert inputs.draft_step_ms.value == 0.31 and inputs.draft_ms == pytest.approx(0.93)
    # The CPU verify step never feeds the model: verify compute stays unknown, the curve a lower bound.
    assert inputs.verify_compute_ms.value is None
    assert report.curve is not None
    assert report.curve.lower_bound and report.curve.unknown == ("verify compute",)
    assert {(f.name, f.value) for f in report.cpu_floor} >= {("verify_compute_ms", 1033.0), ("decode_step_ms", 0.5)}
    two = next(p for p in report.points if p.key == "symm-mem-two-shot")
    assert two.tau_star == pytest.approx((0.93 + 122 * 8.8 / 1000) / 10.25)


def test_cpu_floor_latency_never_feeds_the_model(session):
    campaign = _campaign(session)
    ipc = campaigns.get_approach(session, campaign, "mscclpp")
    trial_id = session.exec(select(Metric.trial_id)).first()
    assert ipc.id is not None and campaign.id is not None
    session.add(
        Metric(
            trial_id=trial_id,
            approach_id=ipc.id,
            campaign_id=campaign.id,
            seq=7,
            index=0,
            name="allreduce_latency_us",
            value=120.0,
            unit="us",
            tags={"backend": "gloo", "device": "cpu", "bytes": 57344, "tokens": 4},
        )
    )
    session.flush()
    report = profitability_report(session, campaign)
    assert "mscclpp" not in {p.key for p in report.points} and "MSCCL++" in report.unmeasured
    assert [(f.title, f.value) for f in report.cpu_floor] == [("MSCCL++", 120.0)]


def test_a_t_base_from_one_machine_is_never_paired_with_another_machines_allreduce(session):
    """Issue 33 item 2 at batch 1, off the grid: with T_base read from the baseline trial on the seed node (8x RTX
    PRO 6000, SM 12.0), the allreduces measured on 2x H200 are not combined with it (listed, with the
    difference); the seed node's own in-situ figure is. Entered, the same 82 tok/s pairs with them: the person
    typed it for these figures (the page names it entered)."""
    campaign = _campaign(session)
    entered = profitability_report(session, campaign)
    assert {"symm-mem-two-shot", "nccl-graph"} <= {p.key for p in entered.points} and not entered.other_stack
    campaign.baseline_tok_s = None
    session.add(campaign)
    session.flush()
    report = profitability_report(session, campaign)
    assert "baseline trial" in report.inputs.t_base.source and report.inputs.t_base.trial_id is not None
    keys = {p.key for p in report.points}
    assert "nccl-pcie" in keys
    assert not keys & {"nccl-graph", "nccl-eager", "symm-mem-two-shot", "symm-mem-one-shot"}
    other = dict(report.other_stack)
    assert set(other) == {"NCCL in a CUDA graph", "NCCL eager", "torch symm-mem two-shot", "torch symm-mem one-shot"}
    assert all(
        "GPU NVIDIA RTX PRO 6000 Blackwell -> NVIDIA H200" in why and "SM 12.0 -> 9.0" in why for why in other.values()
    )
    assert report.headline is not None and report.headline.label != "torch symm-mem two-shot"
