"""Credentials for tests: users, one-time login tokens and API tokens, straight from the database.

Without a user named, a token belongs to the board's first admin, made here if the board has no
user yet (as its first login would have)."""

from __future__ import annotations

from sqlmodel import Session

from app.db import session_scope
from app.domain import users
from app.domain.logins import create_api_token, create_login_token
from app.models import Role, User
from app.state import app_state
from tests.support.databases import TEST_ADMIN


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
