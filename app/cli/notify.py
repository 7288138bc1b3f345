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
    from app.domain import campaigns, notifications, users
    from app.domain.errors import DomainError

    try:
        with session_scope(board_engine(get_settings())) as session:
            actor = users.user_by_name(session, user).name if user else "cli"
            chosen = campaigns.get_campaign(session, campaign) if campaign else None
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


@notify_cli.command("inbox")
def notify_inbox(
    user: Annotated[str, typer.Argument(help="The person's name.")],
    unread: Annotated[bool, typer.Option(help="Only the unread.")] = False,
    read: Annotated[bool, typer.Option("--mark-read", help="Then mark them all read.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="As GET /api/inbox gives it.")] = False,
) -> None:
    """A person's inbox (what they watch: trials ending, verdicts waiting, re-test flags), newest first."""
    import json

    from app.domain import inbox, users
    from app.domain.errors import DomainError

    try:
        with session_scope(board_engine(get_settings()), write=read) as session:
            person = users.user_by_name(session, user)
            count = inbox.unread_count(session, person.id)
            found = inbox.items(session, person.id, unread_only=unread)
            rows: list[dict[str, str | int | None]] = [
                {
                    "id": i.id,
                    "event": i.event.event,
                    "title": i.event.title,
                    "body": i.event.body,
                    "link": i.event.link,
                    "created_at": i.created_at.isoformat(),
                    "read_at": i.read_at.isoformat() if i.read_at else None,
                }
                for i in found
            ]
            if read:
                inbox.mark_read(session, person.id)
    except DomainError as exc:
        fail(exc.message)
    if as_json:
        print(json.dumps({"unread": count, "items": rows}, indent=2))
        return
    console.print(f"{count} unread", markup=False)
    for r in rows:
        mark = " " if r["read_at"] else "*"
        console.print(
            f"{mark} #{r['id']} {str(r['created_at'])[:19]} {r['event']}: {r['title']} {r['link']}", markup=False
        )


@notify_cli.command("watch")
def notify_watch(
    user: Annotated[str, typer.Argument(help="The person's name.")],
    campaign: Annotated[str, typer.Argument(help="The campaign's slug.")],
    approach: Annotated[str | None, typer.Option(help="One approach's key (default: the whole campaign).")] = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop watching it.")] = False,
) -> None:
    """Watch a campaign or an approach for a person: its events reach their inbox (--stop: no longer)."""
    from app.domain import campaigns, inbox, users
    from app.domain.errors import DomainError

    try:
        with session_scope(board_engine(get_settings())) as session:
            person = users.user_by_name(session, user)
            chosen = campaigns.get_campaign(session, campaign)
            row = campaigns.get_approach(session, chosen, approach) if approach else None
            if stop:
                inbox.unwatch(session, person.id, chosen, row)
            else:
                inbox.watch(session, person.id, chosen, row)
            watched = [
                f"{w.campaign.slug}{'/' + w.approach.key if w.approach else ''}"
                for w in inbox.watches(session, person.id)
            ]
    except DomainError as exc:
        fail(exc.message)
    console.print(f"{person.name} watches: {', '.join(watched) or 'nothing'}", markup=False)
