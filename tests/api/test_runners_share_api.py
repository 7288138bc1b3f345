"""GET /api/runners and /api/runners/{id}; share links over the API (list, create, revoke) on SQLite and
PostgreSQL: a created link opens the status page without login until it is revoked."""

from __future__ import annotations

import pytest


def test_runners_list_and_detail(api, seeded):
    listed = {r["name"]: r for r in api.get("/api/runners").json()}
    assert set(listed) == {"node-1", "node-2"}
    busy = listed["node-2"]  # holds the running trial (and campaign d's dispatched one)
    assert busy["status"] == "busy" and busy["trial"]["state"] in ("running", "dispatched")
    assert "8 GPUs" in busy["summary"] and "SM 12.0" in busy["summary"] and "torch 2.11.0+cu130" in busy["summary"]
    assert listed["node-1"]["status"] == "online" and listed["node-1"]["trial"] is None
    one = api.get(f"/api/runners/{seeded.runner_ids['node-1']}").json()
    assert one["name"] == "node-1" and one["fingerprint"]["torch"] == "2.10.0+cu128" and one["revoked_at"] is None
    assert api.post(f"/api/runners/{seeded.runner_ids['node-1']}/revoke").status_code == 200
    revoked = api.get(f"/api/runners/{seeded.runner_ids['node-1']}").json()
    assert revoked["status"] == "revoked" and revoked["revoked_at"].endswith("Z")


@pytest.mark.parametrize(
    "path,status", [("/api/runners/987654", 404), ("/api/runners/0", 422), ("/api/runners/99999999999999999999", 422)]
)
def test_runner_bad_ids(api, seeded, path, status):
    r = api.get(path)
    assert r.status_code == status and r.json()["detail"]


def test_share_links_create_list_revoke(api, seeded, client):
    assert api.get("/api/campaigns/c/share-links").json() == []
    r = api.post("/api/campaigns/c/share-links", json={"name": "  weekly review  "})
    assert r.status_code == 201, r.text
    link = r.json()
    assert link["name"] == "weekly review" and link["created_by"] == "admin" and link["revoked_at"] is None
    assert link["url"].startswith("http://127.0.0.1/s/")
    second = api.post("/api/campaigns/c/share-links", json={}).json()
    assert second["name"] == "status page"
    assert [x["id"] for x in api.get("/api/campaigns/c/share-links").json()] == [second["id"], link["id"]]

    path = link["url"].removeprefix("http://127.0.0.1")
    anonymous = client.get(path, headers={"Authorization": ""})
    assert anonymous.status_code == 200 and "C" in anonymous.text
    revoked = api.post(f"/api/campaigns/c/share-links/{link['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["url"] is None and revoked.json()["revoked_at"]
    assert client.get(path, headers={"Authorization": ""}).status_code == 404
    again = api.post(f"/api/campaigns/c/share-links/{link['id']}/revoke")
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked.json()["revoked_at"]


@pytest.mark.parametrize(
    "method,path,body,status",
    [
        ("post", "/api/campaigns/c/share-links", {"name": "x" * 121}, 422),
        ("post", "/api/campaigns/c/share-links", {"name": "ok", "extra": 1}, 422),
        ("post", "/api/campaigns/c/share-links", {"name": 5}, 422),
        ("post", "/api/campaigns/c/share-links", {"name": "a\x00b"}, 422),
        ("post", "/api/campaigns/c/share-links", {"name": "two\nlines"}, 422),
        ("post", "/api/campaigns/nope/share-links", {"name": "x"}, 404),
        ("get", "/api/campaigns/nope/share-links", None, 404),
        ("post", "/api/campaigns/c/share-links/424242/revoke", None, 404),
        ("post", "/api/campaigns/c/share-links/99999999999999999999/revoke", None, 422),
    ],
)
def test_share_link_errors(api, seeded, method, path, body, status):
    r = getattr(api, method)(path, **({"json": body} if body is not None else {}))
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]


def test_a_link_of_another_campaign_is_not_found(api, seeded):
    link = api.post("/api/campaigns/d/share-links", json={"name": "d"}).json()
    r = api.post(f"/api/campaigns/c/share-links/{link['id']}/revoke")
    assert r.status_code == 404 and "No share link" in r.json()["detail"]
    assert api.get("/api/campaigns/d/share-links").json()[0]["revoked_at"] is None
