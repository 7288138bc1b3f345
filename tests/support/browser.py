"""Debian's Chromium for Playwright (Playwright cannot download its own browser here)."""

import os
from collections.abc import Callable
from typing import TypeVar

from sqlmodel import Session

from app.db import make_engine, session_scope
from app.domain import users
from app.domain.logins import create_login_token
from app.models import Role
from tests.support.servers import LiveServer

CHROMIUM = os.environ.get("CAMPAIGN_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# A page marked by MARK still answers NOT_RELOADED after live updates: it changed without a reload.
MARK = "() => { window.__notReloaded = 'yes'; return true; }"
NOT_RELOADED = "() => window.__notReloaded === 'yes'"

T = TypeVar("T")


def on_board(server: LiveServer, write: Callable[[Session], T]) -> T:
    """`write(session)` in one committed session on the running `server`'s database, and what it returned: how a
    test seeds a board that is already serving."""
    engine = make_engine(server.env["CAMPAIGN_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            return write(session)
    finally:
        engine.dispose()


def login_url(server: LiveServer, path: str | None = None) -> str:
    """A new one-time login link to `server` as the board's admin, leading to `path`: the link the server printed
    can be used once, and a server shared by a module's tests (tests/e2e/conftest.py) is logged into by each."""
    token = on_board(server, lambda session: create_login_token(session, 3600))
    return f"{server.url}/login?token={token}" + (f"&next={path}" if path else "")


def login_context(browser, server_url: str, engine, name: str | None = None, role=None, **context_options):
    """A new browser context (Playwright's `context_options`: viewport, permissions, ...) logged in through a
    one-time link: as the board's admin, or as the person `name` (made with `role`, operator by default)."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    with session_scope(engine) as session:
        person = users.create_user(session, name, role or Role.operator) if name else None
        token = create_login_token(session, 600, person)
    page.goto(f"{server_url}/login?token={token}")
    return context, page


def start_next_trial(page, tries: int = 60) -> None:
    """Click "Run next candidate" on the open campaign page until a trial starts: the embedded runner
    connects on its own, and until then the answer says no runner is connected. Each answer is read
    from its response (the fragment is swapped in a moment later)."""
    for _ in range(tries):
        with page.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
            page.click("#run-next-button")
        said = answer.value.text()
        if "Started" in said:
            page.wait_for_selector("#run-next-result:has-text('Started')")
            return
        assert "no runner is connected" in said, said
        page.wait_for_timeout(500)
    raise AssertionError(f"no trial started after {tries} clicks")
