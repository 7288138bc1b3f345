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
        return LaunchSpec(argv=list(argv), env=env, cwd=cwd, timeout_s=timeout)
    raise RecipeError(f"kind: recipe {kind!r} is not available in this build")


def runner_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment a trial runs with: the runner's own, plus the recipe's."""
    env = dict(os.environ)
    env.update(extra)
    return env
