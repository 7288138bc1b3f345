"""The payoff ranking (app/domain/planning.py) on SQLite and PostgreSQL: every term of a small campaign's
ranking checked by hand; "Run next candidate" follows the ranking unless a person pinned the priority order
(moving an approach pins it); with no figure known the ranking ties and keeps the priority order."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.domain import campaigns, planning, scheduling
from app.models import Approach, ApproachStatus, Campaign, RunOrder, Trial
from tests.support.charts import add_metrics
from tests.support.verdicts import OLD_STACK, runner

BYTES = 4 * 7168 * 2  # the verify message size: 4 tokens x hidden 7168 x 2 bytes = 56 KiB
SM9 = {"sm": "9.0", "torch": "2.10.0"}
ALLREDUCE = {"kind": "allreduce", "params": {}}
COMMAND = {"kind": "command", "params": {"argv": ["true"]}}


def build(engine, *, figures: bool = True, slug: str = "small") -> None:
    """Priority a, b, c (untested) and two verdicts; with `figures`: b has a reported 20 us, `measured` 50 us."""
    with session_scope(engine) as s:
        campaign = Campaign(
            slug=slug,
            name=slug,
            baseline_tok_s=82.0,
            accept_length=2.4,
            draft_steps=3,
            draft_step_ms=0.5,
            verify_compute_ms=9.0,
            reported=[
                {"label": "NCCL (the baseline)", "t_ar_us": 200.0, "baseline": True, "source": "seed"},
                {"label": "B's library", "approach": "b", "t_ar_us": 20.0, "source": "its docstring"},
            ]
            if figures
            else None,
        )
        s.add(campaign)
        s.flush()
        assert campaign.id is not None
        rows = [
            Approach(campaign_id=campaign.id, key="a", title="A", effort="medium (build)", recipe=ALLREDUCE, requirements={"gpus": 2}),
            Approach(campaign_id=campaign.id, key="b", title="B", effort="low (env var)", recipe=ALLREDUCE, requirements={"gpus": 2, "software": ["torch"]}),
            Approach(campaign_id=campaign.id, key="c", title="C", effort="high", recipe=COMMAND),
            Approach(campaign_id=campaign.id, key="measured", title="Measured", status=ApproachStatus.promising, recipe=ALLREDUCE,
                     requirements={"gpus": 2}, bound_to={"components": ["torch"]}, verdict_fingerprint=SM9),
            Approach(campaign_id=campaign.id, key="dead", title="Dead", status=ApproachStatus.dead_end, reason="KeyError: 12", recipe=ALLREDUCE,
                     bound_to={"components": ["torch", "sm"]}, verdict_fingerprint=SM9),
        ]  # fmt: skip
        for position, row in enumerate(rows, start=1):
            row.position = position
            s.add(row)
        s.flush()
        if figures:
            measured = rows[3]
            trial = Trial(campaign_id=campaign.id, approach_id=measured.id, recipe=ALLREDUCE, state="succeeded")  # type: ignore[arg-type]
            s.add(trial)
            s.flush()
            add_metrics(s, trial, [("allreduce_latency_us", 50.0, {"bytes": BYTES, "mode": "graph", "device": "cuda"})])


def ranked(engine, slug: str = "small") -> list[planning.Ranked]:
    with session_scope(engine, write=False) as s:
        return scheduling.ranking(s, campaigns.get_campaign(s, slug))


def test_each_term_of_the_ranking_by_hand(engine):
    build(engine)
    out = ranked(engine)
    assert [r.key for r in out] == ["b", "a", "c"]  # priority is a, b, c: the ranking moves b first
    b, a, c = out
    # needs: beat the current best (the measured usable approach, 50 us), and t_ar* at tau 2.4:
    # T_base = 1000 / 82 = 12.195 ms; savings = 2.4 x 12.195 - 3 x 0.5 - 9.0 = 18.768 ms; / 122 = 153.8 us.
    t_base = 1000 / 82
    assert b.needs.bytes == 57344
    assert b.needs.beat_best_us == 50.0 and "Measured" in b.needs.beat_best_of
    assert b.needs.pay_us == pytest.approx((2.4 * t_base - 1.5 - 9.0) / 122 * 1000)
    assert b.needs.pay_exact and b.needs.us == 50.0
    # expected: b's reported figure; a's from its kind (allreduce on 2 GPUs: the measured one); c none.
    assert (b.expected.t_ar_us, b.expected.source) == (20.0, "reported")  # type: ignore[union-attr]
    assert "its docstring" in b.expected.note  # type: ignore[union-attr]
    assert (a.expected.t_ar_us, a.expected.source) == (50.0, "its kind")  # type: ignore[union-attr]
    assert c.expected is None and c.gain_ms is None and c.score is None
    # gain = (50 - expected) x 122 / 1000 ms per verify step
    assert b.gain_ms == pytest.approx(30 * 122 / 1000) and a.gain_ms == 0.0
    # effort: low 1, medium 2, high 4
    assert (b.effort, a.effort, c.effort) == (1.0, 2.0, 4.0)
    # risk: b requires torch; the verdicts bound to torch on SM 9.0 are `measured` (promising) and `dead`:
    # 1 died of 2 -> (1 + 1) / (2 + 2) = 0.5. a depends on no component: (0 + 1) / (0 + 2) = 0.5.
    assert (b.risk.died, b.risk.judged, b.risk.sm, b.risk.value) == (1, 2, "9.0", 0.5)
    assert (a.risk.died, a.risk.judged, a.risk.value) == (0, 0, 0.5)
    # score = gain x (1 - risk) / effort
    assert b.score == pytest.approx(30 * 122 / 1000 * 0.5 / 1.0)
    assert a.score == 0.0
    assert "needs <= 50 us at 56 KiB to beat Measured (measured, 50 us)" in b.reasons
    assert any(line.startswith("needs <= 154 us at 56 KiB for speculation to pay at tau = 2.4") for line in b.reasons)
    assert "risk 50%: 1 of 2 verdicts bound to torch on SM 9.0 died ((1 + 1) / (2 + 2))" in b.reasons
    assert planning.why_next(out) == "needs <= 50 us at 56 KiB; expected 20 us (reported); effort low (env var)"


def test_effort_words():
    assert planning.effort_points("low (one flag)") == 1.0
    assert planning.effort_points("High: build MSCCL++") == 4.0
    assert planning.effort_points("") == planning.effort_points("a weekend") == 2.0


def test_without_figures_the_ranking_ties_and_keeps_the_priority_order(engine):
    build(engine, figures=False)
    out = ranked(engine)
    assert [r.key for r in out] == ["a", "b", "c"]
    assert all(r.score is None for r in out)
    assert "no figure known for it yet: ranked by priority" in out[0].reasons


def _run_next(engine) -> str:
    with session_scope(engine) as s:
        result = scheduling.run_next(s, campaigns.get_campaign(s, "small"), "alice")
        assert result.trial is not None, result.reason  # started, or queued behind the runner's trial
        return result.approach.key  # type: ignore[union-attr]


def test_run_next_follows_the_ranking_unless_a_person_pins_the_order(engine):
    build(engine)
    with session_scope(engine) as s:
        runner(s, "node-a", OLD_STACK)
        assert campaigns.get_campaign(s, "small").run_order == RunOrder.ranking  # the default
    assert _run_next(engine) == "b"  # ranked first, priority 2


def test_moving_an_approach_pins_the_priority_order_which_wins(engine):
    build(engine)
    with session_scope(engine) as s:
        runner(s, "node-a", OLD_STACK)
        campaign = campaigns.get_campaign(s, "small")
        campaigns.move_approach(s, campaign, campaigns.get_approach(s, campaign, "c"), 1)
        assert campaign.run_order == RunOrder.priority
    assert [r.key for r in ranked(engine)][0] == "b"  # the ranking still proposes b ...
    assert _run_next(engine) == "c"  # ... the pinned priority wins


def test_run_order_can_be_set_back_to_the_ranking_and_refuses_other_words(engine):
    build(engine)
    with session_scope(engine) as s:
        runner(s, "node-a", OLD_STACK)
        campaign = campaigns.get_campaign(s, "small")
        campaigns.set_run_order(s, campaign, "priority")
    assert _run_next(engine) == "a"
    with session_scope(engine) as s:
        campaign = campaigns.get_campaign(s, "small")
        campaigns.set_run_order(s, campaign, "ranking")
        with pytest.raises(campaigns.Invalid, match="order: expected one of ranking, priority"):
            campaigns.set_run_order(s, campaign, "random")
    assert _run_next(engine) == "b"
