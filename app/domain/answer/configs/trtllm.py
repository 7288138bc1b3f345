"""TensorRT-LLM: the LLM API's `speculative_config` (`Eagle3DecodingConfig`, a `DecodingBaseConfig`), given to
`trtllm-serve` in the extra LLM API options YAML.

`draft_len_schedule` maps a batch size to a draft length: a batch uses the entry of the smallest key at or
above it, and above the largest key it drafts 0. Its validator (llm_args.py) wants key 1 present, keys >= 1,
lengths >= 0 and <= `max_draft_len`, and `schedule[1] == max_draft_len`. The one-model EAGLE-3 drafter (the
default, `eagle3_one_model`) refuses length 0 (their PR 16888 floors K at 1: at 0 its drafter state goes
stale), so speculation is turned off above the break-even batch by `max_concurrency` (off above it), never by
a 0 in the schedule. (domain.md, "The engines' per-batch speculation settings"; `check_trtllm_schedule`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from app.domain.answer.configs.schedule import ConfigBuilder, ConfigFile, EngineConfig, Setting, per_batch_schedule
from app.domain.answer.grid import SpeculationAnswer
from app.models import Approach

FILE = "extra-llm-api-options.yaml"


def check_trtllm_schedule(config: Any) -> None:
    """TensorRT-LLM's rules for a `speculative_config` with a draft-length schedule; ValueError if broken."""
    if not isinstance(config, dict):
        raise ValueError("speculative_config must be a mapping")
    max_draft_len = config.get("max_draft_len")
    if type(max_draft_len) is not int or max_draft_len < 1:
        raise ValueError(f"max_draft_len must be an integer >= 1 for Eagle3, not {max_draft_len!r}")
    schedule = config.get("draft_len_schedule")
    if not isinstance(schedule, dict) or not schedule:
        raise ValueError("draft_len_schedule must be a non-empty mapping of batch size -> draft length")
    for batch, length in schedule.items():
        if type(batch) is not int or batch < 1:
            raise ValueError(f"draft_len_schedule: batch size threshold must be >= 1, got {batch!r}")
        if type(length) is not int or length < 0:
            raise ValueError(f"draft_len_schedule: draft length must be >= 0, got {length!r}")
        if length > max_draft_len:
            raise ValueError(f"draft_len_schedule: {length} at batch {batch} is above max_draft_len {max_draft_len}")
        if length == 0 and config.get("eagle3_one_model", True):
            raise ValueError(
                f"draft_len_schedule: 0 at batch {batch} with the one-model drafter (PR 16888 floors K at 1): "
                "use max_concurrency to turn speculation off"
            )
    if 1 not in schedule:
        raise ValueError("draft_len_schedule must include batch_size=1")
    if schedule[1] != max_draft_len:
        raise ValueError(f"draft_len_schedule[1] ({schedule[1]}) must equal max_draft_len ({max_draft_len})")
    concurrency = config.get("max_concurrency")
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise ValueError(f"max_concurrency must be an integer >= 1, not {concurrency!r}")


def trtllm_config(answer: SpeculationAnswer, approaches: Sequence[Approach]) -> EngineConfig:
    del approaches  # TensorRT-LLM picks its own allreduce
    schedule = per_batch_schedule(answer)
    chosen = schedule.approach
    out = ConfigBuilder()
    ranges = schedule.speculating
    head = ranges[0].k if ranges[0].k >= 1 else 1
    lengths: dict[int, int] = {1: head}
    for r in ranges:
        k = min(max(r.k, 1), head)
        if k != r.k:
            out.notes.append(
                f"batches {r.start}-{r.end}: the answer's k = {r.k} is written as {k} "
                + (
                    "(TensorRT-LLM's one-model drafter floors K at 1)"
                    if r.k < 1
                    else f"(no length may exceed the batch-1 length {head})"
                )
            )
        lengths[r.end] = k
        out.add(f"draft_len_schedule[{r.end}]", k, f"batches {r.start}-{r.end}: {r.source}", argv=[])
    b_star = schedule.break_even_batch
    config: dict[str, Any] = {
        "decoding_type": "Eagle3",
        "max_draft_len": head,
        "draft_len_schedule": dict(sorted(lengths.items())),
        "max_concurrency": b_star,
    }
    check_trtllm_schedule(config)
    out.settings.insert(0, Setting("max_draft_len", head, "the batch-1 draft length (the schedule's key 1)"))
    out.add("max_concurrency", b_star, f"off above the break-even batch {b_star}: {schedule.off_reason}", argv=[])
    out.argv = ["--extra_llm_api_options", FILE]
    out.notes += [
        "Add speculative_model (your EAGLE-3 draft head) to speculative_config; pass the file to trtllm-serve "
        "(newer releases name the option --config).",
        "K = 0 is never written into the schedule: TensorRT-LLM's one-model drafter state goes stale at K = 0 "
        "(their PR 16888 floors K at 1); max_concurrency turns speculation off above the break-even batch instead.",
        f"TensorRT-LLM picks its own allreduce; this answer measured {chosen.title} (world size {chosen.world_size}).",
    ]
    text = yaml.safe_dump({"speculative_config": config}, sort_keys=False)
    return EngineConfig(
        "trtllm",
        chosen.key,
        tuple(out.argv),
        {},
        tuple(out.settings),
        tuple(out.notes),
        files=(ConfigFile(FILE, "application/yaml", text),),
    )
