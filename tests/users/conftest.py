"""Fixtures for the people-and-roles tests: clients logged in as a user of a given role."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from app.models import Role
from tests.support.auth import add_user, browser_client


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
