"""Issue 43 items 10, 11, 13: one rule decides on/off per batch (the interval, `Cell.pays`) for the grid, the
sentence and the configs; the sentence names k per batch range from the same cells; the default condition set is
chosen by declared conditions (bf16 experts), never by which trial is newest."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.domain.answer.read import pick_conditions, read_answer
from app.domain.answer.sentence import batch_ranges
from app.domain.answer.speculation import speculation_answer
from app.domain.answer.values import Value, exact, of_trials
from tests.support.results import ALPHAS, import_results
from tests.support.speculation import approach, spec


def _runs(a: float, b: float, first: int) -> Value:
    rng = np.random.default_rng(first)
    return of_trials([list(rng.normal(a, a * 1e-4, 20)), list(rng.normal(b, b * 1e-4, 20))], "s", (first, first + 10))


def test_a_point_above_1_whose_interval_holds_1_is_off_everywhere():
    # Run 1: 2.0 x 10.5 / 20 = 1.05; run 2: 2.0 x 9.7 / 20 = 0.97. The point (1.01) is above 1, the interval is not.
    one = approach("tp1", [1], [1], base=_runs(10.5, 9.7, 1), draft=exact(1.0, "e"), verify=exact(19.0, "e"), world=1)
    a = speculation_answer(spec([one], [1], [1], {1: exact(2.0, "e")})).approaches[0]
    c = a.cell(1, 1)
    assert c is not None and c.speedup is not None and c.speedup.value > 1
    assert c.speedup.low < 1 < c.speedup.high  # type: ignore[operator]
    assert c.pays == "unclear" and c.profitable is None  # not the point estimate's True
    assert a.best_draft_tokens == {1: 0} and a.decision == {1: "unclear"}  # it said k = 1 (on) before
    assert a.break_even_batch is None


def test_the_sentence_names_k_per_batch_range_as_the_grid_does():
    # Batch 1 pays with k = 2, batch 2 does not pay at all (a slow decode step there), batch 4 pays with k = 1.
    taus = {1: exact(1.8, "e"), 2: exact(2.2, "e")}
    one = approach("tp1", [1, 2, 4], [1, 2], world=1)
    one = replace(
        one,
        t_base={1: exact(10.0, "e"), 2: exact(5.0, "e"), 4: exact(10.0, "e")},
        verify_compute={
            **{(b, k): exact(11.0, "e") for b in (1, 2) for k in (1, 2)},
            (4, 1): exact(11.0, "e"),
            (4, 2): exact(20.0, "e"),
        },
    )
    found = speculation_answer(spec([one], [1, 2, 4], [1, 2], taus))
    a = found.approaches[0]
    assert a.best_draft_tokens == {1: 2, 2: 0, 4: 1}
    assert batch_ranges(a) == [(1, 1, "yes", 2), (2, 2, "no", 0), (4, 4, "yes", 1)]
    # It said "pays at every measured batch up to 4 with 1 draft token" (B*'s k only, batch 2 hidden).
    assert found.sentence == (
        "On this node EAGLE-3 with tp1, by batch: 2 draft tokens at batch 1; off at batch 2 (it does not pay); "
        "1 draft token at batch 4; above batch 4 it is not measured."
    )


def test_the_moe_default_is_bf16_by_its_conditions_and_fp8_is_asked_for_by_name(session):
    campaign = import_results(session, "moe-sweep-h200x1", ALPHAS)
    found = read_answer(session, campaign)
    assert found.conditions is not None and found.conditions.tag_map["experts_dtype"] == "bf16"  # it was fp8
    assert "bf16 experts" in (found.default_label or "")
    (a,) = found.speculation.approaches
    # The sentence says per range what the grid says per batch (it said "pays at every batch up to 128 with 5").
    for first, last, state, k in batch_ranges(a):
        assert all(a.decision[b] == state and a.best_draft_tokens[b] == k for b in a.best_speedup if first <= b <= last)
        where = f"batch {first}" if first == last else f"batches {first}-{last}"
        assert where in found.speculation.sentence
    assert "off at batch 4 (it does not pay)" in found.speculation.sentence
    fp8 = pick_conditions(session, campaign, experts_dtype="fp8")
    assert fp8 is not None and "experts_dtype=fp8" in fp8
    assert pick_conditions(session, campaign, context=1024) == found.default_conditions  # not the newest (fp8)


def test_a_campaign_declares_the_conditions_of_its_default_answer(session, client):
    """The default is the set the campaign declares (`answer_conditions`: the precision it deploys), else the
    most complete (bf16 among equals); a declaration no answering set states is said, never silently dropped."""
    campaign = import_results(session, "moe-sweep-h200x1", ALPHAS)
    campaign.answer_conditions = {"experts_dtype": "fp8", "context": "1024"}
    session.flush()
    found = read_answer(session, campaign)
    assert found.conditions is not None and found.conditions.tag_map["experts_dtype"] == "fp8"
    assert found.default_declared is True and "fp8 experts" in (found.default_label or "")
    # asking for a context picks the declared precision among the sets that match it
    assert pick_conditions(session, campaign, context=1024) == found.default_conditions
    assert "experts_dtype=bf16" in (pick_conditions(session, campaign, experts_dtype="bf16") or "")
    campaign.answer_conditions = {"experts_dtype": "int4"}  # not measured in this campaign
    session.flush()
    found = read_answer(session, campaign)
    assert found.conditions is not None and found.conditions.tag_map["experts_dtype"] == "bf16"
    assert found.default_declared is False
    campaign.answer_conditions = None
    session.flush()
    assert read_answer(session, campaign).default_declared is None


def test_answer_conditions_are_checked_and_said_on_the_page(app, operator_client, session):
    client = operator_client
    import_results(session, "moe-sweep-h200x1")
    session.commit()
    bad = client.patch("/api/campaigns/moe-sweep-h200x1", json={"answer_conditions": {"precision": "int4"}})
    assert bad.status_code == 422 and "not a condition: precision" in bad.text
    assert client.get("/api/campaigns/moe-sweep-h200x1").json()["answer_conditions"] is None  # nothing was lost
    ok = client.patch("/api/campaigns/moe-sweep-h200x1", json={"answer_conditions": {"experts_dtype": "int4"}})
    assert ok.status_code == 200, ok.text
    page = client.get("/campaigns/moe-sweep-h200x1/charts").text
    assert "no set that can answer is measured under the conditions this campaign declares (experts_dtype int4)" in page
    body = client.get("/api/campaigns/moe-sweep-h200x1/answer").json()
    assert body["default_conditions_declared"] is False
