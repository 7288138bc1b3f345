"""Login on by default: every state-changing route refuses anonymous callers; CSRF and Origin checks."""

import re

import pytest
from fastapi.routing import APIRoute, iter_route_contexts

from app.security import CSRF_HEADER
from app.state import app_state

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
# Routes anyone may call. Share pages are read-only (GET); the first-admin form and accepting an
# invite spend a one-time secret carried in the form (tests/users covers them).
PUBLIC_WRITES: set[str] = {"/login", "/invite/{token}"}


def _fill(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def _unsafe_routes(app):
    # FastAPI >= 0.16x keeps included routers as they are; iter_route_contexts flattens them.
    for ctx in iter_route_contexts(app.routes):
        if isinstance(ctx.route, APIRoute):
            for method in sorted(set(ctx.methods or ()) & UNSAFE):
                if ctx.path not in PUBLIC_WRITES:
                    yield method, ctx.path


@pytest.fixture(params=["sqlite"])
def db_url(request, tmp_path):
    yield f"sqlite:///{tmp_path / 'auth.db'}"


def test_every_state_changing_route_refuses_anonymous(app, client):
    routes = list(_unsafe_routes(app))
    assert len(routes) >= 10, routes  # the inventory alone has this many; a router that went missing shows here
    for method, path in routes:
        r = client.request(method, _fill(path), data={"x": "1"}, follow_redirects=False)
        # Share pages are public and read-only: they refuse every write outright.
        allowed = (401, 403, 405) if path.startswith("/s/") else (401, 403)
        assert r.status_code in allowed, (method, path, r.status_code, r.text[:200])


def test_anonymous_pages_redirect_to_login_and_api_says_401(client):
    r = client.get("/campaigns/x", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    r = client.get("/api/campaigns")
    assert r.status_code == 401 and "Login required" in r.json()["detail"]


def test_login_link_works_once(app, client):
    from tests.support.auth import login_token

    token = login_token(app)
    assert client.get(f"/login?token={token}", follow_redirects=False).status_code == 303
    assert client.get("/api/campaigns").status_code == 200
    client.cookies.clear()
    r = client.get(f"/login?token={token}", follow_redirects=False)
    assert r.status_code == 403 and "not valid" in r.text
    assert client.get("/api/campaigns").status_code == 401


def test_login_redirect_stays_on_site(app, client):
    from tests.support.auth import login_token

    r = client.get(f"/login?token={login_token(app)}&next=//evil.example/x", follow_redirects=False)
    assert r.headers["location"] == "/"


def test_forged_cookie_is_refused(client):
    client.cookies.set("cb_session", "eyJuYW1lIjoib3BlcmF0b3IiLCJjc3JmIjoieCJ9.forged.sig")
    assert client.get("/api/campaigns").status_code == 401


def test_csrf_token_required_for_cookie_writes(operator_client):
    ok = operator_client.post("/api/campaigns", json={"slug": "a", "name": "A"})
    assert ok.status_code == 201
    token = operator_client.headers.pop(CSRF_HEADER)
    r = operator_client.post("/api/campaigns", json={"slug": "b", "name": "B"})
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    r = operator_client.post("/api/campaigns", json={"slug": "b", "name": "B"}, headers={CSRF_HEADER: "wrong"})
    assert r.status_code == 403
    # A form post may carry the token as a field instead of a header.
    r = operator_client.post("/campaigns", data={"slug": "c", "name": "C", "csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    r = operator_client.post(
        "/campaigns", data={"slug": "d", "name": "D", "csrf_token": "nope"}, follow_redirects=False
    )
    assert r.status_code == 403
    assert [c["slug"] for c in operator_client.get("/api/campaigns").json()] == ["a", "c"]


def test_cross_origin_write_is_refused(operator_client):
    r = operator_client.post(
        "/api/campaigns", json={"slug": "a", "name": "A"}, headers={"Origin": "http://evil.example"}
    )
    assert r.status_code == 403 and "Cross-origin" in r.json()["detail"]
    r = operator_client.post("/api/campaigns", json={"slug": "a", "name": "A"}, headers={"Origin": "http://127.0.0.1"})
    assert r.status_code == 201


def test_api_tokens_need_no_csrf_and_can_be_revoked(app, client):
    from app.db import session_scope
    from app.domain.logins import revoke_api_token
    from tests.support.auth import api_token

    headers = {"Authorization": f"Bearer {api_token(app, 'ci')}"}
    assert client.post("/api/campaigns", json={"slug": "a", "name": "A"}, headers=headers).status_code == 201
    with session_scope(app_state(app).engine) as s:
        assert revoke_api_token(s, "ci") == 1
    assert client.post("/api/campaigns", json={"slug": "b", "name": "B"}, headers=headers).status_code == 401
    assert client.get("/api/campaigns", headers={"Authorization": "Bearer cbt_unknown"}).status_code == 401
