"""Default deny over the whole route table: every route of the app (every method, pages, API, websockets),
asked by a stranger with its path filled from real rows, answers no data unless it is on the one public
list the app declares (`app.middleware.PUBLIC_ROUTES`). A route added later is covered without a line here."""

from __future__ import annotations

import re

import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute, iter_route_contexts
from starlette.routing import Mount, Route
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from app.db import session_scope
from app.domain import campaigns, demo, runners, sharing
from app.middleware import PUBLIC_ROUTES, is_public
from app.models import Artifact, Invite, NotificationTarget, Replay, Trial, TrialState, utcnow
from app.state import app_state
from tests.support.auth import ensure_admin


@pytest.fixture(params=["sqlite"])
def db_url(request, sqlite_template, tmp_path):
    yield sqlite_template.copy(tmp_path)  # the route table is the same on either database


def _seed(app) -> dict[str, str]:
    """Real rows for every kind of path parameter: a campaign with an approach, a trial with an artifact,
    a runner, a share link, an invite, a notification target, a replay, a user with a session."""
    with session_scope(app_state(app).engine) as session:
        demo.load_demo(session)
        campaign = campaigns.get_campaign(session, "kimi-k25-eagle3")
        approach = campaigns.approaches(session, campaign)[0]
        runner, _token = runners.create_runner(session, "node-public-routes")
        assert campaign.id and approach.id and runner.id
        trial = Trial(campaign_id=campaign.id, approach_id=approach.id, state=TrialState.succeeded, runner_id=runner.id)
        session.add(trial)
        session.flush()
        assert trial.id
        session.add(
            Artifact(
                trial_id=trial.id,
                campaign_id=campaign.id,
                name="results.json",
                size=2,
                sha256="0" * 64,
                content_type="application/json",
            )
        )
        link = sharing.create_share_link(session, campaign, "stakeholders", "admin")
        admin = ensure_admin(session)
        invite = Invite(token_hash="h" * 64, role="viewer", created_by_id=admin.id, expires_at=utcnow())
        session.add(invite)
        target = NotificationTarget(url="json://127.0.0.1:9/", redacted="json://127.0.0.1:9/")
        session.add(target)
        replay = Replay(campaign_id=campaign.id, runner_id=runner.id, runner_name=runner.name)
        session.add(replay)
        session.flush()
        return {
            "slug": campaign.slug,
            "key": approach.key,
            "trial_id": str(trial.id),
            "runner_id": str(runner.id),
            "link_id": str(link.id),
            "token": sharing.share_token(link, app_state(app).settings.resolved_secret_key()),
            "invite_id": str(invite.id),
            "target_id": str(target.id),
            "replay_id": str(replay.id),
            "user_id": str(admin.id),
            "session_row_id": "1",
            "session_id": "1",
            "token_id": "1",
            "item_id": "1",  # an inbox item (the route answers 401 before it looks one up)
            "seq": "0",  # a trial's log chunk
            "name": "results.json",
            "rest": "x",
            "path": "app.css",
            "field": "accept_length",
        }


def _fill(path: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1).split(":")[0]
        assert name in values, f"{path}: no seeded value for {{{name}}}: add one to _seed"
        return values[name]

    return re.sub(r"\{([^}]+)\}", value, path)


def _routes(app) -> list[tuple[str, str]]:
    """(method, path template) for every route of the app; websockets as method "WEBSOCKET"."""
    found: list[tuple[str, str]] = []
    for ctx in iter_route_contexts(app.routes):
        route, path = ctx.route, ctx.path or ""
        if isinstance(route, Mount):
            found.append(("GET", f"{path}/{{path:path}}"))
        elif isinstance(route, APIWebSocketRoute):
            found.append(("WEBSOCKET", path))
        elif isinstance(route, (APIRoute, Route)):
            found += [(method, path) for method in sorted(ctx.methods or ())]
    return found


def test_the_public_list_is_the_only_way_past_the_login(app, client):
    values = _seed(app)
    routes = _routes(app)
    assert len(routes) >= 150, len(routes)  # every router: one gone missing shows here
    templates = {path for _, path in routes}
    assert set(PUBLIC_ROUTES) <= templates, set(PUBLIC_ROUTES) - templates  # no stale entry on the list
    leaks: list[str] = []
    for method, path in routes:
        url = _fill(path, values)
        if path in PUBLIC_ROUTES:
            assert is_public(url), (path, url)
            continue
        assert not is_public(url), f"{path} is not on PUBLIC_ROUTES but its URL {url} matches an entry"
        if method == "WEBSOCKET":
            try:
                with client.websocket_connect(url) as ws:
                    leaks.append(f"WEBSOCKET {path}: accepted, first frame {ws.receive_text()[:80]!r}")
            except (WebSocketDenialResponse, WebSocketDisconnect):
                pass
            continue
        r = client.request(method, url, follow_redirects=False, headers={"accept": "application/json"})
        if 200 <= r.status_code < 300 and r.content:
            leaks.append(f"{method} {path} -> {r.status_code}: {r.text[:80]!r}")
        elif r.status_code < 300 or r.status_code >= 500:
            leaks.append(f"{method} {path} -> {r.status_code} (expected a refusal)")
        # Pages redirect a stranger to the login page rather than answering 401.
        page = client.request(method, url, follow_redirects=False, headers={"accept": "text/html"})
        assert page.status_code in (303, 401, 405), (method, path, page.status_code, page.text[:200])
        if page.status_code == 303:
            assert page.headers["location"].startswith("/login"), (method, path)
    assert leaks == [], "\n".join(leaks)


def test_the_change_points_are_private(app, client):
    values = _seed(app)
    for path in ("/campaigns/{slug}/changes", "/campaigns/{slug}/approaches/{key}/changes"):
        url = _fill(path, values)
        assert client.get(url, headers={"accept": "application/json"}).status_code == 401
    # The same client logged in reads them.
    from tests.support.auth import login_token

    assert client.get(f"/login?token={login_token(app)}", follow_redirects=False).status_code == 303
    assert client.get(_fill("/campaigns/{slug}/changes", values)).status_code == 200
