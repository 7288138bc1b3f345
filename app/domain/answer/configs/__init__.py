"""The launch settings that deploy what the answer measured: one small writer per engine, each checked
against that engine's own rules (docs/profitability.md, "Deploy").

- `schedule.py`: the per-batch draft length all writers share (ranges that end at measured batches, each
  naming the measurement behind it), the served batch range and what one k costs across it.
- `vllm.py`: `--speculative-config` with `num_speculative_tokens_per_batch_size`.
- `sglang.py`: adaptive speculation's per-batch config (`--speculative-adaptive-config`), the allreduce
  flag only for the kernel SGLang will run at that TP and SM, and one k for the served range where
  adaptive speculation is off.
- `trtllm.py`: `speculative_config` with `draft_len_schedule` (TensorRT-LLM 1.4.0rc4's rules): where the engine
  cannot express the answer, the nearest schedule it can, with each deviation and its predicted cost.
- `launch.py`: the whole server command around a writer's arguments (model, parallelism, draft head, files).

Every writer names the engine release whose rules it follows (`EngineConfig.rules`) and lists where what it
writes differs from the answer (`EngineConfig.deviations`, `schedule.deviations`): a config never differs silently.

Pure: the answer (`SpeculationAnswer`) and the approaches in, an `EngineConfig` out. No FastAPI here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlmodel import Session, col, select

from app.domain.answer.configs.launch import launch_command
from app.domain.answer.configs.schedule import (
    DEFAULT_SERVE,
    DeployTarget,
    EngineConfig,
    ServeRange,
    Setting,
    parse_serve_range,
)
from app.domain.answer.configs.sglang import sglang_config
from app.domain.answer.configs.trtllm import trtllm_config
from app.domain.answer.configs.vllm import vllm_config
from app.domain.answer.grid import SpeculationAnswer
from app.domain.errors import Invalid
from app.models import Approach, Trial

ENGINES = ("sglang", "vllm", "trtllm")
ENGINE_LABELS = {
    "sglang": "SGLang (launch flags)",
    "vllm": "vLLM (--speculative-config)",
    "trtllm": "TensorRT-LLM (speculative_config)",
}

__all__ = [
    "DEFAULT_SERVE",
    "ENGINES",
    "ENGINE_LABELS",
    "DeployTarget",
    "EngineConfig",
    "ServeRange",
    "Setting",
    "config_json",
    "deploy_target",
    "engine_config",
    "parse_serve_range",
]


def deploy_target(session: Session, answer: SpeculationAnswer, approaches: Sequence[Approach]) -> DeployTarget:
    """The node the chosen approach was measured on: the SM its newest fingerprinted trial reported. One query
    whether or not there is a chosen approach, so a page's query count does not depend on the answer."""
    chosen = answer.chosen
    row = next((a for a in approaches if chosen is not None and a.key == chosen.key), None)
    fingerprint = session.exec(
        select(Trial.fingerprint)
        .where(Trial.approach_id == (row.id if row is not None else -1), col(Trial.fingerprint).is_not(None))
        .order_by(col(Trial.id).desc())
        .limit(1)
    ).first()
    sm = (fingerprint or {}).get("sm")
    return DeployTarget(str(sm) if sm else None)


def engine_config(
    engine: str,
    answer: SpeculationAnswer,
    approaches: Sequence[Approach],
    *,
    serve: ServeRange = DEFAULT_SERVE,
    target: DeployTarget | None = None,
) -> EngineConfig:
    """One engine's launch settings for the answer's chosen approach, with the whole launch command around them;
    Conflict when there is nothing to deploy yet (it says what is missing), Invalid for an unknown engine."""
    if engine == "sglang":
        config = sglang_config(answer, approaches, serve=serve, target=target)
    elif engine == "vllm":
        config = vllm_config(answer, approaches)
    elif engine == "trtllm":
        config = trtllm_config(answer, approaches)
    else:
        raise Invalid(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}", field="engine")
    chosen = answer.approach(config.approach) if config.approach is not None else None
    world_size = chosen.world_size if chosen is not None else 1
    return replace(config, launch=launch_command(config, approaches, world_size))


def config_json(config: EngineConfig) -> dict[str, Any]:
    """An EngineConfig as the API's EngineConfigPublic and `campaign answer --config` give it."""
    static = config.static
    launch = config.launch
    return {
        "engine": config.engine,
        "approach": config.approach,
        "argv": list(config.argv),
        "shell": config.shell,
        "env": config.env,
        "settings": [vars(s) for s in config.settings],
        "notes": list(config.notes),
        "rules": config.rules,
        "expressible": config.expressible,
        "deviations": [
            {
                "start": d.start,
                "end": d.end,
                "answer_k": d.answer_k,
                "config_k": d.config_k,
                "text": d.text,
                "batches": [{**vars(b), "loss": b.loss} for b in d.batches],
            }
            for d in config.deviations
        ],
        "files": [vars(f) for f in config.files],
        "static": None
        if static is None
        else {
            "serve_batches": str(static.serve),
            "k": static.k,
            "argv": list(static.argv),
            "shell": static.shell,
            "costs": [vars(c) for c in static.costs],
            "unmeasured": list(static.unmeasured) if static.unmeasured else None,
            "rule": static.rule,
        },
        "proposed_trials": list(config.proposed_trials),
        "launch": None
        if launch is None
        else {
            "argv": list(launch.argv),
            "command": launch.command,
            "shell": launch.shell,
            "files": [vars(f) for f in launch.files],
            "model": vars(launch.model),
            "draft": vars(launch.draft),
            "tensor_parallel": launch.tensor_parallel,
            "placeholders": list(launch.placeholders),
        },
    }
