"""A session that ends takes its open streams with it: the page feed and the live-log
websocket opened with a session that is then revoked (by an admin, from this server or from another
process), or with an API token that is then revoked, or by a user who is then disabled, close; a stream on a session that is still live
stays open and keeps its notices.

Real uvicorn (ThreadServer), real websockets, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
from urllib.parse import urlencode

import httpx
import pytest
from sqlmodel import select
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.typing import Origin

from app.db import session_scope
from app.domain.credentials import hash_token
from app.domain.logins import create_api_token, revoke_all_sessions
from app.domain.users import create_user
from app.models import AuthToken, BrowserSession, Role
from app.protocol.messages import CloseCode
from app.security import CSRF_HEADER, SESSION_COOKIE
from app.state import app_state
from tests.support.feeds import FeedReader
from tests.support.servers import ThreadServer
from tests.support.trials import ProtocolRunner, command_recipe, make_settings, new_runner_token, seed_campaign

# The periodic check is what notices a revoke made by another process (`campaign sessions revoke`);
# it is long here so that a revoke made through this server must close streams by itself, at once.
SLOW_RECHECK_S = 3600.0


def _server(tmp_path, db_url, recheck_s: float) -> ThreadServer:
    return ThreadServer(make_settings(tmp_path, db_url, access_recheck_s=recheck_s)).start()


def _session_row_id(srv: ThreadServer, cookie: str) -> int:
    operator = app_state(srv.app).session_signer.read(cookie)
    assert operator is not None and operator.session_id is not None
    session_id = operator.session_id
    with session_scope(srv.engine) as s:
        row = s.exec(select(BrowserSession).where(BrowserSession.session_hash == hash_token(session_id))).one()
        assert row.id is not None
        return row.id


def _feed(srv: ThreadServer, cookie: str | None = None, token: str | None = None) -> FeedReader:
    headers = {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = f"{srv.url}/api/pages/feed?" + urlencode([("topic", "runners")])
    reader = FeedReader(url, headers, {SESSION_COOKIE: cookie} if cookie else None)
    assert reader.status == 101
    return reader


def _a_trial(srv: ThreadServer) -> tuple[int, ProtocolRunner]:
    seed_campaign(srv.engine, "spec", [{"key": "echo", "title": "Echo", "recipe": command_recipe("echo", "hi")}])
    _, token = new_runner_token(srv.engine)
    runner = ProtocolRunner(srv.ws_url, token)
    r = httpx.post(f"{srv.url}/api/campaigns/spec/run-next", headers=srv.api_headers(), timeout=30)
    assert r.json()["started"], r.text
    d = runner.expect("dispatch")
    runner.started(d)
    return d.trial_id, runner


def _log_socket(stack: contextlib.ExitStack, srv: ThreadServer, trial_id: int, cookie: str):
    ws = stack.enter_context(
        connect(
            f"{srv.ws_url}/api/trials/{trial_id}/logs/ws",
            origin=Origin(srv.url),
            additional_headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
            open_timeout=10,
        )
    )
    assert json.loads(ws.recv(timeout=10))["type"] == "state"
    return ws


def _closed_with(ws, timeout: float = 15) -> int | None:
    """Read until the server closes the socket; its close code."""
    try:
        while True:
            ws.recv(timeout=timeout)
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else None


@pytest.fixture
def srv(tmp_path, db_url):
    server = _server(tmp_path, db_url, SLOW_RECHECK_S)
    try:
        yield server
    finally:
        server.stop()


def test_an_admin_revoking_a_session_closes_its_feed_and_live_log_at_once(srv):
    trial_id, runner = _a_trial(srv)
    revoked, kept = srv.session_cookie(), srv.session_cookie()
    feed, other_feed = _feed(srv, revoked), _feed(srv, kept)
    with contextlib.ExitStack() as stack:
        ws = _log_socket(stack, srv, trial_id, revoked)
        other_ws = _log_socket(stack, srv, trial_id, kept)
        try:
            _revoke_one_and_keep_the_other(srv, revoked, feed, other_feed, ws, other_ws, runner)
        finally:
            for reader in (feed, other_feed):
                reader.close()
            runner.close()


def _revoke_one_and_keep_the_other(srv, revoked, feed, other_feed, ws, other_ws, runner) -> None:
    """Revoke the first session through the API: its streams close; the second session's stay open."""
    r = httpx.delete(f"{srv.url}/api/sessions/{_session_row_id(srv, revoked)}", headers=srv.api_headers())
    assert r.status_code == 204, r.text
    assert feed.ended.wait(15), "the revoked session's page feed stayed open"
    assert feed.error is None and feed.close_code == CloseCode.UNAUTHORIZED  # closed by the server: log in again
    assert _closed_with(ws) == CloseCode.UNAUTHORIZED
    # It cannot come back: a reconnect with the revoked session is refused.
    again = FeedReader(f"{srv.url}/api/pages/feed?topic=runners", {"Origin": srv.url}, {SESSION_COOKIE: revoked})
    assert again.status == 401
    again.close()
    # The other session's streams are open and still get what happens.
    runner.close()  # the runner goes offline: a "runners" notice
    assert other_feed.until("runners").event == "feed:runners"
    assert not other_feed.ended.is_set()
    assert other_ws.ping().wait(10)  # the socket still answers
    assert app_state(srv.app).access_watch.closed == 2


def test_logging_out_and_revoking_a_token_close_their_streams(srv):
    cookie = srv.session_cookie()
    with session_scope(srv.engine) as s:
        token = create_api_token(s, "script")
    by_cookie, by_token = _feed(srv, cookie), _feed(srv, token=token)
    try:
        operator = app_state(srv.app).session_signer.read(cookie)
        assert operator is not None
        csrf = operator.csrf_token
        r = httpx.post(
            f"{srv.url}/logout",
            cookies={SESSION_COOKIE: cookie},
            headers={"Origin": srv.url, CSRF_HEADER: csrf},
        )
        assert r.status_code in (200, 303), r.text
        assert by_cookie.ended.wait(15), "logging out left the page feed open"
        assert by_cookie.close_code == CloseCode.UNAUTHORIZED
        assert not by_token.ended.is_set()
        with session_scope(srv.engine) as s:
            token_id = s.exec(select(AuthToken.id).where(AuthToken.token_hash == hash_token(token))).one()
        r = httpx.delete(f"{srv.url}/api/tokens/{token_id}", headers=srv.api_headers())
        assert r.status_code == 204, r.text
        assert by_token.ended.wait(15), "the revoked token's page feed stayed open"
        assert by_token.close_code == CloseCode.UNAUTHORIZED
    finally:
        by_cookie.close()
        by_token.close()


def test_disabling_a_user_closes_their_streams_at_once(srv):
    """No route asks for the check: the commit of a transaction that ended credentials does (app/services/access.py)."""
    with session_scope(srv.engine) as s:
        user = create_user(s, "ops", Role.operator)
        token = create_api_token(s, "ops-script", user)
        user_id = user.id
    feed = _feed(srv, token=token)
    try:
        r = httpx.patch(f"{srv.url}/api/users/{user_id}", json={"disabled": True}, headers=srv.api_headers())
        assert r.status_code == 200, r.text
        assert feed.ended.wait(15), "the disabled user's page feed stayed open"
        assert feed.close_code == CloseCode.UNAUTHORIZED
    finally:
        feed.close()


def test_a_revoke_from_another_process_closes_streams_within_the_recheck(tmp_path, db_url):
    """`campaign sessions revoke` writes the database from another process: the periodic check finds it."""
    srv = _server(tmp_path, db_url, 0.5)
    try:
        trial_id, runner = _a_trial(srv)
        cookie = srv.session_cookie()
        feed = _feed(srv, cookie)
        try:
            with contextlib.ExitStack() as stack:
                ws = _log_socket(stack, srv, trial_id, cookie)
                with session_scope(srv.engine) as s:  # what the CLI does, outside the server
                    assert revoke_all_sessions(s) >= 1
                assert feed.ended.wait(30), "the page feed outlived its session"
                assert _closed_with(ws, timeout=30) == CloseCode.UNAUTHORIZED
        finally:
            feed.close()
            runner.close()
    finally:
        srv.stop()
