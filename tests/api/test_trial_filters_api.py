"""The trials filter (schemas.TrialFilter) on SQLite and PostgreSQL: the same filters, sort, pages and count in
`GET /api/trials`, its CSV and JSON export and the trials page (/trials, the filter in its URL); any role reads."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest

from app.db import session_scope
from app.models import Role, Trial, utcnow
from app.state import app_state
from tests.support.auth import add_user, login_token

pytestmark = pytest.mark.both_databases  # the trials page's filter, sort and page SQL


def _ids(body: dict) -> list[int]:
    return [t["id"] for t in body["items"]]


def _mark(app, seeded) -> list[int]:
    """Trial 0 proposed dead_end (its signature), trial 1 started by 'ada' two days ago; returns the ids."""
    ids = seeded.trial_ids
    with session_scope(app_state(app).engine) as s:
        first, second = s.get(Trial, ids[0]), s.get(Trial, ids[1])
        assert first is not None and second is not None
        first.proposal = {"verdict": "dead_end", "signature": "sm_keyerror", "reason": "KeyError: 120"}
        second.requested_by = "ada"
        second.created_at = utcnow() - timedelta(days=2)
        s.add_all([first, second])
    return ids


def test_new_filters_sort_page_and_count(api, seeded, app):
    ids = _mark(app, seeded)
    assert _ids(api.get("/api/trials", params={"proposal": "dead_end"}).json()) == [ids[0]]
    no_signature = api.get("/api/trials", params={"campaign": "c", "proposal": "none"}).json()
    assert ids[0] not in _ids(no_signature) and no_signature["total"] == len(ids) - 1
    assert _ids(api.get("/api/trials", params={"requested_by": "ada"}).json()) == [ids[1]]
    since = (utcnow() - timedelta(days=1)).isoformat()
    recent = api.get("/api/trials", params={"campaign": "c", "since": since}).json()
    assert ids[1] not in _ids(recent) and recent["total"] == len(ids) - 1
    old = api.get("/api/trials", params={"until": since}).json()
    assert _ids(old) == [ids[1]]
    # A tag or condition: trials that printed a metric with it (the seeded logs carry mode=graph, tokens 1/8/64).
    assert api.get("/api/trials", params={"tag": "mode=graph"}).json()["total"] == len(ids)
    assert api.get("/api/trials", params={"tag": "tokens=8"}).json()["total"] == len(ids)
    assert api.get("/api/trials", params={"tag": "tokens=9"}).json()["total"] == 0
    bad = api.get("/api/trials", params={"tag": "tokens"})
    assert bad.status_code == 422 and bad.json()["field"] == "tag"
    # Sorted by runner, then newest first within one; pages of 2 with the count.
    by_runner = api.get("/api/trials", params={"campaign": "c", "sort": "runner", "limit": 2, "page": 2}).json()
    assert by_runner["total"] == len(ids) and by_runner["page"] == 2 and by_runner["next_before"] is None
    everything = [
        t
        for p in (1, 2, 3)
        for t in api.get("/api/trials", params={"campaign": "c", "sort": "runner", "limit": 2, "page": p}).json()[
            "items"
        ]
    ]
    assert [t["runner"] for t in everything] == sorted(t["runner"] for t in everything)
    assert [t["id"] for t in everything][2:4] == _ids(by_runner)
    assert sorted(t["id"] for t in everything) == sorted(ids)
    desc = api.get("/api/trials", params={"campaign": "c", "sort": "-state"}).json()
    assert [t["state"] for t in desc["items"]] == sorted((t["state"] for t in desc["items"]), reverse=True)
    assert api.get("/api/trials", params={"sort": "colour"}).status_code == 422
    assert api.get("/api/trials", params={"sort": "state", "before": 3}).status_code == 422


def test_export_is_what_the_filter_shows_as_csv_and_json(api, seeded, app):
    ids = _mark(app, seeded)
    params = {"campaign": "c", "sort": "id", "since": (utcnow() - timedelta(days=1)).isoformat()}
    shown = [t["id"] for t in api.get("/api/trials", params={**params, "limit": 200}).json()["items"]]
    as_csv = api.get("/api/trials/export", params={**params, "format": "csv"})
    assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [int(r["id"]) for r in rows] == shown == sorted(set(ids) - {ids[1]})
    assert (
        rows[0]["proposed"] == "dead_end" and rows[0]["campaign"] == "c" and rows[0]["approach_title"] == "Approach <A>"
    )
    as_json = api.get("/api/trials/export", params={**params, "format": "json"}).json()
    assert [t["id"] for t in as_json] == shown and as_json[0]["created_at"].endswith("Z")
    empty = api.get("/api/trials/export", params={"campaign": "c", "proposal": "retest", "format": "json"})
    assert empty.json() == []
    assert api.get("/api/trials/export", params={"campaign": "nope"}).status_code == 404


def test_the_trials_page_keeps_its_filter_in_the_url_and_any_role_reads_it(client, seeded, app):
    _mark(app, seeded)
    add_user(app, "Vic", Role.viewer)
    r = client.get(f"/login?token={login_token(app, 'Vic')}", follow_redirects=False)
    assert r.status_code == 303
    page = client.get("/trials", params={"campaign": "c", "state": "succeeded", "runner": "", "sort": "runner"})
    assert page.status_code == 200
    assert '<b id="trial-total">4</b>' in page.text  # trials 0-3 succeeded
    assert 'href="/api/trials/export?campaign=c&amp;state=succeeded&amp;sort=runner&amp;format=csv"' in page.text
    assert "Approach &lt;A&gt;" in page.text  # escaped
    everything = client.get("/trials")
    assert f'<b id="trial-total">{len(seeded.trial_ids) + 1}</b>' in everything.text
    assert client.get("/trials", params={"since": "yesterday"}).status_code == 422


def test_a_bare_number_is_not_a_date(client, api_headers):
    """`until=0.5` was read as half a second after 1970 (pydantic's lax datetime): a date is ISO 8601 text."""
    for value in ("0.5", "1700000000", "-3"):
        r = client.get("/api/trials", params={"until": value}, headers=api_headers)
        assert r.status_code == 422 and "ISO 8601" in r.text, (value, r.text)
    assert client.get("/api/trials", params={"until": "2026-12-07"}, headers=api_headers).status_code == 200
