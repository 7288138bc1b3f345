"""TensorRT-LLM: the LLM API's `speculative_config` (`Eagle3DecodingConfig`, a `DecodingBaseConfig`), given to
`trtllm-serve` in the extra LLM API options YAML. The rules followed are TensorRT-LLM 1.4.0rc4's (`RELEASE`;
`DecodingBaseConfig` in `tensorrt_llm/llmapi/llm_args.py`, `get_draft_len_for_batch_size` in
`tensorrt_llm/_torch/speculative/utils.py`; domain.md, "The engines' per-batch speculation settings"):

- `draft_len_schedule` maps a batch size to a draft length: a batch uses the entry of the smallest key at or above
  it, and above the largest key it drafts 0 (speculation off, implicitly).
- Keys >= 1, lengths >= 0 and <= `max_draft_len`, and the entry of the smallest key must equal `max_draft_len`:
  the first batch range drafts the most.
- `max_concurrency` and `draft_len_schedule` are mutually exclusive (the schedule's largest key is the cut-off).
- EAGLE-3 runs the one-model drafter only (1.4.0rc4 has no two-model path); at an explicit length 0 its drafter
  state goes stale (their open PR 16888 floors K at 1), so 0 is never written: speculation is off only above the
  largest key.

So the engine cannot express speculation off for a batch range below one where it is on, nor a draft length at a
larger batch above the first range's. Where the answer asks for either, the writer gives the nearest schedule it
can express (the one with the highest mean predicted speedup over the answer's measured batches, from the answer's
own cells), says so beside it, and lists each deviation with its predicted cost (`schedule.deviations`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from app.domain.answer.configs.schedule import (
    BatchRange,
    ConfigBuilder,
    ConfigFile,
    EngineConfig,
    Schedule,
    Setting,
    deviations,
    per_batch_schedule,
    speedup_at,
)
from app.domain.answer.grid import SpeculationAnswer
from app.models import Approach

FILE = "extra-llm-api-options.yaml"
RELEASE = "TensorRT-LLM 1.4.0rc4"


def check_trtllm_schedule(config: Any) -> None:
    """TensorRT-LLM 1.4.0rc4's rules for a `speculative_config` with a draft-length schedule (and the one-model
    drafter's: no explicit 0); ValueError naming the first broken one."""
    if not isinstance(config, dict):
        raise ValueError("speculative_config must be a mapping")
    max_draft_len = config.get("max_draft_len")
    if type(max_draft_len) is not int or max_draft_len < 1:
        raise ValueError(f"max_draft_len must be an integer >= 1 for Eagle3, not {max_draft_len!r}")
    schedule = config.get("draft_len_schedule")
    if not isinstance(schedule, dict) or not schedule:
        raise ValueError("draft_len_schedule must be a non-empty mapping of batch size -> draft length")
    if config.get("max_concurrency") is not None:
        raise ValueError("max_concurrency and draft_len_schedule are mutually exclusive (1.4.0rc4)")
    for batch, length in schedule.items():
        if type(batch) is not int or batch < 1:
            raise ValueError(f"draft_len_schedule: batch size threshold must be >= 1, got {batch!r}")
        if type(length) is not int or length < 0:
            raise ValueError(f"draft_len_schedule: draft length must be >= 0, got {length!r}")
        if length > max_draft_len:
            raise ValueError(f"draft_len_schedule: {length} at batch {batch} is above max_draft_len {max_draft_len}")
        if length == 0:
            raise ValueError(
                f"draft_len_schedule: 0 at batch {batch}: the one-model drafter's state goes stale at K = 0 "
                "(PR 16888 floors K at 1); speculation is off only above the largest key"
            )
    smallest = min(schedule)
    if schedule[smallest] != max_draft_len:
        raise ValueError(
            f"draft_len_schedule[{smallest}] ({schedule[smallest]}) must equal max_draft_len ({max_draft_len}): "
            "it is the smallest batch-size key"
        )


def _range_k(schedule: Schedule, r: BatchRange, top: int, ks: Sequence[int]) -> int | None:
    """The k in 1..top with the highest mean predicted speedup over the range's measured batches (ties: the
    smaller k); None where no such k has a speedup at all of them."""
    chosen = schedule.approach
    batches = [b for b in chosen.best_speedup if r.start <= b <= r.end]
    best: tuple[float, int] | None = None
    for k in (k for k in ks if 1 <= k <= top):
        found = [speedup_at(chosen, b, k) for b in batches]
        if any(s is None for s in found):
            continue
        mean = sum(s for s in found if s is not None) / max(len(found), 1)
        if best is None or mean > best[0]:
            best = (mean, k)
    return best[1] if best is not None else None


def nearest_schedule(schedule: Schedule) -> list[tuple[int, int, int]]:
    """The expressible (start, end, k) ranges closest to the answer's: the first range drafts max_draft_len, none
    drafts more, none drafts 0, and speculation stops after one range end. Among every max_draft_len the answer
    measured and every cut-off at a range end, the one with the highest mean predicted speedup over the measured
    batches up to the break-even batch (ties: the smaller max_draft_len, then the later cut-off). The answer's own
    schedule where it is expressible."""
    chosen = schedule.approach
    spec = schedule.speculating
    ks = sorted({c.draft_tokens for c in chosen.cells if c.draft_tokens >= 1 and c.speedup is not None})
    measured = [b for b in sorted(chosen.best_speedup) if b <= schedule.break_even_batch]
    best: tuple[float, int, int, list[tuple[int, int, int]]] | None = None
    for top in ks:
        for cut in range(len(spec)):
            written = []
            for i, r in enumerate(spec[: cut + 1]):
                k = top if i == 0 else _range_k(schedule, r, top, ks)
                if k is None:
                    break
                written.append((r.start, r.end, k))
            else:
                speedups = [speedup_at(chosen, b, next((k for s, e, k in written if s <= b <= e), 0)) for b in measured]
                if any(s is None for s in speedups):
                    continue
                mean = sum(s for s in speedups if s is not None) / max(len(speedups), 1)
                rank = (round(mean, 12), -top, cut)
                if best is None or rank > best[:3]:
                    best = (*rank, written)
    if best is None:  # nothing measurable: the answer's first k everywhere it speculates (said by the deviations)
        head = max(spec[0].k, 1)
        return [(r.start, r.end, min(max(r.k, 1), head)) for r in spec]
    return best[3]


def trtllm_config(answer: SpeculationAnswer, approaches: Sequence[Approach]) -> EngineConfig:
    del approaches  # TensorRT-LLM picks its own allreduce
    schedule = per_batch_schedule(answer)
    chosen = schedule.approach
    written = nearest_schedule(schedule)
    found = deviations(schedule, written)
    top = written[0][2]
    lengths = {end: k for _start, end, k in written}
    config: dict[str, Any] = {"decoding_type": "Eagle3", "max_draft_len": top, "draft_len_schedule": lengths}
    check_trtllm_schedule(config)
    out = ConfigBuilder()
    out.settings.append(Setting("max_draft_len", top, "the first range's draft length (the smallest key's entry)"))
    sources = {r.start: r.source for r in schedule.ranges}
    for start, end, k in written:
        answer_k = next(r.k for r in schedule.ranges if r.start <= start <= r.end)
        why = sources.get(start, "")
        if k != answer_k:
            why = f"the answer says {'off' if answer_k == 0 else f'k = {answer_k}'} (a deviation, below); {why}"
        out.add(f"draft_len_schedule[{end}]", k, f"batches {start}-{end}: {why}", argv=[])
    last = written[-1][1]
    off = schedule.off_reason if last == schedule.break_even_batch else "a deviation (below)"
    out.add("above the largest key", 0, f"off above batch {last} (implicit): {off}", argv=[])
    out.argv = ["--extra_llm_api_options", FILE]
    if found:
        out.notes.append(
            f"{RELEASE} cannot express this answer: its schedule starts at max_draft_len (the first batch range drafts "
            "the most), never drafts 0 below its largest key (the one-model drafter), and turns speculation off only "
            f"above that key. This is the nearest schedule it can express (the highest mean predicted speedup over "
            f"the measured batches up to {schedule.break_even_batch}); it differs from the answer at "
            f"{len(found)} batch range{'s' if len(found) != 1 else ''} (listed with their predicted cost)."
        )
    else:
        out.notes.append(f"{RELEASE} expresses this answer as it is: no deviation.")
    out.notes += [
        f"Rules followed: {RELEASE} (draft_len_schedule: a batch uses the smallest key at or above it; above the "
        "largest key it drafts 0; the smallest key's entry equals max_draft_len; max_concurrency is not written: "
        "it and draft_len_schedule are mutually exclusive).",
        "Add speculative_model (your EAGLE-3 draft head) to speculative_config; pass the file to trtllm-serve "
        "(newer releases name the option --config).",
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
        rules=RELEASE,
        deviations=found,
    )
