"""The node's commands: `campaign runner` (run trials for a board) and the node side of `campaign preflight`
(an sglang_server recipe's checks without its server). app/cli/runners.py registers `runner` and parses the campaign
file for `preflight`; nothing here reads the server's settings: `RunnerSettings` holds the few CAMPAIGN_*
variables a runner reads (docs/configuration.md).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.console import Console

from app.protocol.logconfig import configure_logging, known_level
from app.protocol.recipes import RecipeError
from runners.agent import run
from runners.executors import Executor
from runners.executors.slurm import SlurmConfig, SlurmExecutor
from runners.process import trial_env
from runners.recipes import LaunchSpec, build_launch

err = Console(stderr=True, soft_wrap=True)  # paths in errors stay whole (tests grep them)


class RunnerSettings(BaseSettings):
    """What `campaign runner` reads of the CAMPAIGN_* variables (the same names, defaults and .env file as the
    server's Settings in app/config.py, which documents them)."""

    model_config = SettingsConfigDict(env_prefix="CAMPAIGN_", env_file=".env", extra="ignore")

    data_dir: Path = Field(Path("data"), description="The default spool lives under <data_dir>/runner-spool.")
    cancel_grace_s: float = Field(10.0, description="SIGTERM to SIGKILL grace when a trial is cancelled or times out.")
    log_level: str = Field("INFO", description="Level of the runner's logs on stderr.")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        return known_level(value)


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def runner(
    server: Annotated[str, typer.Option(help="The board's URL, e.g. http://board:8000.")],
    token: Annotated[
        str,
        typer.Option(
            envvar="CAMPAIGN_RUNNER_TOKEN",
            show_default=False,
            help="This runner's token (better: --token-file; ps shows arguments).",
        ),
    ] = "",
    token_file: Annotated[
        str | None,
        typer.Option(help="Read the token from this file ('-': stdin). Trials never see it, whichever way it comes."),
    ] = None,
    labels: Annotated[str, typer.Option(help="Comma-separated labels, e.g. h200,nvlink.")] = "",
    spool_dir: Annotated[Path | None, typer.Option(help="Log spool (default <data_dir>/runner-spool/<name>).")] = None,
    name: Annotated[
        str | None, typer.Option(help="Name in logs and the default spool dir (default: hostname).")
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(
            help="Interpreter the recipes run with: the node's torch or SGLang environment, e.g. "
            "/envs/sglang/bin/python (default: the runner's own). The runner says at start what it holds."
        ),
    ] = None,
    sglang_python: Annotated[
        str | None, typer.Option(help="Interpreter SGLang is installed in, if another one.")
    ] = None,
    max_trials: Annotated[int, typer.Option(min=1, help="Trials run at once on this node.")] = 1,
    parent_pid: Annotated[int | None, typer.Option(hidden=True)] = None,
    executor: Annotated[
        str,
        typer.Option(
            help="Where trials run: local (process groups on this node) or slurm (batch jobs; see docs/cluster.md)."
        ),
    ] = "local",
    partition: Annotated[str, typer.Option(help="slurm: partition (default: the cluster's default).")] = "",
    account: Annotated[str, typer.Option(help="slurm: account to charge.")] = "",
    time_limit: Annotated[str, typer.Option(help="slurm: sbatch --time (default: the recipe's timeout + 2 min).")] = "",
    gpus_per_node: Annotated[
        int, typer.Option(min=0, help="slurm: GPUs per node (default: from the partition's GRES).")
    ] = 0,
    sbatch_option: Annotated[
        list[str] | None, typer.Option(help="slurm: extra sbatch option, e.g. --qos=high (repeatable).")
    ] = None,
    gpu_model: Annotated[str, typer.Option(help="slurm: the partition's GPU model, when GRES does not name it.")] = "",
    gpu_sm: Annotated[str, typer.Option(help="slurm: the partition's GPU SM capability, e.g. 9.0.")] = "",
) -> None:
    """Run trials on this node for a board: connect, report the node, stream logs; reconnects by itself."""
    settings = RunnerSettings()
    name = name or socket.gethostname()
    if token_file:
        token = _read_token(token_file)
    configure_logging(settings.log_level, label=f"runner {name}")
    spool_dir = spool_dir or settings.data_dir / "runner-spool" / name
    slurm = SlurmConfig(
        partition=partition,
        account=account,
        time_limit=time_limit,
        gpus_per_node=gpus_per_node,
        sbatch_options=list(sbatch_option or []),
        gpu_model=gpu_model,
        sm=gpu_sm,
    )
    trial_executor = _trial_executor(executor, slurm, spool_dir)
    code = run(
        server,
        token,
        spool_dir=spool_dir,
        labels=[label.strip() for label in labels.split(",") if label.strip()],
        name=name,
        python=python,
        sglang_python=sglang_python,
        cancel_grace_s=settings.cancel_grace_s,
        max_concurrent=max_trials,
        parent_pid=parent_pid,
        executor=trial_executor,
    )
    raise typer.Exit(code)


def _read_token(token_file: str) -> str:
    """The token from a file ('-': stdin), stripped; exits 2 when it cannot be read."""
    try:
        return (sys.stdin.readline() if token_file == "-" else Path(token_file).read_text()).strip()
    except OSError as exc:
        fail(f"cannot read {token_file}: {exc.strerror}", code=2)


def _trial_executor(executor: str, slurm: SlurmConfig, spool_dir: Path) -> Executor | None:
    """Where trials run: None for local process groups, SLURM batch jobs for slurm (exits on anything else)."""
    if executor == "local":
        return None
    if executor != "slurm":
        fail(f"--executor {executor!r}: expected local or slurm")
    try:
        return SlurmExecutor(slurm, spool_dir)
    except RecipeError as exc:
        fail(str(exc))


def preflight_launch(
    approach: str,
    recipe: dict[str, Any],
    *,
    sglang_python: str | None = None,
    model_path: str | None = None,
    draft_model_path: str | None = None,
    skip: list[str] | None = None,
) -> LaunchSpec:
    """The launch of an approach's sglang_server recipe with its preflight on and this node's paths. Raises
    RecipeError (its message names the approach) when the recipe is not sglang_server or is unusable."""
    recipe = dict(recipe)
    if recipe.get("kind") != "sglang_server":
        raise RecipeError(
            f"approach {approach!r} has no sglang_server recipe (kind {recipe.get('kind')!r}): nothing to preflight"
        )
    params = dict(recipe.get("params") or {})
    for key, value in (("sglang_python", sglang_python), ("model_path", model_path)):
        if value is not None:
            params[key] = value
    if draft_model_path is not None:
        params["speculative"] = {**(params.get("speculative") or {}), "draft_model_path": draft_model_path}
    params["preflight"] = {
        **(params.get("preflight") or {}),
        "enabled": "on",
        "skip": list(skip or (params.get("preflight") or {}).get("skip") or []),
    }
    try:
        return build_launch({**recipe, "params": params})
    except RecipeError as exc:
        raise RecipeError(f"approach {approach!r}: {exc}") from exc


def run_preflight(spec: LaunchSpec) -> int:
    """Run the recipe's checks alone (--only-preflight=on); its exit code (0 passed, 4 one failed)."""
    return subprocess.run([*spec.argv, "--only-preflight=on"], env=trial_env(spec.env), cwd=spec.cwd).returncode
