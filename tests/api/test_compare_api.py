"""GET /api/campaigns/{slug}/compare on SQLite and PostgreSQL: metric rows aligned by their varying tag,
stacks diffed, bad picks refused with a message."""

from __future__ import annotations

import pytest


def test_two_trials_side_by_side(api, seeded):
    first, last_done = seeded.trial_ids[0], seeded.trial_ids[3]  # node-1 (old stack), node-2 (new stack)
    r = api.get("/api/campaigns/c/compare", params=[("trial", first), ("trial", last_done)])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["campaign"] == "c" and [t["id"] for t in body["trials"]] == [first, last_done]
    assert [t["runner"] for t in body["trials"]] == ["node-1", "node-2"]
    (latency,) = body["metrics"]
    assert latency["name"] == "allreduce_latency_us" and latency["unit"] == "us" and latency["x_tag"] == "tokens"
    # mode is the same in every row: it describes the trials, not the points
    assert [(row["point"], row["values"]) for row in latency["rows"]] == [
        ({"tokens": t}, [0.0 + t, 30.0 + t]) for t in (1, 8, 64)
    ]
    stack = {row["component"]: row for row in body["stack"]}
    assert stack["torch"]["values"] == ["2.10.0+cu128", "2.11.0+cu130"] and stack["torch"]["differs"]
    assert stack["cuda"]["differs"] and not stack["gpu"]["differs"] and not stack["driver"]["differs"]
    assert stack["gpu"]["values"] == ["NVIDIA RTX PRO 6000 Blackwell"] * 2 and stack["gpu_count"]["values"] == [
        "8",
        "8",
    ]


def test_a_trial_without_a_point_shows_null(api, seeded, app):
    from app.db import session_scope
    from app.models import Trial
    from tests.support.charts import add_metrics

    with session_scope(app.state.engine) as s:
        trial = s.get(Trial, seeded.trial_ids[1])
        assert trial is not None
        add_metrics(s, trial, [("allreduce_latency_us", 99.0, "us", {"tokens": 256, "mode": "graph"})], seq=50)
    body = api.get(
        "/api/campaigns/c/compare", params=[("trial", seeded.trial_ids[0]), ("trial", seeded.trial_ids[1])]
    ).json()
    rows = body["metrics"][0]["rows"]
    last = rows[-1]
    assert (last["point"], last["values"], last["differs"]) == ({"tokens": 256}, [None, 99.0], True)
    # Nothing to compare where one side did not measure: no verdict, and why.
    assert last["stats"]["verdict"] is None and last["stats"]["not_compared"] == "not measured on both"
    assert last["stats"]["n"] == [0, 1]


@pytest.mark.parametrize(
    "query,status,words",
    [
        ("trial=1", 422, "trial"),
        ("", 422, "trial"),
        ("trial=1&trial=1", 422, "2 and 8"),
        ("trial=1&trial=2&trial=3&trial=4&trial=5&trial=6&trial=7&trial=8&trial=9", 422, "trial"),
        ("trial=1&trial=abc", 422, "trial"),
        ("trial=1&trial=-3", 422, "trial"),
        ("trial=1&trial=99999999999999999999999", 422, "trial"),
        ("trial=1&trial=424242", 404, "#424242"),
    ],
)
def test_bad_picks_are_4xx_with_a_message(api, seeded, query, status, words):
    r = api.get(f"/api/campaigns/c/compare?{query}")
    assert r.status_code == status, r.text
    assert words in r.json()["detail"] or r.json().get("field") == words


def test_a_trial_of_another_campaign_is_not_compared(api, seeded):
    r = api.get("/api/campaigns/c/compare", params=[("trial", seeded.trial_ids[0]), ("trial", seeded.other_trial)])
    assert r.status_code == 404 and f"#{seeded.other_trial}" in r.json()["detail"]
    assert api.get("/api/campaigns/nope/compare?trial=1&trial=2").status_code == 404
