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

from app.domain.answer.configs.schedule import ConfigBuilder, ConfigFile, EngineConfig, per_batch_schedule
from app.domain.answer.grid import SpeculationAnswer
from app.models import Approach

FILE = "speculative-config.json"


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
    del approaches  # vLLM picks its own allreduce: no speculative option selects it
    schedule = per_batch_schedule(answer)
    chosen = schedule.approach
    ranges = [[r.start, r.end, r.k] for r in schedule.ranges]
    top = schedule.largest_k
    check_vllm_schedule(ranges, top)
    spec = {"method": "eagle3", "num_speculative_tokens": top, "num_speculative_tokens_per_batch_size": ranges}
    text = json.dumps(spec, separators=(",", ":"))
    out = ConfigBuilder()
    out.add("method", "eagle3", "the campaign's question (EAGLE-3)", argv=[])
    out.add("num_speculative_tokens", top, "the largest K of the schedule (vLLM sizes its buffers by it)", argv=[])
    for r in schedule.ranges:
        out.add(f"batches {r.start}-{r.end}", r.k, r.source, argv=[])
    out.argv = ["--speculative-config", text]
    out.notes += [
        'Add "model": the path of your EAGLE-3 draft head to the JSON.',
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
    )
