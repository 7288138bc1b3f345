"""Notification destinations: `campaign notify`."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import UserOption, board_engine, console, fail, get_settings, session_scope

notify_cli = typer.Typer(
    help="Notification destinations (Apprise URLs): tell a channel what happens.", no_args_is_help=True
)


@notify_cli.command("add")
def notify_add(
    url: Annotated[
        str, typer.Argument(help="An Apprise URL: slack://..., msteams://..., ntfy://..., json://host/path")
    ],
    event: Annotated[
        list[str], typer.Option("--event", "-e", help="An event to send (repeat): trial.ended, runner.lost, ...")
    ],
    campaign: Annotated[str | None, typer.Option(help="Only this campaign's events (its slug); default: all.")] = None,
    waiting_hours: Annotated[float, typer.Option(help="verdict.waiting: after this many hours.")] = 4.0,
    user: UserOption = None,
) -> None:
    """Add a destination; the running server delivers to it (its URL is printed redacted)."""
    from app.domain import inventory, notifications, users
    from app.domain.errors import DomainError

    try:
        with session_scope(board_engine(get_settings())) as session:
            actor = users.user_by_name(session, user).name if user else "cli"
            chosen = inventory.get_campaign(session, campaign) if campaign else None
            target = notifications.create_target(
                session, url, event, campaign=chosen, actor=actor, waiting_hours=waiting_hours
            )
            console.print(f"notification #{target.id}: {target.redacted} <- {', '.join(target.events)}", soft_wrap=True)
    except DomainError as exc:
        fail(exc.message)


@notify_cli.command("list")
def notify_list() -> None:
    """Destinations (URLs redacted), their events and deliveries by state."""
    from app.domain import notifications

    with session_scope(board_engine(get_settings()), write=False) as session:
        counts = notifications.delivery_counts(session)
        for target, slug in notifications.list_targets(session):
            c = counts.get(target.id or 0, {})
            state = ", ".join(f"{n} {k}" for k, n in sorted(c.items())) or "nothing sent"
            off = " (disabled)" if target.disabled_at else ""
            console.print(
                f"#{target.id} {target.redacted}{off} [{slug or 'every campaign'}] {', '.join(target.events)}: {state}",
                soft_wrap=True,
                markup=False,
            )
