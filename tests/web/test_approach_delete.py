"""Deleting an approach says what goes and keeps the measurements unless asked (issue 32, item 2), on both
databases: the API and the page refuse a delete that would take trials with it (409, counted, naming archive),
archive keeps every trial and takes the approach off the active list and "run next", restore brings it back,
and `delete_evidence` removes them, answering with the counts. An import with `replace` archives instead."""

from __future__ import annotations

import re
from html import unescape

import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns
from app.models import Approach, ApproachStatus, Artifact, LogChunk, Metric, Trial, TrialState
from app.state import app_state

pytestmark = pytest.mark.both_databases  # deletes and their foreign keys


@pytest.fixture
def measured(app, operator_client):
    """Campaign c: `kept` is adopted with one succeeded trial (a metric, a log line, a trace artifact),
    `bare` has none."""
    client = operator_client
    assert client.post("/api/campaigns", json={"slug": "c", "name": "C"}).status_code == 201
    for key in ("kept", "bare"):
        r = client.post("/api/campaigns/c/approaches", json={"key": key, "title": key.title()})
        assert r.status_code == 201, r.text
    with session_scope(app_state(app).engine) as s:
        campaign = campaigns.get_campaign(s, "c")
        approach = campaigns.get_approach(s, campaign, "kept")
        approach.status = ApproachStatus.adopted
        trial = Trial(campaign_id=campaign.id, approach_id=approach.id, state=TrialState.succeeded, log_bytes=6)  # type: ignore[arg-type]
        s.add(trial)
        s.flush()
        s.add(LogChunk(trial_id=trial.id, attempt_id="x", seq=0, offset=0, data="hello\n"))  # type: ignore[arg-type]
        s.add(
            Metric(trial_id=trial.id, approach_id=approach.id, campaign_id=campaign.id, seq=0, name="t", value=1.0)  # type: ignore[arg-type]
        )
        s.add(
            Artifact(
                trial_id=trial.id,  # type: ignore[arg-type]
                campaign_id=campaign.id,  # type: ignore[arg-type]
                name="trace.json",
                size=2,
                sha256="0" * 64,
                content_type="application/json",
                trace={"steps": 1},
            )
        )
        return trial.id


def _rows(app, model) -> int:
    with session_scope(app_state(app).engine, write=False) as s:
        return len(s.exec(select(model)).all())


def test_a_delete_that_would_take_trials_is_refused_counted_and_archive_keeps_them(app, operator_client, measured):
    client = operator_client
    held = client.get("/api/campaigns/c/approaches/kept/evidence").json()
    assert {k: held[k] for k in ("trials", "metrics", "log_bytes", "artifacts", "traces")} == {
        "trials": 1,
        "metrics": 1,
        "log_bytes": 6,
        "artifacts": 1,
        "traces": 1,
    }
    assert held["adopted"] is True and held["status_changes"] >= 1
    # Refused without the flag: the answer says what it holds, that it is adopted, and how to keep it.
    r = client.delete("/api/campaigns/c/approaches/kept")
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    assert "1 trial, 1 metric" in detail and "1 artifact (1 trace)" in detail and "adopted" in detail
    assert "Archive it" in detail and r.json()["field"] == "delete_evidence"
    assert _rows(app, Trial) == _rows(app, Metric) == _rows(app, LogChunk) == _rows(app, Artifact) == 1
    # The page's confirm counts what goes, warns of adoption, and its button says trials go too.
    page = unescape(client.get("/campaigns/c/approaches/kept", headers={"accept": "text/html"}).text)
    confirm = re.search(r'hx-post="/campaigns/c/approaches/kept/delete"\s+hx-confirm="([^"]+)"', page)
    assert confirm, "no delete confirm on the page"
    assert "1 trial, 1 metric, 6 bytes of logs, 1 artifact (1 trace)" in confirm.group(1)
    assert "ADOPTED" in confirm.group(1) and "Archive it instead" in confirm.group(1)
    assert "Delete approach and its 1 trial" in page and 'name="delete_evidence" value="true"' in page
    # A page form without the flag is refused in the flash, like the API.
    r = client.post("/campaigns/c/approaches/kept/delete", headers={"HX-Request": "true"})
    assert r.status_code == 409 and "Archive it" in r.text
    # Archive: off the active list and run next, trials kept, restorable.
    r = client.post("/api/campaigns/c/approaches/kept/archive")
    assert r.status_code == 200 and r.json()["archived_at"], r.text
    assert client.get(f"/api/trials/{measured}").status_code == 200
    inventory_html = client.get("/campaigns/c/inventory", headers={"HX-Request": "true"}).text
    active, _, archived = inventory_html.partition('<details class="archived">')
    assert 'id="approach-kept"' not in active and 'id="approach-bare"' in active
    assert 'id="archived-kept"' in archived and "Archived (1)" in archived
    assert client.post("/api/campaigns/c/approaches/kept/archive").status_code == 409  # already
    r = client.post("/campaigns/c/approaches/kept/restore", headers={"HX-Request": "true"})
    assert r.status_code == 200 and r.headers["HX-Redirect"] == "/campaigns/c/approaches/kept"
    assert client.get("/api/campaigns/c/approaches/kept").json()["archived_at"] is None
    # Explicitly with its evidence: gone, and the answer counts what went.
    r = client.delete("/api/campaigns/c/approaches/kept", params={"delete_evidence": "true"})
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] == "kept" and r.json()["removed"]["trials"] == 1
    assert _rows(app, Trial) == _rows(app, Metric) == _rows(app, LogChunk) == _rows(app, Artifact) == 0
    # Without trials nothing is kept from a delete, and it says so.
    r = client.delete("/api/campaigns/c/approaches/bare")
    assert r.status_code == 200 and r.json()["removed"]["trials"] == 0


def test_an_archived_approach_is_refused_by_run_this_and_settle(operator_client, measured):
    client = operator_client
    assert client.post("/api/campaigns/c/approaches/bare/archive").status_code == 200
    r = client.post("/api/campaigns/c/settle", json={"a": "bare", "budget": 2})
    assert r.status_code in (400, 422) and "archived" in r.json()["detail"] and r.json()["field"] == "a"


def test_an_import_with_replace_archives_what_has_trials(app, operator_client, measured):
    text = "campaign:\n  slug: c\n  name: C\napproaches: []\n"
    r = operator_client.post(
        "/api/campaigns/import?replace=true", content=text, headers={"content-type": "application/x-yaml"}
    )
    assert r.status_code == 200, r.text
    assert "1 removed" in r.json()["summary"] and "1 of them archived" in r.json()["summary"]
    with session_scope(app_state(app).engine, write=False) as s:
        left = s.exec(select(Approach)).all()
        assert [(a.key, a.archived_at is not None) for a in left] == [("kept", True)]
    assert _rows(app, Trial) == 1
