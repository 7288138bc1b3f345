"""Issue 45 item 4, in Chromium against a real `campaign serve` with its embedded runner: Repeat says how far it
is (n of N done, the interval so far) as its trials end, without a reload; the history shows the decision
first with the trials' events folded under it."""

from __future__ import annotations

import sys
import time

import httpx
import pytest
from playwright.sync_api import expect

from app.db import make_engine
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

PROGRAM = (
    "import json, random; s = [10 + random.random() for _ in range(5)]; "
    "print('@@campaign-metric ' + json.dumps({'name': 'verify_time_ms', 'value': sorted(s)[2], 'unit': 'ms', "
    "'tags': {}, 'samples': s}))"
)


def test_repeat_shows_its_progress_live_and_history_folds_trial_events(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'repeat.db'}"
    server = start_live_server(tmp_path, db_url)  # with the embedded runner
    engine = make_engine(db_url)
    context = None
    try:
        seed_campaign(
            engine,
            "spec",
            [{"key": "alpha", "title": "Alpha", "recipe": command_recipe(sys.executable, "-c", PROGRAM)}],
        )
        api = {"Authorization": "Bearer " + server.cli("token", "create", "rep").stdout.strip()}
        deadline = time.monotonic() + 60
        while not any(r["connected"] for r in httpx.get(f"{server.url}/api/runners", headers=api).json()):
            assert time.monotonic() < deadline, "the embedded runner never connected"
            time.sleep(0.3)
        r = httpx.post(
            f"{server.url}/api/campaigns/spec/approaches/alpha/status",
            json={"status": "deferred", "reason": "waiting for the node"},
            headers=api,
        )
        assert r.status_code == 200, r.text
        context, page = login_context(browser, server.url, engine)
        page.goto(f"{server.url}/campaigns/spec/approaches/alpha")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.fill("#repeat-form input[name=budget]", "3")
        page.click("#repeat-button")
        page.wait_for_url("**/campaigns/spec/approaches/alpha")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        done = page.locator("#repeat-progress [data-testid=repeat-done]")
        expect(done).to_have_text("3 of 3 done", timeout=60000)  # live: the fragment follows the page feed
        interval = page.locator("#repeat-progress [data-testid=repeat-interval]").inner_text()
        assert "verify_time_ms" in interval and "95% interval over 3 trials" in interval, interval
        assert page.evaluate(NOT_RELOADED)
        # the API and the CLI say the same
        (body,) = httpx.get(f"{server.url}/api/campaigns/spec/settles?approach=alpha", headers=api).json()
        assert (body["done"], body["total"], body["state"]) == (3, 3, "spent") and body["sides"][0]["trials"] == 3
        line = server.cli("settles", "spec", "--approach", "alpha").stdout
        assert line.startswith("Alpha repeated: 3 of 3 done") and "[" in line
        # the history: the person's decision on top, the three trials' events folded under it
        page.reload()
        first = page.locator("#verdict .history > li").first
        expect(first).to_contain_text("waiting for the node", use_inner_text=True)
        events = first.locator("[data-testid=trial-events]")
        expect(events.locator("summary")).to_contain_text("trial event")
        assert not events.locator("ol").is_visible()  # folded until asked
        events.locator("summary").click()
        assert (
            events.locator("li[data-kind=trial-event]").count() >= 6
        )  # queued/started/ended per trial, at least 2 each
        viewer_ctx, viewer = login_context(browser, server.url, engine, "vera", role="viewer")
        try:  # a viewer reads the progress and the history, and cannot start a Repeat
            viewer.goto(f"{server.url}/campaigns/spec/approaches/alpha")
            expect(viewer.locator("#repeat-progress [data-testid=repeat-done]")).to_have_text("3 of 3 done")
        finally:
            viewer_ctx.close()
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
