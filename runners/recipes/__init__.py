"""Trial recipes: each kind turns an approach's recipe (JSON data) into a process to launch.

A recipe is data, never a shell string:
    {"kind": "command", "params": {...}, "env": {"NCCL_ALGO": "Ring"}, "cwd": null, "timeout_s": 600}
`build_launch` validates it and returns the argv/env/cwd/timeout the runner spawns.
Every recipe module also runs alone: `python -m runners.recipes.<kind> --help`.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any


class RecipeError(ValueError):
    """A recipe or its parameters are invalid; the message says which field and why."""


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float = 600.0


KINDS = ("command", "allreduce", "verify_step", "sglang_server")


def _common(recipe: dict[str, Any]) -> tuple[dict[str, str], str | None, float]:
    env = recipe.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in env.items()):
        raise RecipeError("env: must be a mapping of variable names to strings")
    cwd = recipe.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise RecipeError("cwd: must be a path string")
    timeout = recipe.get("timeout_s", 600)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise RecipeError("timeout_s: must be a positive number of seconds")
    return {k: str(v) for k, v in env.items()}, cwd, float(timeout)


def build_launch(recipe: dict[str, Any], *, python: str | None = None) -> LaunchSpec:
    """Validate a recipe and say how to launch it. Raises RecipeError on bad input."""
    if not isinstance(recipe, dict):
        raise RecipeError("recipe: must be a mapping with a 'kind'")
    kind = recipe.get("kind")
    if kind not in KINDS:
        raise RecipeError(f"kind: unknown recipe kind {kind!r}; expected one of {', '.join(KINDS)}")
    params = recipe.get("params") or {}
    if not isinstance(params, dict):
        raise RecipeError("params: must be a mapping")
    env, cwd, timeout = _common(recipe)
    python = python or sys.executable
    if kind == "command":
        argv = params.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise RecipeError("params.argv: must be a non-empty list of strings")
        unknown = sorted(set(params) - {"argv", "metrics"})
        if unknown:
            raise RecipeError(f"params.{unknown[0]}: unknown parameter; expected argv, metrics")
        if not params.get("metrics"):
            return LaunchSpec(argv=list(argv), env=env, cwd=cwd, timeout_s=timeout)
        from runners.recipes import command

        wrapped = [python, "-m", "runners.recipes.command", *command.metric_flags(params["metrics"]), "--", *argv]
        return LaunchSpec(argv=wrapped, env=_module_env(env), cwd=cwd, timeout_s=timeout)
    if kind in ("allreduce", "verify_step"):
        from runners.recipes import _params, allreduce, verify_step

        module = allreduce if kind == "allreduce" else verify_step
        values = module.validate(params)
        argv = [python, "-m", f"runners.recipes.{kind}", *_params.to_argv(values, module.SPEC)]
        return LaunchSpec(argv=argv, env=_module_env(env, safe=True), cwd=cwd, timeout_s=timeout)
    if kind == "sglang_server":
        from runners.recipes import sglang_server

        values = sglang_server.validate(sglang_server.flatten(params))
        argv = [python, "-m", "runners.recipes.sglang_server", *sglang_server.cli_argv(values)]
        return LaunchSpec(argv=argv, env=_module_env(env, safe=True), cwd=cwd, timeout_s=timeout)
    raise RecipeError(f"kind: recipe {kind!r} is not available in this build")


# Defaulted for every trial that may touch several GPUs: NVLink multicast stays off.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _module_env(env: dict[str, str], *, safe: bool = False) -> dict[str, str]:
    """The recipe's env, plus what `python -m runners.recipes.X` needs from any cwd."""
    out = dict(env)
    if safe:
        for key, value in SAFE_ENV.items():
            out.setdefault(key, value)
    rest = out.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    out["PYTHONPATH"] = _ROOT + (os.pathsep + rest if rest else "")
    return out


