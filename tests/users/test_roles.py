"""Roles on both databases: a viewer reads everything and changes nothing (every unsafe route of the
app answers 403, by session and by API token), admin-only routes refuse operators, tokens carry
their user's role (now and after a change), the last admin stays, sessions end at once."""

from __future__ import annotations

import re

import pytest

from app.deps import ADMIN_ONLY, VIEWER_REFUSED
from app.models import Role
from tests.support.auth import add_user, api_token
from tests.support.routes import fill, unsafe_routes


def refuses_every_change(app, request) -> None:
    routes = unsafe_routes(app)
    assert len(routes) >= 25, routes  # the inventory, trials, runners, users...: a router gone missing shows here
    for method, path in routes:
        r = request(method, fill(path))
        assert r.status_code == 403, (method, path, r.status_code, r.text[:200])
        assert r.json()["detail"] == VIEWER_REFUSED, (method, path, r.text[:200])


def test_a_viewer_reads_everything_and_changes_nothing(app, client, login_as, api_headers):
    admin = login_as()
    assert admin.post("/api/campaigns", json={"slug": "c1", "name": "One"}).status_code == 201
    approach = {"key": "a1", "title": "First approach"}
    assert admin.post("/api/campaigns/c1/approaches", json=approach).status_code == 201
    viewer = login_as("Vera", Role.viewer)
    viewer.headers["accept"] = "application/json"
    # Reads: pages and the API.
    assert viewer.get("/campaigns/c1").status_code == 200
    assert [c["slug"] for c in viewer.get("/api/campaigns").json()] == ["c1"]
    assert viewer.get("/api/me").json() == {"id": 2, "name": "Vera", "role": "viewer", "via": "session"}
    # Every unsafe route of the app, by session (CSRF token sent: the refusal is the role's) ...
    refuses_every_change(app, lambda method, path: viewer.request(method, path, json={}))
    # ... and by the viewer's API token.
    token = {"Authorization": f"Bearer {api_token(app, 'vera-script', 'Vera')}", "accept": "application/json"}
    refuses_every_change(app, lambda method, path: client.request(method, path, json={}, headers=token))
    # Nothing changed.
    assert admin.get("/api/campaigns/c1/approaches/a1").json()["status"] == "untested"
    # An htmx write answers with the flash the page shows.
    r = viewer.post(
        "/campaigns/c1/approaches/a1/status",
        data={"status": "deferred"},
        headers={"HX-Request": "true", "accept": "text/html"},
    )
    assert r.status_code == 403 and r.headers["HX-Retarget"] == "#flash" and "viewer" in r.text
    # A viewer's pages have no write controls (app.css hides them; the body says the role).
    page = viewer.get("/campaigns/c1", headers={"accept": "text/html"}).text
    assert 'data-role="viewer"' in page and "You are a viewer" in page


def test_admin_only_routes_refuse_operators(app, client, login_as):
    operator = login_as("Otto", Role.operator)
    operator.headers["accept"] = "application/json"
    for method, path in [
        ("GET", "/api/users"),
        ("PATCH", "/api/users/1"),
        ("GET", "/api/invites"),
        ("POST", "/api/invites"),
        ("DELETE", "/api/invites/1"),
        ("GET", "/api/tokens"),
        ("POST", "/api/tokens"),
        ("DELETE", "/api/tokens/1"),
        ("POST", "/api/runners"),
        ("POST", "/api/runners/1/revoke"),
        ("GET", "/users"),
        ("GET", "/tokens"),
        ("POST", "/invites"),
        ("POST", "/users/1/role"),
        ("POST", "/runners"),
    ]:
        r = operator.request(method, path, json={"name": "x", "role": "admin"})
        assert r.status_code == 403 and r.json()["detail"] == ADMIN_ONLY, (method, path, r.status_code, r.text[:200])
    # An operator changes things.
    assert operator.post("/api/campaigns", json={"slug": "ok", "name": "OK"}).status_code == 201


def test_tokens_carry_their_users_role_now_and_after_a_change(app, client, login_as):
    admin = login_as()
    uid = add_user(app, "Tess", Role.viewer)
    headers = {"Authorization": f"Bearer {api_token(app, 'tess-ci', 'Tess')}"}
    assert client.get("/api/me", headers=headers).json() == {
        "id": uid,
        "name": "Tess",
        "role": "viewer",
        "via": "token",
    }
    assert client.post("/api/campaigns", json={"slug": "t", "name": "T"}, headers=headers).status_code == 403
    assert admin.patch(f"/api/users/{uid}", json={"role": "operator"}).json()["role"] == "operator"
    r = client.post("/api/campaigns", json={"slug": "t", "name": "T"}, headers=headers)
    assert r.status_code == 201
    # The history names the person behind the token.
    client.post("/api/campaigns/t/approaches", json={"key": "k", "title": "K"}, headers=headers)
    history = client.get("/api/campaigns/t/approaches/k/history", headers=headers).json()
    assert history[-1]["actor"] == "Tess"
    # Disabled: the token is refused at once; enabled again, it works again.
    assert admin.patch(f"/api/users/{uid}", json={"disabled": True}).json()["disabled"] is True
    assert client.get("/api/campaigns", headers=headers).status_code == 401
    admin.patch(f"/api/users/{uid}", json={"disabled": False})
    assert client.get("/api/campaigns", headers=headers).status_code == 200
    # Tokens made from the UI/API for a user; listed without secrets; revoked at once.
    made = admin.post("/api/tokens", json={"name": "nightly", "user_id": uid}).json()
    assert (made["user_name"], made["role"]) == ("Tess", "operator") and made["token"].startswith("cbt_")
    listed = admin.get("/api/tokens").json()
    assert {t["name"] for t in listed} >= {"tess-ci", "nightly"} and all("token" not in t for t in listed)
    bearer = {"Authorization": f"Bearer {made['token']}"}
    assert client.get("/api/me", headers=bearer).json()["name"] == "Tess"
    assert admin.delete(f"/api/tokens/{made['id']}").status_code == 204
    assert client.get("/api/me", headers=bearer).status_code == 401


@pytest.mark.both_databases  # the admins' row lock (FOR UPDATE)
def test_the_last_admin_can_be_neither_demoted_nor_disabled(app, client, login_as):
    admin = login_as()
    me = admin.get("/api/me").json()
    for change in ({"role": "operator"}, {"role": "viewer"}, {"disabled": True}):
        r = admin.patch(f"/api/users/{me['id']}", json=change)
        assert r.status_code == 409 and "last admin" in r.json()["detail"], r.text
    assert admin.get("/api/me").json()["role"] == "admin"
    # With a second admin, the first may step down; then the second is the last one.
    second = add_user(app, "Ada", Role.admin)
    assert admin.patch(f"/api/users/{me['id']}", json={"role": "operator"}).json()["role"] == "operator"
    ada = login_as("Ada")
    assert ada.patch(f"/api/users/{second}", json={"disabled": True}).status_code == 409
    assert ada.patch(f"/api/users/{second}", json={"role": "bogus"}).status_code == 422
    # The page form says the same, in the flash.
    r = ada.post(f"/users/{second}/role", data={"role": "viewer"}, headers={"HX-Request": "true"})
    assert r.status_code == 409 and "last admin" in r.text


def test_sessions_are_listed_and_revoked_at_once(app, client, login_as):
    admin = login_as()
    viewer_a = login_as("Vic", Role.viewer)
    viewer_b = login_as("Vic")  # a second browser of the same viewer
    other = login_as("Olga", Role.operator)
    mine = viewer_a.get("/api/sessions").json()
    assert len(mine) == 2 and {s["user_name"] for s in mine} == {"Vic"}
    assert [s["current"] for s in mine] == [True, False]
    assert len(admin.get("/api/sessions").json()) == 4  # an admin sees everyone's
    # A viewer ends their own other session: refused on its very next request.
    assert viewer_a.delete(f"/api/sessions/{mine[1]['id']}").status_code == 204
    assert viewer_b.get("/api/campaigns").status_code == 401
    # ... but not someone else's (not even told it exists).
    olga = other.get("/api/sessions").json()[0]["id"]
    assert viewer_a.delete(f"/api/sessions/{olga}").status_code == 404
    assert other.get("/api/campaigns").status_code == 200
    # An admin ends anyone's, from the page too.
    r = admin.post(f"/sessions/{olga}/revoke", headers={"HX-Request": "true"})
    assert r.status_code == 200 and "Olga" not in r.text
    assert other.get("/api/campaigns").status_code == 401
    assert viewer_a.get("/sessions").status_code == 200


def test_users_api_is_in_openapi_with_the_error_shape(client):
    schema = client.get("/openapi.json").json()
    for path, method in [
        ("/api/users", "get"),
        ("/api/users/{user_id}", "patch"),
        ("/api/invites", "post"),
        ("/api/invites/{invite_id}", "delete"),
        ("/api/sessions", "get"),
        ("/api/sessions/{session_id}", "delete"),
        ("/api/tokens", "post"),
        ("/api/me", "get"),
    ]:
        responses = schema["paths"][path][method]["responses"]
        for code in ("401", "403", "404", "409", "422"):
            assert responses[code]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
        assert "role" in responses["403"]["description"]


def test_people_pages_disable_users_and_make_tokens(app, client, login_as):
    admin = login_as()
    admin.headers["accept"] = "text/html"
    htmx = {"HX-Request": "true"}
    uid = add_user(app, "Dora", Role.operator)
    dora = login_as("Dora")
    assert 'data-name="Dora"' in admin.get("/users").text
    # Disabled from the page: her session is refused at once; enabled again, a new login works.
    r = admin.post(f"/users/{uid}/disable", headers=htmx)
    assert r.status_code == 200 and 'id="panel"' in r.text and "disabled" in r.text
    assert dora.get("/api/campaigns").status_code == 401
    admin.post(f"/users/{uid}/enable", headers=htmx)
    assert login_as("Dora").get("/api/me").json()["name"] == "Dora"
    # A token made on the Tokens page is shown once, acts as its user, and is revoked from the page.
    r = admin.post("/tokens", data={"name": "dora-ci", "user_id": str(uid)}, headers=htmx)
    assert r.status_code == 200
    secret = re.search(r'id="new-token" readonly value="(cbt_[^"]+)"', r.text)
    assert secret, r.text
    bearer = {"Authorization": f"Bearer {secret.group(1)}"}
    assert client.get("/api/me", headers=bearer).json()["name"] == "Dora"
    assert secret.group(1) not in admin.get("/tokens").text  # never shown again
    token_id = next(t["id"] for t in admin.get("/api/tokens").json() if t["name"] == "dora-ci")
    assert admin.post(f"/tokens/{token_id}/revoke", headers=htmx).status_code == 200
    assert client.get("/api/me", headers=bearer).status_code == 401
    r = admin.post("/tokens", data={"name": "x", "user_id": "999"}, headers=htmx)
    assert r.status_code == 404 and "No user with id 999" in r.text
    # A viewer's Sessions page lists only their own sessions.
    viewer = login_as("Val", Role.viewer)
    page = viewer.get("/sessions", headers={"accept": "text/html"}).text
    assert "Your sessions" in page and page.count('id="session-') == 1


def test_a_viewer_sees_no_empty_cards_of_controls_it_cannot_use(app, client, login_as):
    """Issue 32 item 15: a viewer's campaign page showed the "Add an approach" card (its form hidden) and an
    empty "Replays" card; an operator's page keeps both."""
    admin = login_as()
    assert admin.post("/api/campaigns", json={"slug": "c1", "name": "One"}).status_code == 201
    page = admin.get("/campaigns/c1").text
    assert 'id="add-approach"' in page
    assert 'id="replays-title"' in admin.get("/campaigns/c1/replays").text
    viewer = login_as("Vera", Role.viewer)
    page = viewer.get("/campaigns/c1").text
    assert "Add an approach" not in page and 'id="add-approach"' not in page
    replays = viewer.get("/campaigns/c1/replays")
    assert replays.status_code == 200 and "Replays" not in replays.text and 'id="replays"' in replays.text
