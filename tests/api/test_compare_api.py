"""GET /api/campaigns/{slug}/compare on SQLite and PostgreSQL: metric rows aligned by their varying tag,
stacks diffed, bad picks refused with a message."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from app.db import session_scope
from app.state import app_state
from tests.support.verdicts import NEW_TORCH, OLD_STACK, approach, end_trial, read_every_proposal, runner, seed


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
    from app.models import Trial
    from tests.support.charts import add_metrics

    with session_scope(app_state(app).engine) as s:
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
    assert last["stats"]["n"] == [0, 1] and last["stats"]["trials"] == [0, 1]


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


# ---- statistics: the contract of docs/statistics.md --------------------------------------------------------


def _timed(center: float, seed: int, n: int = 12) -> list[dict]:
    samples = [float(x) for x in np.random.default_rng(seed).normal(center, center * 0.01, n)]
    return [
        {
            "name": "allreduce_latency_us",
            "value": float(np.median(samples)),
            "unit": "us",
            "tags": {"tokens": 4, "p10_us": min(samples), "p90_us": max(samples)},
            "samples": samples,
        }
    ]


@pytest.fixture
def timed(app):
    """Campaign `s`: approach a (two trials at 10 us), b (one at 9 us) on one stack, b once more on another."""
    seed(app_state(app).engine, {"key": "a"}, {"key": "b"}, slug="s")
    with session_scope(app_state(app).engine) as s:
        node, other = runner(s, "node-a", OLD_STACK), runner(s, "node-b", NEW_TORCH)
        a, b = approach(s, "a", "s"), approach(s, "b", "s")
        ids = [end_trial(s, a, node, metrics=_timed(10.0, 1)).id, end_trial(s, a, node, metrics=_timed(10.0, 2)).id]
        ids.append(end_trial(s, b, node, metrics=_timed(9.0, 3)).id)
        ids.append(end_trial(s, b, other, metrics=_timed(8.0, 4)).id)
    return ids


def _runner(s, name: str):
    from sqlmodel import select

    from app.models import Runner

    return s.exec(select(Runner).where(Runner.name == name)).one()


def test_one_trial_a_side_gives_no_verdict_and_says_so(api, timed):
    """Issue 32 item 10, issue 34: a trial against a trial, no run-to-run spread known: a ratio, no
    interval, no verdict."""
    body = api.get("/api/campaigns/s/compare", params=[("trial", timed[0]), ("trial", timed[2])]).json()
    stats = body["metrics"][0]["rows"][0]["stats"]
    assert stats["verdict"] == "no_verdict" and stats["trials"] == [1, 1] and stats["n"] == [12, 12]
    assert stats["ratio"]["value"] < 1 and stats["ratio"]["low"] is None and stats["spread"] == ""


def test_each_row_carries_its_stats(api, app, timed):
    with session_scope(app_state(app).engine) as s:  # earlier repeats of a on node-a: the spread is known there
        a, node = approach(s, "a", "s"), _runner(s, "node-a")
        for n in range(2):
            repeat = end_trial(s, a, node, metrics=_timed(10.0 * (1 + 0.003 * n), 10 + n))
            repeat.finished_at -= timedelta(days=1)  # type: ignore[operator,assignment]  # ran before
    body = api.get("/api/campaigns/s/compare", params=[("trial", timed[0]), ("trial", timed[2])]).json()
    assert body["by"] == "trial" and body["rule"]["confidence"] == 0.95 and body["rule"]["min_effect"] == 0.03
    (group,) = body["metrics"]
    assert group["lower_is_better"] is True
    (row,) = group["rows"]
    assert row["point"] == {"tokens": 4}  # the spread tags place nothing
    stats = row["stats"]
    assert set(stats) == {
        "ratio", "p_value", "verdict", "cv", "between_cv", "unstable", "trials_needed", "trials", "n", "spread",
        "stack_difference", "not_compared", "each", "no_verdict_reason",
    }  # fmt: skip
    assert stats["verdict"] == "faster" and stats["trials_needed"] is None and stats["n"] == [12, 12]
    assert stats["spread"].startswith("run-to-run spread ") and "from 3 earlier trials of A" in stats["spread"]
    assert stats["ratio"]["low"] < stats["ratio"]["value"] < stats["ratio"]["high"] < 1
    assert stats["p_value"] is None  # Welch's test needs 2 trials a side
    assert len(stats["cv"]) == 2 and all(0 < cv < 0.1 for cv in stats["cv"]) and stats["unstable"] == [False, False]
    assert stats["between_cv"] == [None, None]
    (head,) = stats["each"]  # every column after the first; the top level is the second column's
    assert head["column"] == 1
    assert all(head[k] == stats[k] for k in ("ratio", "p_value", "verdict", "trials_needed", "spread", "not_compared"))


def test_a_trial_on_another_stack_gets_no_verdict_unless_asked(api, timed):
    pick = [("trial", timed[0]), ("trial", timed[3])]
    stats = api.get("/api/campaigns/s/compare", params=pick).json()["metrics"][0]["rows"][0]["stats"]
    assert stats["verdict"] is None and stats["not_compared"].startswith("different stack: torch")
    stats = api.get("/api/campaigns/s/compare", params=[*pick, ("across_stacks", "true")]).json()
    stats = stats["metrics"][0]["rows"][0]["stats"]
    assert stats["verdict"] == "no_verdict" and stats["stack_difference"].startswith("torch 2.10.0+cu128 -> ")


def test_approaches_are_compared_over_their_trials_on_one_stack(api, app, timed):
    body = api.get("/api/campaigns/s/compare?approach=a&approach=b").json()
    assert body["by"] == "approach" and [c["trials"] for c in body["columns"]] == [timed[:2], timed[2:3]]
    assert body["columns"][1]["left_out"] == 1
    stats = body["metrics"][0]["rows"][0]["stats"]
    assert stats["trials"] == [2, 1] and stats["n"] == [24, 12] and stats["verdict"] == "no_verdict"
    with session_scope(app_state(app).engine) as s:  # b repeated on node-a: two trials a side decide a 10% gain
        end_trial(s, approach(s, "b", "s"), _runner(s, "node-a"), metrics=_timed(9.0, 5))
    stats = api.get("/api/campaigns/s/compare?approach=a&approach=b").json()["metrics"][0]["rows"][0]["stats"]
    assert stats["trials"] == [2, 2] and stats["verdict"] == "faster" and stats["p_value"] is not None


@pytest.mark.parametrize(
    ("query", "status", "words"),
    [
        ("approach=a", 422, "approach"),
        ("approach=a&approach=zz", 404, "zz"),
        ("approach=a&approach=b&trial=1&trial=2", 422, "not both"),
        ("approach=A&approach=b", 422, "approach"),
    ],
)
def test_bad_approach_picks_are_4xx_with_a_message(api, timed, query, status, words):
    r = api.get(f"/api/campaigns/s/compare?{query}")
    assert r.status_code == status, r.text
    assert words in r.text


def test_settle_queues_a_first_round_and_refuses_bad_requests(api, app, timed):
    r = api.post("/api/campaigns/s/settle", json={"a": "a", "b": "b", "budget": 4})
    assert r.status_code == 422 and "waits for your verdict" in r.json()["detail"]  # as Run this: read it first
    with session_scope(app_state(app).engine) as s:
        read_every_proposal(s, "s")
    r = api.post("/api/campaigns/s/settle", json={"a": "a", "b": "b", "budget": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "open" and body["budget"] == 4 and len(body["queued"]) == 2
    queued = api.get("/api/campaigns/s/queue").json()
    assert [q["trial_id"] for q in queued] == body["queued"] and [q["approach"] for q in queued] == ["a", "b"]
    for payload, status, words in [
        ({"a": "a", "b": "b", "budget": 0}, 422, "budget"),
        ({"a": "a", "b": "nope"}, 404, "nope"),
        ({"a": "b", "b": "b"}, 422, "different"),
        ({"a": "a", "b": "b"}, 422, "already being tried"),
    ]:
        r = api.post("/api/campaigns/s/settle", json=payload)
        assert r.status_code == status and words in r.text, (payload, r.text)


def test_rows_without_a_stored_summary_compare_as_their_samples_do(api, app):
    """A comparison reads each row's stored sample summary; a row written without one (before migration 0018,
    or by a writer that leaves it out) is read from its samples, to the same figures, intervals and
    verdicts, with a known run-to-run spread, trial against trial and approach against approach."""
    bodies = []
    for slug, summary in (("with", True), ("without", False)):
        seed(app_state(app).engine, {"key": "a"}, {"key": "b"}, slug=slug)
        with session_scope(app_state(app).engine) as s:
            node = runner(s, f"node-{slug}", OLD_STACK)
            ids = []
            for key, center, n in (("a", 10.0, 1), ("a", 10.1, 2), ("a", 9.9, 3), ("b", 9.0, 4), ("b", 9.1, 5)):
                lines = [{**line, "summary": summary} for line in _timed(center, n)]
                ids.append(end_trial(s, approach(s, key, slug), node, metrics=lines).id)
        pair = api.get(f"/api/campaigns/{slug}/compare", params=[("trial", ids[0]), ("trial", ids[3])]).json()
        pooled = api.get(f"/api/campaigns/{slug}/compare?approach=a&approach=b").json()
        bodies.append([pair["metrics"], pooled["metrics"]])
    assert bodies[0] == bodies[1]
    pair_stats, pooled_stats = (m[0]["rows"][0]["stats"] for m in bodies[0])
    assert pair_stats["trials"] == [1, 1] and "run-to-run spread" in pair_stats["spread"]
    assert pooled_stats["trials"] == [3, 2] and pooled_stats["n"] == [36, 24]
