"""The queue over real HTTP against real uvicorn, with runners on real websockets, on SQLite and PostgreSQL:
a runner that connects, or reconnects without its old trial, takes the queued trials in priority order; the
queue's JSON route and the campaign page's fragment list them; a queued trial is cancelled from the queue
with no message to any runner; a viewer reads the queue and is refused the cancel."""

from __future__ import annotations

import httpx
import pytest

from app.models import Role
from tests.support.auth import add_user, api_token
from tests.support.trials import (
    ProtocolRunner,
    ThreadServer,
    command_recipe,
    make_settings,
    new_runner_token,
    run_next,
    seed_campaign,
    trial,
)

pytestmark = pytest.mark.both_databases  # queue claims by runners that connect at once

# The protocol runners here send no heartbeats: a loaded machine must not let the sweeper take them for
# lost (4408) in the middle of a test about the queue (the sweeper has its own tests).
LOST_AFTER_S = 120.0

APPROACHES = [{"key": f"a{i}", "title": f"Approach {i}", "recipe": command_recipe("true")} for i in range(1, 5)]


def queue(client: httpx.Client) -> list[tuple[int, str]]:
    r = client.get("/api/campaigns/spec/queue")
    assert r.status_code == 200, r.text
    return [(q["position"], q["approach"]) for q in r.json()]


def test_runners_that_connect_or_reconnect_take_the_queue_in_priority_order(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url, runner_lost_after_s=LOST_AFTER_S)).start()
    try:
        seed_campaign(srv.engine, "spec", APPROACHES)
        _, token_a = new_runner_token(srv.engine, "node-a")
        _, token_b = new_runner_token(srv.engine, "node-b")
        with httpx.Client(base_url=srv.url, headers=srv.api_headers(), timeout=30) as client:
            node_a = ProtocolRunner(srv.ws_url, token_a)
            first = run_next(srv)
            assert first["started"] and first["approach"] == "a1" and first["runner"] == "node-a"
            d1 = node_a.expect("dispatch")
            r = client.post("/api/campaigns/spec/approaches/a4/run").json()
            assert r["queued"] and not r["started"] and r["runner"] is None, r
            second = run_next(srv)
            assert second["queued"] and second["approach"] == "a2", second
            assert queue(client) == [(1, "a2"), (2, "a4")]

            # A second runner connects: welcomed, it takes the first queued trial (a2, by priority).
            node_b = ProtocolRunner(srv.ws_url, token_b)
            d2 = node_b.expect("dispatch")
            assert (d2.trial_id, d2.approach_key) == (second["trial_id"], "a2")
            assert queue(client) == [(1, "a4")]
            assert trial(srv, d2.trial_id)["runner"] == "node-b"

            # node-a restarts: it reconnects without the trial it was running (now lost), so it is free.
            node_a.started(d1)
            node_a.close()
            node_a = ProtocolRunner(srv.ws_url, token_a)
            d4 = node_a.expect("dispatch")
            assert d4.approach_key == "a4" and d4.trial_id == r["trial_id"]
            assert trial(srv, d1.trial_id)["state"] == "lost"
            assert queue(client) == []
            node_a.close()
            node_b.close()
    finally:
        srv.stop()


def test_the_queue_is_listed_and_cancelled_and_viewers_only_read_it(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url, runner_lost_after_s=LOST_AFTER_S)).start()
    try:
        seed_campaign(srv.engine, "spec", APPROACHES)
        add_user(srv.app, "Vera", Role.viewer)
        viewer = {"Authorization": f"Bearer {api_token(srv.app, 'viewer', user='Vera')}"}
        _, token = new_runner_token(srv.engine, "node-a")
        node = ProtocolRunner(srv.ws_url, token)
        with httpx.Client(base_url=srv.url, headers=srv.api_headers(), timeout=30) as client:
            assert run_next(srv)["started"]
            d1 = node.expect("dispatch")
            ids = {
                key: client.post(f"/api/campaigns/spec/approaches/{key}/run").json()["trial_id"] for key in ("a3", "a2")
            }
            listed = client.get("/api/campaigns/spec/queue").json()
            assert [(q["position"], q["trial_id"], q["approach"], q["priority"]) for q in listed] == [
                (1, ids["a2"], "a2", 2),
                (2, ids["a3"], "a3", 3),
            ]
            assert listed[0]["approach_title"] == "Approach 2" and listed[0]["requested_by"] == "admin"
            assert listed[0]["queued_at"].endswith(("Z", "+00:00"))

            # The campaign page's fragment: position, approach, who, a Cancel button per queued trial.
            html = client.get("/campaigns/spec/queue").text
            assert html.index(f'id="queued-{ids["a2"]}"') < html.index(f'id="queued-{ids["a3"]}"')
            assert f'hx-post="/trials/{ids["a2"]}/cancel"' in html and ">admin<" in html

            # Errors: an unknown campaign, a malformed slug; a viewer reads the queue but cannot cancel.
            missing = client.get("/api/campaigns/nope/queue")
            assert missing.status_code == 404 and missing.json()["detail"]
            assert client.get("/api/campaigns/Not%20A%20Slug/queue").status_code == 422
            assert httpx.get(f"{srv.url}/api/campaigns/spec/queue", headers=viewer).json() == listed
            refused = httpx.post(f"{srv.url}/api/trials/{ids['a2']}/cancel", headers=viewer)
            assert refused.status_code == 403 and refused.json()["detail"]

            cancelled = client.post(f"/api/trials/{ids['a2']}/cancel")
            assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
            assert queue(client) == [(1, "a3")]
            again = client.post(f"/api/trials/{ids['a2']}/cancel")
            assert again.status_code == 422 and "already ended" in again.json()["detail"]
            approach = client.get("/api/campaigns/spec/approaches/a2")
            assert approach.status_code == 200 and approach.json()["status"] == "untested"

            # The runner got no message about the cancelled trial: the next it gets is its own trial's
            # finished_ack, then the queue's next trial (a3, not the cancelled a2).
            node.started(d1)
            node.finished(d1)
            d3 = node.expect("dispatch", skip=("ack", "finished_ack"))
            assert (d3.trial_id, d3.approach_key) == (ids["a3"], "a3")
            node.close()
    finally:
        srv.stop()
