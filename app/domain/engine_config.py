"""The launch settings for the decision of `speculation.py`: one small writer per engine.

Option names are the engines' own, read in their sources:
- SGLang 0.5.23 (`sglang/srt/arg_groups/fields/spec.py`, `exec_.py`, `schedule.py`; parsed by
  `ServerArgs.add_cli_args` in the contract tests): `--speculative-algorithm EAGLE3`, `--speculative-num-steps`,
  `--speculative-eagle-topk`, `--speculative-num-draft-tokens` (= steps + 1 for a chain: the verify window),
  `--cuda-graph-bs-decode` / `--cuda-graph-max-bs-decode`, the allreduce flags (`--enable-torch-symm-mem`,
  `--disable-custom-all-reduce`, `--enable-mscclpp`, `--flashinfer-allreduce-fusion-backend`), and
  `--max-running-requests`. SGLang has no option to turn speculation off above a batch size, so the writer caps
  the server's batch at the break-even batch and says so.
- vLLM (`vllm/config/speculative.py`, `SpeculativeConfig`, passed as `--speculative-config JSON`): `method`
  ("eagle3"), `num_speculative_tokens`, and `num_speculative_tokens_per_batch_size`: inclusive
  `[range_start, range_end, k]` entries, the first starting at 1, non-overlapping, k >= 0 (0 = do not
  speculate), validated by `vllm/v1/spec_decode/dynamic/utils.py`. Older vLLM (V0) had
  `disable_by_batch_size` instead, which V1 dropped; the writer gives it as the pre-V1 alternative.
Each setting names the measurement it comes from. No FastAPI here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.domain.answer.grid import ApproachAnswer, SpeculationAnswer
from app.domain.errors import Conflict, Invalid
from app.models import Approach

ENGINES = ("sglang", "vllm")

# An allreduce approach's backend (its recipe's `backend` param) -> the SGLang flags that select it.
SGLANG_ALLREDUCE_FLAGS: dict[str, list[str]] = {
    "nccl": ["--disable-custom-all-reduce"],
    "symm_mem": ["--enable-torch-symm-mem"],
    "mscclpp": ["--enable-mscclpp"],
    "flashinfer": ["--flashinfer-allreduce-fusion-backend", "auto"],
    "custom": [],  # SGLang's own IPC custom allreduce is its default
}


@dataclass(frozen=True)
class Setting:
    """One launch setting: the option, its value, and the measurement it comes from."""

    option: str
    value: Any
    source: str


@dataclass(frozen=True)
class EngineConfig:
    engine: str
    approach: str | None
    argv: tuple[str, ...]  # what to add to the launch line
    env: dict[str, str]
    settings: tuple[Setting, ...]
    notes: tuple[str, ...]


def _decision(answer: SpeculationAnswer) -> tuple[ApproachAnswer, int, int]:
    """(approach, break-even batch, draft tokens there), or Invalid saying what is missing."""
    chosen = answer.chosen
    if chosen is None:
        raise Conflict("no approach is measured over batch sizes yet: nothing to deploy", field="engine")
    if not chosen.best_speedup:
        raise Conflict(
            f"the accept length per draft length is not known, so no speedup of {chosen.title} is: "
            "enter it or measure it (GET /api/campaigns/{slug}/answer lists what is missing)",
            field="engine",
        )
    if chosen.break_even_batch is None:
        raise Conflict(
            f"speculation does not pay at any measured batch with {chosen.title}: deploy it off", field="engine"
        )
    return chosen, chosen.break_even_batch, chosen.best_draft_tokens[chosen.break_even_batch]


def _cell_source(chosen: ApproachAnswer, batch: int, k: int) -> str:
    cell = chosen.cell(batch, k)
    s = cell.speedup if cell else None
    figure = (
        f"speedup {s.value:.2f}" + (f" [{s.low:.2f}, {s.high:.2f}]" if s and s.low is not None else "") if s else ""
    )
    return f"the model at batch {batch}, {k} draft tokens ({figure}; {cell.note if cell else ''})"


def allreduce_flags(approach: Approach | None) -> tuple[list[str], dict[str, str], str]:
    """(SGLang flags, env, why) selecting the approach's allreduce: its own `flags` when it is an
    sglang_server approach, else by its recipe's `backend`."""
    params = (approach.recipe or {}).get("params") or {} if approach is not None else {}
    if isinstance(params.get("flags"), list):
        return [str(f) for f in params["flags"]], dict(params.get("env") or {}), "the approach's own SGLang flags"
    backend = str(params.get("backend") or "")
    if "pcie_ipc" in backend:
        return [], {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, f"backend {backend}"
    for prefix, flags in SGLANG_ALLREDUCE_FLAGS.items():
        if backend.startswith(prefix):
            why = f"backend {backend}"
            if prefix == "symm_mem":
                why += " (SGLang picks one-shot or two-shot itself)"
            return list(flags), {}, why
    return [], {}, f"backend {backend or 'not named'}: no SGLang flag known for it, SGLang's default allreduce"


def sglang_config(answer: SpeculationAnswer, approaches: list[Approach]) -> EngineConfig:
    chosen, b_star, k = _decision(answer)
    source = _cell_source(chosen, b_star, k)
    approach = next((a for a in approaches if a.key == chosen.key), None)
    flags, env, why = allreduce_flags(approach)
    graph_bs = [b for b in answer.batches if b <= b_star]
    settings = [
        Setting("--speculative-algorithm", "EAGLE3", "the campaign's question (EAGLE-3)"),
        Setting("--speculative-num-steps", k, f"best draft length at the break-even batch: {source}"),
        Setting("--speculative-eagle-topk", 1, "the model assumes chain drafts (top-k 1)"),
        Setting("--speculative-num-draft-tokens", k + 1, f"{k} draft tokens + the current one, a chain: {source}"),
        Setting("--cuda-graph-bs-decode", graph_bs, f"the measured batches where speculation pays (up to {b_star})"),
        Setting("--cuda-graph-max-bs-decode", b_star, f"break-even batch B* = {b_star} ({chosen.title})"),
        Setting(
            "--max-running-requests",
            b_star,
            f"above batch {b_star} speculation does not pay; SGLang cannot turn it off by batch",
        ),
    ]
    argv: list[str] = []
    for s in settings:
        argv += [s.option, *[str(v) for v in s.value]] if isinstance(s.value, list) else [s.option, str(s.value)]
    if flags:
        settings.append(Setting(" ".join(flags), True, f"{chosen.title}: {why}"))
        argv += flags
    notes = [
        f"SGLang has no option to turn speculation off above a batch size: this caps the server at batch {b_star}; "
        f"serve larger batches from a second server without --speculative-algorithm.",
        "Add --speculative-draft-model-path with your EAGLE-3 draft head, and --model-path / --tp-size as usual.",
    ]
    if env:
        notes.append(f"{chosen.title} is selected by the environment: {json.dumps(env)} ({why}).")
    return EngineConfig("sglang", chosen.key, tuple(argv), env, tuple(settings), tuple(notes))


def vllm_schedule(chosen: ApproachAnswer, batches: tuple[int, ...]) -> list[list[int]]:
    """`num_speculative_tokens_per_batch_size`: inclusive ranges from 1, each measured batch's best k
    holding up to the next measured batch, and 0 (off) above the break-even batch."""
    measured = [b for b in batches if b in chosen.best_draft_tokens]
    out: list[list[int]] = []
    start = 1
    b_star = chosen.break_even_batch or 0
    for i, b in enumerate(measured):
        if b > b_star:
            break
        end = measured[i + 1] - 1 if i + 1 < len(measured) and measured[i + 1] <= b_star else b
        k = chosen.best_draft_tokens[b]
        if out and out[-1][2] == k and out[-1][1] == start - 1:
            out[-1][1] = end
        else:
            out.append([start, end, k])
        start = end + 1
    out.append([start, max(start, 65_536), 0])
    return out


def vllm_config(answer: SpeculationAnswer, approaches: list[Approach]) -> EngineConfig:
    del approaches  # vLLM's allreduce is not selected by a speculative option
    chosen, b_star, _k = _decision(answer)
    schedule = vllm_schedule(chosen, answer.batches)
    top_k = max(k for _s, _e, k in schedule)
    spec = {"method": "eagle3", "num_speculative_tokens": top_k, "num_speculative_tokens_per_batch_size": schedule}
    settings = (
        Setting("method", "eagle3", "the campaign's question (EAGLE-3)"),
        Setting("num_speculative_tokens", top_k, "the largest draft length the schedule uses"),
        Setting(
            "num_speculative_tokens_per_batch_size",
            schedule,
            "each measured batch's best draft length (the model: "
            + ", ".join(f"batch {b}: k={chosen.best_draft_tokens[b]}" for b in sorted(chosen.best_draft_tokens))
            + f"); 0 above the break-even batch {b_star}",
        ),
    )
    notes = (
        'Add "model": your EAGLE-3 draft head to the JSON.',
        f'vLLM before V1 had no per-batch schedule: there use "disable_by_batch_size": {b_star + 1} '
        f'with "num_speculative_tokens": {chosen.best_draft_tokens[b_star]}.',
        f"vLLM picks its own allreduce; this decision measured {chosen.title}.",
    )
    return EngineConfig(
        "vllm", chosen.key, ("--speculative-config", json.dumps(spec, separators=(",", ":"))), {}, settings, notes
    )


def engine_config(engine: str, answer: SpeculationAnswer, approaches: list[Approach]) -> EngineConfig:
    if engine == "sglang":
        return sglang_config(answer, approaches)
    if engine == "vllm":
        return vllm_config(answer, approaches)
    raise Invalid(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}", field="engine")
