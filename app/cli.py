"""`campaign`: one command with subcommands (serve, demo, import, export, login-url, token, ...).

Each subcommand imports what it runs, inside its function (tests/test_import_graph.py allows it for this
file): `campaign runner` on a GPU node and `campaign --help` start without the web app, the database layer
or plotly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from runners import cli as runner_cli
from runners.logconfig import configure_logging
from runners.recipes import RecipeError
from runners.recipes.metric import MetricName

if TYPE_CHECKING:
    from app.config import Settings

# The database and migration stack (SQLAlchemy, Alembic) and the settings are imported by the
# subcommands that use them, so `campaign --help` and `campaign runner` start without them.

cli = typer.Typer(
    help="Campaign Board: optimization campaigns for LLM inference on GPU nodes.",
    no_args_is_help=True,
    add_completion=False,
)
token_cli = typer.Typer(help="API tokens for scripts (Authorization: Bearer ...).", no_args_is_help=True)
cli.add_typer(token_cli, name="token")
sessions_cli = typer.Typer(help="Browser sessions: list them, or end them all at once.", no_args_is_help=True)
cli.add_typer(sessions_cli, name="sessions")
users_cli = typer.Typer(help="People on the board (invites, roles and sessions: the Users page).", no_args_is_help=True)
cli.add_typer(users_cli, name="users")
runners_cli = typer.Typer(help="Runner tokens: one per GPU node (`campaign runner --token ...`).", no_args_is_help=True)
cli.add_typer(runners_cli, name="runners")
notify_cli = typer.Typer(
    help="Notification destinations (Apprise URLs): tell a channel what happens.", no_args_is_help=True
)
cli.add_typer(notify_cli, name="notify")
console = Console(soft_wrap=True)  # long URLs and summaries stay on one line
err = Console(stderr=True, soft_wrap=True)  # paths in errors stay whole (tests grep them)
log = logging.getLogger(__name__)


def get_settings() -> Settings:
    from app.config import get_settings as load

    return load()


def session_scope(engine: Any, *, write: bool = True, snapshot: bool = False) -> Any:
    from app.db import session_scope as scope

    return scope(engine, write=write, snapshot=snapshot)


def _engine(settings: Settings):
    from app.db import make_engine, migrate

    url = settings.resolved_database_url()
    migrate(url)
    return make_engine(url)


def _board_engine(settings: Settings):
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
        _fail(f"no board at {shown}: the file does not exist. {where[0].upper() + where[1:]}.", code=2)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            has_board = inspect(conn).has_table("alembic_version")
    except SQLAlchemyError as exc:
        engine.dispose()
        _fail(f"cannot open the board's database at {shown}: {str(exc.__cause__ or exc).splitlines()[0]}", code=2)
    if not has_board:
        engine.dispose()
        _fail(f"no board at {shown}: the database has no board's tables. {where[0].upper() + where[1:]}.", code=2)
    migrate(url)  # an older board's schema is brought up to date, as the server would on start
    return engine


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000).")] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Load the demo campaigns first (idempotent).")] = False,
    no_runner: Annotated[bool, typer.Option("--no-runner", help="Pure server: no embedded local runner.")] = False,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=0, max=32, help="Page-worker processes beside the hub (default 1; 0: none)."),
    ] = None,
) -> None:
    """Migrate the database, print a one-time login URL and run the server."""
    import uvicorn

    from app.main import create_app

    settings = get_settings()
    configure_logging(settings.log_level)
    if host:
        settings.host = host
    if port:
        settings.port = port
    if no_runner:
        settings.embedded_runner = False
    if workers is not None:
        settings.page_workers = workers
    if not settings.auth_enabled and settings.host not in ("127.0.0.1", "localhost", "::1"):
        _fail(
            "CAMPAIGN_AUTH_ENABLED=false is only allowed on a loopback address: anyone who can reach "
            f"{settings.host} could run commands on the runners"
        )
    engine = _engine(settings)
    if demo:
        _load_demo(engine)
    with session_scope(engine) as session:
        token, who = _login_link(session, settings, None)
    engine.dispose()
    console.print(f"Campaign Board on [bold]{settings.base_url()}[/bold]  (database: {_safe_url(settings)})")
    link = f"{settings.base_url()}/login?token={token}"
    if settings.host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]Listening on {settings.host}: reachable from other machines.[/yellow]")
        console.print(
            f"Answering only to Host names: {', '.join(settings.host_allowlist())} "
            "(set CAMPAIGN_PUBLIC_URL or CAMPAIGN_ALLOWED_HOSTS for the names browsers and runners use)",
            soft_wrap=True,
            highlight=False,
        )
    app = create_app(settings, run_migrations=False, page_workers=settings.page_workers)
    listening = _listening_file(settings)
    listening.write_text(json.dumps({"pid": os.getpid(), "url": settings.base_url()}))
    lifespan = app.router.lifespan_context
    # No per-message deflate: live-log frames are encoded once and sent as they are to every viewer
    # (compressing per viewer cost a third of the event loop in a flood). A bounded graceful shutdown.
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level="warning",
            ws_max_size=16 * 1024 * 1024,
            ws_per_message_deflate=False,
            timeout_graceful_shutdown=5,
        )
    )

    @asynccontextmanager
    async def forget_listening_on_exit(app_: Any) -> AsyncIterator[None]:
        # uvicorn re-raises SIGTERM after its shutdown, so the `finally` below may not run: forget here.
        announcer = asyncio.create_task(_announce_login(app_, server, login_block(link, who, settings)))
        try:
            async with lifespan(app_):
                yield
        finally:
            announcer.cancel()
            listening.unlink(missing_ok=True)

    app.router.lifespan_context = forget_listening_on_exit
    log.info("serving on %s:%s (embedded runner: %s)", settings.host, settings.port, settings.embedded_runner)
    try:
        server.run()
    finally:
        listening.unlink(missing_ok=True)


def login_block(link: str, who: str, settings: Settings) -> str:
    """The login link as `campaign serve` prints it: a framed block, the link alone on its line (a
    triple-click copies exactly it)."""
    ttl = settings.login_token_ttl_s
    valid = f"{ttl // 3600} h" if ttl % 3600 == 0 else f"{ttl // 60} min" if ttl % 60 == 0 else f"{ttl} s"
    rule = "=" * max(60, len(link) + 4)
    return "\n".join(
        [
            rule,
            f"  Campaign Board is ready on {settings.base_url()}",
            f"  {who} (one-time link, valid {valid}):",
            "",
            f"  {link}",
            rule,
        ]
    )


STARTUP_WAIT_S = 30.0  # the most the repeat of the login block waits for the runner and page workers
STARTUP_QUIET_S = 1.0  # then a moment for their own start-up lines, so the block comes after them


async def _announce_login(app: Any, server: Any, block: str) -> None:
    """Print the login block once the server listens, and again at the end of start-up (the embedded
    runner connected, the page workers ready), so it is not left among their log lines."""
    from app.state import app_state

    state = app_state(app)
    while not server.started:
        await asyncio.sleep(0.05)
    console.print(block, highlight=False, markup=False)
    runner, pool = state.settings.embedded_runner, state.page_workers
    if not runner and pool is None:
        return  # nothing else starts: the block is the last line already

    def started_up() -> bool:
        workers = pool.health() if pool is not None else {"ready": 0, "of": 0}
        return (not runner or bool(state.hub.runners)) and workers["ready"] == workers["of"]

    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_WAIT_S
    while loop.time() < deadline and not started_up():
        await asyncio.sleep(0.1)
    await asyncio.sleep(STARTUP_QUIET_S)
    console.print(block, highlight=False, markup=False)


def _listening_file(settings: Settings) -> Path:
    """Where `campaign serve` records the URL it listens on, for `campaign login-url`."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return settings.data_dir / "server.json"


def _serving_url(settings: Settings) -> str:
    """The URL of the running server of this data dir (its --host/--port), else the settings'."""
    try:
        record = json.loads(_listening_file(settings).read_text())
        os.kill(int(record["pid"]), 0)  # still running?
        return str(record["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return settings.base_url()


def _safe_url(settings: Settings) -> str:
    url = settings.resolved_database_url()
    if "@" in url:  # hide credentials
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def _load_demo(engine) -> None:
    from app.domain.demo import load_demo

    with session_scope(engine) as session:
        for line in load_demo(session):
            console.print(line)


@cli.command()
def demo() -> None:
    """Load the demo campaigns (idempotent: running it twice changes nothing)."""
    _load_demo(_engine(get_settings()))


def _login_link(session: Any, settings: Settings, user_name: str | None) -> tuple[str, str]:
    """A one-time login token for a user (default: the first admin) and who it logs in; on a
    board with no users, the first-admin link (its first login names the admin)."""
    from app.domain import users
    from app.security import create_login_token

    user = users.user_by_name(session, user_name) if user_name else users.first_admin(session)
    token = create_login_token(session, settings.login_token_ttl_s, user)
    if user is None:
        return token, "First login, makes the board's admin"
    return token, f"Log in as {user.name}"


UserOption = Annotated[
    str | None, typer.Option("--user", help="The user's display name (default: the board's first admin).")
]


@cli.command("login-url")
def login_url(user: UserOption = None) -> None:
    """Print a new one-time login URL for a user (on a new board: the link that makes its admin)."""
    from app.domain.errors import DomainError

    settings = get_settings()
    try:
        with session_scope(_board_engine(settings)) as session:
            token, _who = _login_link(session, settings, user)
    except DomainError as exc:
        _fail(exc.message)
    console.print(f"{_serving_url(settings)}/login?token={token}", soft_wrap=True)


@token_cli.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="What the token is for, e.g. 'ci'.")], user: UserOption = None
) -> None:
    """Create an API token acting as a user, with their role, and print it once."""
    from app.domain import users
    from app.domain.errors import DomainError
    from app.security import create_api_token

    try:
        with session_scope(_board_engine(get_settings())) as session:
            owner = users.user_by_name(session, user) if user else None
            console.print(create_api_token(session, name, owner), soft_wrap=True)
    except DomainError as exc:
        _fail(exc.message)


@token_cli.command("revoke")
def token_revoke(name: str) -> None:
    """Revoke every API token with this name."""
    from app.security import revoke_api_token

    with session_scope(_board_engine(get_settings())) as session:
        count = revoke_api_token(session, name)
    if not count:
        _fail(f"no live API token named {name!r}")
    console.print(f"revoked {count} token(s)")


@sessions_cli.command("list")
def sessions_list() -> None:
    """Live browser sessions (opened by a login link; ended by logout or `sessions revoke`)."""
    from app.security import live_sessions

    with session_scope(_board_engine(get_settings()), write=False) as session:
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

    with session_scope(_board_engine(get_settings()), write=False) as session:
        rows = users.list_users(session)
    for row in rows:
        console.print(f"#{row.id}  {row.name}  {row.role}{'  (disabled)' if row.disabled_at else ''}", highlight=False)
    if not rows:
        console.print("no users yet: the login link `campaign serve` prints makes the first admin")


@sessions_cli.command("revoke")
def sessions_revoke() -> None:
    """End every browser session now: their cookies are refused from the next request on."""
    from app.security import revoke_all_sessions

    with session_scope(_board_engine(get_settings())) as session:
        count = revoke_all_sessions(session)
    console.print(f"ended {count} session(s)")


@runners_cli.command("create")
def runners_create(name: Annotated[str, typer.Argument(help="The node's name, e.g. its hostname.")]) -> None:
    """Create a runner and print its token once."""
    from app.domain.errors import DomainError
    from app.domain.runners import create_runner

    try:
        with session_scope(_board_engine(get_settings())) as session:
            _, token = create_runner(session, name)
    except DomainError as exc:
        _fail(exc.message)
    console.print(token, soft_wrap=True)


@runners_cli.command("revoke")
def runners_revoke(name: str) -> None:
    """Revoke a runner's token; a running server disconnects it at its next heartbeat."""
    from sqlmodel import select

    from app.domain.errors import DomainError
    from app.domain.runners import revoke_runner
    from app.models import Runner

    try:
        with session_scope(_board_engine(get_settings())) as session:
            runner = session.exec(select(Runner).where(Runner.name == name)).first()
            if runner is None:
                _fail(f"no runner named {name!r}")
            revoke_runner(session, runner)
    except DomainError as exc:
        _fail(exc.message)
    console.print(f"revoked runner {name!r}")


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
        with session_scope(_board_engine(get_settings())) as session:
            actor = users.user_by_name(session, user).name if user else "cli"
            chosen = inventory.get_campaign(session, campaign) if campaign else None
            target = notifications.create_target(
                session, url, event, campaign=chosen, actor=actor, waiting_hours=waiting_hours
            )
            console.print(f"notification #{target.id}: {target.redacted} <- {', '.join(target.events)}", soft_wrap=True)
    except DomainError as exc:
        _fail(exc.message)


@notify_cli.command("list")
def notify_list() -> None:
    """Destinations (URLs redacted), their events and deliveries by state."""
    from app.domain import notifications

    with session_scope(_board_engine(get_settings()), write=False) as session:
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


@cli.command("export")
def export_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="File to write (default: stdout).")] = None,
    with_results: Annotated[
        bool, typer.Option("--with-results", help="Also the ended trials with their metrics, samples and stack.")
    ] = False,
) -> None:
    """Export a campaign to YAML (keep it in git; `campaign import` reads it back)."""
    from app.domain.campaign_files import export_stream
    from app.domain.errors import DomainError

    with session_scope(_engine(get_settings()), write=False, snapshot=True) as session:
        pieces = export_stream(session, slug, with_results)
        try:
            first = next(pieces)  # an unknown campaign fails here, before a file is written
        except DomainError as exc:
            _fail(exc.message)
        try:
            with output.open("w", encoding="utf-8") if output else nullcontext(sys.stdout) as out:
                for piece in chain([first], pieces):
                    out.write(piece)
        except OSError as exc:  # no such directory, not writable, disk full: one line, not a traceback
            _fail(f"cannot write {output}: {exc.strerror or exc}", code=2)
    if output:
        err.print(f"wrote {output}")


@cli.command("answer")
def answer_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="The answer as GET /api/campaigns/SLUG/answer gives it.")
    ] = False,
    conditions: Annotated[
        str | None, typer.Option(help="The condition set (its key, as the answer lists them); default: the named one.")
    ] = None,
    context: Annotated[int | None, typer.Option(help="The condition set at this context length.")] = None,
    mode: Annotated[str | None, typer.Option(help="The condition set in this mode (graph | eager).")] = None,
) -> None:
    """Up to which batch speculation pays, with how many draft tokens and which allreduce (intervals at the
    campaign's confidence), under one condition set."""
    import json

    from app.domain import inventory
    from app.domain.answer.read import answer_document, pick_conditions, read_answer
    from app.domain.errors import DomainError

    with session_scope(_engine(get_settings()), write=False, snapshot=True) as session:
        try:
            campaign = inventory.get_campaign(session, slug)
            asked = pick_conditions(session, campaign, conditions, context=context, mode=mode)
            answer = read_answer(session, campaign, conditions=asked)
        except DomainError as exc:
            _fail(exc.message)
    found = answer.speculation
    if as_json:
        print(json.dumps(answer_document(answer), indent=2))
        return
    print(found.sentence)
    if answer.conditions is not None:
        default = " (the default)" if answer.is_default else ""
        print(f"  under {answer.conditions.label}{default}")
        for c in answer.condition_sets if len(answer.condition_sets) > 1 else ():
            print(f"  also held: --conditions '{c.key}' ({c.label})")
    for a in found.approaches:
        b_star = a.break_even_batch if a.break_even_batch is not None else "-"
        schedule = ", ".join(f"b{b}:k{k}" for b, k in sorted(a.best_draft_tokens.items())) or "no speedup known"
        print(f"  {a.key}: break-even batch {b_star}; best draft tokens {schedule}")
    for tier in found.tiers:
        if len(tier) > 1:
            print(f"  indistinguishable on this node: {', '.join(tier)}")
    for m in found.missing:
        print(f"  missing: {m.what}" + (f" ({m.approach})" if m.approach else "") + f": {m.how}")
    for flag in answer.flags:
        print(f"  contradictory: {flag}")


@cli.command("answer-config")
def answer_config_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    engine: Annotated[str, typer.Option(help="sglang, vllm or trtllm.")] = "sglang",
    serve_batches: Annotated[
        str | None, typer.Option(help="The batch range you serve, e.g. 1-32 (the default): SGLang's one-k line.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="As GET /api/campaigns/SLUG/answer/config gives it.")] = False,
) -> None:
    """The launch settings that deploy the answer on one engine, each naming the measurement it comes from."""
    import json

    from app.domain import inventory
    from app.domain.answer.configs import config_json, deploy_target, engine_config, parse_serve_range
    from app.domain.answer.read import read_answer
    from app.domain.errors import DomainError

    with session_scope(_engine(get_settings()), write=False, snapshot=True) as session:
        try:
            serve = parse_serve_range(serve_batches)
            answer = read_answer(session, inventory.get_campaign(session, slug))
            found, rows = answer.speculation, answer.approaches
            config = engine_config(engine, found, rows, serve=serve, target=deploy_target(session, found, rows))
        except DomainError as exc:
            _fail(exc.message)
    if as_json:
        print(json.dumps(config_json(config), indent=2))
        return
    if config.env:
        print(f"export {config.env_shell}")
    print(config.shell)
    for f in config.files:
        print(f"\n# {f.name}\n{f.content}", end="")
    for s in config.settings:
        print(f"# {s.option} = {s.value}: {s.source}")
    if config.static is not None:
        print(f"# without adaptive speculation, one k for batches {config.static.serve}: {config.static.shell}")
    for note in config.notes:
        print(f"# {note}")


@cli.command("plan")
def plan_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    target: Annotated[
        list[str] | None, typer.Option("--target", "-t", help="A target version, COMPONENT=VERSION (repeat).")
    ] = None,
    runner: Annotated[int | None, typer.Option(help="Plan for this runner's stack (its id) instead.")] = None,
) -> None:
    """What to try next (the payoff ranking) and what an upgrade would re-open (docs/planning.md)."""
    from rich.table import Table

    from app.domain import inventory, planning, scheduling
    from app.domain.errors import DomainError
    from app.domain.fingerprint import STACK_COMPONENTS

    try:
        with session_scope(_engine(get_settings()), write=False) as session:
            campaign = inventory.get_campaign(session, slug)
            ranked = scheduling.ranking(session, campaign)
            plan = planning.upgrade_plan(session, campaign, planning.target_of(session, target or [], runner))
            order = campaign.run_order
    except DomainError as exc:
        _fail(exc.message)
    table = Table(title=f"What to try next (Run next follows the {order})", show_lines=True)
    for column in ("#", "approach", "score", "needs (us)", "expected (us)", "effort", "risk"):
        table.add_column(column)
    for n, r in enumerate(ranked, start=1):
        table.add_row(
            str(n),
            r.approach.title,
            f"{r.score:.3g}" if r.score is not None else "-",
            f"{r.needs.us:.3g}" if r.needs.us is not None else "-",
            f"{r.expected.t_ar_us:.3g} ({r.expected.source})" if r.expected else "-",
            f"{r.effort:g}",
            f"{r.risk.value:.0%}",
        )
    console.print(table)
    if ranked:
        console.print(f"next: {ranked[0].approach.title}: {planning.why_next(ranked)}", highlight=False)
    upgrades = Table(title="Closed verdicts per stack component")
    for column in ("component", "approach", "died on", "cause"):
        upgrades.add_column(column)
    for component, rows in plan.by_component.items():
        for x in rows:
            upgrades.add_row(
                STACK_COMPONENTS[component], x.approach.title, x.died_on(component) or "?", x.approach.reason
            )
    console.print(upgrades)
    if plan.target:
        change = ", ".join(f"{STACK_COMPONENTS[c]} {old or '?'} -> {new}" for c, old, new in plan.changes)
        console.print(f"target: {change or 'no change'}", highlight=False)
        for reopen in plan.reopens:
            console.print(f"  re-opens {reopen.closed.approach.title}: {reopen.why}", highlight=False)
        for u in plan.untouched:
            console.print(f"  leaves {u.closed.approach.title}: {u.why}", highlight=False)


replay_cli = typer.Typer(
    help="Campaign replay: re-run the closed verdicts a runner's stack may change (docs/planning.md, Replay).",
    no_args_is_help=True,
)
cli.add_typer(replay_cli, name="replay")


def _print_replay(report: Any) -> None:
    from rich.table import Table

    r = report.replay
    console.print(
        f"replay #{r.id} on {r.runner_name} ({report.runner_stack}): {r.state}, {report.ended} of {report.queued} "
        f"trial(s) ended; started by {r.requested_by or '?'} at {r.created_at:%Y-%m-%d %H:%M}",
        highlight=False,
    )
    table = Table(show_lines=True)
    for column in ("approach", "before", "trial", "after", "measured"):
        table.add_column(column)
    for row in report.rows:
        if row.skipped:
            table.add_row(row.key, row.before_status, "-", f"not replayed: {row.skipped}", "")
            continue
        point = next((p for p in row.points if p.verdict), None)
        measured = ""
        if point is not None and point.ratio is not None:
            interval = (
                f" [{point.low:.3g}, {point.high:.3g}]" if point.low is not None and point.high is not None else ""
            )
            measured = f"{row.metric} {point.label} x{point.ratio:.3g}{interval} {point.verdict}".replace("  ", " ")
        after = row.after_status or (f"proposed {row.proposed}" if row.proposed else "no verdict yet")
        table.add_row(
            row.key,
            f"{row.before_status} on {row.before_stack}" if row.before_stack else row.before_status,
            f"#{row.trial_id} {row.trial_state}" if row.trial_id is not None else "-",
            after + (" (changed)" if row.changed else ""),
            measured,
        )
    console.print(table)


@replay_cli.command("start")
def replay_start_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    runner: Annotated[int, typer.Option("--runner", help="The runner whose stack to replay on (its id).")],
) -> None:
    """Replay on a runner: queue, for that runner only and in payoff order, one trial of every approach whose
    verdict is bound to a component in which its stack differs. The runner takes the first when it next looks
    at the queue (it connects, or a trial of it ends); the campaign page's button dispatches at once."""
    from app.domain import inventory, replay
    from app.domain.errors import DomainError

    try:
        with session_scope(_engine(get_settings())) as session:
            campaign = inventory.get_campaign(session, slug)
            row, _queued = replay.start(session, campaign, runner, "cli")
            report = replay.report(session, campaign, row)
    except DomainError as exc:
        _fail(exc.message)
    _print_replay(report)


@replay_cli.command("list")
def replay_list_cmd(slug: Annotated[str, typer.Argument(help="The campaign's slug.")]) -> None:
    """The campaign's replays, newest first, with their trial counts."""
    from app.domain import inventory, replay
    from app.domain.errors import DomainError

    try:
        with session_scope(_engine(get_settings()), write=False) as session:
            rows = replay.summaries(session, inventory.get_campaign(session, slug), limit=1000)
    except DomainError as exc:
        _fail(exc.message)
    if not rows:
        console.print(f"no replays in {slug}", highlight=False)
    for x in rows:
        r = x.replay
        console.print(
            f"#{r.id}  {r.state:<9} {r.runner_name}  {x.ended}/{x.queued} trial(s) ended  "
            f"by {r.requested_by or '?'} at {r.created_at:%Y-%m-%d %H:%M}",
            highlight=False,
        )


@replay_cli.command("show")
def replay_show_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    replay_id: Annotated[int, typer.Argument(help="The replay's id (`campaign replay list`).")],
) -> None:
    """A replay's report: per approach, before and after, what changed, the headline metric's statistics."""
    from app.domain import inventory, replay
    from app.domain.errors import DomainError

    try:
        with session_scope(_engine(get_settings()), write=False) as session:
            campaign = inventory.get_campaign(session, slug)
            report = replay.report(session, campaign, replay.get(session, campaign, replay_id))
    except DomainError as exc:
        _fail(exc.message)
    _print_replay(report)


@cli.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(help="A campaign YAML file ('-' for stdin).")],
    replace: Annotated[bool, typer.Option(help="Also delete approaches that the file does not list.")] = False,
) -> None:
    """Import a campaign file: create the campaign or bring it up to date; all or nothing."""
    from app.domain.campaign_files import import_campaign
    from app.domain.errors import DomainError

    limit = get_settings().max_campaign_file_bytes
    try:
        text = sys.stdin.read(limit + 1) if str(path) == "-" else _read(path, limit)
    except UnicodeDecodeError:
        _fail(f"{path}: not a UTF-8 text file (a campaign file is YAML); nothing was imported", code=2)
    if len(text.encode()) > limit:
        _fail(f"{path}: larger than {limit} bytes (CAMPAIGN_MAX_CAMPAIGN_FILE_BYTES); nothing was imported")
    try:
        with session_scope(_engine(get_settings())) as session:
            summary = import_campaign(session, text, actor="cli import", replace=replace)
    except DomainError as exc:
        _fail(f"{path}: {exc.message}\nnothing was imported")
    console.print(summary.summary)


def _read(path: Path, limit: int) -> str:
    try:
        with path.open(encoding="utf-8") as f:
            return f.read(limit + 1)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}", code=2)
    return ""


@cli.command()
def classify(
    logfile: Annotated[str, typer.Argument(metavar="LOGFILE", help="A trial's log ('-' for stdin).")],
    exit_code: Annotated[int | None, typer.Option("--exit-code", help="The trial's exit code.")] = None,
    signal: Annotated[int | None, typer.Option("--signal", help="The signal that ended the trial.")] = None,
    timed_out: Annotated[
        bool, typer.Option("--timed-out", help="The trial ran past its time limit (the runner stopped it).")
    ] = False,
    baseline: Annotated[
        float | None,
        typer.Option(
            "--baseline",
            min=0.0,
            help="Baseline output throughput (tok/s): a finished trial below it is "
            "'slower than baseline' (read from the log's metric lines or bench_serving summary).",
        ),
    ] = None,
) -> None:
    """Match a log against the known failure signatures and print the proposed verdict.

    Exit code: 0 a signature matched, 1 none matched, 2 the log could not be read."""
    from rich.markup import escape

    from app.domain import fingerprint as stack
    from app.domain.signatures import classify as classify_log
    from app.domain.signatures import metrics_from_log
    from app.domain.verdicts import SIGNATURE_STATUS

    try:
        if logfile == "-":
            text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        else:
            text = Path(logfile).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        _fail(f"cannot read {logfile}: {exc.strerror or exc}", code=2)
    metrics = metrics_from_log(text) if baseline is not None else None
    if metrics is not None and not any(m["name"] == MetricName.OUTPUT_THROUGHPUT for m in metrics):
        _fail(
            f"--baseline: no output throughput in {'stdin' if logfile == '-' else logfile} "
            "(no metric line and no bench_serving 'Output token throughput (tok/s):' summary)",
            code=2,
        )
    found = classify_log(
        text,
        exit_code=exit_code,
        signal=signal,
        metrics=metrics,
        baseline={MetricName.OUTPUT_THROUGHPUT: baseline} if baseline is not None else None,
        timed_out=timed_out,
    )
    if found is None:
        console.print(
            "[yellow]no known failure signature[/yellow] in "
            f"{'stdin' if logfile == '-' else escape(logfile)}: read the log (a person decides the verdict)",
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(1)
    status = SIGNATURE_STATUS.get(found.verdict)
    bound = stack.bound_components(found.bound_to)
    lines = [
        ("cause", f"[bold]{escape(found.cause)}[/bold]"),
        ("signature", escape(found.signature)),
        (
            "proposed",
            f"[bold]{escape(found.verdict)}[/bold]"
            + (f" (approach status: {status.value})" if status is not None else ""),
        ),
        ("reason", escape(found.reason)),
        (
            "bound to",
            ", ".join(stack.STACK_COMPONENTS[c] for c in bound)
            if bound
            else "[dim]not bound (no stack change would change it)[/dim]",
        ),
        ("evidence", escape(found.evidence_line.strip()) if found.evidence_line else "[dim]none in the log[/dim]"),
    ]
    for label, value in lines:
        console.print(f"[cyan]{label + ':':<11}[/cyan]{value}", soft_wrap=True, highlight=False)


@cli.command()
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
        _fail(f"cannot read {campaign_file}: {exc.strerror or exc}", code=2)
    except DomainError as exc:
        _fail(f"{campaign_file}: {exc}", code=2)
    found = next((a for a in parsed.approaches if a.key == approach), None)
    if found is None:
        _fail(
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
        _fail(str(exc), code=2)
    raise typer.Exit(runner_cli.run_preflight(spec))


# `campaign runner` is the node's own command (runners/cli.py, its settings read there).
cli.command("runner")(runner_cli.runner)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
