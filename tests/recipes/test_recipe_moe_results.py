"""The committed MoE results campaign (docs/results/, made by bench/moe_results.py from the trials' logs of the
1x H200 sweep) imports as measured trials whose rows carry the MoE stand-in's conditions, and answers."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns
from app.domain.answer.read import read_answer
from app.domain.campaign_files import import_campaign
from app.models import Metric, Trial
from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.state import app_state

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "moe-sweep-h200x1.yaml"


def test_the_moe_results_campaign_imports_with_its_conditions_and_answers(app):
    with session_scope(app_state(app).engine) as session:
        summary = import_campaign(session, RESULTS.read_text(), actor="test")
        session.flush()
        assert "12 trials" in summary.summary
        campaign = campaigns.get_campaign(session, "moe-sweep-h200x1")
        trials = session.exec(select(Trial).where(Trial.campaign_id == campaign.id)).all()
        assert len(trials) == 12 and all(t.state == "succeeded" for t in trials)
        rows = session.exec(select(Metric).where(Metric.name == M.VERIFY_TIME_MS)).all()
        assert len(rows) == 4 * 64 * 2  # 4 configurations x 64 points x 2 runs
        for row in rows:
            tags = row.tags
            assert tags[C.STANDIN] == "moe" and tags[C.GEOMETRY] == "kimi-k2.5" and tags[C.EXPERTS] == 384
            assert tags[C.LAYERS] == 61 and tags[C.LAYERS_TIMED] == 3 and tags["scaled"] is False
            assert tags["standin_label"].startswith("MoE stand-in, Kimi-K2.5 geometry")
            assert len(row.samples or []) == 20
        touched = {
            (r.tags["batch"], r.tags["draft_tokens"]): r.tags[C.EXPERTS_TOUCHED]
            for r in rows
            if r.tags[C.EXPERTS_DTYPE] == "bf16" and r.tags["context"] == 1024
        }
        # decode at batch 1 reads top-8 of 384; verify at k = 3 (4 tokens) reads about 31
        assert touched[(1, 0)] == 8 and 28 <= touched[(1, 3)] <= 32 and touched[(128, 7)] > 300
        found = read_answer(session, campaign)
        sets = found.condition_sets
        # bf16 / fp8 experts x context 1,024 / 4,096: never combined; at context 1,024 (where the draft step was
        # measured) each once per draft vocabulary, 32,000 and 163,840 (issue 43 item 15)
        assert len(sets) == 6 and sum("draft vocab 163,840" in c.label for c in sets) == 2
        # The default holds most of what an answer needs: at context 4,096 there is no draft step (the file holds
        # no accept length anywhere), so the default is a context-1,024 set (it was fp8 at 4,096 before).
        default = next(c for c in sets if c.key == found.default_conditions)
        assert found.is_default and found.default_label == default.label and "context 1,024" in default.label
        assert "draft vocab 32,000" in default.label
        assert default.inputs == 3 and not default.answers  # decode, draft, verify; tau is missing
        assert all(c.inputs == 2 for c in sets if "context 4,096" in c.label)
        assert any(m.what.startswith("accept length tau") for m in found.speculation.missing)
        assert "at batch 1 with 3 draft tokens" in found.speculation.sentence  # the default answers, tau* at b = 1
