"""Campaign replay over real HTTP against real uvicorn, with runners on real websockets (ProtocolRunner), on
SQLite and PostgreSQL: POST /api/campaigns/{slug}/replays on a runner with a newer torch queues the bound
approaches in payoff order; only that runner takes them (another idle one with the same stack does not);
they run, the replay finishes and its report (API and page) shows before and after with the statistics.
Cancelling a replay cancels its queued trials and nothing else; a runner with the same stack queues nothing
and says so; a viewer reads replays and is refused starting or cancelling one."""

from __future__ import annotations

import httpx
import pytest
from sqlmodel import select

from app.db import session_scope
from app.models import Role, Runner
from app.protocol.metrics import format_metric
from tests.support.auth import add_user, api_token
from tests.support.replay import build, latency
from tests.support.trials import (
    ProtocolRunner,
    ThreadServer,
    make_settings,
    new_runner_token,
    trial,
)
from tests.support.verdicts import NEW_TORCH
from tests.support.waiting import wait_for

pytestmark = pytest.mark.both_databases  # replay claims by a real runner

LOST_AFTER_S = 120.0  # these runners send no heartbeats: the sweeper must not take them for lost
SKIP = ("ack", "finished_ack")
NODE_C = {**NEW_TORCH, "hostname": "node-c"}


def _run(node: ProtocolRunner, d, key: str, n: int) -> None:
    """Play the runner through one trial: measured succeeds at ~40 us (its metric line in the log), the
    others fail as they did."""
    node.started(d)
    if key == "measured":
        (m,) = latency(40.0, seed=10 + n)
        line = format_metric(m["name"], m["value"], m["unit"], samples=m["samples"], **m["tags"]) + "\n"
        node.log(d, 0, 0, line)
        node.finished(d, exit_code=0, last_seq=0)
    else:
        node.finished(d, exit_code=1)


def _replay(client: httpx.Client, replay_id: int) -> dict:
    r = client.get(f"/api/campaigns/c/replays/{replay_id}")
    assert r.status_code == 200, r.text
    return r.json()


def test_a_replay_runs_on_its_runner_only_in_payoff_order_and_reports_before_and_after(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url, runner_lost_after_s=LOST_AFTER_S)).start()
    try:
        build(srv.engine)
        b_id, token_b = new_runner_token(srv.engine, "node-b")
        _, token_c = new_runner_token(srv.engine, "node-c")
        with httpx.Client(base_url=srv.url, headers=srv.api_headers(), timeout=30) as client:
            node_c = ProtocolRunner(srv.ws_url, token_c, NODE_C)  # idle, same new stack: must not take them
            node_b = ProtocolRunner(srv.ws_url, token_b, NEW_TORCH)
            r = client.post("/api/campaigns/c/replays", json={"runner_id": b_id})
            assert r.status_code == 201, r.text
            body = r.json()
            assert body["state"] == "running" and body["runner"] == "node-b" and body["trials"] == 3
            assert "torch 2.11.0" in body["runner_stack"]
            assert [row["key"] for row in body["rows"]] == ["fast", "slow", "measured"]  # payoff order
            assert body["rows"][0]["retest"] == "re-test: torch 2.10.0+cu128 -> 2.11.0"
            ran = []
            for n in range(3):
                d = node_b.expect("dispatch", skip=SKIP)
                ran.append(d.approach_key)
                assert trial(srv, d.trial_id)["runner"] == "node-b"
                _run(node_b, d, d.approach_key, n)
            assert ran == ["fast", "slow", "measured"]
            done = wait_for(lambda: (v := _replay(client, body["id"]))["state"] == "finished" and v, what="finished")
            assert done["ended"] == 3 and done["ended_at"] is not None
            trial_ids = [row["after"]["trial_id"] for row in done["rows"]]
            assert {trial(srv, t)["runner"] for t in trial_ids} == {"node-b"}  # node-c took none
            fast, slow, measured = done["rows"]
            assert fast["before"]["status"] == "dead_end" and fast["after"]["trial_state"] == "failed"
            assert measured["before"]["status"] == "promising" and measured["after"]["trial_state"] == "succeeded"
            assert measured["metric"] == "allreduce_latency_us"
            (point,) = measured["points"]
            # One trial before, one after, no run-to-run spread known on this runner: no verdict (issue 34).
            assert point["verdict"] == "no_verdict" and 0.75 < point["ratio"] < 0.85
            listed = client.get("/api/campaigns/c/replays").json()
            assert [x["id"] for x in listed] == [body["id"]] and listed[0]["state"] == "finished"

            page = client.get(f"/campaigns/c/replays/{body['id']}")
            assert page.status_code == 200
            assert 'data-state="finished"' in page.text and 'id="replay-row-measured"' in page.text
            assert "no verdict" in page.text and 'hx-trigger="feed:campaign, feed-stale"' in page.text
            panel = client.get("/campaigns/c/replays")
            assert f'id="replay-{body["id"]}"' in panel.text and "3 of 3" in panel.text
            node_b.close()
            node_c.close()
    finally:
        srv.stop()


def test_cancelling_a_replay_cancels_its_queued_trials_and_nothing_else(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url, runner_lost_after_s=LOST_AFTER_S)).start()
    try:
        build(srv.engine)
        b_id, token_b = new_runner_token(srv.engine, "node-b")
        with httpx.Client(base_url=srv.url, headers=srv.api_headers(), timeout=30) as client:
            node_b = ProtocolRunner(srv.ws_url, token_b, NEW_TORCH)
            body = client.post("/api/campaigns/c/replays", json={"runner_id": b_id}).json()
            first = node_b.expect("dispatch", skip=SKIP)
            node_b.started(first)
            wait_for(lambda: trial(srv, first.trial_id)["state"] == "running", what="the first trial running")
            # Another trial waits in the queue behind node-b: not the replay's.
            other = client.post("/api/campaigns/c/approaches/fresh/run").json()
            assert other["queued"], other
            r = client.post(f"/api/campaigns/c/replays/{body['id']}/cancel")
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "cancelled"
            states = {row["key"]: row["after"]["trial_state"] for row in r.json()["rows"]}
            assert states == {"fast": "running", "slow": "cancelled", "measured": "cancelled"}
            assert trial(srv, other["trial_id"])["state"] == "queued"
            again = client.post(f"/api/campaigns/c/replays/{body['id']}/cancel")
            assert again.status_code == 422 and "has already ended (cancelled)" in again.json()["detail"]
            # The replay's running trial runs on; when it ends node-b takes the other trial, not a cancelled one.
            node_b.finished(first, exit_code=1)
            d = node_b.expect("dispatch", skip=SKIP)
            assert (d.trial_id, d.approach_key) == (other["trial_id"], "fresh")
            assert trial(srv, first.trial_id)["state"] == "failed"
            node_b.close()
    finally:
        srv.stop()


def test_a_replay_on_a_runner_with_the_same_stack_queues_nothing_and_says_so(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url, runner_lost_after_s=LOST_AFTER_S)).start()
    try:
        build(srv.engine)
        with session_scope(srv.engine) as s:
            a_id = s.exec(select(Runner.id).where(Runner.name == "node-a")).one()
        with httpx.Client(base_url=srv.url, headers=srv.api_headers(), timeout=30) as client:
            r = client.post("/api/campaigns/c/replays", json={"runner_id": a_id})
            assert r.status_code == 422, r.text
            assert r.json()["detail"].startswith(
                "nothing to replay on node-a: no verdict of c is bound to a component in which its stack"
            )
            assert client.get("/api/campaigns/c/replays").json() == []
            assert client.get("/api/campaigns/c/queue").json() == []
            for bad in ({}, {"runner_id": 0}, {"runner_id": "x"}, {"runner_id": 1, "extra": 1}):
                assert client.post("/api/campaigns/c/replays", json=bad).status_code == 422, bad
            assert client.post("/api/campaigns/c/replays", json={"runner_id": 999}).status_code == 404
            assert client.get("/api/campaigns/c/replays/999").status_code == 404
            assert client.get("/api/campaigns/nope/replays").status_code == 404
            # A viewer reads replays but starts and cancels none.
            add_user(srv.app, "Vera", Role.viewer)
            viewer = {"Authorization": f"Bearer {api_token(srv.app, 'viewer', user='Vera')}"}
            assert httpx.get(f"{srv.url}/api/campaigns/c/replays", headers=viewer).json() == []
            refused = httpx.post(f"{srv.url}/api/campaigns/c/replays", json={"runner_id": a_id}, headers=viewer)
            assert refused.status_code == 403 and refused.json()["detail"]
            refused = httpx.post(f"{srv.url}/api/campaigns/c/replays/1/cancel", headers=viewer)
            assert refused.status_code == 403
            page = client.post("/campaigns/c/replays", data={"runner_id": a_id}, headers={"HX-Request": "true"})
            assert page.status_code == 422 and "nothing to replay on node-a" in page.text  # the page's flash
    finally:
        srv.stop()
