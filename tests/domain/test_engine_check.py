"""The answer checked against a real engine (issue 42 item 3), on real databases: hand-computable figures
(tests/support/engine_check.py) give a held cell and missed ones with their exact percent, the engine's per-step
overhead as an input with its source trials, and nothing paired across conditions or stacks."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.domain.answer.prediction import (
    ENGINE_COUNTING,
    STANDIN,
    STANDIN_OVERHEAD,
    check_document,
    check_lines,
    engine_check,
)
from app.models import Metric
from tests.support.engine_check import ENGINE, FP, EngineCheckBuilder, build_engine_check_campaign


def _cell(check, b, k):
    (cell,) = [c for c in check.cells if (c.batch, c.draft_tokens) == (b, k)]
    return cell


def _pred(cell, name):
    (p,) = [p for p in cell.predictions if p.name == name]
    return p


def test_a_held_cell_and_missed_ones_with_their_exact_percent(session):
    b = build_engine_check_campaign(session)
    check = engine_check(session, b.campaign)
    assert check.missing == ()
    cell = _cell(check, 4, 3)
    assert cell.measured.interval.value == pytest.approx(1.55)
    assert cell.measured.interval.low == pytest.approx(1.50) and cell.measured.interval.high == pytest.approx(1.60)
    assert cell.one_trial and len(cell.trials) == 1

    counting = _pred(cell, ENGINE_COUNTING)  # 2.5 x 10 / 16
    assert counting.figure.interval.value == pytest.approx(1.5625)
    assert counting.held is True and counting.off_by == pytest.approx(1.5625 / 1.55 - 1)
    assert counting.words == "held (off by +0.8%)"

    standin = _pred(cell, STANDIN)  # 2.5 x 2 / (T_draft 2 + 4): the drafter measured at k 1 is 13 - 3 - 8 = 2 ms
    assert standin.figure.interval.value == pytest.approx(2.5 * 2 / (2 + 4))
    assert standin.held is False and standin.off_by == pytest.approx(2.5 * 2 / 6 / 1.55 - 1)
    assert standin.words == "missed by -46.2%"
    assert "measured at k 1" in standin.note

    with_overhead = _pred(cell, STANDIN_OVERHEAD)  # 2.5 x (2 + 8) / (2 + 4 + 8)
    assert with_overhead.figure.interval.value == pytest.approx(25 / 14)
    assert with_overhead.held is False and with_overhead.off_by == pytest.approx(25 / 14 / 1.55 - 1)
    assert with_overhead.words == "missed by +15.2%"

    assert cell.drafter_ms.interval.value == pytest.approx(2.0)
    # the other cell borrows the drafter measured at k 3: 16 - 4 - 8 = 4 ms; 1.8 x 10 / (4 + 3 + 8) = 1.2
    other = _cell(check, 4, 1)
    assert other.drafter_ms.interval.value == pytest.approx(4.0)
    missed = _pred(other, STANDIN_OVERHEAD)
    assert missed.figure.interval.value == pytest.approx(1.2)
    assert missed.held is False and missed.off_by == pytest.approx(1.2 / 1.385 - 1)
    assert missed.words == "missed by -13.4%"
    assert _pred(other, ENGINE_COUNTING).figure.interval.value == pytest.approx(1.8 * 10 / 13)
    assert _pred(other, ENGINE_COUNTING).words == "held (off by 0.0%)"  # -0.03%: never "-0.0%"


def test_the_engine_overhead_is_an_input_with_its_source_trials(session):
    b = build_engine_check_campaign(session)
    check = engine_check(session, b.campaign)
    cell = _cell(check, 4, 3)
    assert cell.overhead_ms.interval.value == pytest.approx(8.0)  # engine step off 10 - stand-in decode 2
    standin_trial, engine_trial = sorted(set(cell.overhead_ms.trials))
    assert f"#{engine_trial}" in cell.overhead_ms.source and f"#{standin_trial}" in cell.overhead_ms.source
    assert [(batch, f.interval.value) for batch, f in check.overheads] == [(4, pytest.approx(8.0))]
    doc = check_document(check)
    (doc_cell,) = [c for c in doc["cells"] if c["draft_tokens"] == 3]
    assert doc_cell["inputs"]["engine_overhead_ms"]["value"] == pytest.approx(8.0)
    assert [p["words"] for p in doc_cell["predictions"]] == [
        "held (off by +0.8%)",
        "missed by -46.2%",
        "missed by +15.2%",
    ]
    text = "\n".join(check_lines(check))
    assert "batch 4, k 3" in text and "missed by -46.2%" in text and "engine per-step overhead 8.000" in text


def test_no_engine_trial_says_what_is_missing(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    check = engine_check(session, b.campaign)
    assert check.cells == ()
    assert "no vllm_server trial" in check.missing[0]


def test_a_standin_under_other_conditions_or_another_stack_is_never_paired(session):
    b = EngineCheckBuilder(session)
    b.standin_trial(dtype="fp32")  # the engine ran bf16
    b.standin_trial(fp={**FP, "torch": "2.12.0+cpu"})  # another stack
    b.engine_trial()
    check = engine_check(session, b.campaign)
    cell = _cell(check, 4, 3)
    assert _pred(cell, ENGINE_COUNTING).held is True  # the engine's own figures still check
    for name in (STANDIN, STANDIN_OVERHEAD):
        p = _pred(cell, name)
        assert p.figure is None and p.held is None
        assert "no llama stand-in under the engine's conditions" in p.missing
    assert cell.overhead_ms is None
    assert check.held == 2 and check.missed == 0


def test_engine_trials_are_replicates_only_under_the_same_conditions(session):
    b = build_engine_check_campaign(session)
    b.engine_trial({(4, 3): (2.5, 10.0, 16.0, [1.56, 1.57, 1.58])})  # a second trial, same conditions
    b.engine_trial({(4, 3): (2.0, 10.0, 16.0, [1.2, 1.25, 1.3])}, model="other-llama")
    check = engine_check(session, b.campaign)
    cells = [c for c in check.cells if (c.batch, c.draft_tokens) == (4, 3)]
    assert sorted(len(c.trials) for c in cells) == [1, 2]
    (pair,) = [c for c in cells if len(c.trials) == 2]
    assert not pair.one_trial and pair.measured.interval.value == pytest.approx((1.55 + 1.57) / 2)
    (other,) = [c for c in cells if c.conditions.tag_map["model"] == "other-llama"]
    assert other.measured.interval.value == pytest.approx(1.25)
    # the other model's engine states no geometry: it pairs with the llama stand-in on what both state
    assert _pred(other, ENGINE_COUNTING).figure.interval.value == pytest.approx(2.0 * 10 / 16)
    # and it measured no other k at batch 4, so its drafter cost is not borrowed from the first model's cells
    assert other.drafter_ms is None and "T_draft counted 0" in _pred(other, STANDIN).note
    assert _pred(other, STANDIN).figure.interval.value == pytest.approx(2.0 * 2 / 4)


def test_spec_off_windows_tagged_k_0_serve_every_k_of_their_batch(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    trial = b.engine_trial({(4, 3): ENGINE[(4, 3)]})
    for m in session.exec(select(Metric).where(Metric.trial_id == trial.id)):
        if m.tags.get("spec") == "off":
            m.tags = {**m.tags, "draft_tokens": 0}
    session.flush()
    cell = _cell(engine_check(session, b.campaign), 4, 3)
    assert _pred(cell, ENGINE_COUNTING).figure.interval.value == pytest.approx(1.5625)
    assert cell.overhead_ms.interval.value == pytest.approx(8.0)


def test_an_engine_that_states_its_geometry_pairs_only_with_that_geometry(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    b.engine_trial(hidden_size=256)
    cell = _cell(engine_check(session, b.campaign), 4, 3)
    assert "hidden size 256 vs 128" in _pred(cell, STANDIN).missing


def test_stand_ins_of_two_geometries_are_not_picked_between_for_an_engine_that_states_none(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    b.standin_trial(hidden_size=256)
    b.engine_trial()
    cell = _cell(engine_check(session, b.campaign), 4, 3)
    p = _pred(cell, STANDIN)
    assert p.figure is None and "2 stand-in geometries agree" in p.missing and "hidden_size" in p.missing


def test_among_stand_in_contexts_the_nearest_to_the_engine_decode_context_is_taken_and_named(session):
    b = EngineCheckBuilder(session)
    b.standin_trial(context=1024)  # far from the engine's 128 + 64 / 2 = 160
    near = b.standin_trial(context=160)
    b.engine_trial()
    cell = _cell(engine_check(session, b.campaign), 4, 3)
    assert "context 160" in cell.standin
    assert cell.decode_ms is not None and cell.decode_ms.trials == (near.id,)


def test_unstable_inputs_make_held_a_weak_test_and_say_so(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    b.engine_trial({(4, 3): (2.5, 10.0, 16.0, [0.9, 1.55, 2.4])})  # a 40% spread between window pairs
    p = _pred(_cell(engine_check(session, b.campaign), 4, 3), ENGINE_COUNTING)
    assert p.held is True and p.figure.interval.unstable
    assert p.words == "held (off by +0.8%; unstable inputs (spread above 10%): a weak test)"


def test_a_standin_slower_than_the_engines_whole_step_derives_no_overhead(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    b.engine_trial({(4, 3): (2.5, 1.5, 2.4, [1.50, 1.55, 1.60])})  # engine step off 1.5 ms < stand-in decode 2 ms
    check = engine_check(session, b.campaign)
    cell = _cell(check, 4, 3)
    p = _pred(cell, STANDIN_OVERHEAD)
    assert p.figure is None and p.held is None
    assert "stand-in's decode (2.000 ms) is not below the engine's whole spec-off step (1.500 ms)" in p.missing
    assert cell.overhead_ms.interval.value == pytest.approx(-0.5)  # shown as measured, never used
    assert check.overheads == ()


def test_a_drafter_cost_measured_negative_counts_zero_and_says_so(session):
    b = EngineCheckBuilder(session)
    b.standin_trial()
    # at k 1 the spec-on step (10.5 ms) is below verify 3 + overhead 8: the drafter comes out at -0.5 ms
    b.engine_trial({(4, 3): ENGINE[(4, 3)], (4, 1): (1.8, 10.0, 10.5, [1.38, 1.385, 1.39])})
    cell = _cell(engine_check(session, b.campaign), 4, 3)
    p = _pred(cell, STANDIN)
    assert "T_draft counted 0: measured at k 1 it came out negative (-0.500 ms)" in p.note
    assert p.figure.interval.value == pytest.approx(2.5 * 2 / 4) and cell.drafter_ms is None
