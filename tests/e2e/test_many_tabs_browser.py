"""In Chromium, against a real `campaign serve`: twelve board tabs open at once in one browser profile all
load and stay live. A browser keeps at most six HTTP/1.1 connections per origin; when each page's feed held
one (server-sent events), the seventh tab never loaded and the open tabs' own htmx requests stalled. The
feed is a websocket now, outside that pool.

Every wait is a DOM wait on the state it asserts: each tab's feed is open, its fragments loaded by their
own htmx requests, and then each one's feed element records the notice of a change made after they all
opened, and its fragment shows that change, without a reload.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import expect

from app.db import make_engine
from app.services.events import feed_path
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.feeds import FeedReader
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import seed_campaign

pytestmark = pytest.mark.browser

TABS = 12


def test_twelve_tabs_in_one_browser_all_load_and_each_gets_a_live_change(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'tabs.db'}"
    server = start_live_server(tmp_path, db_url, "--no-runner")
    engine = make_engine(db_url)
    context = None
    try:
        seed_campaign(engine, "kimi", [{"key": "nccl", "title": "NCCL"}, {"key": "ipc", "title": "IPC"}])
        seed_campaign(engine, "shootout", [{"key": "gloo", "title": "Gloo"}])
        api = {"Authorization": "Bearer " + server.cli("token", "create", "tabs").stdout.strip()}
        context, first = login_context(browser, server.url, engine)
        # Seven tabs on one campaign, five on the other, as a team member with a tab per page would have.
        slugs = ["kimi"] * 7 + ["shootout"] * 5
        pages = [first] + [context.new_page() for _ in range(TABS - 1)]
        for page, slug in zip(pages, slugs, strict=True):
            page.goto(f"{server.url}/campaigns/{slug}")  # the seventh and later ones hung here
            expect(page.locator(".page-feed")).to_have_attribute("data-feed", "open")
            page.evaluate(MARK)
        for page in pages:  # and every tab's own htmx requests got through (fragments loaded on "load")
            expect(page.locator("#recent-trials")).to_contain_text("No trials yet", use_inner_text=True)
            expect(page.locator(".page-feed")).to_have_attribute("data-feed", "open")

        # A change on each campaign, made after every tab opened; a feed read beside the tabs gives each
        # change's notice id, which each tab must then have been sent.
        ids = {}
        for slug, key in (("kimi", "ipc"), ("shootout", "gloo")):
            campaign_id = httpx.get(f"{server.url}/api/campaigns/{slug}", headers=api).json()["id"]
            # Opened with a tab's own mark: nothing to catch up on, its first notice is this change's.
            since = parse_qs(urlsplit(first.locator(".page-feed").get_attribute("data-feed-url")).query)["since"][0]
            url = server.url + feed_path([f"campaign:{campaign_id}"], since)
            beside = FeedReader(url, {**api, "Origin": server.url})
            try:
                r = httpx.post(
                    f"{server.url}/api/campaigns/{slug}/approaches/{key}/status",
                    json={"status": "deferred", "reason": f"live in every {slug} tab"},
                    headers=api,
                )
                assert r.status_code == 200, r.text
                ids[slug] = beside.next().id
            finally:
                beside.close()
        for page, slug in zip(pages, slugs, strict=True):
            key = "ipc" if slug == "kimi" else "gloo"
            # The event itself: the tab's feed took that notice (static/pagefeed.js keeps its id) ...
            expect(page.locator(".page-feed")).to_have_attribute("data-feed-seen", ids[slug])
            # ... and the fragment re-fetched itself on it.
            expect(page.locator(f"#approach-{key}")).to_have_attribute("data-status", "deferred")
            expect(page.locator(f"#approach-{key}")).to_contain_text(f"live in every {slug} tab", use_inner_text=True)
            assert page.evaluate(NOT_RELOADED)
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
