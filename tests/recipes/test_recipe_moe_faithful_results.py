"""The faithful MoE sweep (issue 44; docs/results/moe-faithful-h200x1.yaml.gz, made by bench/moe_results.py from
the 1x H200 trials' logs): a results campaign past the 2 MiB import limit as YAML, committed gzip-compressed, that
imports (the limit bounds the bytes sent, a second one what they expand to) with int4, bf16 and fp8 experts as
conditions, balanced routing touching the experts a balanced router does, and answers."""

from __future__ import annotations

import gzip
from pathlib import Path

from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns
from app.domain.answer.read import read_answer
from app.domain.campaign_files import campaign_file_text, import_campaign
from app.models import Metric
from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.state import app_state
from runners.recipes.moe_step import expected_touched

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "moe-faithful-h200x1.yaml.gz"


def test_the_faithful_results_bundle_is_past_the_yaml_limit_and_imports_compressed(app):
    settings = app_state(app).settings
    data = RESULTS.read_bytes()
    assert len(data) <= settings.max_campaign_file_bytes < len(gzip.decompress(data))
    text = campaign_file_text(data, expanded_limit=settings.max_campaign_file_expanded_bytes)
    with session_scope(app_state(app).engine) as session:
        summary = import_campaign(session, text, actor="test")
        session.flush()
        assert "16 trials" in summary.summary
        campaign = campaigns.get_campaign(session, "moe-faithful-h200x1")
        rows = session.exec(select(Metric).where(Metric.name == M.VERIFY_TIME_MS)).all()
        assert len(rows) == 6 * 64 * 2  # 3 experts' dtypes x 2 contexts x 64 points x 2 runs
        assert {r.tags[C.EXPERTS_DTYPE] for r in rows} == {"int4", "bf16", "fp8"}
        for row in rows:
            tags = row.tags
            assert tags["routing"] == "balanced" and tags["experts_kernel"] == "grouped"
            assert tags.get("int4_group", 32) == 32 and len(row.samples or []) == 20
            want = expected_touched(384, 8, tags["tokens"])
            assert abs(tags[C.EXPERTS_TOUCHED] / want - 1) <= 0.05, (tags["tokens"], tags[C.EXPERTS_TOUCHED], want)
        found = read_answer(session, campaign)
        labels = [c.label for c in found.condition_sets]
        # bf16 / fp8 / int4 experts x two contexts; where the draft step was measured, once per draft vocabulary
        assert len(labels) == 9 and any("int4" in label for label in labels)
        assert sum("draft vocab 163,840" in label for label in labels) == 3
        # the campaign declares its deployed precision: the default answer is int4's, the others asked by name
        assert campaign.answer_conditions == {"experts_dtype": "int4"} and found.default_declared is True
        assert found.conditions is not None and found.conditions.tag_map[C.EXPERTS_DTYPE] == "int4"
