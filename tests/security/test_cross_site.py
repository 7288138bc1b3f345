"""Property 1: no cross-site or DNS-rebinding control of the board, with or without login.

Against a real `campaign serve` (uvicorn) on SQLite: a cross-site form post, a post without the
CSRF token, and any request or websocket with a foreign Host header are refused.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.security import csrf_from_page, login, websocket_status
from tests.support.servers import LiveServer, start_live_server, stop_live_server

EVIL = "http://evil.example:8000"


class _Server(LiveServer):
    """The live server and whether it requires login."""

    def __init__(self, live: LiveServer, auth: bool) -> None:
        super().__init__(live.proc, live.url, live.login_url, live.env, live.log)
        self.auth = auth


@pytest.fixture(params=["login-disabled", "login-enabled"])
def server(request, tmp_path):
    env = {"CAMPAIGN_AUTH_ENABLED": "false"} if request.param == "login-disabled" else {}
    srv = _Server(
        start_live_server(tmp_path, f"sqlite:///{tmp_path / 'board.db'}", "--no-runner", env=env),
        auth=request.param == "login-enabled",
    )
    try:
        yield srv
    finally:
        stop_live_server(srv)


def _browser(server) -> httpx.Client:
    return login(server.url, server.login_url) if server.auth else httpx.Client(base_url=server.url, timeout=30)


def _campaigns(client: httpx.Client) -> list[str]:
    r = client.get("/api/campaigns", headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    return [c["slug"] for c in r.json()]


def test_cross_site_form_post_is_refused(server):
    client = _browser(server)
    form = {"slug": "pwned", "name": "Pwned"}
    # What a hostile page's auto-submitting form sends: the browser's cookie, a foreign Origin, no token.
    r = client.post("/campaigns", data=form, headers={"Origin": EVIL, "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403, r.text
    # Same origin but without the CSRF token (a form from a page that could not read it).
    r = client.post("/campaigns", data=form, headers={"Origin": server.url})
    assert r.status_code == 403, r.text
    # A foreign Origin with a stolen-looking token is still refused.
    token = csrf_from_page(client.get("/").text)
    r = client.post("/campaigns", data={**form, "csrf_token": token}, headers={"Origin": EVIL})
    assert r.status_code == 403, r.text
    assert "pwned" not in _campaigns(client)
    # The page's own form, with its token and Origin, works.
    r = client.post(
        "/campaigns", data={**form, "csrf_token": token}, headers={"Origin": server.url}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert "pwned" in _campaigns(client)


def test_run_next_cross_site_is_refused(server):
    client = _browser(server)
    token = csrf_from_page(client.get("/").text)
    assert client.post(
        "/campaigns", data={"slug": "c1", "name": "C1", "csrf_token": token}, headers={"Origin": server.url}
    ).status_code in (200, 303)
    r = client.post("/campaigns/c1/run-next", headers={"Origin": EVIL, "HX-Request": "true"})
    assert r.status_code == 403, r.text


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io", "attacker.test:1234"])
def test_foreign_host_is_refused_on_http_and_websockets(server, host):
    port = server.url.rsplit(":", 1)[1]
    for path in ("/", "/healthz", "/api/campaigns", "/login", "/static/app.js"):
        r = httpx.get(server.url + path, headers={"Host": host}, timeout=30)
        assert r.status_code == 400, (path, r.status_code)
    r = httpx.post(server.url + "/campaigns", headers={"Host": host}, data={"slug": "x", "name": "x"}, timeout=30)
    assert r.status_code == 400
    for path in ("/api/runners/ws", "/api/trials/1/logs/ws"):
        assert websocket_status(server.url, path, {"Host": host}) == 400
    # The same requests with a loopback Host are answered.
    assert httpx.get(server.url + "/healthz", headers={"Host": f"localhost:{port}"}, timeout=30).status_code == 200


def test_allowed_hosts_and_public_url_are_accepted(tmp_path):
    srv = start_live_server(
        tmp_path,
        f"sqlite:///{tmp_path / 'board.db'}",
        "--no-runner",
        env={
            "CAMPAIGN_ALLOWED_HOSTS": "board.example.org, other.example.org",
            "CAMPAIGN_PUBLIC_URL": "https://public.example.net",
        },
    )
    try:
        for host in ("board.example.org", "other.example.org:443", "public.example.net", "127.0.0.1"):
            assert httpx.get(srv.url + "/healthz", headers={"Host": host}, timeout=30).status_code == 200, host
        assert httpx.get(srv.url + "/healthz", headers={"Host": "evil.example"}, timeout=30).status_code == 400
        # Behind the TLS proxy the browser's Origin is the public URL: writes from it are accepted.
        client = login(srv.url, srv.login_url)
        token = csrf_from_page(client.get("/").text)
        r = client.post(
            "/campaigns",
            data={"slug": "p", "name": "P", "csrf_token": token},
            headers={"Origin": "https://public.example.net", "Host": "public.example.net"},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
    finally:
        stop_live_server(srv)
