"""Verdict routes (app.web.verdicts): the trial page's htmx verdict form and JSON twin, CSRF, the
metrics table and CSV, and the campaign page's "waiting for your verdict" / "re-test" fragment."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain import scheduling
from app.models import Metric, Trial
from app.security import CSRF_HEADER
from app.state import app_state
from tests.support.verdicts import (
    NEW_TORCH,
    OLD_STACK,
    approach,
    campaign,
    dead_end_on_old_stack,
    end_trial,
    fixture_log,
    read_every_proposal,
    run_to_end,
    runner,
    seed,
)

HTMX = {"HX-Request": "true"}


@pytest.fixture
def engine(app, operator_client):
    return app_state(app).engine


@pytest.fixture
def failed_trial(engine) -> int:
    """Approach 'a' whose trial failed with torch symmetric memory's KeyError: 12 on OLD_STACK."""
    seed(engine, {"key": "a", "title": "Symmetric memory allreduce"}, {"key": "b"})
    with session_scope(engine) as s:
        trial = end_trial(
            s,
            approach(s, "a"),
            runner(s, "node-a", OLD_STACK),
            log=fixture_log("symm_mem_keyerror_sm120.log"),
            exit_code=1,
        )
        assert trial.id is not None
        return trial.id


def approach_row(engine, key: str):
    with session_scope(engine, write=False) as s:
        return approach(s, key)


def test_the_verdict_form_proposes_and_confirms(operator_client, engine, failed_trial):
    r = operator_client.get(f"/trials/{failed_trial}/verdict", headers=HTMX)
    assert r.status_code == 200, r.text
    html = r.text
    assert "torch symmetric memory has no entry for SM 12" in html and "symm_mem_sm_keyerror" in html
    assert f'hx-post="/trials/{failed_trial}/verdict"' in html
    assert '<option value="dead_end" selected>' in html
    assert 'value="torch" checked' in html and 'value="sm" checked' in html and 'value="nccl" >' in html
    # The stack the trial ran on, next to each component (GPU from gpus[0], SM from the fingerprint).
    for shown in ("2.10.0+cu128", "H200", "9.0", "2.27.3"):
        assert f'<span class="muted">{shown}</span>' in html

    r = operator_client.post(
        f"/trials/{failed_trial}/verdict",
        headers=HTMX,
        data={
            "status": "dead_end",
            "reason": "KeyError: 12: no SM 12 entry in this torch",
            "components": ["torch", "sm"],
        },
    )
    assert r.status_code == 200, r.text
    assert r.headers["HX-Trigger"] == "campaign-changed"
    assert "Verdict recorded" in r.text and "bound to torch 2.10.0+cu128 on SM 9.0" in r.text
    assert "<form" not in r.text
    a = approach_row(engine, "a")
    assert (a.status, a.reason) == ("dead_end", "KeyError: 12: no SM 12 entry in this torch")
    assert a.bound_to == {"components": ["sm", "torch"]} and a.verdict_fingerprint == OLD_STACK
    assert a.pending_trial_id is None


def test_the_json_api_confirms_with_a_bearer_token(operator_client, engine, failed_trial, api_headers):
    r = operator_client.get(f"/api/trials/{failed_trial}/proposal", headers=api_headers)
    assert r.status_code == 200
    assert r.json() | {"reason": "", "cause": ""} == {
        "status": "dead_end",
        "components": ["torch", "sm"],
        "signature": "symm_mem_sm_keyerror",
        "evidence_line": "KeyError: 12",
        "reason": "",
        "cause": "",
        "label": "",  # a failure's signature, not a success's label
        "settle": None,
    }
    r = operator_client.post(
        f"/api/trials/{failed_trial}/verdict",
        headers=api_headers,
        json={"status": "deferred", "reason": "wait for torch 2.11", "components": ["torch"]},
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "approach": "a",
        "status": "deferred",
        "reason": "wait for torch 2.11",
        "bound_to": {"components": ["torch"]},
        "verdict_fingerprint": OLD_STACK,
    }


def test_writes_need_the_sessions_csrf_token(operator_client, engine, failed_trial):
    token = operator_client.headers.pop(CSRF_HEADER)
    try:
        form = {"status": "dead_end", "reason": "x", "components": ["torch"]}
        r = operator_client.post(f"/trials/{failed_trial}/verdict", headers=HTMX, data=form)
        assert r.status_code == 403 and "CSRF" in r.text
        r = operator_client.post(f"/trials/{failed_trial}/verdict", headers={**HTMX, CSRF_HEADER: "forged"}, data=form)
        assert r.status_code == 403
        r = operator_client.post(f"/api/trials/{failed_trial}/verdict", json={"status": "dead_end", "reason": "x"})
        assert r.status_code == 403
    finally:
        operator_client.headers[CSRF_HEADER] = token
    a = approach_row(engine, "a")
    assert a.status == "untested" and a.pending_trial_id == failed_trial


def test_an_unknown_component_is_a_422_with_a_message(operator_client, engine, failed_trial):
    r = operator_client.post(
        f"/trials/{failed_trial}/verdict",
        headers=HTMX,
        data={"status": "dead_end", "reason": "x", "components": ["torch", "kernel"]},
    )
    assert r.status_code == 422
    assert r.headers["HX-Retarget"] == "#flash"
    assert "unknown stack component(s) kernel" in r.text
    r = operator_client.post(
        f"/api/trials/{failed_trial}/verdict", json={"status": "dead_end", "reason": "x", "components": ["kernel"]}
    )
    assert r.status_code == 422
    assert r.json()["field"] == "components" and "unknown stack component(s) kernel" in r.json()["detail"]
    for bad in ({"status": "exploded"}, {"status": "running", "reason": "x"}, {"status": "dead_end"}):
        r = operator_client.post(f"/api/trials/{failed_trial}/verdict", json=bad)
        assert r.status_code == 422 and r.json()["detail"], bad
    r = operator_client.post(f"/trials/{failed_trial}/verdict", headers=HTMX, data={"status": "exploded"})
    assert r.status_code == 422 and "unknown status" in r.text
    assert approach_row(engine, "a").pending_trial_id == failed_trial


def test_a_running_trial_has_no_proposal_yet(operator_client, engine, failed_trial):
    with session_scope(engine) as s:
        from app.domain import scheduling

        trial = scheduling.create_trial(s, approach(s, "b"), runner(s, "node-b", NEW_TORCH), "tester")
    r = operator_client.get(f"/trials/{trial.id}/verdict", headers=HTMX)
    assert r.status_code == 200 and "has not ended" in r.text
    assert operator_client.get(f"/api/trials/{trial.id}/proposal").status_code == 422
    r = operator_client.post(f"/api/trials/{trial.id}/verdict", json={"status": "promising", "reason": "x"})
    assert r.status_code == 422 and "has not ended" in r.json()["detail"]
    assert operator_client.get("/api/trials/999999/proposal").status_code == 404


METRICS = [
    {
        "name": "allreduce_latency_us",
        "value": 12.5,
        "unit": "us",
        "tags": {"backend": "nccl", "tokens": 4, "bytes": 57344, "p10_us": 11.0},
    },
    {"name": "allreduce_busbw_gbps", "value": 41.25, "unit": "GB/s", "tags": {"backend": "nccl", "tokens": 4}},
]


@pytest.mark.both_databases  # the CSV export's raw SQL, per dialect
def test_metrics_csv_and_table(operator_client, engine):
    seed(engine, {"key": "ar", "title": "NCCL allreduce"})
    with session_scope(engine) as s:
        trial_id = end_trial(s, approach(s, "ar"), runner(s, "node-a", OLD_STACK), metrics=METRICS).id
    r = operator_client.get("/campaigns/c/metrics.csv")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert 'filename="c-metrics.csv"' in r.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["trial_id", "approach", "name", "value", "unit", "tags", "recorded_at"]
    assert len(rows) == 1 + len(METRICS)
    for row, m in zip(rows[1:], METRICS):
        assert row[:5] == [str(trial_id), "ar", m["name"], repr(m["value"]), m["unit"]]
        assert json.loads(row[5]) == m["tags"]
    assert operator_client.get("/api/campaigns/c/metrics.csv").text == r.text

    r = operator_client.get(f"/trials/{trial_id}/metrics", headers=HTMX)
    assert r.status_code == 200
    assert "allreduce_latency_us" in r.text and "<th>backend</th>" in r.text and "12.5" in r.text
    assert "<th>p10_us</th>" not in r.text  # percentiles stay in the CSV


@pytest.mark.both_databases  # the CSV export's raw SQL, per dialect
def test_metrics_csv_is_what_csv_writer_writes(operator_client, engine):
    """The CSV stream formats lines itself (for speed): byte for byte what csv.writer writes, with fields
    that need quoting, an empty unit, a value without a fraction and a tiny one."""
    odd = [
        {"name": "allreduce_latency_us", "value": 3.0, "unit": "", "tags": {"note": 'a "quoted", comma'}},
        {"name": "verify_compute_ms", "value": 1e-07, "unit": 'ms, "wall"', "tags": {}},
        {"name": "decode_step_ms", "value": 12.345678901234567, "unit": "ms\nper step", "tags": {"z": 1, "a": [1, 2]}},
    ]
    seed(engine, {"key": "ar", "title": "NCCL allreduce"})
    with session_scope(engine) as s:
        end_trial(s, approach(s, "ar"), runner(s, "node-a", OLD_STACK), metrics=odd)
        end_trial(s, approach(s, "ar"), runner(s, "node-b", OLD_STACK), metrics=METRICS)
    with session_scope(engine, write=False) as s:
        stored = s.exec(select(Metric).order_by(col(Metric.trial_id), col(Metric.seq), col(Metric.index))).all()
        expected = io.StringIO()
        writer = csv.writer(expected)
        writer.writerow(["trial_id", "approach", "name", "value", "unit", "tags", "recorded_at"])
        for m in stored:
            tags = json.dumps(m.tags, sort_keys=True)
            writer.writerow([m.trial_id, "ar", m.name, m.value, m.unit, tags, m.created_at.isoformat()])
    assert len(stored) == len(odd) + len(METRICS)
    r = operator_client.get("/campaigns/c/metrics.csv")
    assert r.status_code == 200
    assert r.content == expected.getvalue().encode()


def test_campaign_fragment_lists_pending_and_flagged(operator_client, engine):
    seed(
        engine,
        {"key": "flagged", "title": "Symmetric memory one-shot"},
        {"key": "waits", "title": "NCCL tree"},
        {"key": "quiet", "title": "Custom allreduce"},
    )
    with session_scope(engine) as s:
        dead_end_on_old_stack(s, "flagged")
        waits = end_trial(
            s,
            approach(s, "waits"),
            runner(s, "node-x", OLD_STACK),
            log=fixture_log("nccl_watchdog_timeout.log"),
            exit_code=1,
        )
    r = operator_client.get("/campaigns/c/verdicts", headers=HTMX)
    assert r.status_code == 200
    assert "Waiting for your verdict" in r.text and "Re-test" not in r.text
    assert f'<a href="/trials/{waits.id}">NCCL tree: trial #{waits.id} failed</a>' in r.text
    assert "NCCL collective timed out" in r.text
    assert "Custom allreduce" not in r.text

    with session_scope(engine) as s:
        runner(s, "node-b", NEW_TORCH)
    r = operator_client.get("/campaigns/c/verdicts", headers=HTMX)
    assert "Re-test: the stack changed" in r.text
    assert 'data-key="flagged"' in r.text and "re-test: torch 2.10.0+cu128 -&gt; 2.11.0 (on node-b)" in r.text
    assert 'data-key="waits"' not in r.text

    with session_scope(engine) as s:
        trial = s.get(Trial, waits.id)
        assert trial is not None
    r = operator_client.post(
        f"/trials/{trial.id}/verdict", headers=HTMX, data={"status": "untested", "reason": "NCCL hang: run again"}
    )
    assert r.status_code == 200
    r = operator_client.get("/campaigns/c/verdicts", headers=HTMX)
    assert "Waiting for your verdict" not in r.text and 'data-key="flagged"' in r.text


def test_the_approach_page_lists_its_trials_only(operator_client, engine, failed_trial):
    with session_scope(engine) as s:
        other = end_trial(s, approach(s, "b"), runner(s, "node-b", NEW_TORCH))
        other_id = other.id
    page = operator_client.get("/campaigns/c/approaches/a").text
    assert 'hx-get="/campaigns/c/approaches/a/trials"' in page
    rows = operator_client.get("/campaigns/c/approaches/a/trials", headers=HTMX).text
    assert f'href="/trials/{failed_trial}"' in rows and f'href="/trials/{other_id}"' not in rows
    latest = operator_client.get("/campaigns/c/trials", headers=HTMX).text
    assert f'href="/trials/{failed_trial}"' in latest and f'href="/trials/{other_id}"' in latest


def test_the_trial_pages_metric_series_run_along_the_points_size_not_print_order(operator_client, engine):
    """Issue 32 item 15: the trial's metric plots put print order on x; a sweep printed 64, 1, 8 tokens."""
    printed = [
        {"name": "allreduce_latency_us", "value": v, "unit": "us", "tags": {"tokens": k, "bytes": k * 14336}}
        for k, v in ((64, 22.4), (1, 16.6), (8, 16.7))
    ] + [{"name": "decode_tok_s", "value": v, "unit": "tok/s", "tags": {}} for v in (80.0, 82.0)]
    seed(engine, {"key": "ar", "title": "NCCL allreduce"})
    with session_scope(engine) as s:
        trial_id = end_trial(s, approach(s, "ar"), runner(s, "node-a", OLD_STACK), metrics=printed).id
    r = operator_client.get(f"/trials/{trial_id}/metrics", headers=HTMX)
    island = r.text.split('id="metric-series">', 1)[1].split("</script>", 1)[0]
    series = json.loads(island)
    assert series["allreduce_latency_us"] == {
        "unit": "us",
        "values": [16.6, 16.7, 22.4],
        "x": [1, 8, 64],
        "x_tag": "tokens",
    }
    assert series["decode_tok_s"]["x_tag"] == "" and series["decode_tok_s"]["x"] == [1, 2]


def test_an_old_trial_page_shows_only_its_own_verdicts(operator_client, engine):
    """Issue 43, item 3: trial 1's page never shows trial 2's verdict (or the approach's status as if it
    were trial 1's); a trial no person gave a verdict says so."""
    seed(engine, {"key": "a", "title": "A"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        first = end_trial(s, approach(s, "a"), node, log=fixture_log("symm_mem_keyerror_sm120.log"), exit_code=1)
    r = operator_client.post(
        f"/trials/{first.id}/verdict", headers=HTMX, data={"status": "dead_end", "reason": "KeyError 12 on torch 2.10"}
    )
    assert r.status_code == 200, r.text
    with session_scope(engine) as s:
        second = end_trial(s, approach(s, "a"), node)
        third = end_trial(s, approach(s, "a"), node)
    r = operator_client.post(
        f"/trials/{third.id}/verdict", headers=HTMX, data={"status": "untested", "reason": "retry"}
    )
    assert r.status_code == 200, r.text

    old = operator_client.get(f"/trials/{first.id}/verdict", headers=HTMX).text
    assert "Verdict recorded on this trial" in old and "KeyError 12 on torch 2.10" in old
    assert 'data-status="dead_end"' in old and "a later verdict replaced it" in old
    assert "retry" not in old and 'data-status="untested"' not in old
    middle = operator_client.get(f"/trials/{second.id}/verdict", headers=HTMX).text
    assert "No verdict was recorded on this trial" in middle and "KeyError" not in middle and "retry" not in middle
    newest = operator_client.get(f"/trials/{third.id}/verdict", headers=HTMX).text
    assert 'data-status="untested"' in newest and "retry" in newest and "KeyError 12" not in newest


def test_a_decided_approach_shows_its_trial_beside_its_status(operator_client, engine, api_headers):
    """Issue 43, item 1: the approach page, the inventory and the API show the decided status and, beside
    it, the trial queued or running; the trial's end leaves the status and a proposal waiting."""
    seed(engine, {"key": "a", "title": "A"})
    with session_scope(engine) as s:
        dead_end_on_old_stack(s, "a")
        trial = scheduling.run_approach(s, campaign(s), approach(s, "a"), "bob").trial
        assert trial is not None and trial.id is not None
        trial_id = trial.id
    api = operator_client.get("/api/campaigns/c/approaches/a", headers=api_headers).json()
    assert (api["status"], api["activity"], api["activity_trial_id"]) == ("dead_end", "queued", trial_id)
    listed = operator_client.get("/api/campaigns/c/approaches", headers=api_headers).json()
    assert [(a["status"], a["activity"]) for a in listed] == [("dead_end", "queued")]
    page = operator_client.get("/campaigns/c/approaches/a").text
    assert 'data-status="dead_end"' in page and f'data-activity="queued" href="/trials/{trial_id}"' in page
    inventory_html = operator_client.get("/campaigns/c").text
    assert 'data-states="dead_end queued"' in inventory_html
    with session_scope(engine) as s:
        ended = s.get(Trial, trial_id)
        assert ended is not None
        run_to_end(s, ended)
    api = operator_client.get("/api/campaigns/c/approaches/a", headers=api_headers).json()
    assert (api["status"], api["activity"], api["pending_trial_id"]) == ("dead_end", None, trial_id)
    assert 'data-states="dead_end awaiting"' in operator_client.get("/campaigns/c").text
    history = operator_client.get("/api/campaigns/c/approaches/a/history", headers=api_headers).json()
    assert [(h["kind"], h["to_status"]) for h in history[:2]] == [("trial", "dead_end"), ("trial", "dead_end")]
    assert history[0]["reason"].startswith(f"trial #{trial_id} succeeded")


def test_repeat_from_a_waiting_proposal_takes_it_first(operator_client, engine):
    """Issue 43, item 7: Repeat and Run this refuse alike while a proposal waits (scheduling.can_run); the trial
    page's Repeat is "take the proposal and repeat": the person's verdict first, then the settle."""
    seed(engine, {"key": "base", "title": "Base"}, {"key": "cand", "title": "Cand"})
    verify = lambda center, seed_: [  # noqa: E731
        {"name": "verify_time_ms", "value": center, "unit": "ms", "tags": {"tokens": 4},
         "samples": [float(x) for x in np.random.default_rng(seed_).normal(center, center * 0.01, 20)]}
    ]  # fmt: skip
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        base = end_trial(s, approach(s, "base"), node, metrics=verify(10.0, 1))
        read_every_proposal(s)
        c = campaign(s)
        c.baseline_trial_id = base.id
        s.add(c)
        cand = end_trial(s, approach(s, "cand"), node, metrics=verify(9.5, 2))
        cand_id = cand.id
    box = operator_client.get(f"/trials/{cand_id}/verdict", headers=HTMX).text
    assert f'name="taking" value="{cand_id}"' in box and "Take the proposal and repeat" in box
    refused = operator_client.post("/campaigns/c/settle", data={"a": "base", "b": "cand", "budget": "2"})
    assert refused.status_code == 422 and f"Cand waits for your verdict on trial #{cand_id}" in refused.text
    r = operator_client.post(
        "/campaigns/c/settle",
        data={"a": "base", "b": "cand", "budget": "2", "taking": str(cand_id)},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    with session_scope(engine, write=False) as s:
        a = approach(s, "cand")
        assert (a.status, a.pending_trial_id) == ("untested", None)
        assert "inconclusive" in a.reason
        queued = s.exec(select(Trial).where(col(Trial.state) == "queued")).all()
        assert sorted(t.approach_id for t in queued) == sorted([approach(s, "base").id or 0, a.id or 0])
