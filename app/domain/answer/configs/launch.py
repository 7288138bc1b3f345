"""The whole launch command a person pastes: the engine's server command with the model, its parallelism and
the draft head, around the speculation arguments its config writer gives (`vllm.py`, `sglang.py`, `trtllm.py`
are called, never repeated here), and the files those arguments name written first by a quoted here-document (vLLM's JSON is inline: no file).

- vLLM: `vllm serve MODEL --tensor-parallel-size N` + `--speculative-config JSON`.
- SGLang: `python -m sglang.launch_server --model-path MODEL --tp-size N --speculative-draft-model-path DRAFT` +
  its flags (the adaptive config file written first).
- TensorRT-LLM: `trtllm-serve MODEL --tp_size N` + `--extra_llm_api_options FILE`, the YAML written first with
  the draft head as `speculative_config.speculative_model`.

The model and draft paths come from the chosen approach's recipe parameters (`model_path`,
`speculative.draft_model_path`), else from the first other approach of the campaign whose recipe names them, else
a named placeholder (`<target-model-path>`) the person replaces. The parallelism is the world size the answer was
measured at. Every argument is `shlex.quote`d: `shlex.split(command) == argv`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from app.domain.answer.configs.schedule import (
    DRAFT_PLACEHOLDER,
    MODEL_PLACEHOLDER,
    ConfigFile,
    EngineConfig,
    LaunchCommand,
    PathChoice,
)
from app.models import Approach


def _params(approach: Approach) -> dict[str, Any]:
    recipe = approach.recipe or {}
    params = recipe.get("params") if isinstance(recipe, dict) else None
    return params if isinstance(params, dict) else {}


def _model_of(params: dict[str, Any]) -> str | None:
    value = params.get("model_path") or params.get("model")
    return value if isinstance(value, str) and value.strip() else None


def _draft_of(params: dict[str, Any]) -> str | None:
    nested = params.get("speculative")
    value = (nested.get("draft_model_path") if isinstance(nested, dict) else None) or params.get(
        "speculative_draft_model_path"
    )
    return value if isinstance(value, str) and value.strip() else None


def _choose(
    chosen: Approach | None, approaches: Sequence[Approach], read: Any, what: str, placeholder: str
) -> PathChoice:
    ordered = ([chosen] if chosen is not None else []) + [a for a in approaches if a is not chosen]
    for row in ordered:
        found = read(_params(row))
        if found is not None:
            whose = "the chosen approach" if row is chosen else f"approach {row.key}"
            return PathChoice(found, f"{what} from {whose}'s recipe")
    return PathChoice(placeholder, f"{what}: no approach's recipe names it; replace {placeholder}")


def model_paths(chosen_key: str | None, approaches: Sequence[Approach]) -> tuple[PathChoice, PathChoice]:
    """The target model and the draft head for the launch line, each with where it came from."""
    chosen = next((a for a in approaches if a.key == chosen_key), None)
    return (
        _choose(chosen, approaches, _model_of, "model", MODEL_PLACEHOLDER),
        _choose(chosen, approaches, _draft_of, "draft head", DRAFT_PLACEHOLDER),
    )


def _with_draft(file: ConfigFile, draft: str) -> ConfigFile:
    """TensorRT-LLM's options YAML with the draft head in `speculative_config` (the writer's settings kept)."""
    data = yaml.safe_load(file.content)
    data["speculative_config"] = {**data["speculative_config"], "speculative_model": draft}
    return ConfigFile(file.name, file.media_type, yaml.safe_dump(data, sort_keys=False))


def launch_command(config: EngineConfig, approaches: Sequence[Approach], world_size: int) -> LaunchCommand:
    """The engine's whole launch command around `config` (its writer's speculation arguments and files)."""
    model, draft = model_paths(config.approach, approaches)
    tp = str(max(world_size, 1))
    files = tuple(f for f in config.files if f.name in config.argv)  # only what the line names (vLLM's is inline)
    if config.engine == "vllm":
        argv = ["vllm", "serve", model.value, "--tensor-parallel-size", tp, *config.argv]
    elif config.engine == "sglang":
        argv = ["python", "-m", "sglang.launch_server", "--model-path", model.value, "--tp-size", tp]
        argv += ["--speculative-draft-model-path", draft.value, *config.argv]
    elif config.engine == "trtllm":
        argv = ["trtllm-serve", model.value, "--tp_size", tp, *config.argv]
        files = tuple(_with_draft(f, draft.value) if f.name.endswith(".yaml") else f for f in files)
    else:  # engine_config refuses any other engine before a config exists
        raise ValueError(f"no launch command for engine {config.engine!r}")
    return LaunchCommand(tuple(argv), files, model, draft, int(tp))
