"""Fixtures for the people-and-roles tests: clients logged in as a user of a given role."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from app.models import Role
from app.security import CSRF_HEADER, SESSION_COOKIE
from app.state import app_state
from tests.support.auth import add_user, login_token


def browser_client(app, name: str | None = None) -> TestClient:
    """A client holding a fresh session of `name` (default: the board's admin), sending its CSRF token."""
    client = TestClient(app, base_url="http://127.0.0.1")
    r = client.get(f"/login?token={login_token(app, name)}", follow_redirects=False)
    assert r.status_code == 303, r.text
    cookie = app_state(app).session_signer.read(client.cookies.get(SESSION_COOKIE))
    assert cookie is not None and cookie.csrf_token is not None
    client.headers[CSRF_HEADER] = cookie.csrf_token
    return client


@pytest.fixture
def login_as(app, client) -> Iterator[Callable[..., TestClient]]:
    """login_as(name, role=None): a logged-in client; with a role, the user is made first."""
    made: list[TestClient] = []

    def make(name: str | None = None, role: Role | None = None) -> TestClient:
        if role is not None:
            assert name
            add_user(app, name, role)
        made.append(browser_client(app, name))
        return made[-1]

    yield make
    for c in made:
        c.close()
