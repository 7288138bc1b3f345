"""Credentials for tests: a one-time login token and an API token, straight from the database."""

from app.db import session_scope
from app.security import create_api_token, create_login_token


def login_token(app) -> str:
    with session_scope(app.state.engine) as session:
        return create_login_token(session, 3600)


def api_token(app, name: str = "tests") -> str:
    with session_scope(app.state.engine) as session:
        return create_api_token(session, name)
