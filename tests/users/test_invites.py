"""Invites on both databases: an admin makes a one-time link (role, optional name, expiry); the
invitee picks a unique, valid name and is logged in with that role. A used, expired, revoked or
unknown invite is a clear page (410), never a 500, and creates nobody."""

from __future__ import annotations

from datetime import timedelta

from sqlmodel import select

from app.db import session_scope
from app.models import Invite, Role, User, utcnow
from app.state import app_state


def _join(client, url: str, name: str, **kw):
    path = url[url.index("/invite/") :]
    return client.post(path, data={"name": name}, follow_redirects=False, **kw)


def test_an_invite_logs_a_teammate_in_once_with_its_role(app, client, login_as):
    admin = login_as()
    made = admin.post("/api/invites", json={"role": "operator", "name": "Grace"})
    assert made.status_code == 201, made.text
    url = made.json()["url"]
    assert url.startswith("http://127.0.0.1/invite/invite_") and made.json()["invite"]["state"] == "open"
    client.cookies.clear()
    page = client.get(url[url.index("/invite/") :])
    assert page.status_code == 200 and 'value="Grace"' in page.text and "operator" in page.text
    # Name taken (any case) or invalid: said next to the field, typed name kept, invite still open.
    r = _join(client, url, "ADMIN")
    assert r.status_code == 409 and "is taken" in r.text and 'value="ADMIN"' in r.text
    r = _join(client, url, "x" * 41)
    assert r.status_code == 422 and "at most 40" in r.text
    r = _join(client, url, "Grace Hopper")
    assert r.status_code == 303 and r.headers["location"] == "/"
    me = client.get("/api/me").json()
    assert (me["name"], me["role"], me["via"]) == ("Grace Hopper", "operator", "session")
    # Used: a clear page, and a second user is not made.
    client.cookies.clear()
    r = client.get(url[url.index("/invite/") :])
    assert r.status_code == 410 and "already been used" in r.text
    r = _join(client, url, "Mallory")
    assert r.status_code == 410 and "already been used" in r.text
    invites = admin.get("/api/invites").json()
    assert invites[0]["state"] == "used" and invites[0]["used_by_id"] == me["id"]
    assert [u["name"] for u in admin.get("/api/users").json()] == ["admin", "Grace Hopper"]


def test_expired_revoked_and_unknown_invites_are_clear_pages(app, client, login_as):
    admin = login_as()
    expired = admin.post("/api/invites", json={"role": "viewer"}).json()
    revoked = admin.post("/api/invites", json={"role": "viewer", "expires_in_days": 1}).json()
    with session_scope(app_state(app).engine) as session:
        row = session.get(Invite, expired["invite"]["id"])
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
        session.add(row)
    assert admin.delete(f"/api/invites/{revoked['invite']['id']}").json()["state"] == "revoked"
    assert admin.delete(f"/api/invites/{revoked['invite']['id']}").status_code == 409  # already revoked
    client.cookies.clear()
    for url, said in [
        (expired["url"], "has expired"),
        (revoked["url"], "was revoked"),
        ("http://127.0.0.1/invite/invite_made-up", "not valid"),
    ]:
        for r in (client.get(url[url.index("/invite/") :]), _join(client, url, "Someone")):
            assert r.status_code == 410 and said in r.text, (url, r.status_code, r.text[:300])
    with session_scope(app_state(app).engine) as session:
        assert [u.name for u in session.exec(select(User)).all()] == ["admin"]
    # Bad invite input through the API is a 422 naming the field.
    r = admin.post("/api/invites", json={"role": "owner"})
    assert r.status_code == 422 and r.json()["field"] == "role"
    r = admin.post("/api/invites", json={"role": "viewer", "expires_in_days": 90})
    assert r.status_code == 422 and r.json()["field"] == "expires_in_days"


def test_invites_from_the_page_show_a_link_to_copy(app, client, login_as):
    admin = login_as()
    admin.headers["accept"] = "text/html"
    page = admin.get("/users")
    assert page.status_code == 200 and "Invite a teammate" in page.text
    r = admin.post("/invites", data={"role": "viewer", "name": "", "days": "3"}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and 'id="invite-url"' in r.text and "/invite/invite_" in r.text
    r = admin.post("/invites", data={"role": "root", "days": "3"}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and "Unknown role" in r.text
    with session_scope(app_state(app).engine) as session:
        invite = session.exec(select(Invite)).one()
        assert invite.role == Role.viewer
        assert invite.expires_at.replace(tzinfo=None) > (utcnow() + timedelta(days=2)).replace(tzinfo=None)
