"""Property 3: sessions that can end, one session per login link, rate-limited failed logins.

Against a real `campaign serve` (uvicorn) on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading

import httpx
import pytest
from sqlalchemy import Engine, func
from sqlmodel import select

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from app.models import BrowserSession
from tests.support.security import csrf_from_page
from tests.support.servers import LiveServer, start_live_server, stop_live_server


class _Server(LiveServer):
    """The live server and an engine on its database."""

    def __init__(self, live: LiveServer, engine: Engine) -> None:
        super().__init__(live.proc, live.url, live.login_url, live.env, live.log)
        self.engine = engine


@pytest.fixture
def server(tmp_path, board_db):
    srv = _Server(start_live_server(tmp_path, board_db, "--no-runner"), make_engine(board_db))
    try:
        yield srv
    finally:
        srv.engine.dispose()
        stop_live_server(srv)


def _new_login_url(server) -> str:
    with session_scope(server.engine) as session:
        return f"/login?token={create_login_token(session, 600)}"


def _logged_in(server) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=30)
    assert client.get(_new_login_url(server), follow_redirects=False).status_code == 303
    return client


def _replay(server, cookies: httpx.Cookies, token: str) -> tuple[int, int]:
    """(GET / status, POST status) for a client holding only the old cookie."""
    client = httpx.Client(base_url=server.url, timeout=30, cookies=cookies)
    page = client.get("/", follow_redirects=False).status_code
    post = client.post(
        "/campaigns",
        data={"slug": "after", "name": "After", "csrf_token": token},
        headers={"Origin": server.url},
        follow_redirects=False,
    ).status_code
    return page, post


def test_logout_ends_the_session_at_once(server):
    client = _logged_in(server)
    token = csrf_from_page(client.get("/").text)
    saved = httpx.Cookies(client.cookies)
    assert _replay(server, saved, token) == (200, 303)  # the cookie works before logout
    r = client.post("/logout", data={"csrf_token": token}, headers={"Origin": server.url}, follow_redirects=False)
    assert r.status_code == 303
    page, post = _replay(server, saved, token)
    assert page == 303 and post == 401  # redirect to /login; the write is refused


def test_an_admin_ends_every_session(server):
    clients = [_logged_in(server) for _ in range(3)]
    tokens = [csrf_from_page(c.get("/").text) for c in clients]
    assert len([line for line in server.cli("sessions", "list").stdout.splitlines() if line.startswith("#")]) == 3
    assert server.cli("sessions", "revoke").stdout.strip() == "ended 3 sessions"
    for client, token in zip(clients, tokens):
        assert _replay(server, client.cookies, token) == (303, 401)
    assert "no live sessions" in server.cli("sessions", "list").stdout


@pytest.mark.both_databases  # concurrent claims of one link (unique key)
def test_twenty_concurrent_uses_of_one_login_link_make_exactly_one_session(server):
    url = _new_login_url(server)
    statuses: list[int] = []
    cookies: list[str | None] = []
    barrier = threading.Barrier(20)

    def redeem() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            barrier.wait()
            r = client.get(url, follow_redirects=False)
            statuses.append(r.status_code)
            cookies.append(r.cookies.get("cb_session"))

    threads = [threading.Thread(target=redeem) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One winner; the others are refused (403), or rate limited (429) once their failures pass the limit.
    assert statuses.count(303) == 1 and set(statuses) - {303} <= {403, 429}, statuses
    assert sum(1 for c in cookies if c) == 1
    with session_scope(server.engine, write=False) as session:
        assert session.exec(select(func.count()).select_from(BrowserSession)).one() == 1


def test_failed_logins_are_rate_limited(server):
    client = httpx.Client(base_url=server.url, timeout=30)
    statuses = [client.get(f"/login?token=login_guess{i}").status_code for i in range(14)]
    assert statuses[:10] == [403] * 10 and set(statuses[10:]) == {429}, statuses
    r = client.get("/login?token=login_guess-more")
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    # Only failures are limited: a valid link from the same address still logs in (behind a proxy a team
    # shares one address), and the next wrong guess is still refused with 429.
    assert client.get(_new_login_url(server), follow_redirects=False).status_code == 303
    assert client.get("/login?token=login_guess-after").status_code == 429


def test_five_hundred_wrong_guesses_never_refuse_a_valid_link(server):
    client = httpx.Client(base_url=server.url, timeout=30)
    statuses = {client.get(f"/login?token=login_wrong{i}").status_code for i in range(500)}
    assert statuses == {403, 429}
    r = client.get(_new_login_url(server), follow_redirects=False)
    assert r.status_code == 303 and r.cookies.get("cb_session")


def test_a_fragment_refresh_without_a_session_is_a_401_in_the_flash_not_the_login_page(client):
    """htmx follows a redirect and swaps what it gets: a fragment refreshed after the session ended (revoked,
    expired) would hold the whole login page. It gets a 401 said in the flash; a page view still redirects."""
    page = client.get("/campaigns/x/charts", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
    fragment = client.get("/trials/1/artifacts", headers={"HX-Request": "true"}, follow_redirects=False)
    assert fragment.status_code == 401
    assert fragment.headers["HX-Retarget"] == "#flash" and "log in again" in fragment.text
    assert "<form" not in fragment.text  # not the login page
