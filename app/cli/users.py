"""People and their credentials: `campaign users`, `token` and `sessions`."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import UserOption, board_engine, console, fail, get_settings, session_scope
from app.domain.units import plural

token_cli = typer.Typer(help="API tokens for scripts (Authorization: Bearer ...).", no_args_is_help=True)
sessions_cli = typer.Typer(help="Browser sessions: list them, or end them all at once.", no_args_is_help=True)
users_cli = typer.Typer(help="People on the board (invites, roles and sessions: the Users page).", no_args_is_help=True)


@token_cli.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="What the token is for, e.g. 'ci'.")], user: UserOption = None
) -> None:
    """Create an API token acting as a user, with their role, and print it once."""
    from app.domain import users
    from app.domain.errors import DomainError
    from app.domain.logins import create_api_token

    try:
        with session_scope(board_engine(get_settings())) as session:
            owner = users.user_by_name(session, user) if user else None
            console.print(create_api_token(session, name, owner), soft_wrap=True)
    except DomainError as exc:
        fail(exc.message)


@token_cli.command("revoke")
def token_revoke(name: str) -> None:
    """Revoke every API token with this name."""
    from app.domain.logins import revoke_api_token

    with session_scope(board_engine(get_settings())) as session:
        count = revoke_api_token(session, name)
    if not count:
        fail(f"no live API token named {name!r}")
    console.print(f"revoked {plural(count, 'token')}")


@sessions_cli.command("list")
def sessions_list() -> None:
    """Live browser sessions (opened by a login link; ended by logout or `sessions revoke`)."""
    from app.domain.logins import live_sessions

    with session_scope(board_engine(get_settings()), write=False) as session:
        rows = live_sessions(session)
    for row in rows:
        console.print(
            f"#{row.id}  {row.user_name}  since {row.created_at:%Y-%m-%d %H:%M} UTC  until {row.expires_at:%Y-%m-%d %H:%M} UTC"
        )
    if not rows:
        console.print("no live sessions")


@users_cli.command("list")
def users_list() -> None:
    """The board's users: name, role, and whether disabled (invite people from the Users page)."""
    from app.domain import users

    with session_scope(board_engine(get_settings()), write=False) as session:
        rows = users.list_users(session)
    for row in rows:
        console.print(f"#{row.id}  {row.name}  {row.role}{'  (disabled)' if row.disabled_at else ''}", highlight=False)
    if not rows:
        console.print("no users yet: the login link `campaign serve` prints makes the first admin")


@sessions_cli.command("revoke")
def sessions_revoke() -> None:
    """End every browser session now: their cookies are refused from the next request on."""
    from app.domain.logins import revoke_all_sessions

    with session_scope(board_engine(get_settings())) as session:
        count = revoke_all_sessions(session)
    console.print(f"ended {plural(count, 'session')}")
