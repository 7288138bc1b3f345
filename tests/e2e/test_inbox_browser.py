"""Issue 45 item 6, in Chromium against a real `campaign serve` with its embedded runner: a viewer watches an
approach; its trial ends (started by an operator through the API); the viewer's Inbox count in the navigation
rises live, without a reload, on a page with no page feed of its own; the inbox lists it (its text escaped)
and reading it brings the count down. Another person's inbox topic is refused by the page feed."""

from __future__ import annotations

import sys
import time

import httpx
import pytest
from playwright.sync_api import expect

from app.db import make_engine
from app.models import Role
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser


def test_a_watched_trial_end_reaches_the_inbox_live(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'inbox.db'}"
    server = start_live_server(tmp_path, db_url)  # with the embedded runner
    engine = make_engine(db_url)
    context = None
    try:
        recipe = command_recipe(sys.executable, "-c", "print('<b>KeyError: 12</b>')")
        seed_campaign(engine, "spec", [{"key": "alpha", "title": "Alpha", "recipe": recipe}])
        api = {"Authorization": "Bearer " + server.cli("token", "create", "ops").stdout.strip()}
        context, page = login_context(browser, server.url, engine, "vera", role=Role.viewer)
        page.goto(f"{server.url}/campaigns/spec/approaches/alpha")
        page.click("[data-testid=watch-form] button")
        expect(page.locator("[data-testid=watch-form] button")).to_have_text("Unwatch this approach")
        page.goto(f"{server.url}/inbox")  # a page with no page feed of its own: the navigation has one
        page.wait_for_selector(".inbox-feed[data-feed=open]")
        expect(page.locator("#inbox-link")).to_have_text("Inbox")
        page.evaluate(MARK)
        deadline = time.monotonic() + 60
        while True:
            r = httpx.post(f"{server.url}/api/campaigns/spec/approaches/alpha/run", headers=api).json()
            if r["started"] or r["queued"]:
                break
            assert time.monotonic() < deadline, r
            time.sleep(0.3)
        expect(page.locator("[data-testid=inbox-unread]")).to_have_text("1", timeout=60000)
        assert page.evaluate(NOT_RELOADED)
        page.reload()
        item = page.locator(".inbox-items li[data-event='trial.ended']")
        expect(item).to_have_count(1)
        assert f"trial #{r['trial_id']}" in item.inner_text()
        item.locator("button:has-text('Mark read')").click()
        expect(page.locator(".inbox-items li.unread")).to_have_count(0)
        expect(page.locator("[data-testid=inbox-unread]")).to_have_count(0)  # the count follows, live
        # The API says the same for the viewer's own token; the page feed refuses another person's inbox.
        body = page.request.get(f"{server.url}/api/inbox").json()
        assert body["unread"] == 0 and body["items"][0]["event"] == "trial.ended"
        refused = page.evaluate(
            """(url) => new Promise((done) => { const ws = new WebSocket(url);
                 ws.onopen = () => done("open"); ws.onerror = () => done("refused"); })""",
            server.url.replace("http", "ws") + "/api/pages/feed?topic=inbox:1",
        )
        assert refused == "refused"
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
