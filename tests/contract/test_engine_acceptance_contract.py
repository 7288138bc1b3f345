"""engine_acceptance against the real SGLang release (tests/contract/conftest.py installs it): the stand-in's
SGLang exposition uses the names, documentation and labels sglang's collectors declare, and /server_info
carries the speculative server args as the top-level fields the recipe reads."""

from __future__ import annotations

import json
import subprocess
import sys

from runners.recipes.engine_acceptance import SGLANG_ACCEPT_GAUGE, SGLANG_GENERATION_TOKENS, SGLANG_VERIFY_CALLS
from tests.standins.prometheus_standin import EngineStandin


def test_the_standins_sglang_metrics_are_the_ones_sglang_declares(sglang_source):
    collector = (sglang_source / "srt/observability/metrics_collector.py").read_text(encoding="utf-8")
    standin = EngineStandin("sglang", tick_s=None)
    try:
        families = {f.name: f for f in standin.registry.collect() if f.name.startswith("sglang:")}
    finally:
        standin.server.server_close()
    assert {SGLANG_VERIFY_CALLS, SGLANG_GENERATION_TOKENS, SGLANG_ACCEPT_GAUGE} <= set(families)
    for name, family in families.items():
        declared = f'name="{name}_total"' if family.type == "counter" else f'name="{name}"'
        assert declared in collector, name
        assert f'documentation="{family.documentation}"' in collector, name
    # The tokenizer collector's labels (model_name, engine_type) and the counters' increments.
    assert '"engine_type": DisaggregationMode.to_engine_type(' in collector
    assert "self.spec_verify_calls_total.labels(**labels).inc(spec_verify_ct)" in collector
    assert "self.generation_tokens_total.labels(**stream_labels).inc(generation_tokens)" in collector


def test_server_info_carries_the_speculative_args_at_its_top_level(sglang_source, sglang_env):
    common = (sglang_source / "srt/utils/common.py").read_text(encoding="utf-8")
    assert "result = server_args.resolved_dict()" in common  # /server_info = the resolved ServerArgs fields + ...
    code = (
        "import json\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "from sglang.srt.arg_groups.arg_utils import record_fields\n"
        "print(json.dumps([f.name for f in record_fields(ServerArgs)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=sglang_env)
    assert done.returncode == 0, done.stderr[-2000:]
    fields = set(json.loads(done.stdout.strip().splitlines()[-1]))
    wanted = {
        "speculative_algorithm",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    }
    assert wanted <= fields
