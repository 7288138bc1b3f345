"""Where page events come from, and how code reaches the app's state: the services publish (app/services/), never
a route of app/web or app/api by hand; nothing reads Starlette's untyped `app.state` but app/state.py, nor its
untyped `request.state` but app/deps.py (`request_state`). Read with
ast, nothing imported. And the writes that moved into app/services/campaigns.py tell open pages, whichever route
makes them (the charts page's model inputs included)."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from sqlmodel import select

from app.db import session_scope
from app.models import Campaign
from app.security import SESSION_COOKIE
from app.services.events import campaign, feed_path
from tests.support.feeds import FeedReader
from tests.support.trials import command_recipe, seed_campaign

ROOT = Path(__file__).resolve().parent.parent.parent
PUBLISHERS = {"publish", "after_commit", "publish_threadsafe"}  # app/services/events.py's ways to publish


def by_hand_publishes(path: Path) -> list[str]:
    """`line: call` for every call of a page feed publisher in this file, and every import of one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in PUBLISHERS:
                found.append(f"{node.lineno}: {ast.unparse(func)}")
        elif isinstance(node, ast.ImportFrom) and node.module == "app.services.events":
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in PUBLISHERS]
    return found


def untyped_state_reads(path: Path) -> list[str]:
    """`line: expression` for every `<app>.state.X` (an app named `app`, `<x>.app` or `scope["app"]`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "state"
        ):
            continue
        owner = node.value.value
        if (
            (isinstance(owner, ast.Name) and owner.id == "app")
            or (isinstance(owner, ast.Attribute) and owner.attr == "app")
            or (
                isinstance(owner, ast.Subscript)
                and isinstance(owner.slice, ast.Constant)
                and owner.slice.value == "app"
            )
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


REQUESTS = {"request", "conn", "ws", "websocket"}  # what the board's code calls a request or a socket


def untyped_request_state(path: Path) -> list[str]:
    """`line: expression` for every `<request>.state.X`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "state"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in REQUESTS
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_route_publishes_page_events_by_hand():
    routes = sorted([*ROOT.joinpath("app", "web").rglob("*.py"), *ROOT.joinpath("app", "api").rglob("*.py")])
    assert len(routes) > 20
    found = {p.relative_to(ROOT).as_posix(): by_hand_publishes(p) for p in routes}
    assert {p: calls for p, calls in found.items() if calls} == {}
    # The check sees the services' publishes.
    assert by_hand_publishes(ROOT / "app" / "services" / "campaigns.py")
    assert by_hand_publishes(ROOT / "app" / "services" / "runners.py")


def test_nothing_reads_the_untyped_app_state():
    paths = sorted([*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("tests").rglob("*.py")])
    found = {p.relative_to(ROOT).as_posix(): untyped_state_reads(p) for p in paths if p.name != "state.py"}
    assert {p: reads for p, reads in found.items() if reads} == {}


def test_only_deps_touches_the_untyped_request_state():
    paths = sorted(ROOT.joinpath("app").rglob("*.py"))
    found = {p.relative_to(ROOT).as_posix(): untyped_request_state(p) for p in paths}
    assert {p: uses for p, uses in found.items() if uses} == {"app/deps.py": ["37: request.state.board"]}


def test_the_checks_can_fail(tmp_path):
    route = tmp_path / "route.py"
    route.write_text(
        "from app.services.events import publish\n"
        "def f(request, session):\n"
        "    events.after_commit(session, 'runners')\n"
        "    publish(request.app, 'runners')\n"
        "    request.app.state.engine\n"
        "    app.state.live_hub\n"
        "    scope['app'].state.page_workers\n"
        "    request.state.feed_mark\n"
        "    trial.state.value\n"
    )
    assert by_hand_publishes(route) == ["1: import publish", "3: events.after_commit", "4: publish"]
    assert untyped_state_reads(route) == [
        "5: request.app.state.engine",
        "6: app.state.live_hub",
        "7: scope['app'].state.page_workers",
    ]
    assert untyped_request_state(route) == ["8: request.state.feed_mark"]


@pytest.mark.parametrize(
    ("path", "form"),
    [
        ("/campaigns/spec/charts/acceptance", {"accept_alphas": "0.8, 0.7"}),
        ("/campaigns/spec/charts/whatif/clear/accept_length", {}),
    ],
)
def test_the_charts_pages_model_inputs_tell_open_campaign_pages(srv, path, form):
    """Stored through app/services/campaigns.update_campaign, as the API's PATCH is: the campaign's pages hear."""
    seed_campaign(srv.engine, "spec", [{"key": "echo", "title": "Echo", "recipe": command_recipe("echo", "hi")}])
    with session_scope(srv.engine, write=False) as session:
        topic = campaign(session.exec(select(Campaign.id).where(Campaign.slug == "spec")).one())
    browser = {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}
    feed = FeedReader(srv.url + feed_path([topic]), browser, {SESSION_COOKIE: srv.session_cookie()})
    try:
        assert feed.status == 101
        r = httpx.post(srv.url + path, data=form, headers=srv.api_headers(), follow_redirects=False)
        assert r.status_code in (200, 303), r.text
        assert feed.until(topic).event == "feed:campaign"
    finally:
        feed.close()
