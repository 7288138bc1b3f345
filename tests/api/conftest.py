"""Fixtures for the JSON API tests: an API client on each backend, and trials made through the domain
(create_trial, append_chunks with metric lines, the scheduler's own states)."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.models import Trial
from app.state import app_state
from tests.support.seeded_trials import Seeded, seed_trials


@pytest.fixture
def api(client, api_headers):
    client.headers.update(api_headers)
    return client


@pytest.fixture
def seeded(app) -> Seeded:
    return seed_trials(app_state(app).engine)


def trial_state(engine, trial_id: int) -> str:
    with session_scope(engine, write=False) as s:
        trial = s.get(Trial, trial_id)
        assert trial is not None
        return trial.state
