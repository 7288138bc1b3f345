"""The GPU node's side: `campaign runners` (their tokens), `runner` and `preflight`. The only group that
imports the runner package (tests/test_import_graph.py): these commands run its code on the node."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import board_engine, console, fail, get_settings, session_scope
from app.protocol.recipes import RecipeError
from runners import cli as runner_cli

runners_cli = typer.Typer(help="Runner tokens: one per GPU node (`campaign runner --token ...`).", no_args_is_help=True)

# `campaign runner` is the node's own command (runners/cli.py, its settings read there).
runner = runner_cli.runner


@runners_cli.command("create")
def runners_create(name: Annotated[str, typer.Argument(help="The node's name, e.g. its hostname.")]) -> None:
    """Create a runner and print its token once."""
    from app.domain.errors import DomainError
    from app.domain.runners import create_runner

    try:
        with session_scope(board_engine(get_settings())) as session:
            _, token = create_runner(session, name)
    except DomainError as exc:
        fail(exc.message)
    console.print(token, soft_wrap=True)


@runners_cli.command("revoke")
def runners_revoke(name: str) -> None:
    """Revoke a runner's token; a running server disconnects it at its next heartbeat."""
    from sqlmodel import select

    from app.domain.errors import DomainError
    from app.domain.runners import revoke_runner
    from app.models import Runner

    try:
        with session_scope(board_engine(get_settings())) as session:
            runner = session.exec(select(Runner).where(Runner.name == name)).first()
            if runner is None:
                fail(f"no runner named {name!r}")
            revoke_runner(session, runner)
    except DomainError as exc:
        fail(exc.message)
    console.print(f"revoked runner {name!r}")


def preflight(
    approach: Annotated[str, typer.Argument(metavar="APPROACH", help="The approach's key in the campaign file.")],
    campaign_file: Annotated[Path, typer.Option("--file", help="Campaign file (YAML) holding the approach.")],
    sglang_python: Annotated[
        str | None, typer.Option(help="This node's sglang interpreter (overrides the recipe's).")
    ] = None,
    model_path: Annotated[
        str | None, typer.Option(help="This node's copy of the model (overrides the recipe's).")
    ] = None,
    draft_model_path: Annotated[str | None, typer.Option(help="This node's copy of the draft model.")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="A check to skip (repeat).")] = None,
) -> None:
    """Run an sglang_server approach's preflight checks on this node, without launching the server.

    Exit code: 0 every applicable check passed, 4 one failed (its verdict proposal is printed),
    2 the approach or its recipe is unusable."""
    from app.domain.campaign_files import parse_campaign_file
    from app.domain.errors import DomainError

    try:
        parsed = parse_campaign_file(campaign_file.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"cannot read {campaign_file}: {exc.strerror or exc}", code=2)
    except DomainError as exc:
        fail(f"{campaign_file}: {exc}", code=2)
    found = next((a for a in parsed.approaches if a.key == approach), None)
    if found is None:
        fail(
            f"no approach {approach!r} in {campaign_file}; keys: {', '.join(a.key for a in parsed.approaches)}", code=2
        )
    try:
        spec = runner_cli.preflight_launch(
            approach,
            dict(found.recipe or {}),
            sglang_python=sglang_python,
            model_path=model_path,
            draft_model_path=draft_model_path,
            skip=skip,
        )
    except RecipeError as exc:
        fail(str(exc), code=2)
    raise typer.Exit(runner_cli.run_preflight(spec))
