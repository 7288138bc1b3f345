"""The first login of a new board makes its admin (asking a name, default "admin"); after that,
login links name a user (`campaign login-url --user NAME`) and the first-admin link is spent."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import session_scope
from app.domain.logins import create_login_token
from app.state import app_state
from tests.support.servers import start_live_server, stop_live_server


@pytest.fixture
def new_board(tmp_path, empty_db_url):
    """A board that nobody has logged in to yet (no users), on each database."""
    from app.main import create_app

    settings = Settings(
        data_dir=tmp_path / "data", database_url=empty_db_url, embedded_runner=False, secret_key=uuid.uuid4().hex
    )
    app = create_app(settings)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield app, client


def test_first_login_asks_a_name_and_makes_the_admin(new_board):
    app, client = new_board
    with session_scope(app_state(app).engine) as session:
        link = create_login_token(session, 600)  # no user to name: the first-admin link
    page = client.get(f"/login?token={link}", follow_redirects=False)
    assert page.status_code == 200 and "name this board's admin" in page.text
    assert 'value="admin"' in page.text  # the default name
    # A bad name: said next to the field, what was typed kept, the link still usable.
    r = client.post("/login", data={"token": link, "name": "<b>x</b>"}, follow_redirects=False)
    assert r.status_code == 422 and "display name starts with" in r.text and "&lt;b&gt;x&lt;/b&gt;" in r.text
    # A cross-site post of the form is refused.
    r = client.post("/login", data={"token": link, "name": "Mallory"}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = client.post("/login", data={"token": link, "name": "  Ada  Lovelace "}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert client.get("/api/me").json() == {"id": 1, "name": "Ada Lovelace", "role": "admin", "via": "session"}
    # The link was spent; a new link names the admin and logs straight in.
    client.cookies.clear()
    assert client.get(f"/login?token={link}", follow_redirects=False).status_code == 403
    with session_scope(app_state(app).engine) as session:
        second = create_login_token(session, 600)
    assert client.get(f"/login?token={second}", follow_redirects=False).status_code == 303
    assert client.get("/api/me").json()["name"] == "Ada Lovelace"


@pytest.mark.both_databases  # a race settled by the database
def test_a_second_first_admin_link_cannot_make_a_second_admin(new_board):
    app, client = new_board
    with session_scope(app_state(app).engine) as session:
        first, second = create_login_token(session, 600), create_login_token(session, 600)
    assert client.post("/login", data={"token": first, "name": "admin"}, follow_redirects=False).status_code == 303
    client.cookies.clear()
    r = client.post("/login", data={"token": second, "name": "Eve"}, follow_redirects=False)
    assert r.status_code == 403 and "already has an admin" in r.text
    assert [
        u["name"]
        for u in TestClient(app, base_url="http://127.0.0.1").get("/api/users", headers=_admin_token(app)).json()
    ] == ["admin"]


def _admin_token(app) -> dict[str, str]:
    from tests.support.auth import api_token

    return {"Authorization": f"Bearer {api_token(app, 'check')}"}


def test_campaign_serve_prints_the_first_admin_link_then_login_url_names_users(tmp_path):
    server = start_live_server(tmp_path, f"sqlite:///{tmp_path / 'new.db'}", "--no-runner", first_login_done=False)
    try:
        assert "First login, makes the board's admin" in server.log.read_text()
        with httpx.Client(base_url=server.url, timeout=30) as browser:
            path = server.login_url[len(server.url) :]
            form = browser.get(path)
            assert form.status_code == 200 and 'name="name" value="admin"' in form.text
            token = re.search(r'name="token" value="([^"]+)"', form.text)
            assert token
            r = browser.post("/login", data={"token": token.group(1), "name": "admin"}, follow_redirects=False)
            assert r.status_code == 303
            assert browser.get("/api/me").json()["role"] == "admin"
            invite = browser.post(
                "/api/invites",
                json={"role": "viewer"},
                headers={"X-CSRF-Token": _csrf(browser.get("/").text)},
            )
            assert invite.status_code == 201, invite.text
        with httpx.Client(timeout=30) as teammate:
            joined = teammate.post(invite.json()["url"], data={"name": "Vi"}, follow_redirects=False)
            assert joined.status_code == 303
        # `campaign login-url`: the first admin by default, anyone with --user, a clear error otherwise.
        for args, who in [((), "admin"), (("--user", "vi"), "Vi")]:
            url = server.cli("login-url", *args).stdout.strip()
            with httpx.Client(timeout=30) as c:
                assert c.get(url, follow_redirects=False).status_code == 303
                assert c.get(server.url + "/api/me").json()["name"] == who
        failed = server.cli("login-url", "--user", "nobody", check=False)
        assert failed.returncode != 0 and "No user named 'nobody'" in failed.stdout + failed.stderr
        # `campaign token create --user`: the token carries that user's role.
        token_text = server.cli("token", "create", "vi-script", "--user", "Vi").stdout.strip()
        me = httpx.get(server.url + "/api/me", headers={"Authorization": f"Bearer {token_text}"}).json()
        assert (me["name"], me["role"], me["via"]) == ("Vi", "viewer", "token")
        assert "Vi  viewer" in server.cli("users", "list").stdout
    finally:
        stop_live_server(server)


def _csrf(html: str) -> str:
    from tests.support.security import csrf_from_page

    return csrf_from_page(html)
