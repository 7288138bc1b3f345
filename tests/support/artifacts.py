"""Artifact tests' server and trials: a real server with small artifact caps (the `server` fixture, which
tests/artifacts/conftest.py registers) and an ended trial to upload to."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain.scheduling import create_trial
from app.domain.trials import end_trial
from app.models import Approach, Campaign, Runner, TrialState
from tests.support.servers import ThreadServer
from tests.support.trials import make_settings, new_runner_token


@pytest.fixture
def server(tmp_path, db_url):
    srv = ThreadServer(
        make_settings(
            tmp_path,
            db_url,
            artifact_max_file_bytes=2_000_000,
            artifact_max_trial_bytes=3_000_000,
            artifact_retention_bytes=5_000_000,
        )
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


def ended_trial(srv, runner_name: str = "node-1") -> tuple[int, str]:
    """A trial of a new approach of campaign "spec" on a new runner, ended; (trial id, that runner's token)."""
    runner_id, token = new_runner_token(srv.engine, runner_name)
    with session_scope(srv.engine) as session:
        campaign = session.exec(select(Campaign).where(Campaign.slug == "spec")).first()
        if campaign is None:
            campaign = Campaign(slug="spec", name="Spec")
            session.add(campaign)
            session.flush()
        n = len(session.exec(select(Approach.id)).all())
        approach = Approach(campaign_id=campaign.id or 0, key=f"a{n}", title=f"A{n}", position=n + 1)
        session.add(approach)
        session.flush()
        t = create_trial(session, approach, session.get(Runner, runner_id), "ada")
        end_trial(session, t, TrialState.succeeded)
        return t.id or 0, token
