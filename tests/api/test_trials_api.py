"""GET /api/trials (filters, pages), /api/trials/{id} (detail), /metrics and /log on SQLite and PostgreSQL:
values from trials made through the domain, bad input as a 4xx with a message."""

from __future__ import annotations

import httpx
import pytest

from app.db import session_scope
from app.domain import logs
from app.domain.scheduling import create_trial
from app.models import Approach, Campaign, Runner, Trial
from app.state import app_state
from tests.support.seeded_trials import FP_OLD, seed_trials
from tests.support.servers import ThreadServer
from tests.support.trials import make_settings


def _ids(body: dict) -> list[int]:
    return [t["id"] for t in body["items"]]


@pytest.mark.both_databases  # the trials list's filter and sort SQL
def test_list_is_newest_first_and_filters(api, seeded):
    ids = seeded.trial_ids
    everything = api.get("/api/trials").json()
    assert _ids(everything) == [seeded.other_trial, *reversed(ids)] and everything["next_before"] is None
    in_c = api.get("/api/trials", params={"campaign": "c"}).json()
    assert _ids(in_c) == list(reversed(ids))
    first = in_c["items"][-1]
    assert first["campaign"] == "c" and first["approach"] == "a" and first["approach_title"] == "Approach <A>"
    assert first["runner"] == "node-1" and first["state"] == "succeeded" and first["attempt_count"] == 1
    assert first["created_at"].endswith("Z") and first["requested_by"] == "tester"

    only_b = _ids(api.get("/api/trials", params={"campaign": "c", "approach": "b"}).json())
    assert only_b == [i for i in reversed(ids) if ids.index(i) % 2 == 1]
    assert _ids(api.get("/api/trials", params={"approach": "x"}).json()) == [seeded.other_trial]  # any campaign
    assert _ids(api.get("/api/trials", params={"approach": "zzz"}).json()) == []
    assert _ids(api.get("/api/trials", params={"state": "failed"}).json()) == [ids[-2]]
    assert _ids(api.get("/api/trials", params={"state": "running"}).json()) == [ids[-1]]
    on_node_1 = _ids(api.get("/api/trials", params={"runner": "node-1"}).json())
    assert on_node_1 == list(reversed(ids[:3]))
    both = api.get("/api/trials", params={"campaign": "c", "approach": "a", "runner": "node-2", "state": "failed"})
    assert _ids(both.json()) == [ids[4]]


@pytest.mark.both_databases  # the trials list's cursor paging SQL
def test_pages_follow_the_cursor_to_the_end(api, seeded):
    seen: list[int] = []
    params: dict = {"campaign": "c", "limit": 4}
    pages = 0
    while True:
        body = api.get("/api/trials", params=params).json()
        pages += 1
        assert len(body["items"]) <= 4
        seen += _ids(body)
        if body["next_before"] is None:
            break
        assert body["next_before"] == seen[-1]
        params["before"] = body["next_before"]
    assert pages == 2 and seen == list(reversed(seeded.trial_ids))


def test_detail_has_attempts_stack_timings_and_proposal(api, seeded, app):
    tid = seeded.trial_ids[0]
    with session_scope(app_state(app).engine) as s:
        trial = s.get(Trial, tid)
        assert trial is not None
        trial.proposal = {"status": "dead_end", "reason": "KeyError: 12"}
        trial.exit_code = 0
        s.add(trial)
    body = api.get(f"/api/trials/{tid}").json()
    assert body["id"] == tid and body["campaign"] == "c" and body["approach"] == "a"
    assert (
        body["state"] == "succeeded" and body["runner"] == "node-1" and body["runner_id"] == seeded.runner_ids["node-1"]
    )
    assert body["fingerprint"] == FP_OLD and body["proposal"]["reason"] == "KeyError: 12"
    assert [a["number"] for a in body["attempts"]] == [1] and body["attempts"][0]["id"] == body["attempt_id"]
    assert body["attempts"][0]["runner_id"] == seeded.runner_ids["node-1"]
    assert body["duration_s"] is not None and body["duration_s"] >= 0
    assert body["log_bytes"] == len(seeded.logs[tid].encode()) and body["phase"] == "dispatched"
    running = api.get(f"/api/trials/{seeded.trial_ids[-1]}").json()
    assert running["state"] == "running" and running["finished_at"] is None


@pytest.mark.both_databases  # bulk metric ingest
def test_metrics_are_the_logged_lines(api, seeded):
    tid = seeded.trial_ids[1]
    rows = api.get(f"/api/trials/{tid}/metrics").json()
    assert [(m["name"], m["value"], m["unit"], m["tags"]["tokens"]) for m in rows] == [
        ("allreduce_latency_us", 10.0 + t, "us", t) for t in (1, 8, 64)
    ]
    assert all(m["tags"]["mode"] == "graph" and m["recorded_at"].endswith("Z") for m in rows)
    assert api.get(f"/api/trials/{seeded.other_trial}/metrics").json() == []


def test_log_download_is_the_stored_log(api, seeded):
    tid = seeded.trial_ids[2]
    r = api.get(f"/api/trials/{tid}/log")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.headers["content-disposition"] == f'attachment; filename="trial-{tid}.log"'
    assert r.text == seeded.logs[tid] and "<b>&amp;</b>" in r.text  # as stored: plain text, not HTML


@pytest.mark.both_databases  # the trials list's filter SQL
@pytest.mark.parametrize(
    "path,status,words",
    [
        ("/api/trials?state=exploded", 422, "state"),
        ("/api/trials?limit=-1", 422, "limit"),
        ("/api/trials?limit=0", 422, "limit"),
        ("/api/trials?limit=100000", 422, "limit"),
        ("/api/trials?before=0", 422, "before"),
        ("/api/trials?before=99999999999999999999999", 422, "before"),
        ("/api/trials?campaign=Not%20A%20Slug", 422, "campaign"),
        ("/api/trials?campaign=nope", 404, "nope"),
        ("/api/trials?campaign=c&approach=nope", 404, "nope"),
        ("/api/trials?runner=ghost", 404, "ghost"),
        ("/api/trials?runner=a%00b", 422, "runner"),
        ("/api/trials?runner=", 422, "runner"),
        ("/api/trials/99999999999999999999999", 422, "trial_id"),
        ("/api/trials/0", 422, "trial_id"),
        ("/api/trials/123456789", 404, "#123456789"),
        ("/api/trials/123456789/metrics", 404, "#123456789"),
        ("/api/trials/123456789/log", 404, "#123456789"),
        ("/api/trials/-5/metrics", 422, "trial_id"),
    ],
)
def test_bad_filters_and_ids_are_4xx_with_a_message(api, seeded, path, status, words):
    r = api.get(path)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"] or r.json().get("field") == words


def test_reads_need_a_login_or_a_token(client, seeded):
    for path in ("/api/trials", f"/api/trials/{seeded.trial_ids[0]}", f"/api/trials/{seeded.trial_ids[0]}/log"):
        r = client.get(path)
        assert r.status_code == 401 and "Login required" in r.json()["detail"]


@pytest.mark.both_databases  # bulk log chunks
def test_a_long_log_downloads_streamed_and_exact(tmp_path, db_url):
    """Thousands of chunks (several pages of the log reader) over real HTTP: chunked transfer, no
    Content-Length (the server never holds the whole log), the bytes exactly the stored log."""
    srv = ThreadServer(make_settings(tmp_path, db_url)).start()
    try:
        with session_scope(srv.engine) as s:
            campaign = Campaign(slug="long", name="Long")
            s.add(campaign)
            s.flush()
            assert campaign.id is not None
            approach = Approach(campaign_id=campaign.id, key="a", title="A", position=1, recipe={"kind": "command"})
            runner = Runner(name="r", token_hash="x", connected=True)
            s.add_all([approach, runner])
            s.flush()
            trial = create_trial(s, approach, runner, "t")
            pieces = [f"{seq:05d} " + "é✓x" * 300 + "\n" for seq in range(2200)]
            offset, chunks = 0, []
            for seq, text in enumerate(pieces):
                chunks.append(logs.Chunk(trial.id, trial.attempt_id, seq, offset, text))  # type: ignore[arg-type]
                offset += len(text.encode())
            logs.append_chunks(s, chunks, runner_id=runner.id, cap_bytes=10**9)  # type: ignore[arg-type]
            tid = trial.id
        expected = "".join(pieces).encode()
        received = bytearray()
        with httpx.stream("GET", f"{srv.url}/api/trials/{tid}/log", headers=srv.api_headers(), timeout=60) as r:
            assert r.status_code == 200
            assert r.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.headers
            for piece in r.iter_raw():
                received += piece
        assert len(expected) > 2_000_000 and bytes(received) == expected
    finally:
        srv.stop()


@pytest.mark.both_databases  # query counts
def test_query_count_of_the_list_does_not_grow_with_trials(app, api_headers):
    """The list is one joined query (plus one lookup per filter), for 6 trials or 60."""
    from fastapi.testclient import TestClient

    from bench.pages_at_scale import StatementCounter

    quiet = TestClient(app, base_url="http://127.0.0.1", headers=api_headers)  # no lifespan: no sweeper
    seed_trials(app_state(app).engine, count=6)
    counter = StatementCounter(app_state(app).engine)

    def count(params: dict) -> int:
        before = counter.count
        assert quiet.get("/api/trials", params=params).status_code == 200
        return counter.count - before

    small = [count(p) for p in ({"campaign": "c"}, {"runner": "node-2", "state": "succeeded"}, {"limit": 200})]
    seed_trials(app_state(app).engine, count=60, suffix="-big")
    large = [
        count(p)
        for p in ({"campaign": "c-big", "limit": 200}, {"runner": "node-2-big", "state": "succeeded"}, {"limit": 200})
    ]
    assert small == large, (small, large)
