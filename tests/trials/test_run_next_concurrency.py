"""Concurrent "run next" clicks with one free runner dispatch exactly one trial; the next candidates wait in
the queue, one trial each, and the rest say nothing is left: real HTTP against real uvicorn, on SQLite and
on PostgreSQL (tests/conftest.py's db_url runs the test once per backend)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain import campaigns
from app.models import Approach, Attempt, Trial
from tests.support.servers import ThreadServer
from tests.support.trials import ProtocolRunner, command_recipe, make_settings, new_runner_token, seed_campaign

pytestmark = pytest.mark.both_databases  # concurrent run next: row locks on PostgreSQL, the write lock on SQLite


@pytest.mark.parametrize("clicks", [2, 20])
def test_concurrent_run_next_dispatch_one_trial_and_queue_the_next(tmp_path, db_url, clicks):
    srv = ThreadServer(make_settings(tmp_path, db_url)).start()
    try:
        seed_campaign(
            srv.engine,
            "spec",
            [{"key": f"a{i}", "title": f"Approach {i}", "recipe": command_recipe("true")} for i in range(3)],
        )
        _, token = new_runner_token(srv.engine)
        runner = ProtocolRunner(srv.ws_url, token)
        headers = srv.api_headers()
        with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=20)) as client:

            def click(_: int) -> dict:
                r = client.post(f"{srv.url}/api/campaigns/spec/run-next", headers=headers)
                assert r.status_code == 200, r.text
                return r.json()

            with ThreadPoolExecutor(clicks) as pool:
                results = list(pool.map(click, range(clicks)))
        started = [r for r in results if r["started"]]
        queued = [r for r in results if r["queued"]]
        assert len(started) == 1, results
        # Each click that found the runner busy queued the next candidate (a different one each time).
        assert len(queued) == min(clicks - 1, 2), results
        assert all(r["runner"] is None and "waits in the queue" in r["reason"] for r in queued), queued
        assert {r["reason"] for r in results if not r["started"] and not r["queued"]} <= {"nothing untested left"}
        assert len({r["approach"] for r in started + queued}) == 1 + len(queued)
        with session_scope(srv.engine, write=False) as session:
            trials = session.exec(select(Trial).order_by(col(Trial.id))).all()
            assert len(trials) == 1 + len(queued)
            assert sorted(t.state for t in trials) == ["dispatched"] + ["queued"] * len(queued)
            assert len(session.exec(select(Attempt)).all()) == 1  # a queued trial has no attempt yet
            rows = list(session.exec(select(Approach).order_by(col(Approach.position))))
            assert {a.status for a in rows} == {"untested"}  # a trial is the activity, never the status
            assert len(campaigns.activities(session, rows)) == 1 + len(queued)
        assert runner.expect("dispatch").trial_id == started[0]["trial_id"]
        runner.close()
    finally:
        srv.stop()
