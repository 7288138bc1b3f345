"""vLLM: `--speculative-config JSON` (`vllm/config/speculative.py`, `SpeculativeConfig`).

`num_speculative_tokens_per_batch_size` is a list of `[start_bs, end_bs, K]`: inclusive ranges, sorted, the
first starting at 1, none overlapping, K >= 0 (0 turns speculation off for that range);
`num_speculative_tokens` is the largest K (it sizes the buffers). Dynamic speculation is off with data
parallelism > 1, where vLLM then drafts `num_speculative_tokens` at every batch. (domain.md, "The engines'
per-batch speculation settings", read in vLLM's source 2026; `check_vllm_schedule` is those rules.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.domain.answer.configs.schedule import ConfigBuilder, ConfigFile, EngineConfig, deviations, per_batch_schedule
from app.domain.answer.grid import SpeculationAnswer
from app.models import Approach

FILE = "speculative-config.json"
RULES = "vLLM's SpeculativeConfig (vllm/config/speculative.py, read in its source 2026)"
# SGLang's --speculative-algorithm -> vLLM's `method` (an approach measured on SGLang deploys on vLLM).
SGLANG_METHODS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NGRAM": "ngram", "STANDALONE": "draft_model"}
# Methods whose drafts come from a model (the JSON's "model" key); n-gram and suffix decoding need none.
MODEL_METHODS = ("eagle3", "eagle", "draft_model", "medusa", "mlp_speculator", "mtp")


def draft_of(approach: Approach | None) -> tuple[str, str | None]:
    """(vLLM's method, the draft's path) the approach's recipe names: a vllm_server recipe's own
    `speculative_config`, an sglang_server recipe's `speculative` algorithm and draft path; the campaign's
    question, EAGLE-3 with no path, when it names neither. (The keys are vLLM 0.32's: the vllm_server
    recipe checks its JSON against them, and tests/contract/test_vllm_engine.py checks that list.)"""
    recipe: dict[str, Any] = approach.recipe if approach is not None and isinstance(approach.recipe, dict) else {}
    params: dict[str, Any] = recipe["params"] if isinstance(recipe.get("params"), dict) else {}
    if recipe.get("kind") == "vllm_server":
        config = params.get("speculative_config")
        if isinstance(config, str):
            try:
                config = json.loads(config)
            except ValueError:
                config = None
        if isinstance(config, dict) and (config.get("method") or config.get("model")):
            model = config.get("model")
            return str(config.get("method") or "draft_model"), str(model) if model else None
    if recipe.get("kind") == "sglang_server":
        spec: dict[str, Any] = params["speculative"] if isinstance(params.get("speculative"), dict) else {}
        algorithm = str(spec.get("algorithm") or "").upper()
        if algorithm in SGLANG_METHODS:
            path = spec.get("draft_model_path")
            return SGLANG_METHODS[algorithm], str(path) if path else None
    return "eagle3", None


def check_vllm_schedule(schedule: Any, num_speculative_tokens: Any) -> None:
    """vLLM's rules for `num_speculative_tokens_per_batch_size`; ValueError naming the first broken one."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must be a non-empty list of [start, end, K]")
    previous_end = 0
    for i, entry in enumerate(schedule):
        if not isinstance(entry, list) or len(entry) != 3 or not all(type(x) is int for x in entry):
            raise ValueError(f"entry {i} must be [start_bs, end_bs, K] of integers, not {entry!r}")
        start, end, k = entry
        if i == 0 and start != 1:
            raise ValueError(f"the first range must start at batch 1, not {start}")
        if start > end:
            raise ValueError(f"entry {i}: start {start} is above end {end} (ranges are inclusive)")
        if start <= previous_end:
            raise ValueError(f"entry {i} overlaps the one before it or is out of order ({start} <= {previous_end})")
        if k < 0:
            raise ValueError(f"entry {i}: K must be >= 0, not {k}")
        previous_end = end
    largest = max(k for _s, _e, k in schedule)
    if num_speculative_tokens != largest:
        raise ValueError(f"num_speculative_tokens must be the largest K ({largest}), not {num_speculative_tokens!r}")


def vllm_config(answer: SpeculationAnswer, approaches: Sequence[Approach]) -> EngineConfig:
    schedule = per_batch_schedule(answer)
    chosen = schedule.approach
    ranges = [[r.start, r.end, r.k] for r in schedule.ranges]
    top = schedule.largest_k
    check_vllm_schedule(ranges, top)
    method, draft = draft_of(next((a for a in approaches if a.key == chosen.key), None))
    spec: dict[str, Any] = {"method": method}
    if draft:
        spec["model"] = draft
    spec.update({"num_speculative_tokens": top, "num_speculative_tokens_per_batch_size": ranges})
    text = json.dumps(spec, separators=(",", ":"))
    out = ConfigBuilder()
    named = method != "eagle3" or draft is not None
    out.add("method", method, f"{chosen.title}'s recipe" if named else "the campaign's question (EAGLE-3)", argv=[])
    if draft:
        out.add("model", draft, f"the draft {chosen.title}'s recipe names", argv=[])
    out.add("num_speculative_tokens", top, "the largest K of the schedule (vLLM sizes its buffers by it)", argv=[])
    for r in schedule.ranges:
        out.add(f"batches {r.start}-{r.end}", r.k, r.source, argv=[])
    out.argv = ["--speculative-config", text]
    if method in MODEL_METHODS and not draft:
        out.notes.append('Add "model": the path of your draft (for EAGLE-3, its draft head) to the JSON.')
    out.notes += [
        f"Data parallelism > 1 turns vLLM's per-batch speculation off: it then drafts {top} tokens at every batch, "
        f"including above batch {schedule.break_even_batch}, where this answer turns speculation off.",
        f"Above batch {schedule.break_even_batch}: {schedule.off_reason}.",
        f"vLLM picks its own allreduce; this answer measured {chosen.title} (world size {chosen.world_size}).",
    ]
    return EngineConfig(
        "vllm",
        chosen.key,
        tuple(out.argv),
        {},
        tuple(out.settings),
        tuple(out.notes),
        files=(ConfigFile(FILE, "application/json", json.dumps(spec, indent=2) + "\n"),),
        rules=RULES,
        deviations=deviations(schedule, [(s, e, k) for s, e, k in ranges]),
    )
