"""What every command group of `campaign` shares: the consoles, the settings, the database engines and the
one way a command fails (a red line on stderr, an exit code). Imports at call time, as every group does."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from app.config import Settings

# The database and migration stack (SQLAlchemy, Alembic) and the settings are imported by the
# subcommands that use them, so `campaign --help` and `campaign runner` start without them.

console = Console(soft_wrap=True)  # long URLs and summaries stay on one line
err = Console(stderr=True, soft_wrap=True)  # paths in errors stay whole (tests grep them)
log = logging.getLogger("app.cli")  # one logger for the whole command ("INFO app.cli: serving on ...")


def get_settings() -> Settings:
    from app.config import get_settings as load

    return load()


def session_scope(engine: Any, *, write: bool = True, snapshot: bool = False) -> Any:
    from app.db import session_scope as scope

    return scope(engine, write=write, snapshot=snapshot)


def migrated_engine(settings: Settings):
    from app.db import make_engine, migrate

    url = settings.resolved_database_url()
    migrate(url)
    return make_engine(url)


def board_engine(settings: Settings):
    """The engine of a board that exists: for commands that act on one (login links, tokens, runners,
    sessions), which must never create an empty database where none was (a login link for a board that is
    not served). Run outside the checkout, the default `./data/campaign.db` is another, empty file."""
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from app.db import make_engine, migrate

    url = settings.resolved_database_url()
    shown = make_url(url).render_as_string(hide_password=True)
    where = (
        "run this where the board was started (the same directory or CAMPAIGN_DATA_DIR), or point "
        "CAMPAIGN_DATABASE_URL at the board's database; `campaign serve` creates a new board"
    )
    database = make_url(url).database or ""
    if url.startswith("sqlite") and database not in ("", ":memory:") and not Path(database).exists():
        fail(f"no board at {shown}: the file does not exist. {where[0].upper() + where[1:]}.", code=2)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            has_board = inspect(conn).has_table("alembic_version")
    except SQLAlchemyError as exc:
        engine.dispose()
        fail(f"cannot open the board's database at {shown}: {str(exc.__cause__ or exc).splitlines()[0]}", code=2)
    if not has_board:
        engine.dispose()
        fail(f"no board at {shown}: the database has no board's tables. {where[0].upper() + where[1:]}.", code=2)
    migrate(url)  # an older board's schema is brought up to date, as the server would on start
    return engine


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


UserOption = Annotated[
    str | None, typer.Option("--user", help="The user's display name (default: the board's first admin).")
]
