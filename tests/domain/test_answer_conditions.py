"""The answer pairs inputs only under the same conditions (issue 33 items 2-3), on real databases: the committed
sweep answers per context with a speedup that falls with batch; an eager draft never meets a graph verify; a
decode step from another stack is refused; accept lengths land on their own k; contradictions are flagged; the
cache follows every declared campaign field. Plus the statistics home's vectorized resampling (pure)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlmodel import select

from app.domain import campaigns
from app.domain.acceptance import alphas_from_unconditional
from app.domain.answer.inputs import WhatIf
from app.domain.answer.query import AnswerQuery
from app.domain.answer.read import pick_conditions, read_answer
from app.domain.answer.speculation import speculation_answer
from app.domain.answer.values import measured
from app.domain.demo import load_demo
from app.domain.errors import Invalid
from app.domain.statistics import trial_estimate, trial_estimates_many, trial_resamples, trial_resamples_many
from app.models import Metric
from app.schemas import ApproachCreate, CampaignCreate, RecipeSpec
from tests.support.results import ALPHAS, import_results
from tests.support.speculation import SweepBuilder, approach, build_sweep_campaign, spec

TORCH_211 = {"torch": "2.11.0+cu130", "cuda": "13.0", "gpus": [{"name": "NVIDIA H200", "sm": "9.0"}]}
TORCH_210 = {"torch": "2.10.0+cu128", "cuda": "12.8", "gpus": [{"name": "NVIDIA H200", "sm": "9.0"}]}


def test_the_committed_sweep_answers_per_context_with_speedup_falling_with_batch(session):
    campaign = import_results(session, "speculation-sweep-h200x1", ALPHAS)
    answer = read_answer(session, campaign)
    contexts = {c.label.split(",")[0]: c for c in answer.condition_sets}
    assert {"context 1", "context 4", "context 0"} <= set(contexts)  # 1,024 / 4,096 / 0: each its own set
    assert answer.conditions is not None and answer.conditions.tag_map["context"] == 1024
    assert answer.conditions.tag_map["mode"] == "graph" and answer.is_default
    (a,) = answer.speculation.approaches
    speedups = [a.best_speedup[b].value for b in sorted(a.best_speedup)]
    assert speedups[-1] < speedups[len(speedups) // 2] < speedups[0]  # falls with batch (it rose to 2.26 before)
    assert a.best_speedup[128].value < a.best_speedup[64].value < 2.0
    by_name = {f.name: f for f in answer.speculation.inputs}
    decode = by_name["decode step at batch 64"]
    assert "#16" not in decode.source and "context 1,024" in decode.conditions  # not the 4,096 variant
    draft = by_name["draft step at batch 64"]
    assert "#12" not in draft.source and "graph" in draft.conditions  # not the eager draft
    assert "torch 2.11.0+cu130" in decode.conditions  # the stack it was measured on is named
    # Context 4,096 holds a decode step only: the answer there says what is missing, never borrows 1,024's.
    at_4096 = read_answer(session, campaign, AnswerQuery(pick_conditions(session, campaign, context=4096)))
    assert not at_4096.speculation.approaches and not at_4096.is_default
    verify = next(m for m in at_4096.speculation.missing if m.what.startswith("verify compute"))
    assert "measured only under other conditions" in verify.how and "not borrowed" in verify.how
    assert "context: 4096" in verify.how and verify.conditions and "4,096" in verify.conditions
    with pytest.raises(Invalid):
        pick_conditions(session, campaign, context=8192)


def test_only_an_eager_draft_leaves_the_graph_cells_open(session):
    b = SweepBuilder(session)
    b.campaign = campaigns.create_campaign(
        session,
        CampaignCreate(
            slug="only-eager",
            name="eager draft only",
            allreduces_per_verify=122,
            hidden_size=7168,
            accept_alphas=ALPHAS,
        ),
    )
    a = campaigns.add_approach(session, b.campaign, ApproachCreate(key="tp1", title="tp1"), actor="t")
    b.verify_sweep(a, batches=(1, 2), ks=(1, 2), world=1)
    eager = campaigns.add_approach(session, b.campaign, ApproachCreate(key="draft-eager", title="eager"), actor="t")
    b.trial(
        eager,
        [
            ("draft_step_ms", 1.0, {"device": "cuda", "batch": bb, "context": 1024, "mode": "eager"}, [1.0, 1.01])
            for bb in (1, 2)
        ],
    )
    answer = read_answer(session, b.campaign)
    (grid,) = answer.speculation.approaches
    assert all(c.speedup is None and "no draft step" in c.note for c in grid.cells), [c.note for c in grid.cells]
    draft = next(m for m in answer.speculation.missing if m.what.startswith("draft step under"))
    assert "eager" in draft.how and "not borrowed" in draft.how and "mode: graph" in draft.how


def test_a_decode_step_from_another_stack_is_refused(session):
    b = SweepBuilder(session)
    b.campaign = campaigns.create_campaign(
        session,
        CampaignCreate(
            slug="two-stacks", name="two stacks", allreduces_per_verify=122, hidden_size=7168, accept_alphas=ALPHAS
        ),
    )
    verify = campaigns.add_approach(session, b.campaign, ApproachCreate(key="verify", title="verify"), actor="t")
    tags = {"device": "cuda", "mode": "graph", "world_size": 1, "context": 1024, "allreduces": 0}
    rows = [("verify_compute_ms", 11.0, {**tags, "batch": 1, "draft_tokens": k}, [11.0, 11.1]) for k in (1, 2)]
    b.trial(verify, rows).fingerprint = TORCH_211
    decode = campaigns.add_approach(session, b.campaign, ApproachCreate(key="decode", title="decode"), actor="t")
    b.trial(
        decode, [("decode_step_ms", 10.0, {**tags, "batch": 1, "draft_tokens": 0}, [10.0, 10.1])]
    ).fingerprint = TORCH_210
    draft = campaigns.add_approach(session, b.campaign, ApproachCreate(key="draft", title="draft"), actor="t")
    b.trial(
        draft, [("draft_step_ms", 0.5, {"device": "cuda", "batch": 1, "context": 1024, "mode": "graph"}, [0.5, 0.51])]
    ).fingerprint = TORCH_211
    session.flush()
    answer = read_answer(session, b.campaign)
    grid = answer.speculation.approach("verify")
    assert grid is not None and all(c.speedup is None and "no plain decode step" in c.note for c in grid.cells)
    # Measured again on the verify's stack, it pairs.
    b.trial(
        decode, [("decode_step_ms", 10.0, {**tags, "batch": 1, "draft_tokens": 0}, [10.0, 10.1])]
    ).fingerprint = TORCH_211
    session.flush()
    grid = read_answer(session, b.campaign).speculation.approach("verify")
    assert grid is not None and grid.cell(1, 1) is not None and grid.cell(1, 1).speedup is not None  # type: ignore[union-attr]


def test_accept_lengths_land_on_their_own_draft_length(session):
    built = build_sweep_campaign(session, slug="tau-by-k", approaches={"nccl-graph": ("NCCL", 17.0, 1e5, 1024)})
    campaign = built.campaign
    campaign.accept_alphas = None
    server = campaigns.add_approach(
        session,
        campaign,
        ApproachCreate(
            key="sglang",
            title="sglang",
            recipe=RecipeSpec.model_validate(
                {"kind": "sglang_server", "params": {"model_path": "moonshotai/Kimi-K2.5"}}
            ),
        ),
        actor="t",
    )
    for k, tau in ((2, 2.3), (4, 2.9), (2, 2.4)):
        built.trial(server, [("accept_length", tau, {"draft_tokens": k, "speculative_topk": 1}, None)])
    built.trial(server, [("accept_length", 3.5, {"draft_tokens": 1, "speculative_topk": 1}, None)])  # > k + 1
    built.trial(server, [("accept_length", 2.0, {"draft_tokens": 5, "speculative_topk": 4}, None)])  # a tree draft
    built.trial(server, [("accept_length", 2.6, {}, None)])  # untagged: the campaign's draft steps (3)
    session.flush()
    answer = read_answer(session, campaign).speculation
    assert answer.tau[2].value == pytest.approx(2.35) and answer.tau[2].low is not None  # two trials: an interval
    assert "2 trials" in answer.tau_sources[2] or "#" in answer.tau_sources[2]
    assert answer.tau[4].value == pytest.approx(2.9)
    assert answer.tau[3].value == pytest.approx(2.6) and "untagged" in answer.tau_sources[3]
    assert 1 not in answer.tau and 5 not in answer.tau
    assert any("above k + 1 = 2" in f for f in answer.flags) and any("top-k 4" in f for f in answer.flags)


def test_the_decode_step_allreduces_are_priced_at_the_decode_steps_own_size(session):
    """Issue 43 item 5: the Kimi demo's ~200 us is the verify step's (56 KiB); the 12.2 ms decode step carries
    14 KiB per allreduce, where the seed gives no figure, so the demo is not contradictory (it said 122 x 200 us =
    24.4 ms inside the 12.2 ms step). A baseline figure at the decode step's 14 KiB is still checked."""
    load_demo(session)
    session.flush()
    campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
    answer = read_answer(session, campaign)
    assert answer.flags == ()
    base = next(r for r in answer.report.references if r.baseline)
    assert base.bytes == 4 * 7168 * 2 and "56 KiB" in base.latency.note and "14 KiB" in base.latency.note
    campaign.reported = [{**f, "bytes": 7168 * 2} if f.get("baseline") else f for f in campaign.reported or []]
    session.flush()
    flagged = read_answer(session, campaign)
    assert any(
        "122 allreduces x 200 us at the decode step's 14 KiB = 24.4 ms" in f and "12.2 ms decode step" in f
        for f in flagged.flags
    )


def test_the_cache_follows_every_declared_campaign_field(session):
    campaign = build_sweep_campaign(session, slug="cache-key", r=4).campaign
    first = read_answer(session, campaign)
    assert read_answer(session, campaign) is first  # nothing changed: the kept answer
    campaign.stats_confidence = 0.9  # a field the old hand-listed key did not hold
    session.flush()
    again = read_answer(session, campaign)
    assert again is not first and again.speculation.confidence == 0.9


def test_one_trial_decides_pays_only_beyond_the_minimum_effect():
    rng = np.random.default_rng(5)
    noisy = measured(11.0, list(rng.normal(11.0, 0.01, 20)), "one trial", 1)
    inputs = spec([approach("tp1", [1], [1], verify=noisy, world=1)], [1], [1], {1: 1.23})
    inputs = type(inputs)(**{**inputs.__dict__, "min_effect": 0.03})
    cell = speculation_answer(inputs).approaches[0].cells[0]
    # 1.23 x 10 / 12 = 1.025: its within-run interval excludes 1, but a 2.5% margin from one trial decides nothing.
    assert cell.speedup is not None and cell.speedup.within_run_only and cell.speedup.low > 1  # type: ignore[operator]
    assert cell.pays == "unclear"


def test_vectorized_trial_resamples_match_the_statistics_home():
    rng = np.random.default_rng(3)
    figures = [
        [list(rng.normal(10, 1, 10))],
        [list(rng.normal(10, 1, 7)), list(rng.normal(11, 1, 10)), list(rng.normal(10.5, 1, 9))],
        [list(rng.normal(5, 1, 4)), list(rng.normal(5.2, 1, 4))],
    ]
    many = trial_resamples_many(figures, 40_000, np.random.default_rng(1))
    for f, row in zip(figures, many, strict=True):
        one = trial_resamples(f, 40_000, np.random.default_rng(2))
        assert one is not None
        # The quartiles: from 2 trials on the draws are a t with 1-2 degrees of freedom, whose 2.5/97.5% ends
        # move by more than 1% between two seeds of the same method.
        assert np.percentile(row, [25, 50, 75]) == pytest.approx(np.percentile(one, [25, 50, 75]), rel=0.01)


def test_vectorized_trial_estimates_match_the_statistics_home():
    rng = np.random.default_rng(4)
    figures = [[list(rng.normal(10, 1, 10))], [list(rng.normal(10, 1, 7)), list(rng.normal(11, 1, 10))], [[3.0]], []]
    for one, many in zip([trial_estimate(f) for f in figures], trial_estimates_many(figures), strict=True):
        assert (one is None and many is None) or (
            one is not None
            and many is not None
            and one.trials == many.trials
            and one.value == pytest.approx(many.value)
            and one.between_cv == pytest.approx(many.between_cv)
            and one.within_cv == pytest.approx(many.within_cv)
        )


def test_a_draft_step_at_another_world_size_is_missing_until_measured_at_the_verify_tp(session):
    """The draft step runs the head's collectives at the target's TP: one measured at TP 1 never pairs with a
    TP 2 verify (issue 33: the draft step's world size is one of the compared conditions)."""
    built = build_sweep_campaign(
        session, slug="draft-tp", approaches={"nccl-graph": ("NCCL", 17.0, 1e5, 1024)}, batches=(1, 2)
    )
    campaign = built.campaign
    (verify,) = [a for a in campaigns.approaches(session, campaign)]
    draft = campaigns.add_approach(session, campaign, ApproachCreate(key="draft-tp1", title="draft"), actor="t")
    tp1 = {"device": "cuda", "context": 1024, "mode": "graph", "world_size": 1}
    # The fixture's draft sweep states no world size: replace it by one at TP 1, newer than everything.
    for trial_metrics in session.exec(select(Metric).where(Metric.name == "draft_step_ms")).all():
        session.delete(trial_metrics)
    built.trial(draft, [("draft_step_ms", 0.5, {**tp1, "batch": b}, [0.5, 0.51]) for b in (1, 2)])
    session.flush()
    answer = read_answer(session, campaign)
    grid = answer.speculation.approach(verify.key)
    assert grid is not None and all(c.speedup is None and "no draft step" in c.note for c in grid.cells)
    missing = next(m for m in answer.speculation.missing if m.what.startswith("draft step"))
    assert "world size 1" in missing.how and "world_size: 2" in missing.how and "not borrowed" in missing.how
    assert not any(f.name.startswith("draft step") for f in answer.speculation.inputs)  # never borrowed
    # Measured at the verify's TP, it pairs.
    built.trial(draft, [("draft_step_ms", 0.6, {**tp1, "world_size": 2, "batch": b}, [0.6, 0.61]) for b in (1, 2)])
    session.flush()
    grid = read_answer(session, campaign).speculation.approach(verify.key)
    assert grid is not None and all(c.speedup is not None for c in grid.cells)
    draft_fig = next(f for f in read_answer(session, campaign).speculation.inputs if f.name == "draft step at batch 2")
    assert "world size 2" in draft_fig.conditions


def test_entered_acceptance_takes_precedence_and_names_the_measurement_and_the_vllm_conversion(session):
    """Typed acceptance (here vLLM's unconditional rates, converted) is used over a measured tau(k); its source
    says so, names the measured figure it replaces, and says how the rates were converted (issue 33 item 3)."""
    built = build_sweep_campaign(session, slug="typed-wins", approaches={"nccl-graph": ("NCCL", 17.0, 1e5, 1024)})
    campaign = built.campaign
    rates = [0.8, 0.56, 0.336]
    campaign.accept_unconditional = rates
    campaign.accept_alphas = alphas_from_unconditional(rates)
    server = campaigns.add_approach(session, campaign, ApproachCreate(key="sglang", title="sglang"), actor="t")
    built.trial(server, [("accept_length", 2.1, {"draft_tokens": 2, "speculative_topk": 1}, None)])
    session.flush()
    found = read_answer(session, campaign).speculation
    assert found.tau[2].value == pytest.approx(1 + 0.8 + 0.56)  # the typed rates, not the measured 2.1
    source = found.tau_sources[2]
    assert source.startswith("derived from the entered per-position acceptance rates")
    assert "converted from vLLM's unconditional per-position rates u (0.8, 0.56, 0.336)" in source
    assert "used in place of the measured 2.1" in source and "takes precedence" in source
    shown = next(f for f in found.inputs if f.name == "accept length at 2 draft tokens")
    assert "used in place of the measured 2.1" in shown.source  # the page's inputs table and the API
    assert "used in place" not in found.tau_sources[3]  # nothing measured at k = 3: nothing replaced
    # Cleared, the measurement is used.
    campaign.accept_alphas = None
    campaign.accept_unconditional = None
    session.flush()
    again = read_answer(session, campaign).speculation
    assert again.tau[2].value == pytest.approx(2.1) and "trial #" in again.tau_sources[2]


def test_a_what_if_changes_the_whole_answer_not_only_the_batch_1_report(session):
    """Issue 33: the what-if is laid over the grid's inputs too, so B*, the tiers, the sentence and the configs
    follow it (it changed only the batch-1 report before)."""
    campaign = build_sweep_campaign(session, slug="what-if-grid", r=4).campaign
    plain = read_answer(session, campaign)
    chosen = plain.speculation.chosen
    assert chosen is not None and chosen.break_even_batch is not None
    # Ten times the allreduces per verify: communication swamps the savings at far smaller batches.
    tried = read_answer(session, campaign, AnswerQuery(what_if=WhatIf(allreduces_per_verify=1220)))
    assert tried.speculation.n_ar == 1220 and tried.report.inputs.allreduces_per_verify.value == 1220
    mine = tried.speculation.approach(chosen.key)
    assert mine is not None
    assert (mine.break_even_batch or 0) < chosen.break_even_batch
    assert tried.speculation.sentence != plain.speculation.sentence
    # A what-if accept length at the campaign's draft steps (3) replaces the campaign's tau(3) on the grid, said.
    tau = read_answer(session, campaign, AnswerQuery(what_if=WhatIf(accept_length=1.2))).speculation
    assert tau.tau[3].value == pytest.approx(1.2) and tau.tau_sources[3] == "what-if"
    assert all(c.pays != "yes" for a in tau.approaches for c in a.cells if c.draft_tokens == 3)
    # The batch-1 figures land at batch 1, exact and said.
    t_base = read_answer(session, campaign, AnswerQuery(what_if=WhatIf(baseline_tok_s=50.0))).speculation
    cell = t_base.approach(chosen.key).cell(1, 1)  # type: ignore[union-attr]
    assert cell is not None and cell.t_base_ms == pytest.approx(20.0)
    assert any(f.name == "decode step at batch 1" and f.source.startswith("what-if") for f in t_base.inputs)
    assert read_answer(session, campaign) is plain  # nothing stored changed: the kept answer


def test_the_batch_1_report_is_the_answer_at_batch_1(session):
    """The report reads the grid's batch-1 inputs (paired by conditions, their trials and conditions named) and
    shows each approach's grid cell there, with its interval, instead of picking its own inputs (issue 33)."""
    campaign = import_results(session, "speculation-sweep-h200x1", ALPHAS)
    found = read_answer(session, campaign)
    grid = {f.name: f for f in found.speculation.inputs}
    t_base = found.report.inputs.t_base
    assert t_base.trial_ids == grid["decode step at batch 1"].trial_ids and "#16" not in t_base.source
    assert t_base.conditions is not None and t_base.conditions.tag_map["context"] == 1024  # not the 4,096 variant
    k = found.speculation.approaches[0].headline_k
    steps = int(found.report.inputs.draft_steps.value or campaign.verify_tokens - 1)
    verify = found.report.inputs.verify_compute_ms
    assert verify.trial_ids == grid[f"verify compute at batch 1, {steps} draft tokens"].trial_ids, k
    # The sweep's verify step ran on one GPU: no allreduce, so no t_ar is needed; the report places it at its grid
    # cell (t_ar 0) and answers, as the grid does, instead of "needs a measured allreduce latency".
    (point,) = found.report.points
    one_gpu = found.speculation.approach(point.key)
    assert one_gpu is not None and point.latency.t_ar_us == 0.0 and point.latency.method == "world size 1"
    assert point.cell is one_gpu.cell(1, steps) and point.speedup == point.cell.speedup.value  # type: ignore[union-attr]
    assert point.title not in found.report.unmeasured and found.report.answer_of(point) is not None
    # With allreduce approaches on the grid, each point is its grid cell at batch 1 and the draft steps.
    built = build_sweep_campaign(session, slug="report-is-grid", r=6).campaign
    answer = read_answer(session, built)
    assert answer.report.points
    for p in answer.report.points:
        cell = answer.speculation.approach(p.key).cell(1, 3)  # type: ignore[union-attr]
        assert p.cell is cell and p.speedup_interval is not None and p.speedup_interval.low is not None
        # The same figures, not a second model's: the point's tau* and speedup are the cell's.
        assert p.speedup == cell.speedup.value and p.tau_star == cell.tau_star.value  # type: ignore[union-attr]
        verdict = answer.report.answer_of(p)
        assert verdict is not None and verdict.tau_star == cell.tau_star.value  # type: ignore[union-attr]
