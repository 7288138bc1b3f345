"""In Chromium, against a real `campaign serve`: every live panel of the campaign, approach and Runners
pages re-fetches itself after a change made elsewhere (by the API, another person), never reloaded.

The panels are found on the page itself (every element whose hx-trigger follows a page feed event), so
a panel added later is covered, and one that listens for an event nothing fires (the ranking's
"sse:campaign" after the feed fired "feed:campaign") fails here. The ranking is also checked by what it
shows: a candidate deferred elsewhere leaves "What to try next".
"""

from __future__ import annotations

import sys

import httpx
import pytest
from playwright.sync_api import expect

from app.db import make_engine
from app.services.events import PAGE_EVENTS
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

# Every successful htmx request of the page, by its path as the hx-get wrote it.
RECORD = """() => { window.__fetched = [];
  document.body.addEventListener("htmx:afterRequest", (e) => {
    if (e.detail.successful) window.__fetched.push(e.detail.pathInfo.requestPath); });
  return true; }"""
# The hx-get of every panel on the page that follows the page feed event `name`.
PANELS = """(name) => [...document.querySelectorAll("[hx-trigger][hx-get]")]
  .filter((el) => el.getAttribute("hx-trigger").split(",").some((t) => t.trim().split(" ")[0] === name))
  .map((el) => el.getAttribute("hx-get"))"""
ALL_FETCHED = """(paths) => paths.every((p) => window.__fetched.includes(p))"""


def _panels(page, kind: str) -> list[str]:
    return page.evaluate(PANELS, PAGE_EVENTS[kind].name)


def _refreshed(page, kind: str, change) -> list[str]:
    """Make `change` elsewhere; wait until every panel following `kind` re-fetched itself."""
    panels = _panels(page, kind)
    page.evaluate("() => { window.__fetched = []; }")
    change()
    try:
        page.wait_for_function(ALL_FETCHED, arg=panels, timeout=15000)
    except Exception as exc:  # say which panel stayed as it was
        raise AssertionError(f"{kind}: {panels} re-fetched only {page.evaluate('() => window.__fetched')}") from exc
    return panels


def test_every_live_panel_refreshes_after_a_change_made_elsewhere(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'panels.db'}"
    server = start_live_server(tmp_path, db_url, "--no-runner")
    engine = make_engine(db_url)
    context = None
    try:
        recipe = command_recipe(sys.executable, "-c", "print('hi')")
        seed_campaign(
            engine,
            "spec",
            [{"key": "alpha", "title": "Alpha", "recipe": recipe}, {"key": "beta", "title": "Beta", "recipe": recipe}],
        )
        api = {"Authorization": "Bearer " + server.cli("token", "create", "elsewhere").stdout.strip()}

        def status(key: str, to: str):
            def change() -> None:
                r = httpx.post(
                    f"{server.url}/api/campaigns/spec/approaches/{key}/status",
                    json={"status": to, "reason": f"{to} elsewhere"},
                    headers=api,
                )
                assert r.status_code == 200, r.text

            return change

        def new_runner(name: str):
            def change() -> None:
                r = httpx.post(f"{server.url}/api/runners", json={"name": name}, headers=api)
                assert r.status_code == 201, r.text

            return change

        context, page = login_context(browser, server.url, engine)

        # The campaign page: its panels on a campaign change, the ranking included.
        page.goto(f"{server.url}/campaigns/spec")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.wait_for_selector("#ranking li[data-key=alpha]")
        page.evaluate(MARK)
        page.evaluate(RECORD)
        panels = _refreshed(page, "campaign", status("alpha", "deferred"))
        assert {"/campaigns/spec/ranking", "/campaigns/spec/inventory", "/campaigns/spec/verdicts"} <= set(panels)
        expect(page.locator("#ranking li[data-key=alpha]")).to_have_count(0)  # re-ranked
        expect(page.locator("#ranking li[data-key=beta]")).to_have_count(1)
        expect(page.locator("#approach-alpha")).to_have_attribute("data-status", "deferred")
        # ... and on a runner change (re-test flags follow the connected runners).
        panels = _refreshed(page, "runners", new_runner("node-new"))
        assert {"/campaigns/spec/ranking", "/campaigns/spec/verdicts"} <= set(panels)
        assert page.evaluate(NOT_RELOADED)

        # The approach page: its panels on an approach change.
        page.goto(f"{server.url}/campaigns/spec/approaches/beta")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        page.evaluate(RECORD)
        panels = _refreshed(page, "approach", status("beta", "promising"))
        assert len(panels) >= 3, panels
        page.wait_for_selector("#verdict .status-line:has-text('promising elsewhere')")
        assert page.evaluate(NOT_RELOADED)

        # The Runners page: its table on a runner change.
        page.goto(f"{server.url}/runners")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        page.evaluate(RECORD)
        panels = _refreshed(page, "runners", new_runner("node-later"))
        assert panels == ["/runners/table"]
        expect(page.locator("#runner-table")).to_contain_text("node-later", use_inner_text=True)
        assert page.evaluate(NOT_RELOADED)
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
