"""Twenty "run next" clicks at once start one trial, not twenty: real HTTP against real uvicorn,
on SQLite and on PostgreSQL (tests/conftest.py's db_url runs the test once per backend)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlmodel import select

from app.db import session_scope
from app.models import Approach, Attempt, Trial
from tests.support.servers import ThreadServer
from tests.support.trials import ProtocolRunner, command_recipe, make_settings, new_runner_token, seed_campaign


def test_twenty_concurrent_run_next_create_exactly_one_trial(tmp_path, db_url):
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

            with ThreadPoolExecutor(20) as pool:
                results = list(pool.map(click, range(20)))
        started = [r for r in results if r["started"]]
        assert len(started) == 1, results
        assert {r["reason"] for r in results if not r["started"]} == {"every runner is busy"}
        with session_scope(srv.engine, write=False) as session:
            assert len(session.exec(select(Trial)).all()) == 1
            assert len(session.exec(select(Attempt)).all()) == 1
            statuses = [a.status for a in session.exec(select(Approach).order_by(Approach.position))]
            assert statuses == ["queued", "untested", "untested"]
        assert runner.expect("dispatch").trial_id == started[0]["trial_id"]
        runner.close()
    finally:
        srv.stop()
