"""The board itself: `campaign serve`, `demo` and `login-url`."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.common import UserOption, board_engine, console, fail, get_settings, log, migrated_engine, session_scope
from app.protocol.logconfig import configure_logging

if TYPE_CHECKING:
    from app.config import Settings


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
    settings = _serve_settings(host, port, no_runner, workers)
    engine = migrated_engine(settings)
    if demo:
        _load_demo(engine)
    with session_scope(engine) as session:
        token, who = _login_link(session, settings, None)
    engine.dispose()
    _print_where(settings)
    _run_server(settings, login_block(f"{settings.base_url()}/login?token={token}", who, settings))


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _serve_settings(host: str | None, port: int | None, no_runner: bool, workers: int | None) -> Settings:
    """The settings with `serve`'s options over them; login may be off only on a loopback address."""
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
    if not settings.auth_enabled and settings.host not in LOOPBACK:
        fail(
            "CAMPAIGN_AUTH_ENABLED=false is only allowed on a loopback address: anyone who can reach "
            f"{settings.host} could run commands on the runners"
        )
    return settings


def _print_where(settings: Settings) -> None:
    console.print(f"Campaign Board on [bold]{settings.base_url()}[/bold]  (database: {_safe_url(settings)})")
    if settings.host not in LOOPBACK:
        console.print(f"[yellow]Listening on {settings.host}: reachable from other machines.[/yellow]")
        console.print(
            f"Answering only to Host names: {', '.join(settings.host_allowlist())} "
            "(set CAMPAIGN_PUBLIC_URL or CAMPAIGN_ALLOWED_HOSTS for the names browsers and runners use)",
            soft_wrap=True,
            highlight=False,
        )


def _run_server(settings: Settings, login: str) -> None:
    """Run the hub until it stops; the login block is printed once it listens, and the listening file
    (`_listening_file`) is there while it runs."""
    import uvicorn

    from app.main import create_app

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
        announcer = asyncio.create_task(_announce_login(app_, server, login))
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


def demo() -> None:
    """Load the demo campaigns (idempotent: running it twice changes nothing)."""
    _load_demo(migrated_engine(get_settings()))


def _login_link(session: Any, settings: Settings, user_name: str | None) -> tuple[str, str]:
    """A one-time login token for a user (default: the first admin) and who it logs in; on a
    board with no users, the first-admin link (its first login names the admin)."""
    from app.domain import users
    from app.domain.logins import create_login_token

    user = users.user_by_name(session, user_name) if user_name else users.first_admin(session)
    token = create_login_token(session, settings.login_token_ttl_s, user)
    if user is None:
        return token, "First login, makes the board's admin"
    return token, f"Log in as {user.name}"


def login_url(user: UserOption = None) -> None:
    """Print a new one-time login URL for a user (on a new board: the link that makes its admin)."""
    from app.domain.errors import DomainError

    settings = get_settings()
    try:
        with session_scope(board_engine(settings)) as session:
            token, _who = _login_link(session, settings, user)
    except DomainError as exc:
        fail(exc.message)
    console.print(f"{_serving_url(settings)}/login?token={token}", soft_wrap=True)
