"""JSON API: the inventory operations, validation as 4xx with a message (never 500)."""

import pytest


@pytest.fixture
def api(client, api_headers):
    client.headers.update(api_headers)
    assert client.post("/api/campaigns", json={"slug": "c", "name": "C"}).status_code == 201
    for key in ("a", "b", "c"):
        assert client.post("/api/campaigns/c/approaches", json={"key": key, "title": key.upper()}).status_code == 201
    return client


def test_inventory_operations(api):
    r = api.patch(
        "/api/campaigns/c/approaches/b",
        json={"evidence": "205 us -> 5.3 us", "requirements": {"gpus": 8, "min_sm": "9.0"}},
    )
    assert r.status_code == 200 and r.json()["requirements"] == {"gpus": 8, "min_sm": "9.0", "software": []}
    r = api.post("/api/campaigns/c/approaches/c/move", json={"position": 1})
    assert [a["key"] for a in r.json()] == ["c", "a", "b"]
    r = api.post("/api/campaigns/c/approaches/a/status", json={"status": "deferred", "reason": "needs a build"})
    assert r.status_code == 200 and r.json()["to_status"] == "deferred"
    hist = api.get("/api/campaigns/c/approaches/a/history").json()
    assert [h["to_status"] for h in hist] == ["deferred", "untested"]
    assert api.delete("/api/campaigns/c/approaches/b").json()["removed"]["trials"] == 0  # it had none
    assert [a["key"] for a in api.get("/api/campaigns/c/approaches").json()] == ["c", "a"]
    text = api.get("/api/campaigns/c/export").text
    assert "format: campaign-board/v1" in text and "needs a build" in text
    r = api.post(
        "/api/campaigns/import",
        content=text.replace("name: C", "name: C2"),
        headers={"Content-Type": "application/x-yaml"},
    )
    assert r.status_code == 200, r.text
    assert api.get("/api/campaigns/c").json()["name"] == "C2"


@pytest.mark.parametrize(
    "method,path,body,status",
    [
        ("post", "/api/campaigns", {"slug": "Bad Slug", "name": "x"}, 422),
        ("post", "/api/campaigns", {"slug": "ok"}, 422),
        ("post", "/api/campaigns", {"slug": "ok", "name": "x", "surprise": 1}, 422),
        ("post", "/api/campaigns", {"slug": "c", "name": "dup"}, 409),
        ("post", "/api/campaigns", "not json", 422),
        ("post", "/api/campaigns/c/approaches", {"key": "a", "title": "dup"}, 409),
        ("post", "/api/campaigns/c/approaches", {"key": "z", "title": ""}, 422),
        ("post", "/api/campaigns/c/approaches", {"key": "z", "title": "Z", "requirements": {"gpus": -1}}, 422),
        ("post", "/api/campaigns/c/approaches", {"key": "z", "title": "Z", "requirements": {"min_sm": "twelve"}}, 422),
        ("post", "/api/campaigns/c/approaches/a/status", {"status": "dead_end"}, 422),
        ("post", "/api/campaigns/c/approaches/a/status", {"status": "exploded", "reason": "x"}, 422),
        ("post", "/api/campaigns/c/approaches/a/status", {"status": "running"}, 422),
        ("post", "/api/campaigns/c/approaches/a/move", {"position": 0}, 422),
        ("patch", "/api/campaigns/c", {"baseline_tok_s": -5}, 422),
        ("get", "/api/campaigns/nope", None, 404),
        ("get", "/api/campaigns/c/approaches/nope", None, 404),
        ("post", "/api/campaigns/import", None, 422),
        # Found by schemathesis: nulls for NOT NULL columns, and ids past 64 bits, were 500s.
        ("patch", "/api/campaigns/c", {"name": None}, 422),
        ("patch", "/api/campaigns/c/approaches/a", {"title": None}, 422),
        ("get", "/api/trials/2390027804674998068366540800", None, 422),
        ("get", "/api/trials/-1/log", None, 422),
        ("post", "/api/runners/322498690408431377973248/revoke", None, 422),
    ],
)
def test_validation_errors_are_4xx_with_a_message(api, method, path, body, status):
    kwargs = {}
    if isinstance(body, str):
        kwargs = {"content": body, "headers": {"Content-Type": "application/json"}}
    elif body is not None:
        kwargs = {"json": body}
    r = getattr(api, method)(path, **kwargs)
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]


def test_bad_campaign_file_over_the_api_names_line_and_field(api):
    bad = "format: campaign-board/v1\ncampaign: {slug: c, name: C}\napproaches:\n- key: a\n  title: A\n  status: sure\n"
    r = api.post("/api/campaigns/import", content=bad, headers={"Content-Type": "application/x-yaml"})
    assert r.status_code == 422 and "line 6" in r.json()["detail"] and "status" in r.json()["detail"]
    assert [a["status"] for a in api.get("/api/campaigns/c/approaches").json()] == ["untested"] * 3


@pytest.mark.both_databases  # timestamps round trip in UTC
def test_null_clears_only_nullable_fields_and_times_are_utc(api):
    assert api.patch("/api/campaigns/c", json={"baseline_tok_s": 82}).json()["baseline_tok_s"] == 82
    body = api.patch("/api/campaigns/c", json={"baseline_tok_s": None}).json()
    assert body["baseline_tok_s"] is None and body["name"] == "C"
    assert body["created_at"].endswith("Z") and body["updated_at"].endswith("Z")


def test_openapi_describes_the_inventory(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/campaigns/{slug}/approaches/{key}/status" in paths
    assert "post" in paths["/api/campaigns"]
