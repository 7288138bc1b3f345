"""Trial recipes: each kind turns an approach's recipe (JSON data) into a process to launch.

A recipe is data, never a shell string:
    {"kind": "command", "params": {...}, "env": {"NCCL_ALGO": "Ring"}, "cwd": null, "timeout_s": 600}
`build_launch` validates it and returns the argv/env/cwd/timeout the runner spawns.
Every recipe module also runs alone: `python -m runners.recipes.<kind> --help`.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.protocol.recipes import MAX_TIMEOUT_S, RecipeError


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Recipe:
    """The contract every recipe module meets, as its module-level `RECIPE`.

    spec: its parameters (for documentation and forms; may be empty);
    validate(params) -> values: coerce and check the recipe's JSON params (raises RecipeError);
    argv(values, python) -> list[str]: the process to launch for validated values;
    safe_env: default SAFE_ENV into the trial's env (anything that may touch several GPUs).
    """

    spec: tuple
    validate: Callable[[dict[str, Any]], dict[str, Any]]
    argv: Callable[[dict[str, Any], str], list[str]]
    safe_env: bool = True


def module_argv(python: str, module: str, flags: list[str]) -> list[str]:
    """`python -m runners.recipes.<kind> flags...`: how a recipe module is launched."""
    return [python, "-m", module, *flags]


def recipes() -> dict[str, Recipe]:
    """Every recipe kind: each module of this package (not `_private`) that defines RECIPE.
    A new recipe is one new module."""
    found: dict[str, Recipe] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        recipe = getattr(module, "RECIPE", None)
        if isinstance(recipe, Recipe):
            found[info.name] = recipe
    return found


def _common(recipe: dict[str, Any]) -> tuple[dict[str, str], str | None, float]:
    env = recipe.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in env.items()
    ):
        raise RecipeError("env: must be a mapping of variable names to strings")
    cwd = recipe.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise RecipeError("cwd: must be a path string")
    timeout = recipe.get("timeout_s", 600)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise RecipeError(f"timeout_s: must be a positive number of seconds, at most {MAX_TIMEOUT_S} (7 days)")
    return {k: str(v) for k, v in env.items()}, cwd, float(timeout)


def build_launch(recipe: dict[str, Any], *, python: str | None = None) -> LaunchSpec:
    """Validate a recipe and say how to launch it. Raises RecipeError on bad input."""
    if not isinstance(recipe, dict):
        raise RecipeError("recipe: must be a mapping with a 'kind'")
    kinds = recipes()
    kind = recipe.get("kind")
    if kind not in kinds:
        raise RecipeError(f"kind: unknown recipe kind {kind!r}; expected one of {', '.join(sorted(kinds))}")
    params = recipe.get("params") or {}
    if not isinstance(params, dict):
        raise RecipeError("params: must be a mapping")
    env, cwd, timeout = _common(recipe)
    python = python or sys.executable
    contract = kinds[kind]
    argv = contract.argv(contract.validate(params), python)
    if argv[1:3] == ["-m", f"{__name__}.{kind}"] or contract.safe_env:
        env = _module_env(env, safe=contract.safe_env)
    return LaunchSpec(argv=argv, env=env, cwd=cwd, timeout_s=timeout)


# Defaulted for every trial that may touch several GPUs: NVLink multicast stays off.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# What a recipe's interpreter may import of the runner's install: `app` for `app.protocol` only.
ENTRY_PACKAGES = ("app", "runners")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def runners_path(root: str = _ROOT) -> str:
    """The PYTHONPATH entry through which another interpreter (the node's torch or SGLang environment)
    imports this `runners` package and the vocabulary it shares with the server (`app.protocol`, standard
    library only but for its messages): the checkout or install root, except when that is a site-packages
    directory (the runner installed in a venv of its own). Then the root would put every package of the
    runner's venv ahead of the node's own (its pydantic, jinja2, ... in torch and in SGLang started from a
    recipe), so the entry is a directory that holds only links to `runners` and `app` (in the user's cache
    directory, which a SLURM job's nodes share with the runner's as they share the home directory)."""
    if os.path.basename(root) not in ("site-packages", "dist-packages"):
        return root
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    entry = os.path.join(cache, "campaign-board", "runners-" + hashlib.sha256(root.encode()).hexdigest()[:16])
    try:
        for package in ENTRY_PACKAGES:
            link, target = os.path.join(entry, package), os.path.join(root, package)
            if os.path.realpath(link) != os.path.realpath(target):
                os.makedirs(entry, exist_ok=True)
                fresh = f"{link}.{os.getpid()}"
                os.symlink(target, fresh)
                os.replace(fresh, link)
    except OSError:
        return root  # no cache directory to write: the whole root, as before
    return entry


def _module_env(env: dict[str, str], *, safe: bool = False) -> dict[str, str]:
    """The recipe's env, plus what `python -m runners.recipes.X` needs from any cwd."""
    out = dict(env)
    if safe:
        for key, value in SAFE_ENV.items():
            out.setdefault(key, value)
    rest = out.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    out["PYTHONPATH"] = runners_path() + (os.pathsep + rest if rest else "")
    return out
