"""A campaign's lifecycle through the JSON API on SQLite and PostgreSQL: rename (old URLs redirect, the old slug
is refused to others while it does, share links keep working), archive (read-only everywhere, off the list,
refused while trials are active unless they are cancelled in the same step), restore, delete (admin, archive
only, name typed; another campaign untouched), each in the campaign's history and by role."""

from __future__ import annotations

import pytest
from sqlalchemy import func
from sqlmodel import col, select

from app.db import session_scope
from app.domain import sharing
from app.models import (
    Approach,
    Artifact,
    Campaign,
    CampaignEvent,
    CampaignSlug,
    LogChunk,
    Metric,
    Role,
    ShareLink,
    StatusChange,
    Trial,
    TrialState,
)
from app.state import app_state
from tests.support.auth import add_user, api_token, log_in


def _finish_running(app, campaign: str = "c") -> None:
    with session_scope(app_state(app).engine) as s:
        cid = s.exec(select(Campaign.id).where(Campaign.slug == campaign)).one()
        for t in s.exec(select(Trial).where(Trial.campaign_id == cid, Trial.state == TrialState.running)):
            t.state = TrialState.succeeded
            s.add(t)


def _as(app, client, role: Role, name: str) -> dict[str, str]:
    add_user(app, name, role)
    return {"Authorization": f"Bearer {api_token(app, name, user=name)}"}


@pytest.mark.both_databases  # unique slugs
def test_rename_redirects_old_urls_and_holds_the_old_slug(api, seeded, app):
    r = api.post("/api/campaigns/c/rename", json={"slug": "c-2026"})
    assert r.status_code == 200, r.text
    assert r.json()["slug"] == "c-2026"
    old = api.get("/api/campaigns/c/approaches/a", follow_redirects=False)
    assert old.status_code == 308 and old.headers["location"] == "/api/campaigns/c-2026/approaches/a"
    assert api.get("/api/campaigns/c/approaches/a").json()["key"] == "a"  # followed
    trials = api.get("/api/trials", params={"campaign": "c", "limit": 2}, follow_redirects=False)
    assert trials.status_code == 308 and "campaign=c-2026" in trials.headers["location"]
    # The old slug is refused to a new campaign, and to another campaign's rename, while it redirects.
    taken = api.post("/api/campaigns", json={"slug": "c", "name": "Another"})
    assert taken.status_code == 409 and "redirect" in taken.json()["detail"]
    assert api.post("/api/campaigns/d/rename", json={"slug": "c"}).status_code == 409
    assert api.post("/api/campaigns/d/rename", json={"slug": "c-2026"}).status_code == 409  # a live slug
    bad = api.post("/api/campaigns/d/rename", json={"slug": "Not A Slug"})
    assert bad.status_code == 422
    # Taking back its own old slug ends that redirect.
    assert api.post("/api/campaigns/c-2026/rename", json={"slug": "c"}).status_code == 200
    assert api.get("/api/campaigns/c-2026", follow_redirects=False).status_code == 308
    history = api.get("/api/campaigns/c/history").json()
    assert [e["kind"] for e in history] == ["renamed", "renamed"]
    assert history[1]["detail"] == "c → c-2026" and history[0]["actor"]


def test_share_links_keep_working_after_a_rename(api, seeded, app):
    with session_scope(app_state(app).engine) as s:
        campaign = s.exec(select(Campaign).where(Campaign.slug == "c")).one()
        link = sharing.create_share_link(s, campaign, "weekly", "tester")
        token = sharing.share_token(link, app_state(app).settings.secret_key or "")
    assert api.post("/api/campaigns/c/rename", json={"slug": "c-new"}).status_code == 200
    page = api.get(f"/s/{token}")
    assert page.status_code == 200 and "C" in page.text


def test_archive_is_refused_while_trials_run_unless_cancelled(api, seeded, app):
    refused = api.post("/api/campaigns/c/archive", json={})
    assert refused.status_code == 409 and "queued or running" in refused.json()["detail"]
    assert api.get("/api/campaigns/c").json()["archived_at"] is None
    done = api.post("/api/campaigns/c/archive", json={"cancel_active": True})
    assert done.status_code == 200 and done.json()["archived_at"]
    running = seeded.trial_ids[-1]
    assert api.get(f"/api/trials/{running}").json()["phase"] == "cancelling"  # asked to stop, its end recorded later
    assert [c["slug"] for c in api.get("/api/campaigns").json()] == ["d"]
    assert [c["slug"] for c in api.get("/api/campaigns", params={"archived": True}).json()] == ["c"]
    assert "cancelled #" in api.get("/api/campaigns/c/history").json()[0]["detail"]


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("post", "/api/campaigns/c/approaches", {"key": "new", "title": "New"}),
        ("patch", "/api/campaigns/c", {"name": "Renamed"}),
        ("patch", "/api/campaigns/c/approaches/a", {"title": "Edited"}),
        ("post", "/api/campaigns/c/approaches/a/status", {"status": "dead_end", "reason": "x"}),
        ("post", "/api/campaigns/c/approaches/a/move", {"position": 2}),
        ("post", "/api/campaigns/c/approaches/a/archive", None),
        ("delete", "/api/campaigns/c/approaches/b?delete_evidence=true", None),
        ("post", "/api/campaigns/c/rename", {"slug": "c-other"}),
        ("post", "/api/campaigns/c/run-next", None),
        ("post", "/api/campaigns/c/share-links", {"name": "x"}),
    ],
)
def test_an_archived_campaign_refuses_every_write(api, seeded, app, method, path, body):
    _finish_running(app)
    assert api.post("/api/campaigns/c/archive", json={}).status_code == 200
    r = getattr(api, method)(path, **({"json": body} if body is not None else {}))
    assert r.status_code == 409, (path, r.status_code, r.text)
    assert "archived" in r.json()["detail"] and "read-only" in r.json()["detail"]
    with session_scope(app_state(app).engine, write=False) as s:
        cid = s.exec(select(Campaign.id).where(Campaign.slug == "c")).one()
        assert {a.key for a in s.exec(select(Approach).where(Approach.campaign_id == cid))} == {"a", "b"}


def test_an_archived_campaign_refuses_an_import(api, seeded, app):
    _finish_running(app)
    api.post("/api/campaigns/c/archive", json={})
    text = "format: campaign-board/v1\ncampaign:\n  slug: c\n  name: C again\napproaches: []\n"
    r = api.post("/api/campaigns/import", content=text, headers={"content-type": "application/x-yaml"})
    assert r.status_code == 409 and "read-only" in r.json()["detail"], r.text


def test_restore_makes_it_writable_again(api, seeded, app):
    _finish_running(app)
    api.post("/api/campaigns/c/archive", json={})
    assert api.post("/api/campaigns/c/restore").json()["archived_at"] is None
    assert api.post("/api/campaigns/c/approaches", json={"key": "new", "title": "New"}).status_code == 201
    assert [e["kind"] for e in api.get("/api/campaigns/c/history").json()] == ["restored", "archived"]
    assert api.post("/api/campaigns/c/restore").status_code == 409  # not archived


def _counts(app, cid: int) -> dict[str, int]:
    with session_scope(app_state(app).engine, write=False) as s:
        trial_ids = select(Trial.id).where(Trial.campaign_id == cid)
        approach_ids = select(Approach.id).where(Approach.campaign_id == cid)
        return {
            "campaign": s.exec(select(func.count()).select_from(Campaign).where(Campaign.id == cid)).one(),
            "approaches": s.exec(select(func.count()).select_from(Approach).where(Approach.campaign_id == cid)).one(),
            "trials": s.exec(select(func.count()).select_from(Trial).where(Trial.campaign_id == cid)).one(),
            "metrics": s.exec(select(func.count()).select_from(Metric).where(Metric.campaign_id == cid)).one(),
            "logs": s.exec(
                select(func.count()).select_from(LogChunk).where(col(LogChunk.trial_id).in_(trial_ids))
            ).one(),
            "history": s.exec(
                select(func.count()).select_from(StatusChange).where(col(StatusChange.approach_id).in_(approach_ids))
            ).one(),
            "share_links": s.exec(
                select(func.count()).select_from(ShareLink).where(ShareLink.campaign_id == cid)
            ).one(),
            "artifacts": s.exec(select(func.count()).select_from(Artifact).where(Artifact.campaign_id == cid)).one(),
            "events": s.exec(
                select(func.count()).select_from(CampaignEvent).where(CampaignEvent.campaign_id == cid)
            ).one(),
            "slugs": s.exec(
                select(func.count()).select_from(CampaignSlug).where(CampaignSlug.campaign_id == cid)
            ).one(),
        }


@pytest.mark.both_databases  # cascade deletes
def test_delete_from_the_archive_removes_its_rows_and_nothing_else(api, seeded, app):
    with session_scope(app_state(app).engine) as s:
        c = s.exec(select(Campaign).where(Campaign.slug == "c")).one()
        d = s.exec(select(Campaign).where(Campaign.slug == "d")).one()
        cid, did = c.id or 0, d.id or 0
        for campaign in (c, d):
            sharing.create_share_link(s, campaign, "weekly", "tester")
    api.post("/api/campaigns/d/approaches", json={"key": "y", "title": "Y"})  # d: status history too
    before_d = _counts(app, did)
    assert before_d["trials"] == 1 and before_d["share_links"] == 1 and before_d["history"] >= 1
    not_archived = api.delete("/api/campaigns/c", params={"confirm": "C"})
    assert not_archived.status_code == 409 and "archive it first" in not_archived.json()["detail"]
    _finish_running(app)
    api.post("/api/campaigns/c/rename", json={"slug": "c2"})
    api.post("/api/campaigns/c2/archive", json={})
    wrong = api.delete("/api/campaigns/c2", params={"confirm": "c"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "confirm"
    assert _counts(app, cid)["trials"] == len(seeded.trial_ids)  # nothing went
    gone = api.delete("/api/campaigns/c2", params={"confirm": "C"})
    assert gone.status_code == 200, gone.text
    assert gone.json()["removed"]["trials"] == len(seeded.trial_ids) and gone.json()["removed"]["approaches"] == 2
    assert set(_counts(app, cid).values()) == {0}
    assert _counts(app, did) == before_d  # the other campaign is untouched
    assert api.get("/api/campaigns/c2").status_code == 404 and api.get("/api/campaigns/c").status_code == 404
    assert api.post("/api/campaigns", json={"slug": "c", "name": "Fresh"}).status_code == 201  # the slug is free


def test_roles_viewer_reads_operator_renames_and_archives_admin_deletes(api, seeded, app, client):
    _finish_running(app)
    viewer = _as(app, client, Role.viewer, "Vera")
    operator = _as(app, client, Role.operator, "Otto")
    api.headers.pop("Authorization")
    for path, body in [("/api/campaigns/c/rename", {"slug": "c3"}), ("/api/campaigns/c/archive", {})]:
        assert client.post(path, json=body, headers=viewer).status_code == 403
    assert client.get("/api/campaigns/c/history", headers=viewer).status_code == 200
    assert client.post("/api/campaigns/c/rename", json={"slug": "c3"}, headers=operator).status_code == 200
    assert client.post("/api/campaigns/c3/archive", json={}, headers=operator).status_code == 200
    assert [e["actor"] for e in client.get("/api/campaigns/c3/history", headers=viewer).json()] == ["Otto", "Otto"]
    assert client.post("/api/campaigns/c3/restore", headers=viewer).status_code == 403
    refused = client.delete("/api/campaigns/c3", params={"confirm": "C"}, headers=operator)
    assert refused.status_code == 403
    assert client.get("/api/campaigns/c3", headers=viewer).status_code == 200  # still there
    admin = {"Authorization": f"Bearer {api_token(app, 'admin-token')}"}
    assert client.delete("/api/campaigns/c3", params={"confirm": "C"}, headers=viewer).status_code == 403
    assert client.delete("/api/campaigns/c3", params={"confirm": "C"}, headers=admin).status_code == 200
    assert client.get("/api/campaigns/c3", headers=viewer).status_code == 404


def _browser_as(app, client, name: str, role: Role) -> None:
    add_user(app, name, role)
    client.cookies.clear()
    log_in(client, app, name)


def test_the_pages_forms_enforce_the_same_roles(client, seeded, app):
    _finish_running(app)
    _browser_as(app, client, "Vera", Role.viewer)
    assert client.post("/campaigns/c/rename", data={"slug": "c9"}).status_code == 403
    assert client.post("/campaigns/c/archive", data={}).status_code == 403
    page = client.get("/campaigns/c")
    assert page.status_code == 200 and 'id="rename-form"' not in page.text and 'id="lifecycle"' in page.text
    _browser_as(app, client, "Otto", Role.operator)
    moved = client.post("/campaigns/c/rename", data={"slug": "c9"}, follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == "/campaigns/c9"
    assert client.get("/campaigns/c", follow_redirects=False).headers["location"] == "/campaigns/c9"
    assert client.post("/campaigns/c9/archive", data={}, follow_redirects=False).status_code == 303
    front = client.get("/")
    assert 'id="archived-campaigns"' in front.text and "/campaigns/c9" in front.text.split('id="archived-campaigns"')[1]
    page = client.get("/campaigns/c9")
    assert (
        'id="archived-banner"' in page.text and 'id="restore-form"' in page.text and 'id="delete-form"' not in page.text
    )
    assert client.post("/campaigns/c9/delete", data={"confirm": "C"}).status_code == 403
    _browser_as(app, client, "Ada", Role.admin)
    assert 'id="delete-form"' in client.get("/campaigns/c9").text
    gone = client.post("/campaigns/c9/delete", data={"confirm": "C"}, follow_redirects=False)
    assert gone.status_code == 303 and gone.headers["location"] == "/"
