"""SGLang: launch flags for `python -m sglang.launch_server`, checked against the pinned 0.5.23's `ServerArgs`
(tests/contract/test_answer_config_contract.py parses them with it).

Per-batch speculation: 0.5.23 has adaptive speculation (`--speculative-adaptive`,
`--speculative-adaptive-config FILE`; `sglang/srt/speculative/adaptive_spec_params.py`). The file maps
batch-size keys ("1", "8", ...) to slots `{"candidate_steps": [...]}`; a batch is padded up to a captured
CUDA-graph size and served by the slot with the largest key at or below it; `--speculative-num-steps` must
be one of the candidates. Here each slot holds the one measured best k (so the slot does not wander), and
the slot above the break-even batch holds 0 (off). Adaptive speculation runs only for EAGLE/EAGLE3 with
top-k 1, and is turned off by SGLang with attention data parallelism, two-batch overlap, multi-layer EAGLE
or pdmux: there SGLang runs `--speculative-num-steps` at every batch, so the config also gives one k chosen
for the batch range the person serves, with what it costs at the other batches.

Never written: `--cuda-graph-bs` (it replaces the default capture list; a sparse list pads every other batch
up to the next captured size) and `--max-running-requests` (a cap on the server's throughput is not a way to
turn speculation off).

Allreduce: no flag at world size 1; otherwise a flag only for the kernel SGLang will run at that TP and SM.
`--enable-torch-symm-mem` runs `TorchSymmMemCommunicator` (0.5.23: SM 9.x and 10.x at world sizes 2, 4, 6,
8; multimem at 4, 6, 8 and two-shot at 2), so a one-shot measurement never justifies it; where the kernel
SGLang would run was not measured, the config says so and proposes the trial that measures it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.domain.answer.configs.schedule import (
    DEFAULT_SERVE,
    LARGEST_BATCH,
    ConfigBuilder,
    ConfigFile,
    DeployTarget,
    EngineConfig,
    Schedule,
    ServeRange,
    deviations,
    per_batch_schedule,
    static_choice,
)
from app.domain.answer.grid import ApproachAnswer, SpeculationAnswer
from app.models import Approach

FILE = "sglang-adaptive-spec.json"
RULES = "SGLang 0.5.23 (ServerArgs, adaptive_spec_params.py)"

# sglang 0.5.23 sglang/srt/distributed/device_communicators: all_reduce_utils.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES
# (SM major -> world sizes it runs at) and TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM.
SYMM_MEM_WORLD_SIZES = {9: (2, 4, 6, 8), 10: (2, 4, 6, 8)}
SYMM_MEM_MULTIMEM = {9: (4, 6, 8), 10: (4, 6, 8)}
# What the allreduce recipe's backend measured (runners/recipes/_dist.py BACKENDS) -> the kernel it ran.
MEASURED_KERNEL = {"symm_mem_one_shot": "one_shot", "symm_mem_two_shot": "two_shot"}
KERNEL_NAMES = {"one_shot": "one-shot", "two_shot": "two-shot", "multimem": "multimem"}


def check_adaptive_config(config: Any, num_steps: int) -> None:
    """SGLang 0.5.23's rules for the adaptive config (`_load_adaptive_config`, `_init_adaptive_speculative_params`):
    at least one integer-string batch key, each slot's `candidate_steps` a non-empty list of ints >= 0, and
    `--speculative-num-steps` one of the candidates. ValueError naming the broken one."""
    if not isinstance(config, dict):
        raise ValueError("the adaptive config must be a JSON object")
    slots = {key: entry for key, entry in config.items() if isinstance(key, str) and key.isdigit()}
    if not slots:
        raise ValueError('the adaptive config needs at least one integer-string batch key, e.g. {"1": {...}}')
    union: set[int] = set()
    for key, entry in slots.items():
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(steps, list) or not steps or not all(type(s) is int and s >= 0 for s in steps):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        union.update(steps)
    if num_steps not in union:
        raise ValueError(f"--speculative-num-steps={num_steps} is not in the candidate_steps {sorted(union)}")


def adaptive_config(schedule: Schedule) -> dict[str, dict[str, list[int]]]:
    """One slot per schedule range, keyed by its first batch, holding that range's k (0 above B*)."""
    return {str(r.start): {"candidate_steps": [r.k]} for r in schedule.ranges}


def routed(slots: dict[str, dict[str, list[int]]]) -> list[tuple[int, int, int]]:
    """The (start, end, k) ranges an adaptive config routes batches to (the slot with the largest key at or below a
    batch; the first of its candidates), to compare with the answer's schedule."""
    starts = sorted(int(key) for key in slots)
    ends = [*(s - 1 for s in starts[1:]), LARGEST_BATCH]
    return [(s, e, slots[str(s)]["candidate_steps"][0]) for s, e in zip(starts, ends, strict=True)]


def symm_mem_kernel(sm_major: int | None, world_size: int) -> str | None:
    """The kernel `--enable-torch-symm-mem` runs (0.5.23), or None where its communicator is not available."""
    if sm_major is None or world_size not in SYMM_MEM_WORLD_SIZES.get(sm_major, ()):
        return None
    return "multimem" if world_size in SYMM_MEM_MULTIMEM.get(sm_major, ()) else "two_shot"


def _speculative_argv(k: int) -> list[str]:
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        str(k),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(k + 1),
    ]


def _allreduce(
    row: Approach | None, chosen: ApproachAnswer, target: DeployTarget, k: int, out: ConfigBuilder
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Add the allreduce flag the measurement justifies (if any) to `out`; (env, proposed trials)."""
    tp = chosen.world_size
    if tp <= 1:
        out.notes.append(f"{chosen.title} runs at world size 1 (TP 1): no allreduce, so no allreduce flag.")
        return {}, []
    params: dict[str, Any] = dict(((row.recipe or {}).get("params") or {}) if row is not None else {})
    if isinstance(params.get("flags"), list):
        flags = [str(f) for f in params["flags"]]
        if flags:
            out.add(
                " ".join(flags),
                True,
                f"{chosen.title}: its own SGLang flags, measured in SGLang at TP {tp}",
                argv=flags,
            )
        return {str(a): str(b) for a, b in (params.get("env") or {}).items()}, []
    backend = str(params.get("backend") or "")
    mode = str(params.get("mode") or "eager")
    if "pcie_ipc" in backend:
        env = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
        out.notes.append(f"{chosen.title} is selected by the environment: {json.dumps(env)} (backend {backend}).")
        return env, []
    if backend == "nccl":
        out.add(
            "--disable-custom-all-reduce",
            True,
            f"{chosen.title}: NCCL measured (backend nccl, {mode}, world size {tp}); SGLang then runs NCCL",
            argv=["--disable-custom-all-reduce"],
        )
        return {}, []
    if backend in MEASURED_KERNEL:
        return {}, _symm_mem(chosen, target, k, params, out)
    out.notes.append(
        f"No allreduce flag: backend {backend or 'not named'} ({chosen.title}) has no SGLang flag that runs it; "
        "SGLang keeps its default allreduce, which this answer did not measure."
    )
    return {}, []


def _symm_mem(
    chosen: ApproachAnswer, target: DeployTarget, k: int, params: dict[str, Any], out: ConfigBuilder
) -> list[dict[str, Any]]:
    """--enable-torch-symm-mem only where SGLang runs the kernel measured on the target's SM and TP; else a note
    and the trial that would measure the kernel it runs (proposed trials)."""
    tp = chosen.world_size
    backend = str(params.get("backend") or "")
    mode = str(params.get("mode") or "eager")
    measured = MEASURED_KERNEL[backend]
    runs = symm_mem_kernel(target.sm_major, tp)
    if target.sm_major is None:
        out.notes.append(
            f"No --enable-torch-symm-mem: the node's SM is not reported, so the kernel SGLang would run at TP {tp} "
            f"is not known ({chosen.title} measured {KERNEL_NAMES[measured]})."
        )
        return []
    if runs is None:
        out.notes.append(
            f"No --enable-torch-symm-mem: SGLang 0.5.23's symmetric-memory allreduce is not available at SM "
            f"{target.sm} and TP {tp} (it runs at SM 9.x/10.x, TP 2/4/6/8)."
        )
        return []
    if runs == measured:
        out.add(
            "--enable-torch-symm-mem",
            True,
            f"{chosen.title}: SGLang runs {KERNEL_NAMES[runs]} at TP {tp} on SM {target.sm}, the kernel measured "
            f"(backend {backend}, {mode}, world size {tp})",
            argv=["--enable-torch-symm-mem"],
        )
        return []
    out.notes.append(
        f"No --enable-torch-symm-mem: at TP {tp} on SM {target.sm} SGLang runs symmetric memory's "
        f"{KERNEL_NAMES[runs]} kernel, and {chosen.title} measured {KERNEL_NAMES[measured]}: the kernel the engine "
        "would run was not measured. The proposed trial measures it."
    )
    if runs == "two_shot":
        trial = {
            "kind": "allreduce",
            "params": {**params, "backend": "symm_mem_two_shot", "world_size": tp, "mode": mode},
        }
    else:  # multimem: no allreduce recipe backend runs it; SGLang itself does, on a node that allows multicast
        trial = {
            "kind": "sglang_server",
            "params": {
                "tp_size": tp,
                "flags": ["--enable-torch-symm-mem"],
                "speculative": {"algorithm": "EAGLE3", "num_steps": k, "eagle_topk": 1, "num_draft_tokens": k + 1},
            },
        }
    return [trial]


def sglang_config(
    answer: SpeculationAnswer,
    approaches: Sequence[Approach],
    *,
    serve: ServeRange = DEFAULT_SERVE,
    target: DeployTarget | None = None,
) -> EngineConfig:
    schedule = per_batch_schedule(answer)
    chosen = schedule.approach
    row = next((a for a in approaches if a.key == chosen.key), None)
    target = target or DeployTarget()
    top = schedule.largest_k
    slots = adaptive_config(schedule)
    check_adaptive_config(slots, top)
    out = ConfigBuilder()
    out.add("--speculative-algorithm", "EAGLE3", "the campaign's question (EAGLE-3)")
    out.add("--speculative-num-steps", top, "the largest k of the schedule (SGLang wants it among the candidates)")
    out.add("--speculative-eagle-topk", 1, "adaptive speculation runs chains only (top-k 1); the model assumes them")
    out.add("--speculative-num-draft-tokens", top + 1, f"{top} draft tokens + the current one (a chain)")
    out.add(
        "--speculative-adaptive", True, "per-batch draft length from the file below", argv=["--speculative-adaptive"]
    )
    out.add("--speculative-adaptive-config", FILE, "one slot per measured range (next rows)")
    for r in schedule.ranges:
        out.add(f'"{r.start}": candidate_steps', [r.k], f"batches {r.start}-{r.end}: {r.source}", argv=[])
    before = len(out.argv)
    env, trials = _allreduce(row, chosen, target, top, out)
    allreduce_argv = out.argv[before:]
    static = static_choice(schedule, serve, lambda k: [*_speculative_argv(k), *allreduce_argv])
    out.notes += [
        "Add --model-path, --tp-size and --speculative-draft-model-path (your EAGLE-3 draft head) as usual; "
        f"save the JSON below as {FILE} next to where you launch.",
        "SGLang pads a batch up to its next captured CUDA-graph size, then serves it by the slot at or below that "
        "size: a batch between measured sizes takes the larger batch's k (or off). The default capture list is kept.",
        "Adaptive speculation needs EAGLE/EAGLE3 with top-k 1; SGLang turns it off with attention data parallelism, "
        f"two-batch overlap, multi-layer EAGLE or pdmux and then drafts {top} tokens at every batch: use the one-k "
        "line below there.",
        f"Above batch {schedule.break_even_batch}: {schedule.off_reason}.",
    ]
    if static is not None and static.unmeasured:
        lo, hi = static.unmeasured
        out.notes.append(f"Batches {lo}-{hi} of the served range {serve} are not measured.")
    text = json.dumps(slots, indent=2) + "\n"
    return EngineConfig(
        "sglang",
        chosen.key,
        tuple(out.argv),
        env,
        tuple(out.settings),
        tuple(out.notes),
        files=(ConfigFile(FILE, "application/json", text),),
        static=static,
        proposed_trials=tuple(trials),
        rules=RULES,
        deviations=deviations(schedule, routed(slots)),
    )
