""" "Run this approach" over real HTTP against real uvicorn, with a runner on a real websocket, on
SQLite and PostgreSQL: the JSON route and the approach page's button start the chosen approach and
push its Dispatch to the runner; with no runner able to run it, they say why and start nothing; while the
runner is busy, it waits in the queue and is dispatched when the runner's trial ends."""

from __future__ import annotations

import httpx
from sqlmodel import select

from app.db import session_scope
from app.models import Trial
from tests.support.trials import (
    FINGERPRINT,
    ProtocolRunner,
    ThreadServer,
    command_recipe,
    make_settings,
    new_runner_token,
    seed_campaign,
)


def test_run_this_starts_the_chosen_approach_or_says_why_not(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url)).start()
    try:
        seed_campaign(
            srv.engine,
            "spec",
            [
                {"key": "first", "title": "First", "recipe": command_recipe("true")},
                {"key": "second", "title": "Second", "recipe": command_recipe("true")},
                {"key": "huge", "title": "Huge", "recipe": command_recipe("true"), "requirements": {"gpus": 16}},
            ],
        )
        headers = srv.api_headers()
        with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as client:
            r = client.post("/api/campaigns/spec/approaches/second/run")
            assert r.status_code == 200 and r.json() == {
                "started": False,
                "queued": False,
                "trial_id": None,
                "approach": "second",
                "runner": None,
                "reason": "no runner is connected",
            }
            assert client.post("/api/campaigns/spec/approaches/nope/run").status_code == 404

            _, token = new_runner_token(srv.engine, "node-1")
            runner = ProtocolRunner(srv.ws_url, token, fingerprint=FINGERPRINT)
            r = client.post("/api/campaigns/spec/approaches/huge/run")
            assert r.json()["reason"] == "Huge needs 16 GPUs: no connected runner has them"

            # The approach page's button (an htmx partial), for the second approach, not the first.
            r = client.post("/campaigns/spec/approaches/second/run", headers={"HX-Request": "true"})
            assert r.status_code == 200 and r.headers["HX-Trigger"] == "campaign-changed"
            assert 'id="run-this"' in r.text and "Started" in r.text and "node-1" in r.text
            dispatch = runner.expect("dispatch")
            assert dispatch.approach_key == "second"
            with session_scope(srv.engine, write=False) as s:
                trial = s.exec(select(Trial)).one()
                assert (trial.id, trial.attempt_id) == (dispatch.trial_id, dispatch.attempt_id)
            assert f'href="/trials/{trial.id}"' in r.text

            # The one runner is busy: "first" waits in the queue, and starts when the runner frees up.
            r = client.post("/campaigns/spec/approaches/first/run", headers={"HX-Request": "true"})
            assert "Queued" in r.text and "First waits in the queue for a free runner (node-1 is busy)." in r.text
            queue = client.get("/api/campaigns/spec/queue").json()
            assert [(q["position"], q["approach"], q["requested_by"]) for q in queue] == [(1, "first", "admin")]
            assert client.get(f"/api/trials/{queue[0]['trial_id']}").json()["state"] == "queued"
            runner.started(dispatch)
            runner.finished(dispatch, exit_code=0)
            queued = runner.expect("dispatch", skip=("ack", "finished_ack"))
            assert (queued.trial_id, queued.approach_key) == (queue[0]["trial_id"], "first")
            assert client.get("/api/campaigns/spec/queue").json() == []
            assert client.get(f"/api/trials/{queued.trial_id}").json()["runner"] == "node-1"
            runner.close()
    finally:
        srv.stop()
