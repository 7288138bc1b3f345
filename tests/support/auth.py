"""Credentials for tests: users, one-time login tokens and API tokens, straight from the database.

Without a user named, a token belongs to the board's first admin, made here if the board has no
user yet (as its first login would have)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlmodel import Session

from app.db import session_scope
from app.domain import users
from app.domain.logins import create_api_token, create_login_token
from app.models import Role, User
from app.security import CSRF_HEADER, SESSION_COOKIE
from app.state import app_state
from tests.support.databases import TEST_ADMIN

if TYPE_CHECKING:  # imported where a client is made: the conftest that imports this module does not need it
    from fastapi.testclient import TestClient


def ensure_admin(session: Session) -> User:
    return users.first_admin(session) or users.create_user(session, TEST_ADMIN, Role.admin)


def add_user(app, name: str, role: Role) -> int:
    with session_scope(app_state(app).engine) as session:
        return users.create_user(session, name, role).id or 0


def _user(session: Session, name: str | None) -> User:
    return users.user_by_name(session, name) if name else ensure_admin(session)


def login_token(app, user: str | None = None) -> str:
    with session_scope(app_state(app).engine) as session:
        return create_login_token(session, 3600, _user(session, user))


def api_token(app, name: str = "tests", user: str | None = None) -> str:
    with session_scope(app_state(app).engine) as session:
        return create_api_token(session, name, _user(session, user))


def log_in(client: TestClient, app, name: str | None = None) -> TestClient:
    """`client` holding a fresh session of `name` (default: the board's admin), sending its CSRF token on writes."""
    r = client.get(f"/login?token={login_token(app, name)}", follow_redirects=False)
    assert r.status_code == 303, r.text
    cookie = app_state(app).session_signer.read(client.cookies.get(SESSION_COOKIE))
    assert cookie is not None and cookie.csrf_token is not None
    client.headers[CSRF_HEADER] = cookie.csrf_token
    return client


def browser_client(app, name: str | None = None) -> TestClient:
    """A new client of `app` logged in as `name` (default: the board's admin), sending its CSRF token."""
    from fastapi.testclient import TestClient

    return log_in(TestClient(app, base_url="http://127.0.0.1"), app, name)
